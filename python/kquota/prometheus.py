"""Prometheus export of kquota's metrics (needs ``prometheus_client``: ``pip install kquota[metrics]``).

Kafka's names map to Prometheus conventions as ``kafka_server_<group>_<name>``: the group in
snake case (``Produce`` -> ``produce``, ``ControllerMutation`` -> ``controller_mutation``), ``-``
in the name as ``_``, and the tag ``client-id`` as the label ``client_id``. So Kafka's
``kafka.server:type=Produce,user=alice,client-id=c1`` attribute ``byte-rate`` is
``kafka_server_produce_byte_rate{user="alice",client_id="c1"}``. Totals are counters
(``kafka_server_produce_sensors_expired_total``), everything else a gauge.

>>> import kquota, kquota.prometheus
>>> qm = kquota.QuotaManager()
>>> server, thread = kquota.prometheus.start_http_server(qm, port=0, addr="127.0.0.1")
>>> server.shutdown(); qm.close()
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric as PromMetric
from prometheus_client.registry import Collector, CollectorRegistry

from kquota import _kquota
from kquota.callback import _ENCODED
from kquota.metrics import iter_rows, jmx_name

if TYPE_CHECKING:
    from kquota.manager import QuotaManager

PREFIX = "kafka_server"

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
    "config-sync-age-seconds": "Seconds since the config watcher last read the store successfully",
}


def _snake(group: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", group).lower()


def prometheus_name(group: str, name: str) -> str:
    """``kafka_server_<group>_<name>`` (without the ``_total`` a counter's sample adds)."""
    base = f"{PREFIX}_{_snake(group)}_{name.replace('-', '_')}"
    return base[: -len("_total")] if base.endswith("_total") else base


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
    """

    def __init__(self, qm: "QuotaManager", now_ms: Optional[Callable[[], int]] = None) -> None:
        self._qm = qm
        self._now_ms = now_ms

    def collect(self) -> Iterator[PromMetric]:
        now = None if self._now_ms is None else self._now_ms()
        snapshot = _kquota._metrics_snapshot(self._qm, now)
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
                user = user[1:] if user.startswith(_ENCODED) else user
                family(group, name, True).add_metric([user, client_id], value)
        for m in self._qm._extra_metrics():
            family(m.group, m.name, False).add_metric([], m.value)
        yield from families.values()

    def describe(self) -> Iterator[PromMetric]:
        # Families depend on which types have sensors; no fixed description.
        return iter(())


def registry_for(qm: "QuotaManager", now_ms: Optional[Callable[[], int]] = None) -> CollectorRegistry:
    """A new registry holding only ``qm``'s collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QuotaCollector(qm, now_ms))
    return registry


def exposition(qm: "QuotaManager", now_ms: Optional[int] = None) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``qm``'s metrics, the same samples the
    collector gives, rendered natively without the GIL: a scrape of 100k sensors does not hold
    up threads recording from Python (see ``benches/results/metrics_scrape.md``)."""
    extra = [(m.group, m.name, m.value) for m in qm._extra_metrics()]
    return _kquota._prometheus_text(qm, now_ms, extra, _HELP)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def start_http_server(
    qm: "QuotaManager",
    port: int = 9308,
    addr: str = "0.0.0.0",
    now_ms: Optional[Callable[[], int]] = None,
) -> Tuple["ThreadingHTTPServer", threading.Thread]:
    """Serves ``qm``'s metrics at ``http://addr:port/metrics`` from a daemon thread: one call.
    ``port=0`` picks a free port (``server.server_port``). Stop with ``server.shutdown()``.
    ``now_ms`` is called at each scrape (see :class:`QuotaCollector`). The body is rendered by
    :func:`exposition`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = exposition(qm, None if now_ms is None else now_ms())
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="kquota-metrics-http", daemon=True)
    thread.start()
    return server, thread
