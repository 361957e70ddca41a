"""Prometheus export of kquota's metrics (needs ``prometheus_client``: ``pip install kquota[metrics]``).

Kafka's names map to Prometheus conventions as ``kafka_server_<group>_<name>``: the group in
snake case (``Produce`` -> ``produce``, ``ControllerMutation`` -> ``controller_mutation``), ``-``
in the name as ``_``, and the tag ``client-id`` as the label ``client_id``. So Kafka's
``kafka.server:type=Produce,user=alice,client-id=c1`` attribute ``byte-rate`` is
``kafka_server_produce_byte_rate{user="alice",client_id="c1"}``. Totals are counters
(``kafka_server_produce_sensors_expired_total``), everything else a gauge.

Utilization (KIP-1373, :mod:`kquota.utilization`) follows the same rule: per quota type
``kafka_server_<group>_quota_utilization`` (percent) and ``kafka_server_<group>_effective_quota``
(the bound, KIP-786's value; limited entities only), labelled ``user``, ``client_id`` and
``level`` (the KIP-55 level that matched). Their cardinality is bounded by ``max_entities``
(``kquota.metrics.max.entities``, default 1000): every throttled entity plus the top
``max_entities`` by utilization; the rest of each quota type is one series labelled
``entity="other"`` (the utilization of the limited ones among them, the sum of their quotas).

>>> import kquota, kquota.prometheus
>>> qm = kquota.QuotaManager()
>>> server, thread = kquota.prometheus.start_http_server(qm, port=0, addr="127.0.0.1")
>>> server.shutdown(); qm.close()
"""

from __future__ import annotations

import logging
import queue
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric as PromMetric
from prometheus_client.samples import Sample
from prometheus_client.registry import Collector, CollectorRegistry

from kquota import _kquota
from kquota.callback import ENCODED_TAGS_PREFIX
from kquota.exceptions import QuotaValueError
from kquota.metrics import iter_rows, jmx_name
from kquota.utilization import DEFAULT_MAX_ENTITIES, check_max_entities, utilization_metrics

if TYPE_CHECKING:
    from kquota.manager import QuotaManager
    from kquota.status import StatusPage

_HELP = {
    "byte-rate": "Tracking byte-rate per user/client-id (Kafka's quota sensor)",
    "request-time": "Tracking request-time per user/client-id",
    "mutation-rate": "Tracking mutation-rate per user/client-id",
    "tokens": "Tokens left in the controller mutation bucket per user/client-id",
    "quota-limit": "The quota bound applying to the sensor (limited sensors only)",
    "throttle-time": "Average throttle-time (ms) of throttled responses in the quota window",
    "queue-size": "Tracks the size of the delay queue",
    "sensor-count": "Live quota sensors",
    "sensors-expired-total": "Quota sensors removed after the expiry time without use",
    "sensor-overflow-total": "Resolutions sent to an overflow sensor because the sensor cap was reached",
    "exempt-request-time": "Request time of exempt requests",
    "name-bytes": "Bytes of names (sensor tags, metric-tag cache keys) the kernel holds",
    "name-bytes-limit": "Budget for the bytes of names held (max_name_bytes)",
    "name-bytes-refused-total": "New sensors or cache entries that did not fit the name budget",
    "watcher-errors-total": "Failed re-reads of the quota store by the config watcher (each retried)",
    "watcher-retry-pending": "1 while a failed re-read of the quota store waits for its retry",
    "config-sync-age-seconds": "Seconds since the config watcher last read the store successfully",
    "quota-utilization": "Measured rate / effective quota x 100 (KIP-1373; NaN unlimited): every throttled entity, "
                         "the top kquota.metrics.max.entities, the rest as entity=\"other\"",
    "effective-quota": "The quota an entity's sensor is checked against (KIP-786), beside quota-utilization",
    "fleet-share": "This proxy's fraction of an active quota (--quota-scope fleet)",
    "fleet-usage-age-seconds": "Age of the newest usage record from each fleet member",
    "fleet-usage-records-rejected-total": "Usage records refused (unsigned, badly signed, from the future, "
                                          "replayed, over a bound), by reason",
    "fleet-members-pruned-total": "Fleet members forgotten after silence",
}


def prometheus_name(group: str, name: str) -> str:
    """``kafka_server_<group>_<name>`` (without the ``_total`` a counter's sample adds): the
    native exposition's own naming (``kquota-py/src/exposition.rs``), so both name alike."""
    return _kquota.prometheus_name(group, name)


def label_name(tag: str) -> str:
    """A metric tag as a Prometheus label name (``client-id`` -> ``client_id``)."""
    return tag.replace("-", "_")


def _labels(tags: Any) -> list[Tuple[str, str]]:
    return [(label_name(k), str(v)) for k, v in tags.items()]


def jmx_mapping(qm: "QuotaManager") -> list[Tuple[str, str, str]]:
    """``(prometheus sample name, JMX MBean name, JMX attribute)`` of every current metric, to map
    existing JMX dashboards onto the Prometheus names."""
    out = []
    for m in qm.metrics():
        name = prometheus_name(m.group, m.name)
        if m.name.endswith("-total"):
            name += "_total"
        out.append((name, jmx_name(m.group, m.tags), m.name))
    return out


