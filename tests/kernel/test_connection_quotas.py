"""Connection quotas (KIP-612) through the Python API: ip entities and their validation as
Kafka's controller (``ClientQuotaControlManager``) and ``ClientQuotasRequestTest`` have them,
atomic alters mixing ip and client entities, the broker properties, metrics with the sensor cap,
expiry."""

from __future__ import annotations

import kquota
import pytest
from kquota import ClientQuotaEntity, QuotaConfigError, QuotaValueError
from kquota.validation import validate_alter

RATE = "connection_creation_rate"


def manager(**kw) -> kquota.QuotaManager:
    kw.setdefault("expiry_interval_seconds", None)
    return kquota.QuotaManager(**kw)


# ---------------------------------------------------------------------------- entities


@pytest.mark.parametrize("name", ["not a valid host because it has spaces", "RFC2606.invalid", "localhost",
                                  "10.1.2", "010.1.2.3", "[::1]", "fe80::1%eth0", "1.2.3.4:9092"])
def test_a_name_that_is_not_an_ip_address_is_refused(name):
    # ClientQuotasRequestTest.testAlterClientQuotasBadIp: "not a valid IP"
    with pytest.raises(QuotaConfigError, match="not a valid IP"):
        ClientQuotaEntity({"ip": name})
    qm = manager()
    with pytest.raises(QuotaConfigError, match="not a valid IP"):
        qm.alter_client_quotas([({"ip": name}, {RATE: 50})])
    assert qm.describe_client_quotas() == {}


@pytest.mark.parametrize("other", [{"user": "user"}, {"client-id": "client"}, {"user": None}])
def test_ip_mixed_with_user_or_client_is_refused(other):
    # ClientQuotasRequestTest.testAlterClientQuotasInvalidEntityCombination
    with pytest.raises(QuotaConfigError, match="IP entity should not be combined with User or ClientId"):
        ClientQuotaEntity({**other, "ip": "1.2.3.4"})


def test_ip_names_are_canonical():
    assert ClientQuotaEntity({"ip": "0:0:0:0:0:0:0:1"}) == ClientQuotaEntity({"ip": "::1"})
    assert ClientQuotaEntity({"ip": "::ffff:1.2.3.4"})["ip"] == "1.2.3.4"
    assert ClientQuotaEntity({"ip": "2001:DB8::1"}).path == "ips/2001:db8::1"
    assert ClientQuotaEntity({"ip": None}).path == "ips/<default>"
    assert str(ClientQuotaEntity({"ip": None})) == "ip=<default>"
    assert ClientQuotaEntity({"ip": "10.0.0.1"}).config_entities() == []
    with pytest.raises(QuotaConfigError, match="empty"):
        ClientQuotaEntity({"ip": ""})


# ---------------------------------------------------------------------------- alter / describe


def test_alter_ip_quotas_request():
    # ClientQuotasRequestTest.testAlterIpQuotasRequest, on the manager.
    qm = manager()
    known, default = ClientQuotaEntity({"ip": "1.2.3.4"}), ClientQuotaEntity({"ip": None})

    def ip_quotas():
        return {e: v for e, v in qm.describe_client_quotas().items() if e.is_ip}

    assert ip_quotas() == {}
    qm.alter_client_quotas([(known, {RATE: 100.0})])
    assert ip_quotas() == {known: {RATE: 100.0}} and qm.connection_rate_for_ip("1.2.3.4") == 100
    qm.alter_client_quotas([(known, {RATE: 150.0})])
    qm.alter_client_quotas([(default, {RATE: 200.0})])
    assert ip_quotas() == {known: {RATE: 150.0}, default: {RATE: 200.0}}
    assert qm.connection_rate_for_ip("5.6.7.8") == 200
    qm.alter_client_quotas([(known, {RATE: None})])
    assert ip_quotas() == {default: {RATE: 200.0}} and qm.connection_rate_for_ip("1.2.3.4") == 200
    qm.alter_client_quotas([(default, {RATE: None})])
    assert ip_quotas() == {} and qm.connection_rate_for_ip("1.2.3.4") == 2**31 - 1


