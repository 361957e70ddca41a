"""Kafka's ``ClientQuotaType`` and the one conversion of a ``quota_type`` argument.

Every Python module that takes a quota type (a member or its name) converts it here, with the
same rules and messages as the native entry points: a member passes, a name is looked up
case-insensitively, an unknown name raises :class:`~kquota.QuotaValueError`, anything else
``TypeError``.
"""

from __future__ import annotations

from typing import Union

from kquota._kquota import ClientQuotaType
from kquota.exceptions import QuotaValueError

#: A quota type as the API takes it: a :class:`ClientQuotaType` member or its name.
QuotaTypeLike = Union[ClientQuotaType, str]

__all__ = ["ClientQuotaType", "QuotaTypeLike", "coerce_quota_type"]


def coerce_quota_type(quota_type: QuotaTypeLike) -> ClientQuotaType:
    """The :class:`ClientQuotaType` member ``quota_type`` names (a member, or its name in any
    case); ``QuotaValueError`` for an unknown name, ``TypeError`` for anything else."""
    if isinstance(quota_type, ClientQuotaType):
        return quota_type
    if not isinstance(quota_type, str):
        raise TypeError(
            f"quota_type must be a kquota.ClientQuotaType (or its name), not {type(quota_type).__name__}"
        )
    try:
        # The native lookup, so the message matches the one the record calls raise.
        return ClientQuotaType.from_name(quota_type)
    except UnicodeEncodeError:
        # A lone surrogate cannot name a type: a bad value, not an encoding error.
        raise QuotaValueError("unknown quota type (a string with a lone surrogate)") from None
