"""A ``kquota proxy`` process for the tests (the CLI as an operator runs it), and the capture ->
recommend -> apply -> enforced loop the README describes, shared by the proxy and configs tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from proxy_support import VALUE, Meter, make_topic, produce_loop
from waiting import free_port, wait_port, wait_until


def start_proxy(broker: Any, tmp_path, *extra: str, protocol: str = "PLAINTEXT",
                store: Optional[str] = None) -> tuple[subprocess.Popen, int]:
    """A proxy process in front of ``broker`` (an ``address``; a ``kafka_broker.Listener`` is
    named with its protocol) on a free port with listener ``protocol``, its store ``store``
    (default: ``q.db`` in ``tmp_path``)."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    name = getattr(broker, "name", "PLAINTEXT")
    bootstrap = broker.address if name == "PLAINTEXT" else f"{name}://{broker.address}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", bootstrap,
         "--listen", f"{protocol}://127.0.0.1:{port}", "--store", store or f"sqlite:///{tmp_path}/q.db", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        wait_port(port, 30)
    except TimeoutError:
        proc.kill()
        raise AssertionError(proc.communicate()[1].decode())
    return proc, port


def stop_proxy(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    """Stops the proxy with ``sig`` (killed if it is still running 30 s later); its exit status
    and stderr."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err.decode()


def capture_and_recommend(broker, tmp_path, seconds: int = 4) -> tuple[str, Path, float]:
    """A client ``paced`` producing a steady ~100 KB/s through a ``kquota proxy --request-log``
    for ``seconds``, then ``kquota pipeline usage`` and ``recommend`` (p99 x 1.2, per client-id):
    (the topic, the recommendation directory, paced's recommended producer_byte_rate)."""
    from confluent_kafka import Producer

    from kquota.cli import main
    from kquota.config_file import load_quota_config

    capture, usage, rec = tmp_path / "capture", tmp_path / "usage", tmp_path / "rec"
    proc, port = start_proxy(broker, tmp_path, "--request-log", str(capture))
    try:
        address = f"127.0.0.1:{port}"
        topic = make_topic(address)
        p = Producer({"bootstrap.servers": address, "client.id": "paced", "linger.ms": 5})
        t0 = time.monotonic()
        for tick in range(1, 10 * seconds + 1):  # 10 messages every 0.1 s on a fixed schedule
            for _ in range(10):
                p.produce(topic, VALUE)
            p.poll(0)
            time.sleep(max(0.0, t0 + tick * 0.1 - time.monotonic()))
        assert p.flush(15) == 0
        del p  # gone before its proxy: it would keep reconnecting
    finally:
        code, err = stop_proxy(proc)
    assert code == 0, err
    assert main(["pipeline", "usage", "--input", str(capture), "--out", str(usage)]) == 0
    assert main(["pipeline", "recommend", "--usage", str(usage), "--out", str(rec), "--level", "client-id",
                 "--percentile", "99", "--headroom", "1.2"]) == 0
    recommended = {entity.entries["client-id"]: config for entity, config in load_quota_config(rec / "quotas.json")}
    quota = recommended["paced"]["producer_byte_rate"]
    # 10 requests of 10 x 1 KB a second, each with its headers (~102 KB/s), x 1.2 headroom.
    assert 100_000 <= quota <= 160_000, recommended
    return topic, rec, quota


def assert_enforced_once_applied(broker, tmp_path, topic: str, quota: float, apply, *proxy_args: str,
                                 store: Optional[str] = None, at_end: Optional[Callable[[], None]] = None) -> str:
    """``paced`` producing as fast as it can through a new proxy (its store ``store``, as
    :func:`start_proxy`): ``apply(address)`` (which writes the quota) holds it to ``quota`` within
    a few seconds, with throttle times sent. ``at_end`` runs at the end of the measured window,
    the proxy still up. The proxy's stderr."""
    proc, port = start_proxy(broker, tmp_path, "--quota-window-num", "2", *proxy_args, store=store)
    meter, stop = Meter(), threading.Event()
    producer = threading.Thread(target=produce_loop, args=(f"127.0.0.1:{port}", topic, "paced", meter, stop))
    try:
        producer.start()
        assert wait_until(meter.total), "nothing delivered through the proxy"
        started = time.monotonic()
        time.sleep(1)  # the measured window of the unlimited rate
        unlimited = meter.rate(started, started + 1)
        apply(f"127.0.0.1:{port}")
        applied = time.monotonic()
        time.sleep(9)  # the measured window: the enforced rate is over its last 6 s
        if at_end is not None:
            at_end()
    finally:
        stop.set()
        producer.join(30)
        code, err = stop_proxy(proc)
    assert code == 0, err
    enforced = meter.rate(applied + 3, applied + 9)
    assert unlimited > 3 * quota, (unlimited, quota)
    # Held to the recommended produce rate (the recommended request quota may hold it lower).
    assert 0.3 * quota <= enforced <= 1.2 * quota, (enforced, quota)
    assert max(meter.throttles, default=0) > 0
    return err
