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
import re
import signal
from typing import Any, Optional

from kquota.exceptions import KQuotaError
from kquota.utilization import DEFAULT_MAX_ENTITIES

log = logging.getLogger("kquota.proxy")

#: The file holding the fleet's key (--quota-scope fleet needs it; docs/guides/proxy.md).
FLEET_KEY_PROPERTY = "kquota.fleet.usage.key.file"
#: Entities besides the throttled ones the metrics port's utilization series show (the rest
#: summed per quota type; kquota.utilization).
METRICS_MAX_ENTITIES_PROPERTY = "kquota.metrics.max.entities"
#: How an over-quota Fetch response is answered: ``deliver-large`` (default) or ``kafka``
#: (every throttled response empty, as Kafka's broker answers it); see ``QuotaManager``.
FETCH_ANSWER_PROPERTY = "kquota.fetch.answer"
FETCH_ANSWERS = ("deliver-large", "kafka")

#: Broker properties --config understands (others are reported and ignored, as a broker would).
KNOWN_PROPERTIES = (
    "quota.window.num", "quota.window.size.seconds", "controller.quota.window.num",
    "controller.quota.window.size.seconds", "client.quota.callback.class", "socket.request.max.bytes",
    "num.partitions", "num.io.threads", "num.network.threads",
) + (
    "max.connections", "max.connection.creation.rate", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "listener.name.<listener>.max.connection.creation.rate", "listener.name.<listener>.max.connections",
    "kquota.proxy.max.client.sockets", "kquota.proxy.protocol.enable", "kquota.proxy.protocol.timeout.ms",
    "kquota.proxy.protocol.trusted.sources",
) + (
    "sasl.server.max.receive.size", "connections.max.idle.ms", "kquota.proxy.inspected.request.max.bytes",
    "kquota.proxy.decoded.request.max.bytes", "kquota.max.client.ids.per.principal", FETCH_ANSWER_PROPERTY,
) + (FLEET_KEY_PROPERTY, METRICS_MAX_ENTITIES_PROPERTY)
#: The connection-quota properties (KIP-612 and the counts) the kernel enforces at the proxy's
#: accept, as Kafka's ``ConnectionQuotas``; besides them every ``listener.name.<l>.max.connections``
#: and ``listener.name.<l>.max.connection.creation.rate``. The proxy's ports are one listener,
#: named by the ``--listen`` protocol (``SSL`` for ``SSL://host:port``, as a broker names it).
#: ``kquota.proxy.max.client.sockets`` is not among them: the proxy's own descriptor guard.
CONNECTION_PROPERTIES = (
    "max.connections", "max.connection.creation.rate", "max.connections.per.ip", "max.connections.per.ip.overrides",
)
#: The per-listener forms of the connection limits (``listener.name.<l>.<suffix>``).
LISTENER_CONNECTION_SUFFIXES = (".max.connections", ".max.connection.creation.rate")


def _tls_options(args: argparse.Namespace, props: dict[str, str]) -> tuple[Any, Any, dict[str, Any]]:
    """``--listen`` and ``--bootstrap-server`` in Kafka's listener form, the listener's TLS from
    ``--config`` and the upstream's from ``--broker-config`` (every file read now: a bad one is
    one line naming the property and the file): (listen, bootstrap, ProxyServer options)."""
    from kquota.kafka.java_properties import load_properties
    from kquota.proxy.tls_settings import listener_tls, parse_listener, upstream_security

    listen = parse_listener(args.listen, "--listen")
    bootstrap = parse_listener(args.bootstrap_server, "--bootstrap-server")
    options: dict[str, Any] = {}
    if listen.tls:
        options["listener_tls"] = listener_tls(props, args.config or "--config", listen).properties
    broker_props = load_properties(args.broker_config, "--broker-config") if args.broker_config else {}
    upstream = upstream_security(broker_props, args.broker_config or "--bootstrap-server", bootstrap)
    if upstream.tls is not None:
        options["upstream_tls"] = upstream.tls
    return listen, bootstrap, options


