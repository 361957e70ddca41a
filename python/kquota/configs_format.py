"""The output of ``kquota configs`` (store and ``--bootstrap-server`` modes alike): the human
table, the quota configuration file of ``--json`` (``docs/pipeline.md``), Kafka's entity words."""

from __future__ import annotations

import json
from typing import Any, Optional

from kquota.entity import CLIENT_ID, IP, TOPIC, USER, ClientQuotaEntity

#: Stands for ``--entity-default`` in the list of names (Kafka uses an empty name; kquota
#: rejects an empty ``--entity-name`` as it rejects empty names everywhere).
DEFAULT_MARK = "\x00default"



def _show(name: Optional[str]) -> str:
    if name is None:
        return "<default>"
    if name in ("<default>", "-", "") or name != name.strip() or any(c.isspace() for c in name):
        return json.dumps(name)
    return name


def _fmt(value: float) -> str:
    from kquota.stores.base import format_value

    return format_value(value)


def _ordered(config: dict[str, float]) -> dict[str, float]:
    from kquota.manager import CONFIG_KEYS

    return {k: config[k] for k in sorted(config, key=lambda k: (CONFIG_KEYS.index(k) if k in CONFIG_KEYS else 99, k))}


def format_table(state: dict[ClientQuotaEntity, dict[str, float]]) -> str:
    """Human table: USER, CLIENT-ID, CONFIGS (``-`` where the entity has no such part); ``ip``
    entities in a table of their own (IP, CONFIGS) below, then ``topic`` entities (TOPIC, CONFIGS)."""
    rows = [("USER", "CLIENT-ID", "CONFIGS")]
    ip_rows = [("IP", "CONFIGS")]
    topic_rows = [("TOPIC", "CONFIGS")]
    for entity, config in state.items():
        configs = ",".join(f"{k}={_fmt(v)}" for k, v in _ordered(config).items())
        if entity.is_ip:
            ip_rows.append((_show(entity[IP]), configs))
            continue
        if entity.is_topic:
            topic_rows.append((_show(entity[TOPIC]), configs))
            continue
        rows.append((
            _show(entity[USER]) if USER in entity else "-",
            _show(entity[CLIENT_ID]) if CLIENT_ID in entity else "-",
            configs,
        ))
    tables = []
    if len(rows) > 1:
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        tables.append("\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows))
    for two in (ip_rows, topic_rows):
        if len(two) > 1:
            w = max(len(r[0]) for r in two)
            tables.append("\n".join(f"{a:<{w}}  {c}".rstrip() for a, c in two))
    return "\n\n".join(tables)


def _sort_key(item: tuple[ClientQuotaEntity, Any]) -> tuple:
    e = item[0]

    def part(key: str) -> tuple:
        if key not in e:
            return (0, "")
        return (1, "") if e[key] is None else (2, e[key])

    return (part(TOPIC) != (0, ""), part(IP) != (0, ""), part(USER) == (0, ""), part(USER), part(CLIENT_ID),
            part(IP), part(TOPIC))


def _matches(entity: ClientQuotaEntity, spec: list[tuple[str, Optional[str]]]) -> bool:
    if not spec:
        return True
    if set(entity) != {key for key, _ in spec}:
        return False
    return all(name is None or entity[key] == (None if name == DEFAULT_MARK else name) for key, name in spec)


def _spec_path(spec: list[tuple[str, Optional[str]]]) -> str:
    """``clients/nobody``, ``users/<default>/clients/app``, ``users/*`` (any name), ``ips/*``,
    ``topics/orders``."""
    words = {USER: "users", CLIENT_ID: "clients", IP: "ips", TOPIC: "topics"}
    return "/".join(f"{words[key]}/{'*' if name is None else '<default>' if name == DEFAULT_MARK else name}"
                    for key, name in spec)


def print_described(state: dict[ClientQuotaEntity, dict[str, float]], spec: list[tuple[str, Optional[str]]],
                    as_json: bool, where: str) -> None:
    """A describe's output: the entities of ``state`` that ``spec`` selects, as the table or as
    the quota configuration file; a one-line note when there are none."""
    from kquota.config_file import quota_config_document

    selected = sorted(((e, _ordered(c)) for e, c in state.items() if c and _matches(e, spec)), key=_sort_key)
    if as_json:
        print(json.dumps(quota_config_document(selected), indent=2))
    elif selected:
        print(format_table(dict(selected)))
    elif spec:
        print(f"no quotas for {_spec_path(spec)}")
    else:
        print(f"no quotas in {where}")


def print_altered(altered: list[tuple[ClientQuotaEntity, dict[str, float]]]) -> None:
    """An ``--alter --json``'s output: the altered entities' quotas as a quota configuration file."""
    from kquota.config_file import quota_config_document

    print(json.dumps(quota_config_document([(e, _ordered(c)) for e, c in altered]), indent=2))
