"""What a client can make the proxy hold or do before anything it says is believed, attacked as
an attacker would, against Apache Kafka's broker: declared frame sizes (memory follows the bytes that arrived),
a SASL listener before authentication (``sasl.server.max.receive.size``, ApiVersions and SASL
only), the size and the decode time of the requests Python decodes, ``connections.max.idle.ms``,
and PROXY protocol headers only from ``kquota.proxy.protocol.trusted.sources``."""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Iterator, Optional

import kquota
import pytest
from proxy_connect import api_versions, attempt, closed_by_proxy, connect, proxy_v1, proxy_v2
from proxy_support import ProxyThread
from proxy_wire import read_exact
from waiting import wait_until

pytestmark = [pytest.mark.process, pytest.mark.timing]

A, B = "127.0.0.1", "127.0.0.2"
METADATA, DESCRIBE_CONFIGS, SASL_HANDSHAKE, API_VERSIONS = 3, 32, 17, 18
ALTER_CLIENT_QUOTAS, PRODUCE = 49, 0
#: socket.request.max.bytes: the largest frame the proxy takes from an authenticated client.
MAX_FRAME = 104_857_600


def _port(proxy: ProxyThread) -> int:
    return proxy.proxy.bootstrap_address[1]


def _header(api_key: int, version: int, corr: int, client_id: bytes = b"attacker", flexible: bool = False) -> bytes:
    """A request header v1 (v2 when ``flexible``: empty tagged fields)."""
    head = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    return head + (b"\x00" if flexible else b"")


def _declare(sock: socket.socket, size: int, api_key: int, version: int = 0, send: int = 0) -> None:
    """A frame declaring ``size`` bytes: its prefix, header and the first ``send`` bytes of body."""
    head = _header(api_key, version, 1)
    sock.sendall(struct.pack(">i", size) + head + b"\x00" * max(0, min(send, size) - len(head)))


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _unread_bytes(port: int) -> int:
    """Bytes the kernel holds for the proxy's sockets on ``port`` that the proxy has not read
    (the Recv-Q of /proc/net/tcp, local port ``port``)."""
    total = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, queues = fields[1], fields[4]
            if int(local.split(":")[1], 16) == port:
                total += int(queues.split(":")[1], 16)
    return total


# ---------------------------------------------------------------------------- memory


def test_declared_frames_hold_only_the_bytes_that_arrived(broker, tmp_path):
    """40 connections declaring 100 MB frames and sending their first 16 KB (half Metadata,
    which Python decodes, half DescribeConfigs, relayed natively) made the proxy allocate 1.5 GB:
    its buffers were sized to the declared length."""
    from proxy_cli import start_proxy, stop_proxy

    proc, port = start_proxy(broker, tmp_path)
    held: list[socket.socket] = []
    try:
        assert attempt(port).served
        before = _rss_kib(proc.pid)
        for i in range(40):
            s = connect(port, A, timeout=10)
            held.append(s)
            _declare(s, MAX_FRAME - 1, METADATA if i % 2 else DESCRIBE_CONFIGS, send=16 << 10)
        # Every byte sent has been read by the proxy (or its connection closed) ...
        assert wait_until(lambda: _unread_bytes(port) == 0, 30), _unread_bytes(port)
        time.sleep(0.2)
        grown = _rss_kib(proc.pid) - before
        # ... and it holds about one 64 KiB step per connection, not 100 MB: 40 x 100 MB would
        # be 4 GB; 64 MB leaves room for the allocator and the runtime.
        assert grown < 64 << 10, f"RSS grew {grown} KiB"
        # The Metadata ones are over the decoded-request cap: closed at once, unread.
        closed = [closed_by_proxy(s, timeout=5) for s in held[1::2]]
        assert all(c is not None for c in closed), closed
        assert attempt(port).served
    finally:
        for s in held:
            s.close()
        code, err = stop_proxy(proc)
    assert code == 0, err
    assert "kquota.proxy.inspected.request.max.bytes" in err


def test_requests_handed_to_python_are_capped_before_python_sees_them(broker):
    proxy = ProxyThread(("127.0.0.1", broker.port), max_inspected_request_bytes=4096, max_decoded_request_bytes=2048)
    try:
        port = _port(proxy)
        # One byte over the cap: closed before its body is read (the body never comes).
        s = connect(port)
        _declare(s, 4097, METADATA, 1)
        assert closed_by_proxy(s) is not None
        s.close()
        # Under it, but over the decoded cap: an AlterClientQuotas is closed undecoded.
        s = connect(port)
        s.sendall(_alter_client_quotas_v1(1000))
        assert closed_by_proxy(s) is not None
        s.close()
        assert proxy.proxy._bridged == {} or all(c.closed for c in proxy.proxy._bridged.values())
        # The cap is only for the APIs Python decodes: a relayed API of that size goes through
        # (answered by the broker, whatever it says).
        s = connect(port)
        body = _header(DESCRIBE_CONFIGS, 0, 5) + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(body) + 5000) + body + b"\x00" * 5000)
        # ... and a small ApiVersions is served.
        assert attempt(port).served
        s.close()
    finally:
        proxy.stop()


