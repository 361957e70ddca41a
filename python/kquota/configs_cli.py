"""``kquota configs``: kafka-configs syntax for client quotas in a :mod:`kquota.stores` store.

    kquota configs --store sqlite:///q.db --alter --add-config 'producer_byte_rate=1024' \\
        --entity-type users --entity-name alice
    kquota configs --alter --delete-config producer_byte_rate --entity-type users --entity-default
    kquota configs --describe [--entity-type users [--entity-name alice]] [--json]
    kquota configs --alter --add-config connection_creation_rate=20 --entity-type ips --entity-name 10.1.2.3
    kquota configs --alter --add-config connection_creation_rate=50 --ip-defaults
    kquota configs --alter --add-config producer_byte_rate=12000000 --entity-type topics --entity-name orders
    kquota configs --alter --add-config consumer_byte_rate=50000000 --entity-type topics --entity-default
    kquota configs --bootstrap-server 127.0.0.1:9092 [--command-config client.properties] --describe
    kquota configs --promote-shadow --shadow-store sqlite:///shadow.db --store sqlite:///q.db
    kquota configs --alter --add-config shadow.producer_byte_rate=512000 --entity-type users --entity-name etl
    kquota configs --promote-shadow --store sqlite:///q.db

With ``--bootstrap-server`` instead of ``--store`` the command manages a running cluster's (or
``kquota proxy``'s) quotas over the admin protocol (:mod:`kquota.configs_bootstrap`).
Entity names pair with entity types in order, as in Kafka's ``ConfigCommand``
(``--entity-default`` counts as an empty name, i.e. ``<default>``). ``--describe --json`` prints
the quota configuration file of ``docs/pipeline.md``; ``--alter --quota-file FILE``
feeds such a file back in. Errors print one line and exit with status 1.

A quota marked shadow (``shadow.<config key>``, :mod:`kquota.shadow_marks`) is stored beside the
enforced ones and never enforced; ``kquota proxy --shadow-marked`` evaluates the marks, and
``--promote-shadow`` without ``--shadow-store`` makes them the enforced quotas.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from typing import Any, Optional

from kquota.configs_format import DEFAULT_MARK, print_altered, print_described
from kquota.entity import CLIENT_ID, IP, TOPIC, USER, ClientQuotaEntity
from kquota.exceptions import KQuotaError, QuotaConfigError

_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP, "topics": TOPIC}
#: The entity types that stand alone (kafka-configs' words for them).
_SOLE_TYPES = ("ips", "topics")


class ConfigCommandError(KQuotaError):
    """A command line that names no valid operation (one-line message, exit status 1)."""



class _EntityName(argparse.Action):
    """--entity-name / --entity-default append, in command-line order, to one list."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append(DEFAULT_MARK if option_string == "--entity-default" else values)
        namespace.entity_names = names


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Registers ``configs`` on the ``kquota`` command's subparsers."""
    p = sub.add_parser(
        "configs",
        help="alter or describe client quotas in a configuration store (kafka-configs syntax)",
        description="Alter or describe client quotas in a configuration store, with kafka-configs' options.",
    )
    op = p.add_mutually_exclusive_group(required=True)
    op.add_argument("--alter", action="store_true", help="change quotas of one entity (or of a --quota-file)")
    op.add_argument("--describe", action="store_true", help="list quotas (all entities unless narrowed)")
    op.add_argument("--promote-shadow", action="store_true",
                    help="make --store's configuration the --shadow-store's, in one transaction (every entity "
                         "or none): the shadow a `kquota proxy --shadow-store` evaluated becomes the enforced one; "
                         "without --shadow-store, --store's quotas marked shadow (shadow.<config key>, as "
                         "`kquota proxy --shadow-marked` evaluates them) replace their unmarked keys and the marks go")
    p.add_argument("--shadow-store", metavar="URL", help="with --promote-shadow: the shadow configuration's store "
                   "(the --store URL forms); it is only read, and its own shadow marks are not promoted")
    p.add_argument("--store", metavar="URL", help="sqlite:///relative.db, sqlite:////absolute/path.db, a plain "
                   "path, zookeeper://host:port[/chroot] or kafka://host:port/topic (docs/store-urls.md; "
                   "default: $KQUOTA_STORE, else a file in ~/.local/share/kquota)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="instead of --store: a running Kafka "
                   "cluster or kquota proxy, over DescribeClientQuotas/AlterClientQuotas (KIP-546), as "
                   "kafka-configs --bootstrap-server")
    p.add_argument("--command-config", metavar="FILE", help="with --bootstrap-server or a kafka:// --store: Kafka "
                   "client properties for the connection (security.protocol, ssl.truststore.*, ssl.keystore.*, "
                   "ssl.endpoint.identification.algorithm, sasl.mechanism=PLAIN, sasl.jaas.config)")
    p.add_argument("--dry-run", action="store_true", help="with --bootstrap-server --alter: the cluster validates "
                   "the alter (ValidateOnly) and changes nothing")
    p.add_argument("--entity-type", action="append", choices=sorted(_TYPES), default=[],
                   help="users, clients, ips or topics (a topic quota: the topic's total rate over all its "
                   "partitions, clients and brokers; docs/topic-quotas.md); repeat for <user, client-id> "
                   "(ips and topics stand alone)")
    p.add_argument("--entity-name", action=_EntityName, help="the name for the matching --entity-type")
    p.add_argument("--entity-default", action=_EntityName, nargs=0, help="the <default> entity of the matching type")
    p.add_argument("--user", help="short for --entity-type users --entity-name USER")
    p.add_argument("--user-defaults", action="store_true", help="short for --entity-type users --entity-default")
    p.add_argument("--client", help="short for --entity-type clients --entity-name CLIENT")
    p.add_argument("--client-defaults", action="store_true", help="short for --entity-type clients --entity-default")
    p.add_argument("--ip", help="short for --entity-type ips --entity-name IP (an IPv4 or IPv6 address)")
    p.add_argument("--ip-defaults", action="store_true", help="short for --entity-type ips --entity-default")
    p.add_argument("--add-config", metavar="K=V,...", help="quotas to set, e.g. 'producer_byte_rate=1024'")
    p.add_argument("--delete-config", metavar="K,...", help="quota keys to remove")
    p.add_argument("--quota-file", metavar="FILE", help="with --alter: set every entry of a quota configuration "
                   "file (the --describe --json format); '-' reads stdin")
    p.add_argument("--json", action="store_true", help="machine-readable output (quota configuration file)")
    p.set_defaults(func=run, entity_names=[])
    return p


