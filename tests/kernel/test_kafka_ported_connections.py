"""Kafka's ``ConnectionQuotasTest`` (core/src/test/scala/unit/kafka/network) ported to the
kernel's clock: Kafka's ``MockTime`` is ``now_ms``, its blocking ``inc`` is
``record_connection_accept`` (the delay the acceptor would block, added to the clock) then
``record_connection``. Kafka's test broker has ``quota.window.num=2`` and
``quota.window.size.seconds=1`` and three listeners EXTERNAL, ADMIN, REPLICATION with one client
address each.

Known difference, checked below: a connection refused by ``max.connections.per.ip`` is never
counted here; Kafka counts it until its acceptor has closed it (``TooManyConnectionsException``
is thrown after the count went up, ``closeChannel`` takes it back).
"""

from __future__ import annotations

import math

import kquota
import pytest
from kquota.exceptions import TooManyConnectionsError

LISTENERS = {"EXTERNAL": "192.168.1.1", "ADMIN": "192.168.1.2", "REPLICATION": "192.168.1.3"}
KNOWN_HOST = "192.168.10.0"
UNLIMITED = 2**31 - 1


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def sleep(self, ms: int) -> None:
        self.ms += ms


def manager(**props: object) -> kquota.QuotaManager:
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1, expiry_interval_seconds=None)
    qm.configure_connections(props)
    return qm


def inc(qm: kquota.QuotaManager, clock: Clock, listener: str, ip: str) -> int:
    """Kafka's ``inc``: waits out the broker / listener delay (``waitForConnectionSlot``), then the
    address's rate and count. Returns the IP throttle (0: counted)."""
    delay = qm.record_connection_accept(listener, now_ms=clock.ms)
    clock.sleep(delay)
    return qm.record_connection(ip, now_ms=clock.ms, listener=listener)


def accept_connections(qm, clock, listener, ip, n, interval_ms, expect_ip_throttle=False) -> bool:
    """Kafka's ``acceptConnections``: one connection every ``interval_ms`` (or slower when
    blocked); returns whether the address was throttled."""
    next_send = clock.ms + interval_ms
    throttled = False
    for _ in range(n):
        if inc(qm, clock, listener, ip) > 0:
            assert expect_ip_throttle, "unexpected IP throttle"
            throttled = True
        clock.sleep(max(next_send - clock.ms, 0))
        next_send += interval_ms
    return throttled


def accept_and_verify_rate(qm, clock, listener, ip, n, interval_ms, expected_rate, epsilon, expect_ip_throttle=False):
    start, before = clock.ms, qm.connection_count(ip)
    accept_connections(qm, clock, listener, ip, n, interval_ms, expect_ip_throttle)
    rate = (qm.connection_count(ip) - before) / ((clock.ms - start) / 1000)
    assert abs(rate - expected_rate) <= epsilon, (rate, expected_rate)


def metric(qm, clock, name: str, **tags: str) -> float:
    found = [m.value for m in qm.connection_metrics(clock.ms) if m.name == name and dict(m.tags) == tags]
    assert len(found) == 1, (name, tags, found)
    return found[0]


def ip_throttled(qm, clock, listener) -> bool:
    # A listener no connection came through yet has no row (Kafka's reads NaN).
    rows = [m.value for m in qm.connection_metrics(clock.ms)
            if m.name == "ip-connection-accept-throttle-time" and dict(m.tags) == {"listener": listener}]
    return bool(rows) and not math.isnan(rows[0]) and rows[0] > 0


def test_no_connection_limits_by_default():
    qm, clock = manager(), Clock()
    for listener, ip in LISTENERS.items():
        accept_connections(qm, clock, listener, ip, 300, 0)
        assert qm.connection_count(ip) == 300
    assert qm.connection_count() == 900