class QuotaCollector(Collector):
    """A ``prometheus_client`` collector of a :class:`~kquota.QuotaManager`'s metrics.

    ``now_ms`` is called at each scrape for the time to measure rates at (ms on the clock the
    broker records with); by default the kernel estimates it (see ``QuotaManager.metrics``).
    ``max_entities`` bounds the utilization series (see :mod:`kquota.utilization`).
    """

    def __init__(self, qm: "QuotaManager", now_ms: Optional[Callable[[], int]] = None,
                 max_entities: int = DEFAULT_MAX_ENTITIES) -> None:
        self._qm = qm
        self._now_ms = now_ms
        self._max_entities = check_max_entities(max_entities)

    def collect(self) -> Iterator[PromMetric]:
        now = None if self._now_ms is None else self._now_ms()
        snapshot = self._qm._metrics_snapshot(now)
        families: dict[Tuple[str, str], PromMetric] = {}

        def family(group: str, name: str, labelled: bool) -> PromMetric:
            fam = families.get((group, name))
            if fam is None:
                cls = CounterMetricFamily if name.endswith("-total") else GaugeMetricFamily
                fam = cls(
                    prometheus_name(group, name),
                    _HELP.get(name, name),
                    labels=["user", "client_id"] if labelled else [],
                )
                families[(group, name)] = fam
            return fam

        for group, name, user, client_id, value in iter_rows(snapshot):
            if user is None:
                family(group, name, False).add_metric([], value)
            else:
                # A callback's tag map other than {user, client-id}: its JSON, as the native
                # exposition writes it.
                user = user[len(ENCODED_TAGS_PREFIX):] if user.startswith(ENCODED_TAGS_PREFIX) else user
                family(group, name, True).add_metric([user, client_id], value)
        for group, name, topic, value in snapshot.topic_rows():
            # Topic quotas' sensors: the group's family, labelled by topic (as the native
            # exposition writes them).
            fam = family(group, name, False)
            fam.samples.append(Sample(fam.name, {"topic": topic}, value))
        tagged: dict[Tuple[str, str], PromMetric] = {}
        for m in self._qm.extra_metrics() + utilization_metrics(self._qm.utilization(self._max_entities, now)):
            fam = family(m.group, m.name, False)
            if m.tags:
                # Extra rows carry their own tags (ip, listener): one family may mix label sets
                # (connection-accept-rate per ip and per listener), as Kafka's metric names do.
                sample = fam.name + ("_total" if m.name.endswith("-total") else "")
                fam.samples.append(Sample(sample, dict(_labels(m.tags)), m.value))
            else:
                fam.add_metric([], m.value)
        yield from families.values()
        yield from tagged.values()

    def describe(self) -> Iterator[PromMetric]:
        # Families depend on which types have sensors; no fixed description.
        return iter(())


