"""The order in which Apache Kafka's broker lists an entity's quota values in a
DescribeClientQuotas response, so the proxy's answer lists them the same way (Apache's
``kafka-configs.sh --describe`` prints them in the order its own HashMap gives, which keeps the
response's order for keys that share a bucket: a different response order prints differently).

The broker answers from its metadata image: ``ClientQuotaImage.toDescribeValues`` iterates the
entity's ``HashMap<String, Double>``, which ``ClientQuotaDelta.apply`` builds with
``new HashMap<>(0)`` (an entity loaded from the metadata log or set by one alteration), inserting
the changes in the iteration order of the delta's own ``HashMap`` (default capacity). A Java
HashMap iterates its buckets in index order (``(h ^ h >>> 16) & (capacity - 1)`` of
``String.hashCode``), and within a bucket in insertion order (a resize splits a bucket keeping
that order). The key order of the records that fill the delta only matters for keys that share
its bucket, which none of Kafka's quota keys do; their names' order stands in for it.
"""

from __future__ import annotations

from collections.abc import Iterable

#: java.util.HashMap's defaults.
_DEFAULT_CAPACITY, _LOAD_FACTOR = 16, 0.75


def java_string_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _bucket(key: str, capacity: int) -> int:
    h = java_string_hash(key)
    return (h ^ (h >> 16)) & (capacity - 1)


def _table_size_for(n: int) -> int:
    """HashMap.tableSizeFor: the smallest power of two >= n (1 for 0)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _capacity(initial: int, size: int) -> int:
    """The table's capacity once ``size`` keys have been put into ``new HashMap<>(initial)``:
    it doubles whenever the size passes capacity * 0.75 (truncated)."""
    capacity = _table_size_for(initial)
    while size > int(capacity * _LOAD_FACTOR):
        capacity *= 2
    return capacity


def _iteration(keys: list[str], initial: int) -> list[str]:
    """The iteration order of ``new HashMap<>(initial)`` after ``keys`` were put in this order:
    by bucket, insertion order within one."""
    capacity = _capacity(initial, len(keys))
    return sorted(keys, key=lambda k: _bucket(k, capacity))  # stable: insertion order kept


def kafka_order(keys: Iterable[str]) -> list[str]:
    """An entity's quota keys in the order Kafka's broker lists them."""
    delta = _iteration(sorted(set(keys)), _DEFAULT_CAPACITY)
    return _iteration(delta, 0)