def _store_security(args: argparse.Namespace, store_url: Optional[str], bootstrap: Any) -> dict[str, Any]:
    """The Kafka store's connection settings: ``--store-config``; else, for a store on the proxied
    cluster, ``--broker-config`` with the ``--bootstrap-server`` protocol; else none."""
    from kquota.kafka.java_properties import load_properties
    from kquota.stores.url import parse_store_url

    if store_url is None or parse_store_url(store_url).kind != "kafka":
        if args.store_config:
            raise KQuotaError("--store-config is for a kafka:// --store")
        return {}
    if args.store_config:
        return {"security": load_properties(args.store_config, "--store-config"), "security_source": args.store_config}
    hosts = (parse_store_url(store_url).hosts or "").split(",")
    if f"{bootstrap.host}:{bootstrap.port}" not in hosts:
        return {}
    props = load_properties(args.broker_config, "--broker-config") if args.broker_config else {}
    if bootstrap.protocol != "PLAINTEXT" or props:
        props = {"security.protocol": bootstrap.protocol, **props}
    return {"security": props, "security_source": args.broker_config or "--bootstrap-server"}


def _shadow_store_url(shadow: Optional[str], store_url: Optional[str], bootstrap: str) -> Optional[str]:
    """``--shadow-store``'s URL (a kafka:// one without a host on the proxied cluster, as
    ``--store``'s), checked: not the enforced store's URL (a store opened under two spellings is
    refused once both are open, by their canonical URLs)."""
    from kquota.stores.kafka.store import fill_cluster
    from kquota.stores.url import parse_store_url

    if shadow is None:
        return None
    if not shadow.strip():
        raise KQuotaError("--shadow-store: an empty URL")
    url = fill_cluster(shadow.strip(), bootstrap.rpartition("://")[2])
    try:
        parse_store_url(url)
    except KQuotaError as e:
        raise KQuotaError(f"--shadow-store: {e}") from None
    if store_url is not None and url == store_url:
        raise KQuotaError(f"--shadow-store names the enforced --store ({url}): a shadow is a second configuration")
    return url


def _token_owners(args: argparse.Namespace, bootstrap: Any) -> Any:
    """Who owns a delegation token, asked of the cluster with the proxy's own connection settings
    (``--broker-config``, the ``--bootstrap-server`` protocol); ``None`` (tokens counted per token
    id, logged once) where those settings cannot make that connection."""
    from kquota.kafka.client_security import client_security
    from kquota.kafka.java_properties import load_properties
    from kquota.proxy.token_owners import TokenOwners

    props = load_properties(args.broker_config, "--broker-config") if args.broker_config else {}
    source = args.broker_config or "--bootstrap-server"
    try:
        security = client_security({"security.protocol": bootstrap.protocol, **props}, source)
    except KQuotaError as e:
        log.warning("delegation tokens are counted per token id: the proxy cannot ask their owners (%s)", e)
        return None
    return TokenOwners(f"{bootstrap.host}:{bootstrap.port}", security)


def _principal_list(text: str) -> list[str]:
    """``--admin-principals``: separated by commas (or semicolons, as Kafka's ``super.users``),
    except that a principal may be a certificate's distinguished name, whose commas are followed
    by its next attribute (``User:CN=admin,OU=ops,User:bob,ANONYMOUS``)."""
    return [p for part in text.split(";") for p in re.split(r",(?!\s*[A-Za-z][A-Za-z0-9.-]*=)", part)]


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


def _fetch_answer_prop(props: dict[str, str]) -> Optional[str]:
    """:data:`FETCH_ANSWER_PROPERTY` (absent: ``None``, the kernel's default), checked here so a
    bad value is one line naming the property."""
    if FETCH_ANSWER_PROPERTY not in props:
        return None
    value = props[FETCH_ANSWER_PROPERTY].strip()
    if value not in FETCH_ANSWERS:
        raise KQuotaError(f"--config: {FETCH_ANSWER_PROPERTY} must be one of {', '.join(FETCH_ANSWERS)}, got {value!r}")
    return value


def _bool_prop(props: dict[str, str], key: str) -> bool:
    """A Kafka-style boolean property (``true``/``false``, any case; absent: false)."""
    value = props.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        raise KQuotaError(f"--config: {key} must be true or false, got {props[key]!r}")
    return value == "true"