def registry_for(qm: "QuotaManager", now_ms: Optional[Callable[[], int]] = None,
                 max_entities: int = DEFAULT_MAX_ENTITIES) -> CollectorRegistry:
    """A new registry holding only ``qm``'s collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QuotaCollector(qm, now_ms, max_entities))
    return registry


def exposition_chunks(qm: "QuotaManager", now_ms: Optional[int] = None,
                      max_entities: int = DEFAULT_MAX_ENTITIES) -> Iterator[bytes]:
    """The Prometheus text exposition (format 0.0.4) of ``qm``'s metrics as chunks of about
    64 KiB: one compact native snapshot, each chunk rendered without the GIL. A scrape of 1M
    sensors never holds the whole text (157 MB) in memory. The utilization series are bounded
    by ``max_entities`` (see :func:`utilization_metrics`)."""
    rows = qm.extra_metrics() + utilization_metrics(qm.utilization(check_max_entities(max_entities), now_ms))
    extra = [(m.group, m.name, _labels(m.tags), m.value) for m in rows]
    return iter(qm._prometheus_stream(now_ms, extra, _HELP))


def exposition(qm: "QuotaManager", now_ms: Optional[int] = None, max_entities: int = DEFAULT_MAX_ENTITIES) -> bytes:
    """The whole exposition as one ``bytes`` (the same samples the collector gives); the HTTP
    server streams :func:`exposition_chunks` instead."""
    return b"".join(exposition_chunks(qm, now_ms, max_entities))


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The status page (:mod:`kquota.status`) beside ``/metrics``: the HTML page and its data.
STATUS_PATHS = ("/", "/status.json")

#: Defaults of :func:`start_http_server`: scrapes served at once (each holds one snapshot), the
#: worker threads (all the threads connections ever get), connections waiting for a worker, and
#: the socket timeout that drops a slow client (slowloris) instead of holding a worker.
MAX_CONCURRENT_SCRAPES = 2
WORKERS = 4
BACKLOG = 16
TIMEOUT_S = 10.0


class _PooledHTTPServer(HTTPServer):
    """An HTTP server with a fixed pool of worker threads and a bounded queue of accepted
    connections; a connection that finds the queue full is closed at once."""

    daemon_threads = True

    def __init__(self, address: Tuple[str, int], handler: type, workers: int, backlog: int) -> None:
        super().__init__(address, handler)
        self._pending: "queue.Queue[Any]" = queue.Queue(maxsize=backlog)
        self._workers = [
            threading.Thread(target=self._work, name=f"kquota-metrics-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        for w in self._workers:
            w.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._pending.put_nowait((request, client_address))
        except queue.Full:
            self.shutdown_request(request)  # every worker busy and the queue full: refused

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away or timed out is routine: no traceback on stderr, a debug line.
        logging.getLogger("kquota.prometheus").debug("metrics connection from %s failed", client_address, exc_info=True)

    def shutdown(self) -> None:
        """Stops serving, then stops the workers (each finishes its connection first)."""
        super().shutdown()
        for _ in self._workers:
            self._pending.put(None)
        for w in self._workers:
            if w is not threading.current_thread():
                w.join()
        self.server_close()


def start_http_server(
    qm: "QuotaManager",
    port: int = 9308,
    addr: str = "127.0.0.1",
    now_ms: Optional[Callable[[], int]] = None,
    *,
    max_concurrent_scrapes: int = MAX_CONCURRENT_SCRAPES,
    workers: int = WORKERS,
    backlog: int = BACKLOG,
    timeout: float = TIMEOUT_S,
    max_entities: int = DEFAULT_MAX_ENTITIES,
    status: Optional["StatusPage"] = None,
) -> Tuple["HTTPServer", threading.Thread]:
    """Serves ``qm``'s metrics at ``http://addr:port/metrics`` from a daemon thread: one call;
    ``/`` is the status page (:mod:`kquota.status`: ``status``, by default ``qm``'s utilization
    alone) and ``/status.json`` its data. GET and HEAD only (others ``405``), other paths ``404``.

    Safe by default: binds ``127.0.0.1`` (pass ``addr="0.0.0.0"`` to expose it); the body is
    streamed (HTTP/1.1 chunked, see :func:`exposition_chunks`); at most
    ``max_concurrent_scrapes`` scrapes run at once (others get ``503``), so memory is bounded by
    that many snapshots; ``workers`` threads serve all connections, at most ``backlog`` wait, and
    a client silent or stalled for ``timeout`` seconds is dropped. ``port=0`` picks a free port
    (``server.server_port``). Stop with ``server.shutdown()``. ``now_ms`` is called at each
    scrape (see :class:`QuotaCollector`). ``max_entities`` bounds the utilization series
    (``kquota.metrics.max.entities``; see :mod:`kquota.utilization`) and, unless ``status`` is
    given, the status page's tables. A status render counts as a scrape."""
    check_max_entities(max_entities)
    for name, value in (("max_concurrent_scrapes", max_concurrent_scrapes), ("workers", workers), ("backlog", backlog)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise QuotaValueError(f"{name} must be an int >= 1, got {value!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 3600:
        raise QuotaValueError(f"timeout must be a number of seconds in (0, 3600), got {timeout!r}")
    scrapes = threading.BoundedSemaphore(max_concurrent_scrapes)
    from kquota.status import StatusPage
    from kquota.status_html import content_security_policy

    page = status if status is not None else StatusPage(qm, max_entities=max_entities)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.timeout = timeout  # StreamRequestHandler sets it on the socket
            super().setup()

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._serve(body=True)

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
            self._serve(body=False)

        def _refuse(self) -> None:
            self.close_connection = True
            self.send_response(405)
            self.send_header("Allow", "GET, HEAD")
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse  # noqa: N815

        def _serve(self, body: bool) -> None:
            self.close_connection = True
            path = self.path.split("?", 1)[0]
            if path not in ("/metrics", *STATUS_PATHS):
                self.send_error(404)
                return
            if not scrapes.acquire(blocking=False):
                self.send_error(503, "too many concurrent scrapes")
                return
            try:
                if path != "/metrics":
                    self._status(path, body)
                    return
                # HEAD: the headers alone, no snapshot taken.
                chunks = exposition_chunks(qm, None if now_ms is None else now_ms(), max_entities) if body else iter(())
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                if not body:
                    return
                for chunk in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            finally:
                scrapes.release()

        def _status(self, path: str, body: bool) -> None:
            try:
                at = None if now_ms is None else now_ms()
                payload, kind = (page.html(at), "text/html; charset=utf-8") if path == "/" else \
                    (page.json(at), "application/json; charset=utf-8")
            except Exception:  # noqa: BLE001 - the page's failure is the client's 500, the server goes on
                logging.getLogger("kquota.prometheus").warning("status page %s failed", path, exc_info=True)
                self.send_error(500, "status page failed")
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            if path == "/":
                self.send_header("Content-Security-Policy", content_security_policy())
                self.send_header("X-Frame-Options", "DENY")
            self.send_header("Connection", "close")
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = _PooledHTTPServer((addr, port), Handler, workers, backlog)
    thread = threading.Thread(target=server.serve_forever, name="kquota-metrics-http", daemon=True)
    thread.start()
    return server, thread
