"""The JSON of a ZooKeeper config node, as Kafka writes it: ``{"version":1,"config":{...}}``."""

from __future__ import annotations

import json
import math
from typing import Optional

from kquota.entity import ClientQuotaEntity
from kquota.exceptions import QuotaConfigError
from kquota.shadow_marks import marked
from kquota.validation import CONFIG_KEYS, IP_CONFIG_KEYS, TOPIC_CONFIG_KEYS, validate_alter


class CorruptNode(Exception):
    """A node's data cannot be read as a quota config (the message says why)."""


def json_object(data: bytes, error: type[Exception]) -> dict:
    """``data`` (a node's bytes) read as a UTF-8 JSON object; ``error`` says why it cannot be."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise error(f"not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise error("not a JSON object")
    return doc


def decode_config(data: Optional[bytes]) -> dict[str, str]:
    """A config node's ``config`` object (all keys, values as strings); ``CorruptNode`` if unreadable."""
    if data is None or not data.strip():
        return {}  # Kafka creates parent nodes without data
    doc = json_object(data, CorruptNode)
    config = doc.get("config", {})
    if not isinstance(config, dict):
        raise CorruptNode('"config" is not a JSON object')
    out = {}
    for k, v in config.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise CorruptNode(f"config key {k!r}: value {v!r} is not a string")
        out[k] = v if isinstance(v, str) else json.dumps(v)
    return out


def encode_config(config: dict[str, str]) -> bytes:
    """A config node's data for ``config`` (values already strings)."""
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode("utf-8")


def quota_values(entity: ClientQuotaEntity, config: dict[str, str]) -> dict[str, float]:
    """The quota keys of a node's config as numbers, validated like an alter (other keys, such
    as SCRAM credentials, are not ours and are ignored); ``CorruptNode`` if one is invalid."""
    out: dict[str, float] = {}
    keys = IP_CONFIG_KEYS if entity.is_ip else TOPIC_CONFIG_KEYS if entity.is_topic else \
        CONFIG_KEYS + tuple(marked(k) for k in CONFIG_KEYS)  # and the quotas marked shadow
    for key in keys:
        if key in config:
            text = config[key].strip()
            try:
                value = float(text)
            except ValueError:
                raise CorruptNode(f"config key {key}: {config[key]!r} is not a number") from None
            if not math.isfinite(value):
                raise CorruptNode(f"config key {key}: {config[key]!r} is not a finite number")
            out[key] = value
    try:
        validate_alter([(entity, out)], shadow_marks=True)
    except QuotaConfigError as e:
        raise CorruptNode(str(e)) from None
    return out
