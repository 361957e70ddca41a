"""The status page (``/`` on the metrics port) and its data (``/status.json``): every name escaped
and cut, entities ordered by utilization, throttled ones marked, every table bounded, the
sections' empty states; the real metrics server serves it beside an unchanged ``/metrics``, GET
and HEAD only."""

from __future__ import annotations

import html.parser
import http.client
import json

import pytest

import kquota
import kquota.prometheus as kprom
from kquota.status import NAME_MAX_CHARS, ShadowReport, ShadowRow, StatusPage, shown_name
from kquota.status_html import SCRIPT, render

HOSTILE = ['<script>alert("x")</script>', "\"'><img src=x onerror=alert(1)>", "a\u202eevil\nline\x00", "&amp;"]


class Sections(html.parser.HTMLParser):
    """The ids of the page's sections, its scripts' texts, and whether any tag came from a name."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.scripts: list[str] = []
        self.tags: set[str] = set()
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "section":
            self.ids.append(dict(attrs)["id"])
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def parsed(page: str) -> Sections:
    p = Sections()
    p.feed(page)
    return p


def manager(**kwargs):
    qm = kquota.QuotaManager(expiry_interval_seconds=None, **kwargs)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 10_000})])
    return qm


def test_hostile_names_are_escaped_and_cut():
    qm = manager()
    try:
        long_id = "L" * 30_000  # near Kafka's int16 string bound, which the kernel keeps
        for i, name in enumerate(HOSTILE + [long_id]):
            qm.record_no_throttle("produce", "u", name, 1000 * (i + 1), now_ms=1000)
        page = StatusPage(qm).html(now_ms=1000).decode()
    finally:
        qm.close()
    p = parsed(page)
    assert p.scripts == [SCRIPT]  # the page's own script, nothing a name brought
    assert "img" not in p.tags
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "&quot;&#x27;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "\u202e" not in page and "a\\u202eevil\\x0aline\\x00" in page
    assert "&amp;amp;" in page
    assert "L" * NAME_MAX_CHARS + f"…(+{30_000 - NAME_MAX_CHARS} chars)" in page
    assert "L" * (NAME_MAX_CHARS + 1) not in page
    assert len(page) < 20_000


def test_a_megabyte_name_costs_what_a_short_one_does():
    """Names the kernel never sees (a shadow source's, a store error's) are cut as well."""
    huge = "<" * 1_000_000
    assert shown_name(huge) == "<" * NAME_MAX_CHARS + f"…(+{1_000_000 - NAME_MAX_CHARS} chars)"
    assert shown_name("\u202e" * 1_000_000).startswith("\\u202e" * 20)
    assert len(shown_name("\x01" * 1_000_000)) < 2 * NAME_MAX_CHARS
    qm = manager()
    try:
        report = ShadowReport(huge, [ShadowRow("Produce", huge, huge, 10.0, None, 5.0, True)] * 3)
        page = StatusPage(qm, shadow=lambda k: report).html().decode()
    finally:
        qm.close()
    assert len(page) < 20_000
    assert "<<" not in page and "&lt;" * NAME_MAX_CHARS in page


def test_entities_are_ordered_by_utilization_and_the_throttled_marked():
    qm = manager()
    try:
        for name, size in (("low", 1_000), ("high", 80_000), ("over", 500_000), ("mid", 20_000)):
            qm.record_no_throttle("produce", "u", name, size, now_ms=1000)
        qm.record_no_throttle("fetch", "u", "unlimited", 5_000, now_ms=1000)
        snap = StatusPage(qm).snapshot(now_ms=1000)
        page = render(snap)
    finally:
        qm.close()
    rows = snap["entities"]["rows"]
    limited = [r["client_id"] for r in rows if r["utilization"] is not None]
    assert limited[:4] == ["over", "high", "mid", "low"]
    assert all(r["utilization"] is None for r in rows[len(limited):])  # unlimited last
    assert [r["client_id"] for r in snap["throttled"]["rows"]] == ["over"]
    assert snap["throttled"]["total"] == 1
    throttled_section = page.split('<section id="throttled">')[1].split("</section>")[0]
    assert ">over<" in throttled_section and ">high<" not in throttled_section
    table = page.split('<section id="utilization">')[1].split("</section>")[0]
    assert table.index(">over<") < table.index(">high<") < table.index(">mid<") < table.index(">low<")
    assert table.count('<tr class=throttled>') == 1 and table.count('class="badge">throttled<') == 1
    assert json.loads(json.dumps(snap, allow_nan=False)) == snap  # NaN is null: strict JSON


def test_tables_are_bounded_with_a_count_of_the_rest():
    qm = manager()
    try:
        for i in range(30):
            # Each over its 10 KB/s (the first window counts as the whole 10 s one, as Kafka's Rate).
            qm.record_no_throttle("produce", "u", f"c{i:02d}", 200_000 + 1000 * i, now_ms=1000)
        snap = StatusPage(qm, page_entities=5).snapshot(now_ms=1000)
        small = StatusPage(qm, max_entities=3).snapshot(now_ms=1000)  # kquota.metrics.max.entities smaller
    finally:
        qm.close()
    assert len(snap["entities"]["rows"]) == 5 and snap["entities"]["more"] == 25
    assert len(snap["throttled"]["rows"]) == 5 and snap["throttled"]["more"] == 25 and snap["throttled"]["total"] == 30
    assert [r["client_id"] for r in snap["entities"]["rows"]] == ["c29", "c28", "c27", "c26", "c25"]
    assert small["max_rows"] == 3 and len(small["entities"]["rows"]) == 3
    assert "and 25 more throttled entities not shown" in render(snap)


def test_empty_state_names_every_section():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    try:
        page = StatusPage(qm).html().decode()
    finally:
        qm.close()
    assert parsed(page).ids == ["throttled", "utilization", "shadow", "fleet", "store"]
    for text in ("No entity is throttled now.", "No entity has a quota sensor yet", "No shadow configuration.",
                 "Not in a fleet", "No quota store is followed."):
        assert text in page
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in page  # the no-JS refresh


def test_shadow_rows_come_from_the_provider_sorted_and_a_broken_source_says_so():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    try:
        rows = [ShadowRow("Produce", "", "a", 100.0, None, 1000.0, False),
                ShadowRow("Produce", "", "b", 5000.0, 10_000.0, 1000.0, True),
                ShadowRow("Fetch", "", "c", 1.0, None, None, False, -5, float("nan")),  # hostile totals
                ShadowRow("Fetch", "", "d", 1.0, None, None, False, 2500, 3 * 1024 * 1024)]
        snap = StatusPage(qm, shadow=lambda k: ShadowReport("sqlite:///shadow.db", rows, rest=4)).snapshot()
        shown = StatusPage(qm, shadow=lambda k: ShadowReport("s", rows)).html().decode()

        def broken(k):
            raise RuntimeError("<b>shadow store down</b>")

        page = StatusPage(qm, shadow=broken, store=broken).html().decode()
        none = StatusPage(qm, shadow=lambda k: None).html().decode()
    finally:
        qm.close()
    shadow = snap["shadow"]
    # Would throttle first, then by would-be throttle time; a total that is not a count >= 0 is 0.
    assert [r["client_id"] for r in shadow["rows"]] == ["b", "d", "a", "c"]
    assert [(r["throttle_time_ms"], r["delayed_bytes"]) for r in shadow["rows"]][1:] == [(2500, 3145728), (0, 0), (0, 0)]
    assert ">2.5 s<" in shown and ">3.0 MiB<" in shown
    assert shadow["rows"][0]["shadow_utilization"] == pytest.approx(500.0) and shadow["rows"][0]["would_throttle"]
    assert shadow["more"] == 4 and shadow["label"] == "sqlite:///shadow.db"
    assert page.count("Cannot read this section: RuntimeError: &lt;b&gt;shadow store down&lt;/b&gt;") == 2
    assert "No shadow configuration." in none
    with pytest.raises(kquota.QuotaValueError):
        StatusPage(qm, refresh_seconds=0)


def test_the_proxys_shadow_source_sums_predictions_under_the_shadows_tags_and_is_bounded():
    """``ShadowStatus`` (the proxy's shadow section) on real kernels: raw entities summed under
    the shadow's metric tags, the quota in force beside the shadow's, the rest row of the
    predictions left out; *would throttle* while the throttle total grows within the shadow's
    quota window (or the shadow rate is over its quota), not after; the rows bounded."""
    from kquota.proxy.shadow import ShadowPrediction, ShadowStatus
    from kquota.quota_type import ClientQuotaType

    produce = ClientQuotaType.PRODUCE
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    shadow_qm = kquota.QuotaManager(expiry_interval_seconds=None)
    try:
        qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
        shadow_qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 500}),
                                       ({"client-id": HOSTILE[0]}, {"producer_byte_rate": 100}),
                                       ({"client-id": "quiet"}, {"producer_byte_rate": 1e6})])
        shadow_qm.record_no_throttle("produce", "alice", "app1", 50_000)
        shadow_qm.record_no_throttle("produce", "carol", "quiet", 10)
        preds = [ShadowPrediction("alice", "app1", produce, 100, 1000), ShadowPrediction("alice", "app2", produce, 50, 500),
                 ShadowPrediction("bob", HOSTILE[0], produce, 30, 0), ShadowPrediction(None, None, produce, 7, 7)]
        clock = [0.0]
        source = ShadowStatus("sqlite:///shadow.db", qm, shadow_qm, lambda: list(preds), clock=lambda: clock[0])
        first = source(50)
        clock[0] = 100.0  # past the shadow's 11 s quota window: bob's total has not grown since
        later = source(50)
        preds[2] = ShadowPrediction("bob", HOSTILE[0], produce, 40, 0)
        clock[0] = 101.0
        grown = source(50)
        small = source(1)
        page = StatusPage(qm, shadow=source).html().decode()
    finally:
        qm.close()
        shadow_qm.close()
    rows = {(r.user, r.client_id): r for r in first.rows}
    assert set(rows) == {("alice", ""), ("", HOSTILE[0]), ("", "quiet")}  # by tags; the rest row left out
    alice = rows[("alice", "")]
    assert (alice.throttle_time_ms, alice.delayed_bytes, alice.quota, alice.shadow_quota) == (150, 1500, 1000.0, 500.0)
    assert alice.would_throttle and alice.rate > 500
    quiet = rows[("", "quiet")]  # a limited shadow entity without a prediction, from its utilization
    assert not quiet.would_throttle and quiet.throttle_time_ms == 0 and quiet.shadow_quota == 1e6
    bob = {r.client_id: r for r in later.rows}[HOSTILE[0]]
    assert rows[("", HOSTILE[0])].would_throttle and not bob.would_throttle  # its rate is 0: only its growth counted
    assert {r.client_id: r for r in grown.rows}[HOSTILE[0]].would_throttle
    assert [r.client_id for r in first.rows] == ["", HOSTILE[0], "quiet"]  # would throttle, by throttle time
    assert len(small.rows) == 1 and small.rest >= 2
    shadow = page.split('<section id="shadow">')[1].split("</section>")[0]
    assert HOSTILE[0] not in shadow and "&lt;script&gt;" in shadow
    assert "150 ms" in shadow and "1.5 KiB" in shadow and "would throttle" in shadow


@pytest.mark.process  # the SQLite store's driver looks for its library with ldconfig
def test_the_store_section_says_when_the_store_last_changed(tmp_path):
    from kquota.stores.sqlite import SQLiteConfigStore
    from kquota.watcher import QuotaConfigWatcher

    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    store = SQLiteConfigStore(str(tmp_path / "q.db"))
    watcher = QuotaConfigWatcher(store, qm).start()
    try:
        page = StatusPage(qm, store=watcher.status)
        assert page.snapshot()["store"]["last_change"] is None
        store.alter([({"client-id": "<x>"}, {"producer_byte_rate": 1000}), ({"user": "u"}, {"consumer_byte_rate": 5})])
        assert watcher.wait_applied(2, 10)
        part = page.snapshot()["store"]
        html = page.html().decode()
    finally:
        watcher.stop()
        store.close()
        qm.close()
    assert part["url"] == store.url and part["changes"] == 1 and part["last_change_entities"] == 2
    assert part["last_change"] is not None and part["errors_total"] == 0
    assert "(2 entities)" in html and f"<dd>{store.url}</dd>" in html


def _request(port: int, method: str, path: str) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_the_metrics_server_serves_the_page_beside_unchanged_metrics():
    qm = manager()
    qm.record_no_throttle("produce", "u", "<script>", 500_000, now_ms=1000)
    server, _ = kprom.start_http_server(qm, port=0, now_ms=lambda: 1000)
    try:
        port = server.server_port
        assert server.server_address[0] == "127.0.0.1"
        status, headers, body = _request(port, "GET", "/")
        assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert int(headers["content-length"]) == len(body)
        assert "script-src 'sha256-" in headers["content-security-policy"]
        assert "default-src 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
        assert b"&lt;script&gt;" in body and b'<span class="badge">throttled</span>' in body
        status, headers, body = _request(port, "GET", "/status.json")
        assert status == 200 and headers["content-type"] == "application/json; charset=utf-8"
        data = json.loads(body)
        assert data["throttled"]["rows"][0]["client_id"] == "<script>" and data["now_ms"] == 1000
        status, headers, body = _request(port, "GET", "/metrics")
        assert status == 200 and headers["content-type"] == kprom.CONTENT_TYPE
        assert body == kprom.exposition(qm, now_ms=1000)
        for path in ("/", "/status.json", "/metrics"):
            status, headers, body = _request(port, "HEAD", path)
            assert status == 200 and body == b"", path
        status, headers, body = _request(port, "HEAD", "/")
        assert int(headers["content-length"]) > 1000
        for method in ("POST", "PUT", "DELETE", "OPTIONS"):
            status, headers, _ = _request(port, method, "/")
            assert status == 405 and headers["allow"] == "GET, HEAD", method
        for path in ("/index.html", "/status", "/metrics/", "/%2f", "/status.json/x", "/../metrics"):
            assert _request(port, "GET", path)[0] == 404, path
        assert _request(port, "GET", "/?x=<y>")[0] == 200
    finally:
        server.shutdown()
        qm.close()
