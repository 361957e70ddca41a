"""Quotas marked shadow inside one store: ``shadow.<config key>`` beside the enforced keys.

A store entry may hold, beside its enforced quotas, *marked* ones: ``shadow.producer_byte_rate``,
``shadow.consumer_byte_rate``, ``shadow.request_percentage`` or ``shadow.controller_mutation_rate``
on a client entity (user, client id or both, named or ``<default>``), each checked as its
unmarked key would be. A marked quota is never enforced. The shadow configuration it stands for
is the store's enforced one with each marked quota in place of (or beside) its unmarked key:
what enforcing the marks would give. ``kquota proxy --shadow-marked`` evaluates it on live
traffic (:mod:`kquota.proxy.shadow`), and ``kquota configs --promote-shadow`` without
``--shadow-store`` applies it in one ``alter``: each marked value becomes the enforced one and
its mark goes.

A mark replaces or adds a quota; a shadow configuration that removes one needs a store of its
own (``--shadow-store``). ``ip`` and ``topic`` entities take no marks: the shadow evaluates the
client quotas of the responses.

This module is the one place that knows the mark's spelling; the checks of a marked value are
:func:`kquota.validation.validate_alter`'s (``shadow_marks=True``).
"""

from __future__ import annotations

from typing import Mapping, Optional, TypeVar

from kquota.entity import ClientQuotaEntity

#: The prefix of a marked (shadow) config key.
SHADOW_PREFIX = "shadow."

V = TypeVar("V", float, Optional[float])

#: A store's state: entity -> {config key: value}.
State = Mapping[ClientQuotaEntity, Mapping[str, float]]

__all__ = ["SHADOW_PREFIX", "enforced_state", "has_marks", "is_marked", "marked", "promotion", "shadow_state",
           "split_marks"]


def is_marked(key: str) -> bool:
    """Whether ``key`` is a marked (shadow) config key."""
    return key.startswith(SHADOW_PREFIX)


def marked(key: str) -> str:
    """The marked spelling of config key ``key`` (``producer_byte_rate`` -> ``shadow.producer_byte_rate``)."""
    return SHADOW_PREFIX + key


def split_marks(config: Mapping[str, V]) -> tuple[dict[str, V], dict[str, V]]:
    """``(enforced, marks)`` of one entity's config: the unmarked keys, and the marked ones by
    their unmarked key."""
    enforced: dict[str, V] = {}
    marks: dict[str, V] = {}
    for key, value in config.items():
        if is_marked(key):
            marks[key[len(SHADOW_PREFIX):]] = value
        else:
            enforced[key] = value
    return enforced, marks


def enforced_state(state: State) -> dict[ClientQuotaEntity, dict[str, float]]:
    """The enforced configuration of ``state``: its marks left out (an entity holding marks
    only is left out)."""
    out = {}
    for entity, config in state.items():
        enforced, _ = split_marks(config)
        if enforced:
            out[entity] = enforced
    return out


def shadow_state(state: State) -> dict[ClientQuotaEntity, dict[str, float]]:
    """The shadow configuration ``state``'s marks stand for: each entity's enforced quotas with
    its marked ones in their place."""
    out = {}
    for entity, config in state.items():
        enforced, marks = split_marks(config)
        enforced.update(marks)
        if enforced:
            out[entity] = enforced
    return out


def has_marks(state: State) -> bool:
    """Whether any entity of ``state`` holds a marked quota."""
    return any(is_marked(key) for config in state.values() for key in config)


def promotion(state: State) -> list[tuple[ClientQuotaEntity, dict[str, Optional[float]]]]:
    """The alter entries that promote ``state``'s marks: per entity holding marks, each marked
    value set on its unmarked key and the mark removed (entities in ``state``'s order)."""
    entries: list[tuple[ClientQuotaEntity, dict[str, Optional[float]]]] = []
    for entity, config in state.items():
        _, marks = split_marks(config)
        if marks:
            ops: dict[str, Optional[float]] = dict(marks)
            ops.update({marked(key): None for key in marks})
            entries.append((entity, ops))
    return entries
