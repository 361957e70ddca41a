"""Kafka's ``ClientQuotaType`` and the one conversion of a ``quota_type`` argument.

``ClientQuotaType`` is an :class:`enum.IntEnum` (as watchfiles defines ``Change``): the native
module reads a member as the quota type of the same value and hands these members back to
Python (callback arguments, delay queues, metrics); this module registers the class with the
extension at import (``_kquota._register_quota_type``). Its names and values need to match the
Rust core's ``ClientQuotaType`` (``rust/kquota-py/src/quota_type.rs``); the config keys and
metric groups are taken from the core, and the names and values are checked against it at
import.

A ``quota_type`` argument is a member or its name in any case: an unknown name raises
:class:`~kquota.QuotaValueError`, anything else (a plain ``int`` too) ``TypeError``, with the
same messages from every entry point.
"""

from __future__ import annotations

import enum
from typing import Union

from kquota import _kquota

__all__ = ["ClientQuotaType", "QuotaTypeLike", "coerce_quota_type"]


class ClientQuotaType(enum.IntEnum):
    """Kafka's ``ClientQuotaType``: which quota a request is measured against."""

    PRODUCE = 0
    FETCH = 1
    REQUEST = 2
    CONTROLLER_MUTATION = 3

    # ``ClientQuotaType.PRODUCE`` in messages and f-strings on every Python version (3.11's
    # IntEnum would print ``0``), as the native class printed before.
    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__

    @property
    def config_key(self) -> str:
        """The dynamic config key of this type's quota, e.g. ``"producer_byte_rate"``."""
        return _CONFIG_KEYS[self.value]

    @property
    def metric_group(self) -> str:
        """Kafka's metric group for this type, e.g. ``"Produce"``."""
        return _METRIC_GROUPS[self.value]

    @classmethod
    def members(cls) -> list[ClientQuotaType]:
        """All members in value order (``list(ClientQuotaType)``)."""
        return list(cls)

    @classmethod
    def from_name(cls, name: str) -> ClientQuotaType:
        """The member named ``name`` (case-insensitive); ``QuotaValueError`` if there is none."""
        if not isinstance(name, str):
            raise TypeError(f"name must be str, not {type(name).__name__}")
        return coerce_quota_type(name)


_TABLE = _kquota._quota_types()
if [(name, value) for name, value, _, _ in _TABLE] != [(t.name, t.value) for t in ClientQuotaType]:
    raise ImportError(
        "kquota.quota_type.ClientQuotaType does not match the native quota types "
        f"{[(name, value) for name, value, _, _ in _TABLE]}"
    )
# The extension reads and returns these members; it is handed the class here, so it never
# imports this package back.
_kquota._register_quota_type(ClientQuotaType)
_CONFIG_KEYS = tuple(key for _, _, key, _ in _TABLE)
_METRIC_GROUPS = tuple(group for _, _, _, group in _TABLE)

#: A quota type as the API takes it: a :class:`ClientQuotaType` member or its name.
QuotaTypeLike = Union[ClientQuotaType, str]


def coerce_quota_type(quota_type: QuotaTypeLike) -> ClientQuotaType:
    """The :class:`ClientQuotaType` member ``quota_type`` names (a member, or its name in any
    case); ``QuotaValueError`` for an unknown name, ``TypeError`` for anything else."""
    if type(quota_type) is ClientQuotaType:
        return quota_type
    # The native conversion, so the rules and messages are those of the record calls.
    return ClientQuotaType(_kquota._quota_type_value(quota_type))