def test_max_connections_per_ip():
    qm, clock = manager(**{"max.connections.per.ip": 17}), Clock()
    ip = LISTENERS["EXTERNAL"]
    accept_connections(qm, clock, "EXTERNAL", ip, 17, 0)
    assert qm.connection_count(ip) == 17
    for _ in range(2):
        with pytest.raises(TooManyConnectionsError) as e:
            inc(qm, clock, "EXTERNAL", ip)
        assert (e.value.ip, e.value.max_connections) == (ip, 17)
        assert str(e.value) == f"Too many connections from {ip} (maximum = 17)"
    assert qm.connection_count(ip) == 17  # Kafka: 19 until its acceptor closes the two
    # Another address on the same listener is accepted.
    accept_connections(qm, clock, "EXTERNAL", KNOWN_HOST, 17, 0)
    for _ in range(2):
        assert qm.release_connection(ip, "EXTERNAL")
    assert qm.connection_count(ip) == 15
    accept_connections(qm, clock, "EXTERNAL", ip, 2, 0)
    assert qm.connection_count(ip) == 17


def test_max_connections_per_ip_override():
    qm = manager(**{"max.connections.per.ip": 2, "max.connections.per.ip.overrides": f"{KNOWN_HOST}:4"})
    clock = Clock()
    accept_connections(qm, clock, "EXTERNAL", KNOWN_HOST, 4, 0)
    with pytest.raises(TooManyConnectionsError):
        inc(qm, clock, "EXTERNAL", KNOWN_HOST)
    accept_connections(qm, clock, "EXTERNAL", "192.168.1.1", 2, 0)
    with pytest.raises(TooManyConnectionsError):
        inc(qm, clock, "EXTERNAL", "192.168.1.1")


def test_fail_decrement_for_unknown_ip():
    # Kafka throws IllegalArgumentException; here release says False and changes nothing.
    qm = manager()
    assert qm.release_connection("127.0.0.1", "EXTERNAL") is False
    assert qm.connection_count() == 0


def test_max_broker_wide_and_listener_connection_limits():
    qm = manager(**{"max.connections": 5, "listener.name.admin.max.connections": 2})
    clock = Clock()
    accept_connections(qm, clock, "ADMIN", LISTENERS["ADMIN"], 2, 0)
    assert not qm.connection_slot_available("ADMIN")  # the listener is full ...
    assert qm.connection_slot_available("EXTERNAL")  # ... the broker is not
    accept_connections(qm, clock, "EXTERNAL", LISTENERS["EXTERNAL"], 3, 0)
    assert not qm.connection_slot_available("EXTERNAL")
    qm.release_connection(LISTENERS["EXTERNAL"], "EXTERNAL")
    assert qm.connection_slot_available("EXTERNAL") and not qm.connection_slot_available("ADMIN")


def test_broker_connection_rate_limit_when_actual_rate_below_limit():
    qm, clock = manager(**{"max.connection.creation.rate": 50}), Clock()
    # 25/s on one listener for 200 connections: never delayed.
    accept_and_verify_rate(qm, clock, "EXTERNAL", LISTENERS["EXTERNAL"], 200, 40, 25, 0)
    assert math.isnan(metric(qm, clock, "connection-accept-throttle-time", listener="EXTERNAL"))


def test_broker_connection_rate_limit_when_actual_rate_above_limit():
    qm, clock = manager(**{"max.connection.creation.rate": 30}), Clock()
    # Offered 100/s; the acceptor is held to the broker-wide 30/s (Kafka's epsilon for it: 7).
    accept_and_verify_rate(qm, clock, "EXTERNAL", LISTENERS["EXTERNAL"], 600, 10, 30, 7)
    assert metric(qm, clock, "connection-accept-throttle-time", listener="EXTERNAL") > 0
    assert qm.connection_count(LISTENERS["EXTERNAL"]) == 600  # delayed, never refused


