"""``kquota proxy``: run the quota-enforcing Kafka proxy in the foreground.

    kquota proxy --bootstrap-server 127.0.0.1:9092 --listen 127.0.0.1:9192 \\
        --store sqlite:///quotas.db --admin-principals User:admin --request-log ./requests

Quotas come from the store (followed live by the watcher); ``--config`` takes broker-style
properties. SIGTERM/SIGINT stop it cleanly (exit status 0).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any, Optional

from kquota.exceptions import KQuotaError

log = logging.getLogger("kquota.proxy")

#: Broker properties --config understands (others are reported and ignored, as a broker would).
KNOWN_PROPERTIES = (
    "quota.window.num", "quota.window.size.seconds", "controller.quota.window.num",
    "controller.quota.window.size.seconds", "client.quota.callback.class", "socket.request.max.bytes",
    "max.connections", "num.partitions", "num.io.threads", "num.network.threads",
)


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port) with a clear error."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise KQuotaError(f"{what} must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file (``key=value``, ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or line[0] in "#!":
                    continue
                key, sep, value = line.partition("=")
                if not sep:
                    key, sep, value = line.partition(":")
                if not sep or not key.strip():
                    raise KQuotaError(f"{path}:{n}: expected key=value, got {line!r}")
                out[key.strip()] = value.strip()
    except OSError as e:
        raise KQuotaError(f"cannot read --config {path!r}: {e.strerror or e}") from None
    return out


def _int_prop(props: dict[str, str], key: str, default: int, minimum: int = 1) -> int:
    if key not in props:
        return default
    try:
        value = int(props[key])
    except ValueError:
        raise KQuotaError(f"--config: {key} must be an integer, got {props[key]!r}") from None
    if value < minimum:
        raise KQuotaError(f"--config: {key} must be at least {minimum}, got {value}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Registers ``proxy`` on the ``kquota`` command's subparsers."""
    p = sub.add_parser(
        "proxy", help="a Kafka protocol proxy enforcing client quotas on real clients, as a broker does",
        description="Run a Kafka wire-protocol proxy in front of a cluster that throttles clients with "
                    "Kafka's quota rules (produce, fetch, request, controller mutation).")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker of the cluster to proxy")
    p.add_argument("--listen", default="127.0.0.1:9192", metavar="HOST:PORT",
                   help="where clients bootstrap; broker N is proxied on PORT+1+N (port 0: free ports)")
    p.add_argument("--advertised-host", metavar="HOST", help="host written into broker addresses (default: the "
                   "--listen host)")
    p.add_argument("--store", metavar="URL", help="quota store followed live (sqlite:///path, "
                   "zookeeper://host:port[/chroot], kafka://[host:port]/topic: no host is the --bootstrap-server's "
                   "cluster; default: $KQUOTA_STORE, else the user's default store)")
    p.add_argument("--quota-scope", default="proxy", choices=["proxy", "fleet"],
                   help="proxy: each quota holds per proxy, as Kafka's hold per broker; fleet: every proxy following "
                        "the same kafka:// --store topic is one fleet and each quota holds for the fleet as a whole "
                        "(usage exchanged through the topic <store topic>.usage; see docs/guides/proxy.md)")
    p.add_argument("--quota-window-num", type=int, metavar="N",
                   help="quota.window.num (default: 11, or the --config file's)")
    p.add_argument("--quota-window-size-seconds", type=int, metavar="S",
                   help="quota.window.size.seconds (default: 1, or the --config file's)")
    p.add_argument("--config", metavar="FILE", help="broker-style properties: " + ", ".join(KNOWN_PROPERTIES))
    p.add_argument("--metrics-port", type=int, metavar="P", help="serve Prometheus metrics on 127.0.0.1:P")
    p.add_argument("--request-log", metavar="DIR", help="write every recorded request to rotated Parquet files "
                   "in DIR (the pipeline's request-log schema)")
    p.add_argument("--admin-principals", metavar="P,...",
                   help="comma-separated principals (User:name) allowed to AlterClientQuotas through the proxy (default: none)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="worker threads of the data plane (Rust, tokio: sockets, Produce, Fetch, relayed APIs), "
                        "1-64; more only help with many busy connections and spare cores (default: 1)")
    p.add_argument("--event-loop", default="auto", choices=["auto", "uvloop", "asyncio"],
                   help="asyncio event loop of the APIs handled in Python (Metadata, SASL, admin, ...): auto is "
                        "uvloop when installed, else the standard one")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log level")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """The ``kquota proxy`` command."""
    from kquota._kquota import BROKER_DEFAULTS
    from kquota.manager import QuotaManager
    from kquota.proxy.admin import principal_names
    from kquota.proxy.reqlog import RequestLogWriter
    from kquota.proxy.native import NativeProxyServer
    from kquota.proxy.settings import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAME_BYTES
    from kquota.stores.kafka.store import fill_cluster
    from kquota.stores.url import STORE_ENV, open_store
    from kquota.watcher import QuotaConfigWatcher

    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not 1 <= args.threads <= 64:
        raise KQuotaError(f"--threads must be between 1 and 64, got {args.threads}")
    bootstrap = parse_address(args.bootstrap_server, "--bootstrap-server")
    listen = parse_address(args.listen, "--listen")
    props = read_properties(args.config) if args.config else {}
    for key in props:
        if key not in KNOWN_PROPERTIES and not key.startswith("client.quota.callback."):
            log.warning("--config: %s is not used by the proxy", key)
    window_num = args.quota_window_num or _int_prop(props, "quota.window.num", BROKER_DEFAULTS["window_num"])
    window_size = args.quota_window_size_seconds or _int_prop(props, "quota.window.size.seconds",
                                                               BROKER_DEFAULTS["window_size_seconds"])
    callback_configs = {k: v for k, v in props.items() if k.startswith("client.quota.callback.")
                        and k != "client.quota.callback.class"}
    qm = QuotaManager(
        window_num=window_num, window_size_seconds=window_size,
        num_io_threads=_int_prop(props, "num.io.threads", BROKER_DEFAULTS["num_io_threads"]),
        num_network_threads=_int_prop(props, "num.network.threads", BROKER_DEFAULTS["num_network_threads"]),
        controller_window_num=_int_prop(props, "controller.quota.window.num", BROKER_DEFAULTS["controller_window_num"]),
        controller_window_size_seconds=_int_prop(props, "controller.quota.window.size.seconds",
                                                 BROKER_DEFAULTS["controller_window_size_seconds"]),
        callback=props.get("client.quota.callback.class") or None,
        callback_configs=callback_configs or None,
    )
    store_url = args.store if args.store is not None else (os.environ.get(STORE_ENV, "").strip() or None)
    store_url = fill_cluster(store_url, args.bootstrap_server)
    if args.quota_scope == "fleet" and not (store_url or "").lower().startswith("kafka://"):
        raise KQuotaError("--quota-scope fleet needs a kafka:// --store: the proxies following one store topic "
                          f"are the fleet (got {store_url or 'the default store'})")
    store = open_store(store_url)
    watcher = QuotaConfigWatcher(store, qm).start()
    fleet = None
    metrics_server = None
    request_log: Optional[RequestLogWriter] = None
    try:
        if args.quota_scope == "fleet":
            from kquota.proxy.fleet import FleetCoordinator

            fleet = FleetCoordinator(qm, store.hosts, store.topic).start()
        if args.metrics_port is not None:
            from kquota.prometheus import start_http_server

            metrics_server, _ = start_http_server(qm, port=args.metrics_port, addr="127.0.0.1")
            log.info("metrics on http://127.0.0.1:%d/metrics", metrics_server.server_port)
        if args.request_log:
            request_log = RequestLogWriter(args.request_log)
        proxy = NativeProxyServer(
            qm, bootstrap, listen, store=store,
            admin_principals=principal_names((args.admin_principals or "").split(",")),
            max_frame_bytes=_int_prop(props, "socket.request.max.bytes", DEFAULT_MAX_FRAME_BYTES),
            max_connections=_int_prop(props, "max.connections", DEFAULT_MAX_CONNECTIONS),
            request_log=request_log, default_partitions=_int_prop(props, "num.partitions", 1),
            advertised_host=args.advertised_host, threads=args.threads,
        )
        _run(_main(proxy), args.event_loop)
        log.info("kquota proxy stopped")
        return 0
    finally:
        if fleet is not None:
            fleet.stop()
        watcher.stop()
        store.close()
        if metrics_server is not None:
            metrics_server.shutdown()
        qm.close()


def _run(coro: Any, event_loop: str) -> None:
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                coro.close()
                raise KQuotaError("--event-loop uvloop: uvloop is not installed (pip install 'kquota[proxy]')") from None
        else:
            log.info("event loop: uvloop %s", uvloop.__version__)
            uvloop.run(coro)
            return
    asyncio.run(coro)


async def _main(proxy: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await proxy.start()
    await stop.wait()
    log.info("stopping: draining connections")
    await proxy.close()