# ---------------------------------------------------------------------------- parsing


def _entity_spec(args: argparse.Namespace) -> list[tuple[str, Optional[str]]]:
    """[(entity key, name, or DEFAULT_MARK, or None for 'any')] in user, client order."""
    types = list(args.entity_type)
    names = list(args.entity_names)
    short = bool(args.user is not None or args.user_defaults or args.client is not None or args.client_defaults
                 or args.ip is not None or args.ip_defaults)
    if short:
        if types or names:
            raise ConfigCommandError("use either --entity-type/--entity-name or --user/--client, not both")
        if args.user is not None and args.user_defaults:
            raise ConfigCommandError("--user and --user-defaults are mutually exclusive")
        if args.client is not None and args.client_defaults:
            raise ConfigCommandError("--client and --client-defaults are mutually exclusive")
        if args.user is not None or args.user_defaults:
            types.append("users")
            names.append(DEFAULT_MARK if args.user_defaults else args.user)
        if args.client is not None or args.client_defaults:
            types.append("clients")
            names.append(DEFAULT_MARK if args.client_defaults else args.client)
        if args.ip is not None and args.ip_defaults:
            raise ConfigCommandError("--ip and --ip-defaults are mutually exclusive")
        if args.ip is not None or args.ip_defaults:
            types.append("ips")
            names.append(DEFAULT_MARK if args.ip_defaults else args.ip)
    if len(types) > 2 or len(set(types)) != len(types):
        raise ConfigCommandError("--entity-type may be given at most twice: once users, once clients")
    if any(t in _SOLE_TYPES for t in types) and len(types) > 1:
        # Kafka's ConfigCommand, word for word.
        raise ConfigCommandError("Only 'users' and 'clients' entity types may be specified together")
    if len(names) > len(types):
        raise ConfigCommandError("more --entity-name/--entity-default than --entity-type")
    # As Kafka's ConfigCommand: `clients ... users` is reordered to user first, names with it.
    if len(types) == 2 and types[0] == "clients":
        types.reverse()
        if len(names) == 2:
            names.reverse()
    if "" in names:
        raise QuotaConfigError("an entity name is empty (use --entity-default for the <default> entity)")
    spec: list[tuple[str, Optional[str]]] = []
    for i, t in enumerate(types):
        name = names[i] if i < len(names) else None
        if t == "ips" and name not in (None, DEFAULT_MARK):
            # Checked (and made canonical) before any store is opened: nothing is written.
            try:
                name = ClientQuotaEntity({IP: name})[IP]
            except QuotaConfigError as e:
                raise QuotaConfigError(f"The entity name for ips must be a valid IP: {e}") from None
        if t == "topics" and name not in (None, DEFAULT_MARK):
            # Checked before any store is opened: nothing is written.
            ClientQuotaEntity({TOPIC: name})
        spec.append((_TYPES[t], name))
    return spec


