"""Connection quotas (KIP-612) enforced by the proxy at accept, against Apache Kafka with raw clients
from two loopback source addresses (127.0.0.1 and 127.0.0.2): the per-IP creation rate (a
throttled connection is held, then closed), max.connections.per.ip and its overrides, the
PROXY protocol header (v1, v2; malformed, truncated, late, missing), and a good client served
after each."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

import kquota
import pytest
from proxy_connect import API_VERSIONS, api_versions, attempt, closed_by_proxy, connect, proxy_v1, proxy_v2
from proxy_support import ProxyThread
from waiting import wait_until

pytestmark = [pytest.mark.process, pytest.mark.timing]

A, B = "127.0.0.1", "127.0.0.2"


def _port(proxy: ProxyThread) -> int:
    return proxy.proxy.bootstrap_address[1]


def _total(qm: kquota.QuotaManager, name: str) -> float:
    return sum(m.value for m in qm.connection_metrics() if m.name == name and not m.tags)


def storm(port: int, source: str, seconds: float, threads: int = 3) -> list:
    """Reconnects from ``source`` on ``threads`` threads for ``seconds``; every attempt."""
    out: list = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run() -> None:
        while time.monotonic() < end:
            a = attempt(port, source)
            with lock:
                out.append(a)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    return out


def served_within(port: int, source: str, header: bytes = b"", seconds: float = 5.0) -> bool:
    """Whether a connection from ``source`` is served within ``seconds`` (a closed connection is
    counted down when the proxy sees its session end, a moment after the client closes)."""
    return wait_until(lambda: attempt(port, source, header=header).served, seconds, 0.05)


@pytest.fixture
def small_window_qm():
    # Two 1 s samples: a rate is measured over about one second, so a storm shows within it.
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    yield qm
    qm.close()


def test_reconnect_storm_from_one_address_is_held_to_its_rate_the_other_connects_freely(broker, small_window_qm):
    qm = small_window_qm
    qm.alter_client_quotas([({"ip": B}, {"connection_creation_rate": 5})])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm)
    try:
        port = _port(proxy)
        result: dict = {}
        t = threading.Thread(target=lambda: result.setdefault("b", storm(port, B, 3.0)))
        t.start()
        free = storm(port, A, 3.0, threads=1)
        t.join(30)
        stormed = result["b"]
        served_b = sum(a.served for a in stormed)
        # 5/s over 3 s and about one more window's worth at the start: at most 5 x (3 + 2).
        assert 5 <= served_b <= 25, (served_b, len(stormed))
        throttled = [a for a in stormed if not a.served]
        assert throttled, "the storm was never throttled"
        # Kafka's delayed close: a throttled connection is held before the proxy closes it.
        assert max(a.seconds for a in throttled) >= 0.1
        # The other address is not limited by B's storm: every attempt served, many of them.
        assert all(a.served for a in free) and len(free) >= 2 * served_b, (len(free), served_b)
        assert _total(qm, "connections-throttled-total") == len(throttled)
        assert any(m.name == "connections-throttled-total" and m.tags.get("ip") == B and m.value == len(throttled)
                   for m in qm.connection_metrics())
        time.sleep(1.2)  # the span under test: a window later the address is under its rate again
        assert attempt(port, B).served
    finally:
        proxy.stop()


def test_max_connections_per_ip_and_its_override_then_release(broker):
    qm = kquota.QuotaManager()
    qm.configure_connections({"max.connections.per.ip": 2, "max.connections.per.ip.overrides": f"{B}:4"})
    proxy = ProxyThread(("127.0.0.1", broker.port), qm)
    held: list[socket.socket] = []
    try:
        port = _port(proxy)
        for source, allowed in ((A, 2), (B, 4)):
            for _ in range(allowed):
                s = connect(port, source)
                held.append(s)
                assert api_versions(s)
            extra = connect(port, source)
            closed = closed_by_proxy(extra)
            extra.close()
            assert closed is not None and closed < 1.0, f"{source}: connection over its maximum not closed at once"
        assert _total(qm, "connections-refused-total") == 2
        # Closing one of A's connections frees its slot (the proxy releases the count).
        held.pop(0).close()
        assert served_within(port, A), "a closed connection's slot never came back"
    finally:
        for s in held:
            s.close()
        proxy.stop()
        qm.close()


def test_proxy_protocol_takes_the_client_address_and_refuses_bad_headers(broker, caplog):
    caplog.set_level(logging.INFO, logger="kquota.proxy")
    qm = kquota.QuotaManager()
    # One connection per address: which address a connection counts on shows which one was used.
    qm.configure_connections({"max.connections.per.ip": 1})
    proxy = ProxyThread(("127.0.0.1", broker.port), qm, proxy_protocol=True, proxy_protocol_timeout_ms=500,
                        proxy_protocol_trusted_sources=f"{A}/32")
    held: list[socket.socket] = []
    try:
        port = _port(proxy)

        def served(header: bytes) -> bool:
            s = connect(port, A, header=header)
            held.append(s)
            return api_versions(s)

        assert served(proxy_v1("10.9.8.7"))
        assert not served(proxy_v1("10.9.8.7", sport=40001))  # the same client: over its maximum
        assert served(proxy_v1("10.9.8.6"))                    # same balancer, another client
        assert served(proxy_v2("2001:db8::5", tlv=b"\x04\x00\x02ab"))
        assert not served(proxy_v2("2001:db8::5"))
        assert served(proxy_v1("::ffff:10.1.1.1"))              # v1 TCP6, IPv4-mapped
        assert not served(proxy_v2("10.1.1.1"))                 # ... is the IPv4 address
        assert served(proxy_v2("", local=True))                 # LOCAL: the balancer's own address
        assert not served(proxy_v2("", local=True))
        # The header and the request in one segment: the proxy reads exactly the header.
        s = connect(port, A)
        held.append(s)
        s.sendall(proxy_v2("10.2.2.2") + API_VERSIONS)
        assert api_versions(s)
        # A v2 header longer than one read (a 10 KB TLV), the request in the same write.
        s = connect(port, A)
        held.append(s)
        s.sendall(proxy_v2("10.2.2.3", tlv=b"\xee" + struct.pack(">H", 10_000) + b"x" * 10_000) + API_VERSIONS)
        assert api_versions(s)
        bad = 0
        for header, shut in ((b"PROXY TCP4 999.1.1.1 127.0.0.1 1 2\r\n", False),   # malformed
                             (b"PROXY TCP4 10.0.0.1 127.0.0.1 1 2\n", False),      # no CR
                             (proxy_v2("10.3.3.3")[:20], True),                    # truncated, closed
                             (b"PROXY TCP4 10.0.0.1", False)):                      # truncated, silent
            s = connect(port, A, header=header)
            if shut:
                s.shutdown(socket.SHUT_WR)
            closed = closed_by_proxy(s)
            s.close()
            bad += 1
            assert closed is not None, header
        # Missing: a Kafka request where the header should be.
        assert not attempt(port, A).served
        bad += 1
        late = connect(port, A)
        closed = closed_by_proxy(late)
        late.close()
        bad += 1
        assert closed is not None and closed >= 0.4, "a silent connection must wait out the header deadline"
        stats = proxy.proxy._stats()
        assert stats["proxy_header_refused"] == bad
        wait_until(lambda: "invalid PROXY protocol header" in caplog.text and "no PROXY protocol header" in caplog.text, 5)
        text = caplog.text
        assert "invalid PROXY protocol header" in text and "no PROXY protocol header" in text
        assert "truncated" in text and "within 500 ms" in text
        # The proxy still serves a good client.
        assert served(proxy_v1("10.4.4.4"))
    finally:
        for s in held:
            s.close()
        proxy.stop()
        qm.close()


def _served_of(port: int, source: str, n: int) -> int:
    return sum(attempt(port, source).served for _ in range(n))


def test_cli_config_properties_and_a_live_ip_quota_alter_through_kquota_configs(broker, tmp_path):
    import subprocess
    import sys
    import urllib.request

    from proxy_cli import start_proxy, stop_proxy
    from waiting import free_port

    cfg = tmp_path / "proxy.properties"
    cfg.write_text(f"max.connections.per.ip=50\nmax.connections.per.ip.overrides={B}:3\n")
    metrics_port = free_port()
    proc, port = start_proxy(broker, tmp_path, "--config", str(cfg), "--quota-window-num", "2",
                             "--metrics-port", str(metrics_port))
    try:
        # The override from --config: B holds three connections, A many.
        held = [connect(port, B) for _ in range(3)]
        assert all(api_versions(s) for s in held)
        extra = connect(port, B)
        assert closed_by_proxy(extra) is not None
        extra.close()
        for s in held:
            s.close()
        time.sleep(0.3)  # the proxy counts a closed connection down when its session ends
        # No rate on B yet: a burst of 20 connections (one at a time) is served whole.
        assert _served_of(port, B, 20) == 20
        r = subprocess.run([sys.executable, "-m", "kquota", "configs", "--store", f"sqlite:///{tmp_path}/q.db",
                            "--alter", "--add-config", "connection_creation_rate=3", "--ip", B],
                           capture_output=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr.decode()
        # Once the watcher has followed the store, the same burst is throttled (3/s over a window
        # of about a second): the proxy was not restarted.
        assert wait_until(lambda: _served_of(port, B, 12) <= 9, 20, 0.5), "the altered ip quota never took effect"
        assert _served_of(port, A, 20) == 20
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert f'kafka_server_k_quota_connections_connections_throttled_total{{ip="{B}"}}' in text
        assert f'kafka_server_socket_server_metrics_connection_accept_rate{{ip="{B}"}}' in text
        assert "kafka_server_k_quota_connections_connections_refused_total 1.0" in text
        assert "kafka_server_k_quota_connections_proxy_protocol_refused_total 0.0" in text
    finally:
        code, err = stop_proxy(proc)
    assert code == 0, err
    assert "too many connections from 127.0.0.2 (maximum = 3)" in err
    assert "throttled" in err


def test_cli_refuses_bad_connection_properties_in_one_line(tmp_path):
    import subprocess
    import sys

    for line, message in (("max.connections.per.ip=-1", "max.connections.per.ip"),
                          ("max.connections.per.ip.overrides=nohost:3", "nohost"),
                          ("kquota.proxy.protocol.enable=yes", "kquota.proxy.protocol.enable must be true or false")):
        bad = tmp_path / "bad.properties"
        bad.write_text(line + "\n")
        r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                            "--store", f"sqlite:///{tmp_path}/q.db", "--config", str(bad)],
                           capture_output=True, timeout=30, check=False)
        err = r.stderr.decode()
        assert r.returncode == 1 and message in err and "Traceback" not in err, err


def test_broker_wide_creation_rate_delays_accepts_without_refusing(broker, small_window_qm):
    qm = small_window_qm
    qm.configure_connections({"max.connection.creation.rate": 10})
    proxy = ProxyThread(("127.0.0.1", broker.port), qm)
    try:
        port = _port(proxy)
        start = time.monotonic()
        results = [attempt(port, source) for source in (A, B) * 12]
        elapsed = time.monotonic() - start
        # Nothing refused: every connection is served, the accept loop only slowed down.
        assert all(a.served for a in results)
        assert proxy.proxy._stats()["accept_delayed"] > 0
        # 24 connections at 10/s, measured over a window of at least one second: >= 1 s.
        assert elapsed >= 1.0, elapsed
        assert _total(qm, "connections-throttled-total") == 0
        assert any(m.name == "connection-accept-throttle-time" and m.value > 0 for m in qm.connection_metrics())
    finally:
        proxy.stop()


def test_connection_rows_reach_both_prometheus_expositions_with_their_labels():
    from prometheus_client import generate_latest

    from kquota.prometheus import exposition, registry_for

    with kquota.QuotaManager() as qm:
        qm.alter_client_quotas([({"ip": B}, {"connection_creation_rate": 100})])
        for ip in (A, B, B):
            qm.record_connection_accept("PLAINTEXT")
            assert qm.record_connection(ip, listener="PLAINTEXT") == 0
        assert any(m.tags == {"ip": B} and m.name == "connections" and m.value == 2 for m in qm.metrics())
        for text in (exposition(qm).decode(), generate_latest(registry_for(qm)).decode()):
            assert f'kafka_server_k_quota_connections_connections{{ip="{B}"}} 2.0' in text, text
            assert f'kafka_server_socket_server_metrics_connection_accept_rate{{ip="{B}"}}' in text
            assert 'kafka_server_socket_server_metrics_connection_accept_rate{listener="PLAINTEXT"}' in text
            assert "kafka_server_k_quota_connections_connections_accepted_total 3.0" in text


def test_sockets_waiting_for_their_proxy_header_count_against_the_descriptor_guard(broker):
    proxy = ProxyThread(("127.0.0.1", broker.port), max_client_sockets=3, proxy_protocol=True,
                        proxy_protocol_timeout_ms=5000, proxy_protocol_trusted_sources=f"{A}/32")
    silent: list[socket.socket] = []
    try:
        port = _port(proxy)
        silent = [connect(port, A) for _ in range(3)]
        time.sleep(0.2)
        over = connect(port, A)
        closed = closed_by_proxy(over)
        over.close()
        assert closed is not None and closed < 1.0, "a 4th socket must be refused while 3 wait for headers"
        assert proxy.proxy._stats()["refused_client_sockets"] == 1
        for s in silent:
            s.close()
        assert served_within(port, A, header=proxy_v1("10.6.6.6")), "the waiting sockets' places never came back"
    finally:
        for s in silent:
            s.close()
        proxy.stop()


def test_cli_fetch_answer_property_reaches_the_kernel_and_bad_values_are_one_line(tmp_path):
    """``kquota.fetch.answer`` in --config: ``kafka`` or ``deliver-large`` go to the proxy's
    QuotaManager, anything else is refused in one line naming the property."""
    import subprocess
    import sys

    from kquota.exceptions import KQuotaError
    from kquota.proxy.cli import _fetch_answer_prop

    assert _fetch_answer_prop({}) is None
    assert _fetch_answer_prop({"kquota.fetch.answer": " kafka "}) == "kafka"
    assert _fetch_answer_prop({"kquota.fetch.answer": "deliver-large"}) == "deliver-large"
    with pytest.raises(KQuotaError, match="kquota.fetch.answer must be one of deliver-large, kafka, got 'empty'"):
        _fetch_answer_prop({"kquota.fetch.answer": "empty"})
    bad = tmp_path / "bad.properties"
    bad.write_text("kquota.fetch.answer=Kafka\n")
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                        "--store", f"sqlite:///{tmp_path}/q.db", "--config", str(bad)],
                       capture_output=True, timeout=30, check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and "kquota.fetch.answer must be one of" in err and "Traceback" not in err, err