def _alter_client_quotas_v1(entries: int, corr: int = 9) -> bytes:
    """AlterClientQuotas v1 (flexible) with ``entries`` empty entries: 3 bytes each."""
    out = bytearray()
    n = entries + 1
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            break
    body = _header(ALTER_CLIENT_QUOTAS, 1, corr, flexible=True) + bytes(out) + b"\x01\x01\x00" * entries + b"\x00\x00"
    return struct.pack(">i", len(body)) + body


def test_a_big_decode_does_not_stall_other_clients(broker):
    """One 24 MB AlterClientQuotas (8M empty entries) from an anonymous client held another
    client's ApiVersions for more than 5 s. Now it is over the inspected-request cap (closed
    unread), one of 1 MiB is over the decoded cap (closed undecoded), and one at that cap
    (128 KiB, 43K entries) is decoded and answered off the event loop."""
    proxy = ProxyThread(("127.0.0.1", broker.port))
    try:
        port = _port(proxy)
        big = connect(port, timeout=60)
        big.sendall(_alter_client_quotas_v1(8_000_000)[:1 << 20])
        assert closed_by_proxy(big, timeout=10) is not None, "a 24 MB AlterClientQuotas was read"
        big.close()
        big = connect(port, timeout=60)
        big.sendall(_alter_client_quotas_v1((1_048_576 - 64) // 3))
        assert closed_by_proxy(big, timeout=10) is not None, "a 1 MiB AlterClientQuotas was decoded"
        big.close()
        frame = _alter_client_quotas_v1((131_072 - 64) // 3)
        assert len(frame) - 4 <= 131_072
        answered = threading.Event()
        took: list[float] = []

        def attack() -> None:
            s = connect(port, timeout=120)
            try:
                t0 = time.monotonic()
                s.sendall(frame)
                size = struct.unpack(">i", read_exact(s, 4))[0]
                read_exact(s, size)
                took.append(time.monotonic() - t0)
                answered.set()
            finally:
                s.close()

        t = threading.Thread(target=attack)
        t.start()
        latencies: list[float] = []
        victim = connect(port, timeout=30)
        try:
            while not answered.is_set() and len(latencies) < 400:
                t0 = time.monotonic()
                assert api_versions(victim)
                latencies.append(time.monotonic() - t0)
                time.sleep(0.02)
        finally:
            victim.close()
            t.join(120)
        assert answered.is_set(), "the big request was never answered"
        assert len(latencies) >= 5, latencies
        # Its handling took a second or more (decode, 43K answers, encode); another client's
        # ApiVersions is served throughout it, not after it (relative: the machine may be loaded).
        assert max(latencies) < max(0.5, took[0] / 2) and max(latencies) < 5.0, (took, sorted(latencies)[-5:])
    finally:
        proxy.stop()


# ---------------------------------------------------------------------------- SASL listener


def _conn_id(proxy: ProxyThread) -> int:
    assert wait_until(lambda: len(proxy.proxy._bridged) == 1, 10)
    return next(iter(proxy.proxy._bridged))


def test_sasl_listener_before_authentication(broker):
    qm = kquota.QuotaManager()
    proxy = ProxyThread(("127.0.0.1", broker.port), qm, sasl_listener=True)
    try:
        port = _port(proxy)
        # Over sasl.server.max.receive.size: closed on the size prefix alone.
        s = connect(port)
        assert api_versions(s)
        _declare(s, 524_289, SASL_HANDSHAKE, 1)
        assert closed_by_proxy(s) is not None
        s.close()
        # At the limit the size passes; a Produce before authentication does not.
        s = connect(port)
        _declare(s, 524_288, PRODUCE, 3, send=64)
        assert closed_by_proxy(s) is not None
        s.close()
        # Any API but ApiVersions and SASL closes the connection, and records nothing.
        for key, version in ((METADATA, 1), (PRODUCE, 3), (DESCRIBE_CONFIGS, 0)):
            s = connect(port)
            assert api_versions(s)
            body = _header(key, version, 3, client_id=b"preauth-flood")
            s.sendall(struct.pack(">i", len(body) + 8) + body + b"\x00" * 8)
            assert closed_by_proxy(s) is not None, key
            s.close()
        assert not any("preauth-flood" in str(m.tags) for m in qm.metrics())
        stats = proxy.proxy._stats()
        assert stats["preauth_refused"] == 5, stats
        # Once Python has seen the exchange complete (set_user), the client is bounded as
        # any other: Metadata is served and large frames are read.
        s = connect(port)
        assert api_versions(s)
        proxy.proxy._plane.set_user(_conn_id(proxy), "alice")
        body = _header(METADATA, 1, 4) + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", read_exact(s, 4))[0]
        assert struct.unpack(">i", read_exact(s, size)[:4])[0] == 4
        body = _header(DESCRIBE_CONFIGS, 0, 5) + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(body) + 600_000) + body + b"\x00" * 600_000)
        assert proxy.proxy._stats()["preauth_refused"] == 5
        s.close()
    finally:
        proxy.stop()
        qm.close()


def test_a_plaintext_listener_is_not_bounded_by_the_sasl_limit(broker):
    proxy = ProxyThread(("127.0.0.1", broker.port))
    try:
        port = _port(proxy)
        s = connect(port)
        body = _header(METADATA, 1, 4) + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", read_exact(s, 4))[0]
        assert struct.unpack(">i", read_exact(s, size)[:4])[0] == 4
        s.close()
    finally:
        proxy.stop()


# ---------------------------------------------------------------------------- idle


def _open_for(sock: socket.socket, seconds: float) -> Optional[float]:
    return closed_by_proxy(sock, timeout=seconds)


def test_silent_connections_are_closed_after_connections_max_idle_ms(broker):
    proxy = ProxyThread(("127.0.0.1", broker.port), connections_max_idle_ms=600, proxy_protocol=True,
                        proxy_protocol_trusted_sources=f"{A}/32")
    try:
        port = _port(proxy)
        # A session silent after one request.
        s = connect(port, header=proxy_v1("10.0.0.1"))
        assert api_versions(s)
        closed = closed_by_proxy(s, timeout=20)
        s.close()
        assert closed is not None and closed >= 0.5, closed
        # A client still sending its PROXY header (the header's own deadline is 10 s).
        s = connect(port, header=b"PROXY TCP4 10.0.0.2")
        closed = closed_by_proxy(s, timeout=8)
        s.close()
        assert closed is not None and closed >= 0.5, closed
        # Mid-frame silence: a declared 100 MB frame with 16 KB sent.
        s = connect(port, header=proxy_v1("10.0.0.3"))
        _declare(s, MAX_FRAME - 1, DESCRIBE_CONFIGS, send=16 << 10)
        assert closed_by_proxy(s, timeout=20) is not None
        s.close()
        # A client that keeps talking is not idle, however long it stays.
        s = connect(port, header=proxy_v1("10.0.0.4"))
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            assert api_versions(s), "an active connection was closed"
            time.sleep(0.15)
        s.close()
        assert proxy.proxy._stats()["idle_closed"] >= 2
    finally:
        proxy.stop()


def test_idle_tls_handshake_is_closed(broker, pki):
    from test_proxy_tls import listener_props

    proxy = ProxyThread(("127.0.0.1", broker.port), connections_max_idle_ms=500, listener_tls=listener_props(pki))
    try:
        s = connect(_port(proxy))
        s.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then silence
        closed = closed_by_proxy(s, timeout=8)
        s.close()
        # The handshake's own deadline is 10 s.
        assert closed is not None and closed < 5, closed
    finally:
        proxy.stop()


# ---------------------------------------------------------------------------- PROXY protocol


@contextlib.contextmanager
def _behind_balancer(broker, max_per_ip: int) -> Iterator[tuple[ProxyThread, int, list[socket.socket]]]:
    """A proxy that reads PROXY headers from ``A`` only, ``max.connections.per.ip`` set: yields
    it, its port, and a list for the test's sockets (closed at the end, with the proxy)."""
    qm = kquota.QuotaManager()
    qm.configure_connections({"max.connections.per.ip": max_per_ip})
    proxy = ProxyThread(("127.0.0.1", broker.port), qm, proxy_protocol=True, proxy_protocol_trusted_sources=f"{A}/32")
    held: list[socket.socket] = []
    try:
        yield proxy, _port(proxy), held
    finally:
        for s in held:
            s.close()
        proxy.stop()
        qm.close()


def test_proxy_header_read_only_from_trusted_sources(broker):
    with _behind_balancer(broker, 1) as (proxy, port, held):
        # The trusted balancer's header is used: one connection per named client.
        for src in ("10.1.0.1", "10.1.0.2", "2001:db8::7"):
            s = connect(port, A, header=proxy_v1(src) if ":" not in src else proxy_v2(src))
            held.append(s)
            assert api_versions(s), src
        s = connect(port, A, header=proxy_v1("10.1.0.1", sport=40001))
        held.append(s)
        assert not api_versions(s), "the header's address was not the one counted"
        # 127.0.0.2 is loopback too, but not trusted: closed unread, whatever header it sends.
        for header in (proxy_v1("10.1.0.9"), proxy_v2("10.1.0.9"), b""):
            s = connect(port, B, header=header)
            closed = closed_by_proxy(s)
            s.close()
            assert closed is not None and closed < 2, header
        stats = proxy.proxy._stats()
        assert stats["proxy_protocol_untrusted"] == 3, stats
        assert any(m.name == "proxy-protocol-untrusted-total" and m.value == 3 for m in proxy.proxy.accept_metrics())


def test_six_spoofed_sources_stay_within_max_connections_per_ip(broker):
    """One host naming six sources in its headers was served six times past
    max.connections.per.ip=2; only the balancer may name sources now."""
    with _behind_balancer(broker, 2) as (_proxy, port, held):
        served = 0
        for i in range(6):
            s = connect(port, B, header=proxy_v1(f"198.51.100.{i + 1}"))
            held.append(s)
            served += api_versions(s)
        assert served <= 2, served
        assert served == 0  # an untrusted peer is never served


def test_proxy_protocol_needs_trusted_sources_and_good_cidrs(broker, tmp_path):
    with pytest.raises(ValueError, match="kquota.proxy.protocol.trusted.sources"):
        ProxyThread(("127.0.0.1", broker.port), proxy_protocol=True)
    for line, message in (
            ("kquota.proxy.protocol.enable=true", "kquota.proxy.protocol.enable=true needs "
                                                  "kquota.proxy.protocol.trusted.sources"),
            ("kquota.proxy.protocol.enable=true\nkquota.proxy.protocol.trusted.sources=10.0.0.1/8",
             "kquota.proxy.protocol.trusted.sources: \"10.0.0.1/8\""),
            ("kquota.proxy.protocol.enable=true\nkquota.proxy.protocol.trusted.sources=lb.example",
             "not an IPv4 or IPv6 CIDR block"),
            ("connections.max.idle.ms=0", "connections.max.idle.ms must be at least 1"),
            ("sasl.server.max.receive.size=x", "sasl.server.max.receive.size must be an integer")):
        bad = tmp_path / "bad.properties"
        bad.write_text(line + "\n")
        r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker.address,
                            "--listen", "127.0.0.1:0", "--store", f"sqlite:///{tmp_path}/q.db", "--config", str(bad)],
                           capture_output=True, timeout=60, check=False)
        err = r.stderr.decode()
        assert r.returncode == 1 and message in err and "Traceback" not in err, err