@pytest.mark.parametrize("ops, message", [
    ({RATE: 12.5}, "cannot be a fractional value"),
    ({RATE: 0}, "must be greater than 0"),
    ({RATE: -3}, "must be greater than 0"),
    ({RATE: 2**31}, "too large for an INT"),
    ({"producer_byte_rate": 10}, "Invalid configuration key producer_byte_rate"),
    ({RATE: "10"}, "must be a number"),
])
def test_ip_values_are_checked_as_kafkas_controller(ops, message):
    qm = manager()
    with pytest.raises(QuotaConfigError, match=message):
        qm.alter_client_quotas([({"ip": "10.0.0.1"}, ops)])
    with pytest.raises(QuotaConfigError, match=message):
        validate_alter([({"ip": "10.0.0.1"}, ops)])
    assert qm.describe_client_quotas() == {}


def test_connection_creation_rate_is_not_a_client_key():
    with pytest.raises(QuotaConfigError, match="unknown config key"):
        manager().alter_client_quotas([({"user": "u"}, {RATE: 10})])


def test_a_mixed_alter_is_all_or_nothing():
    qm = manager()
    with pytest.raises(QuotaConfigError):
        qm.alter_client_quotas([({"ip": "10.0.0.1"}, {RATE: 5}), ({"user": "u"}, {"producer_byte_rate": 1.5})])
    with pytest.raises(QuotaConfigError):
        qm.alter_client_quotas([({"user": "u"}, {"producer_byte_rate": 10}), ({"ip": "10.0.0.1"}, {RATE: 0.5})])
    assert qm.describe_client_quotas() == {} and qm.connection_rate_for_ip("10.0.0.1") == 2**31 - 1
    qm.alter_client_quotas([({"ip": "10.0.0.1"}, {RATE: 5})], validate_only=True)
    assert qm.describe_client_quotas() == {}
    qm.alter_client_quotas([({"ip": "10.0.0.1"}, {RATE: 5}), ({"user": "u"}, {"producer_byte_rate": 10})])
    assert len(qm.describe_client_quotas()) == 2


def test_callbacks_never_see_ip_quotas():
    seen = []

    class Recorder(kquota.ClientQuotaCallback):
        def quota_metric_tags(self, quota_type, principal, client_id):
            return {"user": principal.name, "client-id": client_id}

        def quota_limit(self, quota_type, metric_tags):
            return None

        def update_quota(self, quota_type, entity, new_value):
            seen.append(entity)

        def remove_quota(self, quota_type, entity):
            seen.append(entity)

        def quota_reset_required(self, quota_type):
            return False

        def update_cluster_metadata(self, cluster):
            return False

        def close(self):
            pass

    qm = manager(callback=Recorder())
    qm.alter_client_quotas([({"ip": "10.0.0.1"}, {RATE: 5}), ({"user": "u"}, {"producer_byte_rate": 10})])
    assert seen == [ClientQuotaEntity({"user": "u"})]


# ---------------------------------------------------------------------------- accept path


def test_record_connection_refuses_a_bad_address_and_release_is_exact():
    qm = manager()
    with pytest.raises(QuotaValueError, match="not a valid IP"):
        qm.record_connection("example.com", now_ms=0)
    assert qm.record_connection("::ffff:127.0.0.2", now_ms=0) == 0
    assert qm.connection_count("127.0.0.2") == 1  # the mapped address is the IPv4 one
    assert qm.release_connection("127.0.0.2") and not qm.release_connection("127.0.0.2")


