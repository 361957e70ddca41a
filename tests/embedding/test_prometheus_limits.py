"""The exporter binds loopback by default, streams the exposition in chunks,
limits concurrent scrapes, and serves every connection from a bounded pool with timeouts."""

from __future__ import annotations

import http.client
import inspect
import socket
import threading
import time

import pytest

import kquota
import kquota.prometheus as kprom
from kquota import ClientQuotaType as Q
from waiting import wait_until


def loaded_manager(n=20_000):
    # One principal's n client ids, each a sensor of its own: the bound on a principal's client
    # ids (kquota.max.client.ids.per.principal) lifted past n.
    qm = kquota.QuotaManager(expiry_interval_seconds=None, max_client_ids_per_principal=n + 1)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    for i in range(n):
        qm.record_no_throttle(Q.PRODUCE, "u", f"client-{i}", 10, now_ms=0)
    return qm


def test_binds_loopback_by_default():
    assert inspect.signature(kprom.start_http_server).parameters["addr"].default == "127.0.0.1"
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    server, _ = kprom.start_http_server(qm, port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()


def test_the_exposition_is_streamed_in_bounded_chunks():
    qm = loaded_manager()
    chunks = list(kprom.exposition_chunks(qm, now_ms=0))
    assert len(chunks) > 10
    assert max(len(c) for c in chunks) < 64 * 1024 + 1024
    text = b"".join(chunks)
    assert text == kprom.exposition(qm, now_ms=0)
    assert text.count(b"kafka_server_produce_byte_rate{") == 20_000
    # Each family once, its samples contiguous.
    assert text.count(b"# TYPE kafka_server_produce_byte_rate gauge") == 1
    server, _ = kprom.start_http_server(qm, port=0, now_ms=lambda: 0)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        assert r.status == 200
        assert r.getheader("Transfer-Encoding") == "chunked"
        assert r.getheader("Content-Length") is None
        assert r.read() == text
        conn.close()
    finally:
        server.shutdown()


def test_concurrent_scrapes_are_limited():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    entered, release = threading.Event(), threading.Event()

    def slow_now():
        entered.set()
        release.wait(10)
        return 0

    server, _ = kprom.start_http_server(qm, port=0, now_ms=slow_now, max_concurrent_scrapes=1)
    statuses = []

    def scrape():
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        r.read()
        statuses.append(r.status)
        conn.close()

    try:
        first = threading.Thread(target=scrape)
        first.start()
        assert entered.wait(10)
        scrape()  # while the first holds the only scrape slot
        assert statuses == [503]
        release.set()
        first.join()
        assert statuses == [503, 200]
    finally:
        release.set()
        server.shutdown()


def test_slow_clients_hold_no_unbounded_threads():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    before = threading.active_count()
    server, _ = kprom.start_http_server(qm, port=0, workers=3, backlog=4, timeout=0.5)
    socks = []
    try:
        for _ in range(40):  # slowloris: connect, send half a request line, never finish
            s = socket.create_connection(("127.0.0.1", server.server_port), timeout=5)
            s.sendall(b"GET /metr")
            socks.append(s)
        time.sleep(0.2)
        # The pool and the accept thread, nothing per connection.
        assert threading.active_count() <= before + 3 + 1
        # After the timeout the stalled clients are dropped and a real scrape is served.
        def scrape() -> int:
            conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
            try:
                conn.request("GET", "/metrics")
                return conn.getresponse().status
            finally:
                conn.close()

        def served() -> bool:
            try:
                return scrape() == 200
            except (OSError, http.client.HTTPException):
                return False

        assert wait_until(served, 20, 0.2)
    finally:
        for s in socks:
            s.close()
        server.shutdown()
    assert threading.active_count() <= before + 1


def test_exporter_settings_are_validated():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    for kw in ({"workers": 0}, {"max_concurrent_scrapes": True}, {"timeout": 0}, {"backlog": "3"}):
        with pytest.raises(kquota.QuotaValueError):
            kprom.start_http_server(qm, port=0, **kw)