def test_listener_connection_rate_limit_when_actual_rate_above_limit():
    qm = manager(**{"max.connection.creation.rate": 125, "listener.name.external.max.connection.creation.rate": 30})
    clock = Clock()
    accept_and_verify_rate(qm, clock, "EXTERNAL", LISTENERS["EXTERNAL"], 600, 25, 30, 7)
    assert metric(qm, clock, "connection-accept-throttle-time", listener="EXTERNAL") > 0
    # The other listener is not held by EXTERNAL's rate.
    accept_and_verify_rate(qm, clock, "ADMIN", LISTENERS["ADMIN"], 200, 25, 40, 0)


def test_ip_connection_rate_when_actual_rate_below_limit():
    qm, clock = manager(), Clock()
    ip = LISTENERS["EXTERNAL"]
    qm.alter_client_quotas([({"ip": ip}, {"connection_creation_rate": 30})])
    accept_and_verify_rate(qm, clock, "EXTERNAL", ip, 200, 40, 25, 0)
    assert qm.connection_count(ip) == 200
    # An address without a quota is never throttled.
    accept_and_verify_rate(qm, clock, "ADMIN", LISTENERS["ADMIN"], 200, 20, 50, 0)
    for listener in LISTENERS:
        assert not ip_throttled(qm, clock, listener)


def test_ip_connection_rate_when_actual_rate_above_limit():
    qm, clock = manager(), Clock()
    ip = LISTENERS["EXTERNAL"]
    qm.alter_client_quotas([({"ip": ip}, {"connection_creation_rate": 20})])
    accept_and_verify_rate(qm, clock, "EXTERNAL", ip, 80, 25, 20, 1, expect_ip_throttle=True)
    assert ip_throttled(qm, clock, "EXTERNAL")
    # The default quota applies to addresses without their own.
    qm.alter_client_quotas([({"ip": None}, {"connection_creation_rate": 20})])
    assert not ip_throttled(qm, clock, "ADMIN")
    accept_and_verify_rate(qm, clock, "ADMIN", LISTENERS["ADMIN"], 80, 25, 20, 1, expect_ip_throttle=True)
    assert ip_throttled(qm, clock, "ADMIN")
    # An IP throttle never delays the acceptor.
    for listener in ("EXTERNAL", "ADMIN"):
        assert math.isnan(metric(qm, clock, "connection-accept-throttle-time", listener=listener))


def test_rejected_ip_connection_unrecorded_from_connection_rate_quotas():
    qm, clock = manager(), Clock()
    ip = LISTENERS["EXTERNAL"]
    qm.alter_client_quotas([({"ip": ip}, {"connection_creation_rate": 1})])
    assert inc(qm, clock, "EXTERNAL", ip) == 0
    before = [metric(qm, clock, "connection-accept-rate", ip=ip),
              metric(qm, clock, "connection-accept-rate", listener="EXTERNAL"),
              metric(qm, clock, "broker-connection-accept-rate")]
    assert before == [1.0, 1.0, 1.0]  # one connection over the 1 s window
    throttle = inc(qm, clock, "EXTERNAL", ip)
    # Bounded by one sample window: (2 - 1) / 1 * 1000 ms.
    assert throttle == 1000
    after = [metric(qm, clock, "connection-accept-rate", ip=ip),
             metric(qm, clock, "connection-accept-rate", listener="EXTERNAL"),
             metric(qm, clock, "broker-connection-accept-rate")]
    assert after == before  # the throttled connection is in none of the rates
    assert qm.connection_count(ip) == 1


