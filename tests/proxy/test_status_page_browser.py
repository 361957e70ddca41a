"""The status page in a real browser (Debian's headless chromium): the sections are in the DOM, the
live refresh swaps in new values without a reload, a failed one says the page is stale, and a
``kquota proxy`` with real clients through it shows its throttled client and its store.

``KQUOTA_STATUS_PAGE_PNG=path`` also writes the proxy's screenshot there (the one in
``docs/img/status-page.png``)."""

from __future__ import annotations

import os
import shutil
import threading
import time
import urllib.request

import pytest

import kquota
import kquota.prometheus as kprom
from headless_chromium import dump_dom, screenshot
from kquota.status import StatusPage
from waiting import free_port, wait_until

pytestmark = pytest.mark.process

SECTIONS = ('<section id="throttled">', '<section id="utilization">', '<section id="shadow">', '<section id="fleet">',
            '<section id="store">')


def test_the_live_refresh_swaps_in_new_values_without_a_reload():
    """The second render (the script's first refetch) is the first to see ``late-client``: a
    DOM holding it, with the script's swap count on ``<body>`` (a reload would reset it), was
    updated by the script. (The no-JavaScript reload, a ``<noscript>`` meta refresh, is checked
    in the markup only: headless chromium dumps no DOM with scripts disabled.)"""
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 10_000})])
    qm.record_no_throttle("produce", "u", "early<b>", 500_000, now_ms=int(time.time() * 1000))
    renders: list[int] = []

    def now_ms() -> int:
        renders.append(1)
        if len(renders) == 2:
            qm.record_no_throttle("produce", "u", "late-client", 500_000, now_ms=int(time.time() * 1000))
        return int(time.time() * 1000)

    server, _ = kprom.start_http_server(qm, port=0, now_ms=now_ms, status=StatusPage(qm, refresh_seconds=1))
    url = f"http://127.0.0.1:{server.server_port}/"
    try:
        first = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "late-client" not in first and "early&lt;b&gt;" in first
        renders.clear()
        dom = dump_dom(url, virtual_ms=3500)
        assert len(renders) >= 2, renders
        for section in SECTIONS:
            assert section in dom
        assert "late-client" in dom and "early&lt;b&gt;" in dom and "early<b>" not in dom
        late = dom.split(">late-client<")[1].split("</tr>")[0]
        assert 'class="badge">throttled<' in late  # its values came with it
        swaps = int(dom.split('data-refreshes="')[1].split('"')[0])
        assert swaps >= 1
        assert '<span id="live" class="">live</span>' in dom
    finally:
        server.shutdown()
        qm.close()


def test_a_failed_refresh_says_the_page_is_stale():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    calls: list[int] = []

    def now_ms() -> int:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("gone")  # every refetch fails: the server answers 500
        return 0

    server, _ = kprom.start_http_server(qm, port=0, now_ms=now_ms, status=StatusPage(qm, refresh_seconds=1))
    try:
        dom = dump_dom(f"http://127.0.0.1:{server.server_port}/", virtual_ms=2500)
    finally:
        server.shutdown()
        qm.close()
    assert '<span id="live" class="stale">stale: HTTP 500</span>' in dom
    for section in SECTIONS:
        assert section in dom  # the last good content stays


def paced(address: str, topic: str, client_id: str, stop: threading.Event) -> None:
    """About 100 KB/s (ten 1 KB messages every 0.1 s) until ``stop``: a client well under its quota."""
    from confluent_kafka import Producer
    from proxy_support import VALUE

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5})
    while not stop.wait(0.1):
        for _ in range(10):
            p.produce(topic, VALUE)
        p.poll(0)
    p.flush(10)


