"""The release build (scripts/build-wheels.sh): a manylinux wheel that a user installs without a
Rust toolchain, and that works there: `kquota --version`, a `kquota configs` round trip and
`kquota proxy` throttling a real client (confluent-kafka) in front of a real broker (tansu).

The wheel is built with the script's quicker dev profile (the release profile's fat LTO takes
minutes per interpreter: docs/release.md has the numbers); everything else is the release path:
zig-linked manylinux2014, maturin's and auditwheel's checks of the tag."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kquota
from proxy_support import Tansu, make_topic
from waiting import wait_port, wait_until

pytestmark = [pytest.mark.process, pytest.mark.heavy]

ROOT = Path(__file__).resolve().parents[2]
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
CP = f"cp{sys.version_info.major}{sys.version_info.minor}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    # The build tools (the release extra's pins) in a virtual environment outside the clone, made
    # and kept by the script, and the base interpreter (not this clone's venv): cargo-zigbuild
    # names its linker wrapper after the zig it runs, and the linker and the interpreter are part
    # of cargo's fingerprints. From this clone's venv, every fresh clone rebuilt every dependency
    # (195 s in a CI run); from fixed paths only the workspace crates that changed.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kquota"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    env = {**os.environ, "KQUOTA_BUILD_VENV": str(cache / "wheel-build-venv"), "KQUOTA_PYTHON": str(base),
           "PATH": f"{base.parent}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "scripts/build-wheels.sh", "--profile", "dev", "--python", PY, "--out", str(out),
                        "--no-sdist"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    name = wheels[0].name
    # One wheel per interpreter (no abi3) for manylinux2014 = glibc 2.17, confirmed by auditwheel.
    assert name == f"kquota-{kquota.__version__}-{CP}-{CP}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", name
    assert f"ok: {name} (manylinux_2_17_x86_64 per auditwheel)" in p.stdout, p.stdout
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed from the file alone (no index, no build), and an
    environment whose PATH has no cargo and no rustc."""
    home = tmp_path_factory.mktemp("user")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    path = f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None, path
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "KQUOTA_STORE")}
    env.update(PATH=path, HOME=str(home), XDG_DATA_HOME=str(home / "data"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--only-binary", ":all:", str(wheel)],
                       env=env, cwd=home, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return venv, env, home


def run(installed, *args, timeout=120):
    venv, env, home = installed
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], env=env, cwd=home, capture_output=True,
                          text=True, timeout=timeout)


def test_the_wheel_runs_without_rust_and_from_its_own_files(installed):
    venv, _, _ = installed
    p = run(installed, "kquota", "--version")
    assert p.returncode == 0 and p.stdout == f"kquota {kquota.__version__}\n", p.stdout + p.stderr
    p = run(installed, "python", "-c", "import kquota, kquota._kquota as k; print(kquota.__file__); print(k.__file__)")
    assert p.returncode == 0, p.stderr
    site = str(venv / "lib")
    assert all(line.startswith(site) for line in p.stdout.splitlines()), p.stdout  # not this checkout's sources


def test_configs_round_trip(installed):
    _, _, home = installed
    url = f"sqlite:///{home / 'quotas.db'}"
    p = run(installed, "kquota", "configs", "--store", url, "--alter", "--add-config",
            "producer_byte_rate=1024,consumer_byte_rate=2048", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "app")
    assert p.returncode == 0, p.stderr
    p = run(installed, "kquota", "configs", "--store", url, "--describe", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["quotas"] == [{"entity": {"user": "alice", "client-id": "app"},
                                               "config": {"consumer_byte_rate": 2048, "producer_byte_rate": 1024}}]
    quota_file = home / "quotas.json"
    quota_file.write_text(p.stdout)
    other = f"sqlite:///{home / 'copy.db'}"
    assert run(installed, "kquota", "configs", "--store", other, "--alter", "--quota-file", str(quota_file)).returncode == 0
    assert run(installed, "kquota", "configs", "--store", other, "--describe", "--json").stdout == p.stdout


def test_proxy_from_the_wheel_throttles_a_real_client(installed):
    from confluent_kafka import Consumer, Producer, TopicPartition

    _, _, home = installed
    url = f"sqlite:///{home / 'proxy.db'}"
    quota = 100_000
    assert run(installed, "kquota", "configs", "--store", url, "--alter", "--add-config", f"producer_byte_rate={quota}",
               "--entity-type", "clients", "--entity-name", "smoke").returncode == 0
    broker = Tansu()
    venv, env, _ = installed
    log = home / "proxy.log"
    with open(log, "w") as f:
        proxy = subprocess.Popen([str(venv / "bin" / "kquota"), "proxy", "--bootstrap-server", broker.address,
                                  "--listen", "127.0.0.1:0", "--store", url,
                                  # 2 windows: throttled after about a second's worth, not ten
                                  "--quota-window-num", "2"], env=env, cwd=home,
                                 stdout=f, stderr=subprocess.STDOUT)
    try:
        def listening():
            m = re.search(r"kquota proxy listening on (127\.0\.0\.1:\d+) .*\(native data plane\)", log.read_text())
            return m.group(1) if m else None

        wait_until(lambda: listening() or proxy.poll() is not None, 30)
        address = listening()
        assert address, log.read_text()
        wait_port(int(address.rsplit(":", 1)[1]))
        topic = make_topic(address)
        throttles = []
        p = Producer({"bootstrap.servers": address, "client.id": "smoke", "linger.ms": 5,
                      "throttle_cb": lambda e: throttles.append(e.throttle_time)})
        for i in range(300):  # 300 KB, three seconds' worth of the quota: throttled
            p.produce(topic, b"x" * 1000, key=str(i).encode())
            p.poll(0)
        assert p.flush(60) == 0
        assert throttles and max(throttles) > 0, "the proxy never throttled the client over its quota"
        c = Consumer({"bootstrap.servers": address, "group.id": "smoke", "client.id": "reader"})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        wait_until(lambda: got.extend(m.key() for m in c.consume(300, 1.0) if not m.error()) or len(got) >= 300, 30, 0)
        c.close()
        assert got == [str(i).encode() for i in range(300)]
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(30) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        broker.stop()


def test_the_wheels_built_match_the_pythons_claimed():
    """requires-python, the classifiers and the script's list of interpreters tell one story."""
    supported = re.search(r'^SUPPORTED="([^"]+)"', (ROOT / "scripts" / "build-wheels.sh").read_text(), re.M).group(1)
    versions = supported.split()
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^requires-python = ">=(\S+)"$', text, re.M).group(1) == versions[0]
    claimed = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    assert claimed == versions
    assert [int(v.split(".")[1]) for v in versions] == list(range(9, 9 + len(versions)))  # no gap
    assert PY in versions  # the interpreter the tests run on has a wheel