def _fleet_key(props: dict[str, str], config: Optional[str]) -> Any:
    """The fleet's key (``UsageKey``) from the file :data:`FLEET_KEY_PROPERTY` names: fleet scope
    needs it, so its absence or a bad file is a ``KQuotaError`` (one line)."""
    from kquota.proxy.fleet_usage import KEY_MIN_BYTES, read_key_file

    path = props.get(FLEET_KEY_PROPERTY, "").strip()
    if not path:
        raise KQuotaError(f"--quota-scope fleet needs {FLEET_KEY_PROPERTY} in --config: a file holding the key "
                          f"(at least {KEY_MIN_BYTES} bytes, the same on every proxy of the fleet) that signs its "
                          f"usage records (got {'no --config' if config is None else 'none in ' + config})")
    try:
        return read_key_file(path)
    except ValueError as e:
        raise KQuotaError(f"--config: {FLEET_KEY_PROPERTY}: {e}") from None


def configure_connection_quotas(qm: Any, props: dict[str, str]) -> None:
    """Hands the --config file's connection-quota properties to ``qm`` (all or none; a bad one
    is a ``KQuotaError`` naming it)."""
    qm.configure_connections({k: v for k, v in props.items() if k in CONNECTION_PROPERTIES or (
        k.startswith("listener.name.") and k.endswith(LISTENER_CONNECTION_SUFFIXES))})


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Registers ``proxy`` on the ``kquota`` command's subparsers."""
    p = sub.add_parser(
        "proxy", help="a Kafka protocol proxy enforcing client quotas on real clients, as a broker does",
        description="Run a Kafka wire-protocol proxy in front of a cluster that throttles clients with "
                    "Kafka's quota rules (produce, fetch, request, controller mutation).")
    p.add_argument("--bootstrap-server", required=True, metavar="[PROTOCOL://]HOST:PORT",
                   help="a broker of the cluster to proxy; SSL:// or SASL_SSL:// for TLS to the brokers (settings "
                        "from --broker-config)")
    p.add_argument("--broker-config", metavar="FILE",
                   help="Kafka client properties of the proxy's own connections to the brokers: security.protocol, "
                        "ssl.truststore.*, ssl.keystore.* (mutual TLS), ssl.endpoint.identification.algorithm "
                        "(default https: the broker's certificate must match its advertised host)")
    p.add_argument("--listen", default="127.0.0.1:9192", metavar="[PROTOCOL://]HOST:PORT",
                   help="where clients bootstrap; broker N is proxied on PORT+1+N (port 0: free ports), with the "
                        "same protocol: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL (TLS settings: the "
                        "ssl.* broker properties of --config) (default: %(default)s)")
    p.add_argument("--advertised-host", metavar="HOST", help="host written into broker addresses (default: the "
                   "--listen host)")
    p.add_argument("--store", metavar="URL", help="quota store followed live (sqlite:///path, "
                   "zookeeper://host:port[/chroot], kafka://[host:port]/topic: no host is the --bootstrap-server's "
                   "cluster; default: $KQUOTA_STORE, else the user's default store)")
    p.add_argument("--shadow-store", metavar="URL",
                   help="a second quota store (same URL forms as --store, never the same store) followed live and "
                        "evaluated on the same traffic, never enforced: per entity its would-be throttle time and "
                        "delayed bytes as metrics (kafka_server_<type>_shadow_throttle_time_total, "
                        "..._shadow_delayed_bytes_total) and request-log columns; `kquota configs --promote-shadow` "
                        "applies it (docs/guides/proxy.md, Shadow quotas)")
    p.add_argument("--shadow-marked", action="store_true",
                   help="instead of --shadow-store: evaluate, the same way, the quotas marked shadow in --store "
                        "(config keys shadow.<key>, e.g. `kquota configs --alter --add-config "
                        "shadow.producer_byte_rate=N`): each entity's quotas with its marked ones in their place; "
                        "`kquota configs --promote-shadow` without --shadow-store applies them")
    p.add_argument("--store-config", metavar="FILE",
                   help="Kafka client properties of a kafka:// --store's (and the fleet's) connections: "
                        "security.protocol, ssl.truststore.*, ssl.keystore.*, ssl.endpoint.identification.algorithm, "
                        "sasl.mechanism=PLAIN, sasl.jaas.config (default for a store on the proxied cluster: "
                        "--broker-config, with the --bootstrap-server protocol)")
    p.add_argument("--quota-scope", default="proxy", choices=["proxy", "fleet"],
                   help="proxy: each quota holds per proxy, as Kafka's hold per broker; fleet: every proxy following "
                        "the same kafka:// --store topic is one fleet and each quota holds for the fleet as a whole "
                        "(usage exchanged through the topic <store topic>.usage, signed with the key in the file named by "
                        "kquota.fleet.usage.key.file in --config, which fleet scope needs; see docs/guides/proxy.md)")
    p.add_argument("--quota-window-num", type=int, metavar="N",
                   help="quota.window.num (default: 11, or the --config file's)")
    p.add_argument("--quota-window-size-seconds", type=int, metavar="S",
                   help="quota.window.size.seconds (default: 1, or the --config file's)")
    p.add_argument("--config", metavar="FILE", help="broker-style properties: " + ", ".join(KNOWN_PROPERTIES))
    p.add_argument("--metrics-port", type=int, metavar="P", help="serve Prometheus metrics on 127.0.0.1:P/metrics and a "
                   "status page on 127.0.0.1:P/ (the "
                   f"utilization series bounded by {METRICS_MAX_ENTITIES_PROPERTY} in --config, default "
                   f"{DEFAULT_MAX_ENTITIES}: every throttled entity, the top N, the rest summed)")
    p.add_argument("--request-log", metavar="DIR", help="write every recorded request to rotated Parquet files "
                   "in DIR (the pipeline's request-log schema)")
    p.add_argument("--admin-principals", metavar="P,...",
                   help="comma-separated principals (User:name; a TLS client's is its certificate's subject mapped by "
                        "ssl.principal.mapping.rules, e.g. User:CN=admin,OU=ops) allowed to AlterClientQuotas through the "
                        "proxy (default: none); they may DescribeClientQuotas too")
    p.add_argument("--describe-principals", metavar="P,...",
                   help="comma-separated principals (as --admin-principals) allowed to DescribeClientQuotas through "
                        "the proxy besides the admin principals; others are answered CLUSTER_AUTHORIZATION_FAILED, "
                        "as Kafka answers a principal without DESCRIBE_CONFIGS on the cluster (default: none)")
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
    from kquota.proxy.request_log_writer import RequestLogWriter
    from kquota.proxy.server import ProxyServer
    from kquota.proxy.settings import (DEFAULT_CONNECTIONS_MAX_IDLE_MS, DEFAULT_MAX_CLIENT_SOCKETS,
                                       DEFAULT_MAX_DECODED_REQUEST_BYTES, DEFAULT_MAX_FRAME_BYTES,
                                       DEFAULT_MAX_INSPECTED_REQUEST_BYTES,
                                       DEFAULT_PROXY_PROTOCOL_TIMEOUT_MS, DEFAULT_SASL_MAX_RECEIVE_SIZE)
    from kquota.stores.kafka.store import fill_cluster
    from kquota.stores.url import STORE_ENV, open_store
    from kquota.shadow_marks import is_marked, shadow_state
    from kquota.watcher import QuotaConfigWatcher

    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not 1 <= args.threads <= 64:
        raise KQuotaError(f"--threads must be between 1 and 64, got {args.threads}")
    from kquota.kafka.java_properties import load_properties
    from kquota.proxy.tls_settings import LISTENER_TLS_PROPERTIES

    props = load_properties(args.config) if args.config else {}
    listen_at, bootstrap_at, tls_options = _tls_options(args, props)
    bootstrap = (bootstrap_at.host, bootstrap_at.port)
    listen = (listen_at.host, listen_at.port)
    for key in props:
        if (key not in KNOWN_PROPERTIES and key not in LISTENER_TLS_PROPERTIES and not key.startswith("listener.name.")
                and not key.startswith("client.quota.callback.")):
            log.warning("--config: %s is not used by the proxy", key)
    proxy_protocol = _bool_prop(props, "kquota.proxy.protocol.enable")
    metrics_max_entities = _int_prop(props, METRICS_MAX_ENTITIES_PROPERTY, DEFAULT_MAX_ENTITIES, minimum=0)
    proxy_protocol_timeout_ms = _int_prop(props, "kquota.proxy.protocol.timeout.ms", DEFAULT_PROXY_PROTOCOL_TIMEOUT_MS)
    window_num = args.quota_window_num or _int_prop(props, "quota.window.num", BROKER_DEFAULTS["window_num"])
    window_size = args.quota_window_size_seconds or _int_prop(props, "quota.window.size.seconds",
                                                               BROKER_DEFAULTS["window_size_seconds"])
    callback_configs = {k: v for k, v in props.items() if k.startswith("client.quota.callback.")
                        and k != "client.quota.callback.class"}
    def quota_manager() -> Any:
        return QuotaManager(
            window_num=window_num, window_size_seconds=window_size,
            num_io_threads=_int_prop(props, "num.io.threads", BROKER_DEFAULTS["num_io_threads"]),
            num_network_threads=_int_prop(props, "num.network.threads", BROKER_DEFAULTS["num_network_threads"]),
            controller_window_num=_int_prop(props, "controller.quota.window.num",
                                            BROKER_DEFAULTS["controller_window_num"]),
            controller_window_size_seconds=_int_prop(props, "controller.quota.window.size.seconds",
                                                     BROKER_DEFAULTS["controller_window_size_seconds"]),
            callback=props.get("client.quota.callback.class") or None,
            callback_configs=callback_configs or None,
            # Absent: the kernel's default (1000).
            max_client_ids_per_principal=_int_prop(props, "kquota.max.client.ids.per.principal", 0) or None,
            fetch_answer=_fetch_answer_prop(props),
        )

    qm = quota_manager()
    try:
        configure_connection_quotas(qm, props)
    except KQuotaError as e:
        qm.close()
        raise KQuotaError(f"--config: {e}") from None
    store_url = args.store if args.store is not None else (os.environ.get(STORE_ENV, "").strip() or None)
    store_url = fill_cluster(store_url, args.bootstrap_server.rpartition("://")[2])
    if args.quota_scope == "fleet" and not (store_url or "").lower().startswith("kafka://"):
        raise KQuotaError("--quota-scope fleet needs a kafka:// --store: the proxies following one store topic "
                          f"are the fleet (got {store_url or 'the default store'})")
    if args.shadow_marked and args.shadow_store is not None:
        raise KQuotaError("--shadow-marked and --shadow-store are alternatives: the shadow is the marks in --store "
                          "or a second store")
    shadow_url = _shadow_store_url(args.shadow_store, store_url, args.bootstrap_server)
    shadow_qm = shadow_store = shadow_watcher = None
    try:
        fleet_key = _fleet_key(props, args.config) if args.quota_scope == "fleet" else None
        store = open_store(store_url, **_store_security(args, store_url, bootstrap_at))
        if shadow_url is not None:
            try:
                shadow_store = open_store(shadow_url, read_only=True, **_store_security(args, shadow_url, bootstrap_at))
            except KQuotaError as e:
                store.close()
                raise KQuotaError(f"--shadow-store: {e}") from None
            if shadow_store.url == store.url:
                shadow_store.close()
                store.close()
                raise KQuotaError(f"--shadow-store names the enforced --store ({store.url}): a shadow is a second "
                                  "configuration")
            shadow_qm = quota_manager()
        elif args.shadow_marked:
            shadow_qm = quota_manager()
    except BaseException:
        qm.close()
        raise
    watcher = QuotaConfigWatcher(store, qm).start()
    if shadow_store is not None:
        shadow_watcher = QuotaConfigWatcher(shadow_store, shadow_qm).start()
        log.info("shadow quotas from %s (evaluated, never enforced)", shadow_store.url)
    elif shadow_qm is not None:
        # The marks' shadow: the same store, seen through its marks (kquota.shadow_marks).
        shadow_watcher = QuotaConfigWatcher(store, shadow_qm, view=shadow_state).start()
        log.info("shadow quotas marked in %s (evaluated, never enforced)", store.url)
    else:
        try:
            marked = sum(1 for config in store.describe().values() for key in config if is_marked(key))
        except KQuotaError:
            marked = 0  # the watcher reports a store it cannot read
        if marked:
            log.warning("%s holds %d quota(s) marked shadow, not evaluated: start with --shadow-marked to see "
                        "what they would do", store.url, marked)
    fleet = None
    metrics_server = None
    request_log: Optional[RequestLogWriter] = None
    try:
        if args.quota_scope == "fleet":
            from kquota.proxy.fleet import FleetCoordinator

            fleet = FleetCoordinator(qm, store.hosts, store.topic, security=store.client_security, key=fleet_key).start()
        if args.metrics_port is not None:
            from kquota.prometheus import start_http_server
            from kquota.status import StatusPage

            page = StatusPage(qm, max_entities=metrics_max_entities, store=watcher.status,
                              fleet=None if fleet is None else fleet.status)
            metrics_server, _ = start_http_server(qm, port=args.metrics_port, addr="127.0.0.1",
                                                  max_entities=metrics_max_entities, status=page)
            log.info("metrics on http://127.0.0.1:%d/metrics", metrics_server.server_port)
            log.info("status page on http://127.0.0.1:%d/", metrics_server.server_port)
        if args.request_log:
            request_log = RequestLogWriter(args.request_log)
        proxy = ProxyServer(
            qm, bootstrap, listen, store=store,
            admin_principals=principal_names(_principal_list(args.admin_principals or "")),
            describe_principals=principal_names(_principal_list(args.describe_principals or ""),
                                                "--describe-principals"),
            sasl_listener=listen_at.sasl, token_owners=_token_owners(args, bootstrap_at) if listen_at.sasl else None,
            max_frame_bytes=_int_prop(props, "socket.request.max.bytes", DEFAULT_MAX_FRAME_BYTES),
            max_client_sockets=_int_prop(props, "kquota.proxy.max.client.sockets", DEFAULT_MAX_CLIENT_SOCKETS),
            request_log=request_log, default_partitions=_int_prop(props, "num.partitions", 1),
            advertised_host=args.advertised_host, threads=args.threads, **tls_options,
            proxy_protocol=proxy_protocol, proxy_protocol_timeout_ms=proxy_protocol_timeout_ms,
            proxy_protocol_trusted_sources=props.get("kquota.proxy.protocol.trusted.sources"),
            sasl_max_receive_size=_int_prop(props, "sasl.server.max.receive.size", DEFAULT_SASL_MAX_RECEIVE_SIZE),
            max_inspected_request_bytes=_int_prop(props, "kquota.proxy.inspected.request.max.bytes",
                                                  DEFAULT_MAX_INSPECTED_REQUEST_BYTES),
            max_decoded_request_bytes=_int_prop(props, "kquota.proxy.decoded.request.max.bytes",
                                                DEFAULT_MAX_DECODED_REQUEST_BYTES),
            connections_max_idle_ms=_int_prop(props, "connections.max.idle.ms", DEFAULT_CONNECTIONS_MAX_IDLE_MS),
            shadow=shadow_qm, shadow_store=shadow_store,
        )
        if metrics_server is not None and shadow_qm is not None:
            from kquota.proxy.shadow import ShadowStatus

            # Set once the proxy exists (its predictions feed the section); until then the
            # page says there is no shadow.
            label = shadow_store.url if shadow_store is not None else f"{store.url} (quotas marked shadow)"
            page.shadow = ShadowStatus(label, qm, shadow_qm, proxy.shadow_predictions)
        _run(_main(proxy), args.event_loop)
        log.info("kquota proxy stopped")
        return 0
    finally:
        if fleet is not None:
            fleet.stop()
        watcher.stop()
        store.close()
        if shadow_watcher is not None:
            shadow_watcher.stop()
        if shadow_store is not None:
            shadow_store.close()
        if metrics_server is not None:
            metrics_server.shutdown()
        qm.close()
        if shadow_qm is not None:
            shadow_qm.close()


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