def _entity(spec: list[tuple[str, Optional[str]]]) -> ClientQuotaEntity:
    if not spec or any(name is None for _, name in spec):
        raise ConfigCommandError(
            "--alter needs --entity-name or --entity-default with each --entity-type (or --quota-file)"
        )
    return ClientQuotaEntity({key: None if name == DEFAULT_MARK else name for key, name in spec})


def _number(key: str, text: str) -> float:
    text = text.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)  # type: ignore[return-value]  # ints stay exact up to 2^63
    try:
        return float(text)
    except ValueError:
        raise QuotaConfigError(f"invalid value {text!r} for {key}: not a number") from None


def parse_add_config(text: str) -> dict[str, Any]:
    """``'k=v,k2=v2'`` -> ``{k: number}`` (kafka-configs' --add-config syntax)."""
    out: dict[str, Any] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise QuotaConfigError(f"invalid --add-config entry {item.strip()!r}: expected key=value")
        if key in out:
            raise QuotaConfigError(f"invalid --add-config: {key} is given twice")
        out[key] = _number(key, value)
    if not out:
        raise QuotaConfigError("--add-config is empty")
    return out


def parse_delete_config(text: str) -> list[str]:
    """``'k,k2'`` -> ``[k, k2]``."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise QuotaConfigError("--delete-config is empty")
    return keys


# ---------------------------------------------------------------------------- run


def _alter_entries(args: argparse.Namespace) -> list[tuple[ClientQuotaEntity, dict[str, Any]]]:
    from kquota.config_file import load_quota_config, parse_quota_config

    if args.quota_file is not None:
        if args.add_config is not None or args.delete_config is not None or args.entity_type or args.entity_names \
                or args.user is not None or args.client is not None or args.user_defaults or args.client_defaults \
                or args.ip is not None or args.ip_defaults:
            raise ConfigCommandError("--quota-file takes no entity and no --add-config/--delete-config")
        if args.quota_file == "-":
            try:
                doc = json.load(sys.stdin)
            except json.JSONDecodeError as e:
                raise QuotaConfigError(f"quota configuration <stdin> is not valid JSON: {e}") from None
            entries = parse_quota_config(doc, source="<stdin>")
        else:
            entries = load_quota_config(args.quota_file)
        return [(e, dict(c)) for e, c in entries]
    entity = _entity(_entity_spec(args))
    if args.add_config is None and args.delete_config is None:
        raise ConfigCommandError("--alter needs --add-config and/or --delete-config (or --quota-file)")
    ops: dict[str, Any] = parse_add_config(args.add_config) if args.add_config is not None else {}
    if args.delete_config is not None:
        deleted = parse_delete_config(args.delete_config)
        both = sorted(set(deleted) & set(ops))
        if both:
            raise QuotaConfigError(
                f"invalid entity config: {', '.join(both)} cannot be both added and deleted"
            )
        ops.update({k: None for k in deleted})
    return [(entity, ops)]


def run(args: argparse.Namespace) -> int:
    """Runs ``kquota configs``; returns the exit status (errors propagate as exceptions)."""
    from kquota.stores import open_store

    if args.bootstrap_server is not None and args.store is not None:
        raise ConfigCommandError("--store and --bootstrap-server are alternatives: give one")
    kafka_store = args.store is not None and args.store.strip().lower().startswith("kafka:")
    if args.bootstrap_server is None and args.dry_run:
        raise ConfigCommandError("--dry-run needs --bootstrap-server")
    if args.bootstrap_server is None and args.command_config is not None and not kafka_store:
        raise ConfigCommandError("--command-config needs --bootstrap-server or a kafka:// --store")
    # kazoo logs every failed connection attempt; the command reports one line instead.
    kazoo_log = logging.getLogger("kazoo")
    kazoo_log.addHandler(logging.NullHandler())
    kazoo_log.propagate = False
    if args.promote_shadow:
        return promote_shadow(args)
    if args.shadow_store is not None:
        raise ConfigCommandError("--shadow-store needs --promote-shadow")
    if args.describe:
        if args.add_config is not None or args.delete_config is not None or args.quota_file is not None:
            raise ConfigCommandError("--add-config, --delete-config and --quota-file need --alter")
        spec = _entity_spec(args)
        entries = None
    else:
        entries = _alter_entries(args)  # parsed and checked before the store is touched
        spec = []
    if args.bootstrap_server is not None:
        from kquota.configs_bootstrap import run_bootstrap

        return run_bootstrap(args, spec, entries)
    warnings: list[str] = []
    url, new_file = _locate(args.store)
    if new_file is not None and args.describe:
        raise ConfigCommandError(f"no store at {new_file} ({url}): nothing to describe, nothing created "
                                 "(an --alter creates it)")
    # A describe only reads: the store is opened read-only (nothing created or changed).
    options: dict = {}
    if args.command_config is not None:
        from kquota.kafka.java_properties import load_properties

        options = {"security": load_properties(args.command_config, "--command-config"),
                   "security_source": args.command_config}
    store = open_store(args.store, read_only=entries is None, **options)
    try:
        if entries is not None:
            store.alter(entries)
            if new_file is not None:
                print(f"kquota configs: created a new store at {new_file}", file=sys.stderr)
            state = store.describe([e for e, _ in entries], on_error=lambda m, _e: warnings.append(m))
            for m in warnings:
                print(f"kquota configs: warning: {m}", file=sys.stderr)
            if args.json:
                print_altered([(e, state.get(e, {})) for e, _ in entries])
            else:
                for entity, _ in entries:
                    print(f"Completed updating config for {entity}.")
            return 0
        state = store.describe(on_error=lambda m, _e: warnings.append(m))
    finally:
        store.close()
    for m in warnings:
        print(f"kquota configs: warning: {m}", file=sys.stderr)
    print_described(state, spec, args.json, url)
    return 0


def promote_shadow(args: argparse.Namespace) -> int:
    """``--promote-shadow``: ``--store``'s enforced configuration becomes ``--shadow-store``'s,
    or, without ``--shadow-store``, its own quotas marked shadow (:mod:`kquota.shadow_marks`), in
    one ``alter`` (the store's one transaction: every entity or none). A shadow entry the store
    cannot read refuses the promotion (a partial configuration is never applied)."""
    from kquota.shadow_marks import enforced_state
    from kquota.stores import open_store
    from kquota.stores.base import diff_ops

    if args.bootstrap_server is not None:
        raise ConfigCommandError("--promote-shadow works on stores: give --store, not --bootstrap-server")
    if (args.add_config is not None or args.delete_config is not None or args.quota_file is not None
            or _entity_spec(args) or args.dry_run):
        raise ConfigCommandError("--promote-shadow takes the whole shadow configuration: no entity, --add-config, "
                                 "--delete-config, --quota-file or --dry-run")
    options: dict = {}
    if args.command_config is not None:
        from kquota.kafka.java_properties import load_properties

        options = {"security": load_properties(args.command_config, "--command-config"),
                   "security_source": args.command_config}
    url, _ = _locate(args.store)
    problems: list[str] = []
    if args.shadow_store is None:
        return _promote_marks(url, open_store(args.store, **options), args.json)
    try:
        shadow = open_store(args.shadow_store, read_only=True, **options)
    except KQuotaError as e:
        raise ConfigCommandError(f"--shadow-store: {e}") from None
    try:
        wanted = enforced_state(shadow.describe(on_error=lambda m, _e: problems.append(m)))
        if problems:
            raise ConfigCommandError(f"--shadow-store {shadow.url}: {problems[0]} (nothing promoted)")
        store = open_store(args.store, **options)
    finally:
        shadow.close()
    try:
        if store.url == shadow.url:
            raise ConfigCommandError(f"--shadow-store and --store are the same store ({store.url}): nothing to promote "
                                     "(its quotas marked shadow are promoted without --shadow-store)")
        current = store.describe(on_error=lambda m, _e: problems.append(m))
        # The enforced keys only: --store's own marks stay as they are.
        enforced = enforced_state(current)
        entries = [(e, ops) for e in sorted(set(enforced) | set(wanted), key=str)
                   if (ops := diff_ops(enforced.get(e, {}), wanted.get(e, {})))]
        if entries:
            store.alter(entries)
    finally:
        store.close()
    for m in problems:
        print(f"kquota configs: warning: {m}", file=sys.stderr)
    if args.json:
        print_altered([(e, wanted.get(e, {})) for e, _ in entries])
    else:
        print(f"Promoted the shadow configuration of {shadow.url} to {url}: {len(entries)} "
              f"{'entity' if len(entries) == 1 else 'entities'} changed.")
    return 0


def _promote_marks(url: str, store: Any, json_out: bool) -> int:
    """``--promote-shadow`` without ``--shadow-store``: ``store``'s marked quotas replace their
    unmarked keys, and the marks go, in one ``alter``; refused if an entry cannot be read or
    nothing is marked."""
    from kquota.shadow_marks import SHADOW_PREFIX, promotion, shadow_state

    try:
        problems: list[str] = []
        current = store.describe(on_error=lambda m, _e: problems.append(m))
        if problems:
            raise ConfigCommandError(f"--store {store.url}: {problems[0]} (nothing promoted)")
        entries = promotion({e: current[e] for e in sorted(current, key=str)})
        if not entries:
            raise ConfigCommandError(f"--promote-shadow: no quota in {store.url} is marked shadow "
                                     f"({SHADOW_PREFIX}<config key>) and no --shadow-store was given: nothing to promote")
        store.alter(entries)
    finally:
        store.close()
    if json_out:
        promoted = shadow_state({e: current[e] for e, _ in entries})
        print_altered([(e, promoted[e]) for e, _ in entries])
    else:
        count = sum(1 for _, ops in entries for v in ops.values() if v is not None)
        print(f"Promoted {count} quota{'' if count == 1 else 's'} marked shadow in {url}: {len(entries)} "
              f"{'entity' if len(entries) == 1 else 'entities'} changed.")
    return 0


def _locate(store: Optional[str]) -> tuple[str, Optional[str]]:
    """(the store's URL, the absolute path of its SQLite file if that file does not exist yet),
    read by the one URL parser (:func:`kquota.stores.url.parse_store_url`)."""
    from kquota.stores.url import default_store_url, parse_store_url

    url = store if store is not None else default_store_url()
    where = parse_store_url(url)
    if where.path is not None and not os.path.exists(where.path):
        return url, where.path
    return url, None
