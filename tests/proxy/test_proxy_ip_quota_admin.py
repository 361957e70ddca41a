"""Describe/AlterClientQuotas with ``ip`` entities through the proxy in front of Apache Kafka, as
Kafka's ``ClientQuotasRequestTest`` has them (the ip cases): alter, describe by exact / default /
any match, strict, validate-only, per-entry errors (an ip mixed with user or client-id, a name
that is not an IP address, a key ip entities do not take), filter errors, and a real client's
request encoding (kafka-python)."""

from __future__ import annotations

import pytest
from kquota.kafka.protocol import apis
from proxy_support import ProxyThread
from proxy_wire import Wire
from test_proxy_protocol import describe_with_kafka_python

RATE = "connection_creation_rate"
EXACT, DEFAULT, ANY = 0, 1, 2


@pytest.fixture
def proxy(broker):
    p = ProxyThread(("127.0.0.1", broker.port), admin_principals=["ANONYMOUS"])
    yield p
    p.stop()
    p.qm.close()


@pytest.fixture
def wire(proxy):
    """A connection to ``proxy``, closed at teardown."""
    w = Wire(proxy.proxy.bootstrap_address)
    yield w
    w.close()


def alter(w: Wire, entries: list, validate_only: bool = False) -> list:
    resp = w.call(apis.ALTER_CLIENT_QUOTAS, 1, "AlterClientQuotas", {"Entries": entries, "ValidateOnly": validate_only})
    return [(e["ErrorCode"], e["ErrorMessage"]) for e in resp["Entries"]]


def entry(entity: dict, value, key: str = RATE) -> dict:
    return {"Entity": [{"EntityType": t, "EntityName": n} for t, n in entity.items()],
            "Ops": [{"Key": key, "Value": 0.0 if value is None else float(value), "Remove": value is None}]}


def describe(w: Wire, components: list, strict: bool = False) -> dict:
    return w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {
        "Components": [{"EntityType": t, "MatchType": m, "Match": n} for t, m, n in components], "Strict": strict})


def entities(resp: dict) -> dict:
    assert resp["ErrorCode"] == 0, resp
    return {tuple((e["EntityType"], e["EntityName"]) for e in x["Entity"]): {v["Key"]: v["Value"] for v in x["Values"]}
            for x in resp["Entries"]}


def assert_filter_errors(w: Wire, cases: list) -> None:
    """Each ``(components, error code, part of the message)`` of ``cases``: describing with those
    components is answered with that error."""
    for comps, code, message in cases:
        resp = describe(w, comps)
        assert resp["ErrorCode"] == code and message in resp["ErrorMessage"], (comps, resp)


def component_errors(kind: str, name: str) -> list:
    """Kafka's checks of an entity type's filter components, the same for every type (cases for
    :func:`assert_filter_errors`): ``kind`` twice, an exact match without a name, a default or
    any match with one (``name``)."""
    return [
        ([(kind, ANY, None), (kind, EXACT, name)], apis.INVALID_REQUEST, "cannot appear more than once"),
        ([(kind, EXACT, None)], apis.INVALID_REQUEST, "MATCH_TYPE_EXACT, but set match string to null"),
        ([(kind, DEFAULT, name)], apis.INVALID_REQUEST, "MATCH_TYPE_DEFAULT, but also specified"),
        ([(kind, ANY, name)], apis.INVALID_REQUEST, "MATCH_TYPE_SPECIFIED, but also specified"),
    ]


def assert_alters_go_to_the_store(tmp_path, entity: dict, key: str, bad: dict) -> None:
    """A proxy with --store answers from and writes to the store (every watching proxy
    converges): an alter setting ``key`` of ``entity`` to 20 and one of ``bad`` (refused) is
    written to the store entry by entry, the proxy's own quotas are left to the store's watcher,
    and a describe of ``entity`` answers from the store."""
    import asyncio

    import kquota
    from kquota.proxy.admin import QuotaAdmin
    from kquota.stores import open_store

    store = open_store("sqlite:///" + str(tmp_path / "q.db"))
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    admin = QuotaAdmin(qm, store=store, admin_principals=["ANONYMOUS"])
    try:
        resp = asyncio.run(admin.alter({"Entries": [entry(entity, 20, key=key), entry(bad, 1, key=key)],
                                        "ValidateOnly": False}, "ANONYMOUS"))
        assert [e["ErrorCode"] for e in resp["Entries"]] == [0, apis.INVALID_REQUEST]
        assert store.describe() == {kquota.ClientQuotaEntity(entity): {key: 20.0}}
        assert qm.describe_client_quotas() == {}  # the watcher, not the handler, applies it
        (kind, name), = entity.items()
        resp = asyncio.run(admin.describe({"Components": [{"EntityType": kind, "MatchType": EXACT, "Match": name}],
                                           "Strict": True}, "ANONYMOUS"))
        assert entities(resp) == {((kind, name),): {key: 20.0}}
    finally:
        store.close()
        qm.close()


