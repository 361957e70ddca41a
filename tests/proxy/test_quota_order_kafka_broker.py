"""The order of an entity's quota values in a DescribeClientQuotas answer (quota_order.py): the
rule against Apache Kafka's broker for every combination of the quota keys, and the proxy's answer
in that order."""

from __future__ import annotations

import uuid
from itertools import combinations

from kafka_proxy import KquotaProxy

from kquota.kafka.admin_client import AdminConnection
from kquota.proxy.quota_order import java_string_hash, kafka_order

TAG = uuid.uuid4().hex[:6]
# The keys a user / client-id entity takes (an ip entity takes connection_creation_rate alone).
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
SUBSETS = [c for n in range(1, len(KEYS) + 1) for c in combinations(KEYS, n)]


def test_java_string_hash_is_javas():
    # values String.hashCode gives (signed ints printed by Java, here unsigned)
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("\u00e9\U0001f600") == (((0xE9 * 31 + 0xD83D) * 31 + 0xDE00) & 0xFFFFFFFF)


def test_the_order_does_not_depend_on_the_order_given():
    for keys in SUBSETS:
        assert kafka_order(keys) == kafka_order(reversed(keys)) == kafka_order(list(keys) * 2)
        assert sorted(kafka_order(keys)) == sorted(keys)


def _entries(subsets, tag):
    return [{"Entity": [{"EntityType": "client-id", "EntityName": f"order-{tag}-{i}"}],
             "Ops": [{"Key": k, "Value": float(j + 1), "Remove": False} for j, k in enumerate(keys)]}
            for i, keys in enumerate(subsets)]


def _described(address: str, tag: str) -> dict[str, list[str]]:
    with AdminConnection(address) as admin:
        entries = admin.describe_client_quotas([{"EntityType": "client-id", "MatchType": 2, "Match": None}], False)
    return {e["Entity"][0]["EntityName"]: [v["Key"] for v in e["Values"]] for e in entries
            if e["Entity"][0]["EntityName"].startswith(f"order-{tag}-")}


def _alter(address: str, subsets, tag: str) -> None:
    with AdminConnection(address) as admin:
        results = admin.alter_client_quotas(_entries(subsets, tag), False)
    assert all(r["ErrorCode"] == 0 for r in results), results


def test_the_rule_gives_the_brokers_order_for_every_combination_of_keys(kafka_broker):
    address = kafka_broker.listeners["PLAINTEXT"]
    # each combination set in one alteration, and again with its keys given the other way round
    _alter(address, SUBSETS, TAG)
    _alter(address, [tuple(reversed(k)) for k in SUBSETS], TAG + "r")
    for tag in (TAG, TAG + "r"):
        got = _described(address, tag)
        assert len(got) == len(SUBSETS)
        for i, keys in enumerate(SUBSETS):
            assert got[f"order-{tag}-{i}"] == kafka_order(keys), (keys, got[f"order-{tag}-{i}"])


def test_the_proxy_answers_in_the_brokers_order(kafka_broker, tmp_path):
    p = KquotaProxy(kafka_broker.listeners["PLAINTEXT"], tmp_path, "--admin-principals", "ANONYMOUS")
    try:
        tag = TAG + "p"
        _alter(p.address, SUBSETS, tag)
        _alter(kafka_broker.listeners["PLAINTEXT"], SUBSETS, tag)
        assert _described(p.address, tag) == _described(kafka_broker.listeners["PLAINTEXT"], tag)
    finally:
        code, err = p.stop()
        assert code == 0, err