def test_ip_connection_rate_metric_update():
    qm, clock = manager(), Clock()
    ext, adm = LISTENERS["EXTERNAL"], LISTENERS["ADMIN"]
    qm.alter_client_quotas([({"ip": None}, {"connection_creation_rate": 50})])
    inc(qm, clock, "EXTERNAL", ext)
    inc(qm, clock, "ADMIN", adm)
    assert qm.connection_rate_for_ip(ext) == qm.connection_rate_for_ip(adm) == 50
    qm.alter_client_quotas([({"ip": ext}, {"connection_creation_rate": 30})])
    assert qm.connection_rate_for_ip(ext) == 30
    qm.alter_client_quotas([({"ip": None}, {"connection_creation_rate": 20})])
    assert (qm.connection_rate_for_ip(ext), qm.connection_rate_for_ip(adm)) == (30, 20)
    qm.alter_client_quotas([({"ip": None}, {"connection_creation_rate": None})])
    assert (qm.connection_rate_for_ip(ext), qm.connection_rate_for_ip(adm)) == (30, UNLIMITED)
    qm.alter_client_quotas([({"ip": ext}, {"connection_creation_rate": None})])
    assert qm.connection_rate_for_ip(ext) == UNLIMITED


def test_enforced_ip_connection_rate_quota_update():
    qm, clock = manager(), Clock()
    ext, adm = LISTENERS["EXTERNAL"], LISTENERS["ADMIN"]

    def accept_until_throttled(ip: str, n: int) -> None:
        for _ in range(n):
            if inc(qm, clock, "EXTERNAL", ip) > 0:
                return
        raise AssertionError("never throttled")

    qm.alter_client_quotas([({"ip": ext}, {"connection_creation_rate": 20})])
    accept_until_throttled(ext, 40)
    assert qm.connection_count(ext) == 20
    qm.alter_client_quotas([({"ip": ext}, {"connection_creation_rate": 30})])
    accept_until_throttled(ext, 40)
    assert qm.connection_count(ext) == 30
    qm.alter_client_quotas([({"ip": ext}, {"connection_creation_rate": None})])
    accept_connections(qm, clock, "EXTERNAL", ext, 40, 0)
    assert qm.connection_count(ext) == 70
    accept_connections(qm, clock, "ADMIN", adm, 40, 0)
    assert qm.connection_count(adm) == 40
    qm.alter_client_quotas([({"ip": None}, {"connection_creation_rate": 20})])
    accept_until_throttled(adm, 40)
    assert qm.connection_count(adm) == 60


def test_non_default_connection_count_limit_and_rate_limit():
    qm = manager(**{"max.connections": 350, "max.connection.creation.rate": 25})
    clock = Clock()
    ip = LISTENERS["EXTERNAL"]
    accept_and_verify_rate(qm, clock, "EXTERNAL", ip, 350, 10, 25, 8)
    assert qm.connection_count(ip) == 350
    assert not qm.connection_slot_available("EXTERNAL")  # the next one waits ...
    qm.release_connection(ip, "EXTERNAL")
    assert qm.connection_slot_available("EXTERNAL")  # ... until one closes


def test_ip_rate_with_listener_rate_only_one_address_saturates():
    # Kafka's testIpConnectionRateWithListenerConnectionRate: default ip quota 25, listener 35;
    # two addresses connect as fast as they can: the acceptor is held by the listener rate, so
    # at most one address is throttled by its own.
    qm = manager(**{"listener.name.external.max.connection.creation.rate": 35})
    qm.alter_client_quotas([({"ip": None}, {"connection_creation_rate": 25})])
    clock = Clock()
    throttled = {ip: False for ip in (KNOWN_HOST, "192.168.2.0")}
    for _ in range(35):
        for ip in throttled:
            throttled[ip] |= inc(qm, clock, "EXTERNAL", ip) > 0
    assert metric(qm, clock, "connection-accept-throttle-time", listener="EXTERNAL") > 0
    assert sum(throttled.values()) < 2


def test_listener_names_are_case_insensitive():
    # Kafka normalises listener names (ListenerName.normalised): listener.name.external.* is EXTERNAL's.
    qm = manager(**{"listener.name.external.max.connections": 1})
    clock = Clock()
    accept_connections(qm, clock, "external", LISTENERS["EXTERNAL"], 1, 0)
    assert not qm.connection_slot_available("EXTERNAL") and not qm.connection_slot_available("External")