def test_alter_ip_quotas_request(proxy, wire):
    # ClientQuotasRequestTest.testAlterIpQuotasRequest, over the wire.
    assert entities(describe(wire, [("ip", ANY, None)])) == {}
    assert alter(wire, [entry({"ip": "1.2.3.4"}, 100)]) == [(0, None)]
    assert entities(describe(wire, [("ip", EXACT, "1.2.3.4")])) == {(("ip", "1.2.3.4"),): {RATE: 100.0}}
    assert proxy.qm.connection_rate_for_ip("1.2.3.4") == 100  # the proxy's own quotas changed
    assert alter(wire, [entry({"ip": "1.2.3.4"}, 150)]) == [(0, None)]
    assert alter(wire, [entry({"ip": None}, 200)]) == [(0, None)]
    assert entities(describe(wire, [("ip", DEFAULT, None)])) == {(("ip", None),): {RATE: 200.0}}
    assert entities(describe(wire, [("ip", ANY, None)])) == {(("ip", "1.2.3.4"),): {RATE: 150.0},
                                                             (("ip", None),): {RATE: 200.0}}
    assert proxy.qm.connection_rate_for_ip("9.9.9.9") == 200
    assert alter(wire, [entry({"ip": "1.2.3.4"}, None)]) == [(0, None)]
    assert entities(describe(wire, [("ip", EXACT, "1.2.3.4")])) == {}
    assert alter(wire, [entry({"ip": None}, None)]) == [(0, None)]
    assert entities(describe(wire, [("ip", ANY, None)])) == {}
    assert proxy.qm.connection_rate_for_ip("1.2.3.4") == 2**31 - 1


def test_alter_errors_are_per_entry_and_validate_only_applies_nothing(proxy, wire):
    results = alter(wire, [
        entry({"user": "user", "ip": "1.2.3.4"}, 12.34, key="request_percentage"),
        entry({"client-id": "client", "ip": "1.2.3.4"}, 12.34, key="request_percentage"),
        entry({"ip": "not a valid host because it has spaces"}, 50),
        entry({"ip": "RFC2606.invalid"}, 50),
        entry({"ip": "10.0.0.1"}, 50, key="producer_byte_rate"),
        entry({"ip": "10.0.0.2"}, 2.5),
        entry({"ip": "10.0.0.3"}, 30),
        {"Entity": [{"EntityType": "ip", "EntityName": "10.0.0.4"}, {"EntityType": "ip", "EntityName": "10.0.0.5"}],
         "Ops": [{"Key": RATE, "Value": 1.0, "Remove": False}]},
        entry({"host": "10.0.0.6"}, 1),
    ])
    codes = [c for c, _ in results]
    assert codes == [apis.INVALID_REQUEST] * 6 + [0] + [apis.INVALID_REQUEST] * 2
    messages = [m for _, m in results]
    assert all("IP entity should not be combined with User or ClientId" in m for m in messages[:2])
    assert all("not a valid IP" in m for m in messages[2:4])
    assert "Invalid configuration key producer_byte_rate" in messages[4]
    assert "cannot be a fractional value" in messages[5]
    assert "duplicate entity entry ip" in messages[7]
    assert "Unhandled client quota entity type: host" in messages[8]
    assert entities(describe(wire, [("ip", ANY, None)])) == {(("ip", "10.0.0.3"),): {RATE: 30.0}}
    # validate-only: checked, answered, nothing applied.
    checked = alter(wire, [entry({"ip": "10.0.0.9"}, 5), entry({"ip": "nope"}, 5)], validate_only=True)
    assert [c for c, _ in checked] == [0, apis.INVALID_REQUEST] and "not a valid IP" in checked[1][1]
    assert entities(describe(wire, [("ip", EXACT, "10.0.0.9")])) == {}
    assert proxy.qm.connection_rate_for_ip("10.0.0.9") == 2**31 - 1


def test_describe_filters_as_kafka(proxy, wire):
    # ClientQuotasRequestTest.testDescribeClientQuotasMatchPartial / InvalidFilterCombination.
    proxy.qm.alter_client_quotas([({"ip": "1.2.3.4"}, {RATE: 10}), ({"ip": "2.3.4.5"}, {RATE: 20}),
                                  ({"user": "user-1"}, {"request_percentage": 56.56}),
                                  ({"user": None, "client-id": "client-id-1"}, {"request_percentage": 53.53})])
    ips = {(("ip", "1.2.3.4"),): {RATE: 10.0}, (("ip", "2.3.4.5"),): {RATE: 20.0}}
    assert entities(describe(wire, [("ip", ANY, None)])) == ips
    assert entities(describe(wire, [("ip", ANY, None)], strict=True)) == ips
    assert entities(describe(wire, [("ip", EXACT, "2.3.4.5")], strict=True)) == {(("ip", "2.3.4.5"),): {RATE: 20.0}}
    assert entities(describe(wire, [("ip", DEFAULT, None)])) == {}
    # No filter matches every entity; a user filter never matches an ip entity.
    assert len(entities(describe(wire, []))) == 4
    assert all(k[0][0] == "user" for k in entities(describe(wire, [("user", ANY, None)])))
    assert_filter_errors(wire, [
        ([("ip", ANY, None), ("user", ANY, None)], apis.INVALID_REQUEST,
         "Invalid entity filter component combination"),
        ([("ip", ANY, None), ("client-id", ANY, None)], apis.INVALID_REQUEST,
         "Invalid entity filter component combination"),
        *component_errors("ip", "1.2.3.4"),
        ([("ip", 7, None)], apis.INVALID_REQUEST, "Unknown match type 7"),
        ([("host", ANY, None)], apis.UNSUPPORTED_VERSION, "Unsupported entity type host"),
        ([("", ANY, None)], apis.INVALID_REQUEST, "Invalid empty entity type."),
    ])


def test_a_real_client_describes_ip_quotas(proxy):
    pytest.importorskip("kafka")
    proxy.qm.alter_client_quotas([({"ip": "::1"}, {RATE: 7}), ({"ip": None}, {RATE: 9})])
    got = describe_with_kafka_python(proxy.address)  # kafka-python's own request encoding
    assert got == {(("ip", "::1"),): {RATE: 7.0}, (("ip", None),): {RATE: 9.0}}


def test_with_a_store_ip_alters_go_to_the_store(tmp_path):
    assert_alters_go_to_the_store(tmp_path, {"ip": "10.1.2.3"}, RATE, {"ip": "bad"})