def test_broker_properties_round_trip_and_bad_ones_change_nothing():
    qm = manager()
    props = {"max.connections": 100, "max.connection.creation.rate": "30", "max.connections.per.ip": 5,
             "max.connections.per.ip.overrides": "127.0.0.2:10,::1:3",
             "listener.name.external.max.connections": 50, "broker.id": "ignored"}
    qm.configure_connections(props)
    got = qm.connection_limits()
    assert got == {"max.connections": 100, "max.connection.creation.rate": 30, "max.connections.per.ip": 5,
                   "max.connections.per.ip.overrides": "127.0.0.2:10,::1:3",
                   "listener.name.external.max.connections": 50}
    for bad, message in [({"max.connections": -1}, "at least 0"), ({"max.connections": True}, "must be an int"),
                         ({"max.connections.per.ip": 0}, "can be set to zero only if"),
                         ({"max.connections.per.ip.overrides": "somehost:1"}, "invalid addresses")]:
        with pytest.raises(QuotaValueError, match=message):
            qm.configure_connections(bad)
        assert qm.connection_limits() == got


def test_address_sensors_are_capped_and_overflow_is_shared():
    qm = manager(max_sensors=2)
    qm.alter_client_quotas([({"ip": None}, {RATE: 10})])
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
        assert qm.record_connection(ip, now_ms=0) == 0
    rows = {(m.name, m.tags.get("ip")): m.value for m in qm.connection_metrics(0)}
    assert rows[("ip-sensor-count", None)] == 2
    assert rows[("ip-sensor-overflow-total", None)] == 2
    assert rows[("connection-accept-rate", "<overflow>")] == 2 / 10  # two connections, 10 s window
    # Per-address rows stay within the cap: the other addresses' counts are summed in overflow.
    assert rows[("connections", "<overflow>")] == 2
    assert sum(v for (n, ip), v in rows.items() if n == "connections" and ip != "<overflow>") == 2
    assert len([k for k in rows if k[0] == "connections"]) == 3
    assert rows[("connections-accepted-total", None)] == 4


def test_per_ip_count_rows_past_the_cap_are_summed_into_overflow():
    qm = manager(max_sensors=2)
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        qm.record_connection(ip, now_ms=0)
    rows = [(m.tags.get("ip"), m.value) for m in qm.connection_metrics(0) if m.name == "connections"]
    assert len(rows) == 3 and ("<overflow>", 1.0) in rows


def test_idle_address_sensors_expire():
    qm = manager(sensor_expiry_seconds=10)
    qm.alter_client_quotas([({"ip": None}, {RATE: 10})])
    qm.record_connection("10.0.0.1", now_ms=0)
    qm.record_connection("10.0.0.2", now_ms=5_000)
    assert qm.expire_sensors(now_ms=10_001) == 1
    rows = {(m.name, m.tags.get("ip")) for m in qm.connection_metrics(10_001)}
    assert ("connection-accept-rate", "10.0.0.2") in rows and ("connection-accept-rate", "10.0.0.1") not in rows


def test_a_closed_manager_records_no_connection():
    qm = manager()
    qm.close()
    with pytest.raises(kquota.KQuotaError, match="closed"):
        qm.record_connection("10.0.0.1", now_ms=0)
    with pytest.raises(kquota.KQuotaError, match="closed"):
        qm.record_connection_accept(now_ms=0)


def test_lone_surrogates_are_refused_as_kquota_errors():
    # No client can send such a name (no UTF-8 form): a clear refusal, never a UnicodeEncodeError.
    qm = manager()
    for call in (lambda: qm.record_connection("\udc80", now_ms=0),
                 lambda: qm.record_connection_accept("\udc80", now_ms=0),
                 lambda: qm.release_connection("10.0.0.1", "\udc80"),
                 lambda: qm.configure_connections({"max.connections.per.ip.overrides": "\udc80:1"}),
                 lambda: qm.alter_client_quotas([({"ip": "\udc80"}, {RATE: 1})])):
        with pytest.raises(kquota.KQuotaError, match="lone surrogate"):
            call()
    assert qm.describe_client_quotas() == {} and qm.connection_limits() == {}