def test_real_sasl_clients_pass_the_pre_authentication_bounds(kafka_broker):
    """librdkafka over SASL/PLAIN (ApiVersions, SaslHandshake, SaslAuthenticate, then
    everything else on each connection) is served whole on a SASL listener in front of Kafka's
    SASL_PLAINTEXT listener, and a client that skips the exchange is not."""
    import uuid

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    upstream = kafka_broker.listener("SASL_PLAINTEXT")
    proxy = ProxyThread(("127.0.0.1", upstream.port), sasl_listener=True)
    sasl = {**kafka_broker.client_config("SASL_PLAINTEXT", "admin", "PLAIN"), "bootstrap.servers": proxy.address}
    topic = f"bounds-sasl-{uuid.uuid4().hex[:8]}"
    try:
        admin = AdminClient(sasl)
        for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(15)
        p = Producer({**sasl, "client.id": "sasl-bounds", "linger.ms": 5})
        for _ in range(50):
            p.produce(topic, b"v" * 1000)
        assert p.flush(30) == 0  # Kafka's SASL listener served them: the exchange went through whole
        assert proxy.proxy._stats()["preauth_refused"] == 0
        # The same cluster without the exchange: Metadata first closes the connection.
        s = connect(_port(proxy))
        body = _header(METADATA, 1, 4) + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(body)) + body)
        assert closed_by_proxy(s) is not None
        s.close()
        assert proxy.proxy._stats()["preauth_refused"] == 1
    finally:
        proxy.stop()