def read_loop(address: str, topic: str, client_id: str, stop: threading.Event) -> None:
    """Reads ``topic`` from its start until ``stop`` (Fetch traffic under a consumer quota)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "client.id": client_id, "group.id": f"{client_id}-{topic}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    while not stop.is_set():
        c.consume(500, 0.2)
    c.close()


def test_a_proxy_with_real_clients_shows_its_throttled_client_store_and_shadow(broker, tmp_path):
    """A real ``kquota proxy --shadow-store`` with four clients: the shadow configuration halves
    ``audit-log``'s quota (it sends ~100 KB/s, under its enforced default) and raises
    ``search-indexer``'s. The page shows the throttled producers, the store, and in the shadow
    section ``audit-log`` as would-throttle with a would-be throttle time, ``search-indexer``
    not. The stores live in a clearly named directory (the screenshot shows their URLs)."""
    import tempfile

    from kquota.stores.sqlite import SQLiteConfigStore

    # start_proxy's store is <dir>/q.db; not a pytest temp dir, whose name would fill the screenshot.
    stores = tempfile.mkdtemp(prefix="kquota-status-page-")
    try:
        with SQLiteConfigStore(os.path.join(stores, "q.db")) as store:
            store.alter([({"client-id": "billing-ingest"}, {"producer_byte_rate": 200_000}),
                         ({"client-id": "search-indexer"}, {"producer_byte_rate": 50_000}),
                         ({"client-id": "dashboards"}, {"consumer_byte_rate": 400_000}),
                         ({"client-id": None}, {"producer_byte_rate": 1_000_000})])
            store_url = store.url
        with SQLiteConfigStore(os.path.join(stores, "shadow.db")) as shadow:
            shadow.alter([({"client-id": "billing-ingest"}, {"producer_byte_rate": 200_000}),
                          ({"client-id": "search-indexer"}, {"producer_byte_rate": 4_000_000}),
                          ({"client-id": "audit-log"}, {"producer_byte_rate": 50_000}),
                          ({"client-id": "dashboards"}, {"consumer_byte_rate": 400_000})])
            shadow_url = shadow.url
        _proxy_page(broker, tmp_path, stores, store_url, shadow_url)
    finally:
        shutil.rmtree(stores, ignore_errors=True)


def _section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">')[1].split("</section>")[0]


def _row(part: str, client: str) -> str:
    return part.split(f">{client}<")[1].split("</tr>")[0]


def _proxy_page(broker, tmp_path, stores: str, store_url: str, shadow_url: str) -> None:
    from proxy_cli import start_proxy, stop_proxy
    from proxy_support import Meter, make_topic, produce_loop

    metrics_port = free_port()
    proc, port = start_proxy(broker, stores, "--metrics-port", str(metrics_port), "--shadow-store", shadow_url)
    stop = threading.Event()
    threads = []
    try:
        address = f"127.0.0.1:{port}"
        topic = make_topic(address, prefix="status-page-")
        loops = [(produce_loop, (address, topic, client, Meter(), stop)) for client in ("billing-ingest", "search-indexer")]
        loops += [(paced, (address, topic, "audit-log", stop)), (read_loop, (address, topic, "dashboards", stop))]
        for target, args in loops:
            t = threading.Thread(target=target, args=args, daemon=True)
            t.start()
            threads.append(t)
        url = f"http://127.0.0.1:{metrics_port}/"

        def shown() -> bool:
            page = urllib.request.urlopen(url, timeout=10).read().decode()
            throttled, shadow = _section(page, "throttled"), _section(page, "shadow")
            return (">search-indexer<" in throttled and ">audit-log<" in page and ">dashboards<" in page
                    and ">audit-log<" in shadow and 'class="badge">would throttle<' in _row(shadow, "audit-log"))

        assert wait_until(shown, 40, 0.5)
        dom = dump_dom(url, virtual_ms=6000)
        for section in SECTIONS:
            assert section in dom
        store_part = _section(dom, "store")
        assert store_url in store_part and "(4 entities)" in store_part
        assert "Not in a fleet" in dom
        utilization = _section(dom, "utilization")
        assert utilization.index(">search-indexer<") < utilization.index(">audit-log<")
        assert ">audit-log<" not in _section(dom, "throttled")  # the shadow never enforces
        shadow = _section(dom, "shadow")
        assert f"From {shadow_url}:" in shadow
        audit = _row(shadow, "audit-log")
        cells = audit.split("<td")
        assert "48.8 KiB/s" in audit and 'class="badge">would throttle<' in audit  # its shadow quota: 50,000 B/s
        assert "976.6 KiB/s" in audit  # the quota in force: the client-id default
        throttle_cell, delayed_cell = cells[-3], cells[-2]
        assert throttle_cell.split(">")[1].split("<")[0] not in ("0", ""), audit
        assert "B" in delayed_cell, audit
        # The shadow's raised quota: no would-be throttle for search-indexer, though it is throttled.
        assert ">search-indexer<" not in shadow or "would throttle" not in _row(shadow, "search-indexer")
        assert 'data-refreshes="' in dom
        png = tmp_path / "status-page.png"
        screenshot(url, str(png), height=1000)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        if os.environ.get("KQUOTA_STATUS_PAGE_PNG"):
            shutil.copyfile(png, os.environ["KQUOTA_STATUS_PAGE_PNG"])
        assert urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).status == 200
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        code, err = stop_proxy(proc)
    assert code == 0, err
    assert f"status page on http://127.0.0.1:{metrics_port}/" in err


def test_the_fleet_section_lists_the_members_and_this_proxys_shares(broker):
    """Two real members over a usage topic on Kafka's broker (steps driven here): each page lists
    both members, itself first, and its half of the shared quota; the lists are bounded."""
    import uuid

    from kquota.proxy.fleet import FleetCoordinator
    from waiting import step_until

    secret = b"the-status-page-fleet-key-" + b"0123456789abcdef" * 2
    topic = f"status-page-quotas-{uuid.uuid4().hex[:8]}"
    qms = [kquota.QuotaManager(window_num=2) for _ in range(2)]
    coords = [FleetCoordinator(qm, broker.address, topic, interval_s=0.3, key=secret) for qm in qms]
    try:
        for qm in qms:
            qm.alter_client_quotas([({"client-id": "shared<app>"}, {"producer_byte_rate": 1000.0})])
        qms[0].record_no_throttle("PRODUCE", "", "shared<app>", 10.0)
        assert step_until(coords, lambda: all(c.fleet_size == 2 for c in coords), 20, 0.3)
        coords[0].step()
        page = StatusPage(qms[0], fleet=coords[0].status)
        part = page.snapshot()["fleet"]
        html = page.html().decode()
        small = coords[0].status(1)
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()
    assert part["member"] == coords[0].member and part["size"] == 2 and not part["fallback"]
    assert [m["member"] for m in part["members"]] == [coords[0].member, coords[1].member]
    assert [m["self"] for m in part["members"]] == [True, False] and all(m["live"] for m in part["members"])
    assert [(s["quota_type"], s["client_id"]) for s in part["shares"]] == [("Produce", "shared<app>")]
    assert part["shares"][0]["share"] == pytest.approx(0.5)
    fleet = html.split('<section id="fleet">')[1].split("</section>")[0]
    assert f"{coords[0].member} (this proxy)" in fleet and coords[1].member in fleet
    assert "shared&lt;app&gt;" in fleet and "50.0%" in fleet
    assert len(small["members"]) == 1 and small["members_more"] == 1
