"""Apache Kafka's own unit tests for byte-rate quotas (KIP-13 / KIP-55), ported to kquota.

Source: apache/kafka at 1eb7644349cb07139d6a3c1ad1986979647cac99 (2024-10-25), and for the
static-default variants ("Kafka 2.x") the parent of KAFKA-12591 (ff3b2d67a10^ =
8d356b034b5759e7baa740921a4804dbba678f49), whose tests ran with `quota.producer.default = 500`.

How a Kafka test becomes a kquota test:
* A Kafka `MockTime` becomes explicit `now_ms` values: `T0` plays `time.milliseconds()` at the
  start (MockTime starts at the wall clock; only differences matter), `time.sleep(d)` adds d.
* `ClientQuotaManager.maybeRecordAndGetThrottleTimeMs` -> `record_and_get_throttle_time_ms`;
  `quota(user, clientId).bound` -> `quota_limit` (Kafka's `Long.MaxValue` "no quota" bound is
  `None`); `getMaxValueInQuotaWindow` -> `max_value_in_quota_window` (Kafka's
  `Double.MaxValue` is `math.inf`); `updateQuota` -> `alter_client_quotas`.
* Tests of the metrics library (`Rate`, `SampledStat`, `Sensor`) run on one kquota sensor: a
  client-id quota so high it can never be reached stands in for a bare `Rate`, `rate.record`
  becomes `record_no_throttle` and `rate.measure` becomes `measured_rate`. kquota windows are
  whole seconds, so Kafka tests with millisecond windows are scaled (every time multiplied by
  the same factor, which leaves every count and ratio unchanged); each case says so.
* Where Kafka only asserts "throttled" (> 0) the exact value Kafka's code produces is asserted,
  with the arithmetic in a comment (`W` is `Rate.windowSize`, throttle =
  `Math.round((rate - bound) / bound * W)`, QuotaUtils.throttleTime).
"""

# Not ported (reason):
# ---------------------------------------------------------------------------------------------
# Features kquota does not have yet
#   ClientQuotaManagerTest.testExpireThrottleTimeSensor    throttle-time sensors; removes a sensor
#   ClientQuotaManagerTest.testExpireQuotaSensors          removes sensors by hand (sensor expiry)
#   ClientQuotaManagerTest.testQuotaViolation (queue-size / callback / ThrottledChannelReaper
#       part)                                               delay queue and throttle callbacks
#   MetricsTest.testRemoveInactiveMetrics, SensorTest.testExpiredSensor     sensor expiry
#   SensorTest.testStrictQuotaEnforcementWithTokenBucket    CONTROLLER_MUTATION (token bucket)
#   QuotaUtilsTest.testBoundedThrottleTime*                 bounded throttle = request quotas
#   ClientRequestQuotaManagerTest, RequestQuotaTest         REQUEST quotas
#   ControllerMutationQuotaManagerTest, ControllerMutationQuotaTest        mutation quotas
#   ThrottledChannelTest, ThrottledChannelExpirationTest    delay queue / callbacks
#   CustomQuotaCallbackTest                                 KIP-257 callbacks
# Already ported in tests/kernel/test_byte_semantics.py (not duplicated)
#   ClientQuotaManagerTest.testQuotaConfigPrecedence; the byte-rate assertions of
#   testQuotaViolation (0 x 10, 2100 ms, 0 at the end). Only its unasserted middle part (the
#   throttles while the burst rolls over) and its Kafka 2.x static-default form are added here.
# Not about anything kquota exposes
#   QuotaUtilsTest.test*ThrowsExceptionIfProvidedNonRateMetric   non-Rate metrics
#   MetricsTest.testSimpleRate; ReplicationQuotaManagerTest; RLMQuotaManagerTest;
#       ReplicationQuotasTest; ReplicaManagerQuotasTest     SimpleRate (no N-1 window padding),
#                                                          replication / remote-log quotas
#   MetricsTest: testSampledStatReturnsNaNWhenNoValuesExist, testPercentiles*, testMetricName,
#       testHierarchicalSensors, testBadSensorHierarchy, testRemove*, testDuplicateMetricName,
#       testQuotasEquality, testMetricInstances, testConcurrentReadUpdate*   Max/Min/Avg,
#       percentiles, metric registry API (the Rate parts of testSimpleStats / testQuotas are ported)
#   SensorTest: testRecordLevelEnum, testShouldRecordFor*LevelSensor, testIdempotentAdd,
#       shouldReturnPresenceOfMetrics, testRecordAndCheckQuotaUseMetricConfigOfEachStat
#                                                          recording levels, stats per sensor
#   SampledStatTest uses a sample-counting stat; ported through the WindowedSum that Rate uses.
#   ClientQuotasRequestTest: testAlterIpQuotasRequest, testAlterClientQuotasBadIp,
#       testAlterClientQuotasInvalidEntityCombination, ClientQuotaControlManagerTest
#       testIsValidIpEntity*, testConfigKeysForEntityTypeWithIp*, testConfigKeysForUnresolvable-
#       IpEntity                                            IP (connection-rate) quotas
#   ClientQuotasRequestTest: testDescribeClientQuotasMatchExact/MatchPartial,
#       testDescribeClientQuotasInvalidFilterCombination, testClientQuotasUnsupportedEntityTypes
#                                                          describe filters (kquota describes all)
#   ClientQuotasRequestTest.testClientQuotasForScramUsers  @Disabled in Kafka; SCRAM credentials
#   BaseQuotaTest, ClientIdQuotaTest, UserQuotaTest, UserClientIdQuotaTest     integration tests
#       with real producers / consumers against a broker
#   KafkaApisTest, ControllerApisTest (quota parts)        mock the quota manager
#   ConnectionQuotasTest, DynamicConnectionQuotaTest        connection quotas
#   ClientQuotasImageTest, ClientQuotasImageNodeTest        metadata image serialization
#   SanitizerTest.testJmxSanitize (jmxSanitize / MBean registration part)   JMX only
# ---------------------------------------------------------------------------------------------

import math
import urllib.parse

import pytest

from kafka_port import (FETCH, NUM_QUOTA_SAMPLES, PRODUCE, STATIC_DEFAULT_KW, T0,
                        check_quota, set_quota)


@pytest.fixture(params=[PRODUCE, FETCH], ids=["PRODUCE", "FETCH"])
def qt(request):
    """Kafka's ClientQuotaManager is the same class for Produce and Fetch: run both."""
    return request.param


# ============================================================================================
# core/src/test/scala/unit/kafka/server/ClientQuotaManagerTest.scala
# ============================================================================================


def _quota_parsing(make_qm, qt, client1, client2, random_client, default_config_entity,
                   static_default=None, random_bound=None):
    """ClientQuotaManagerTest.testQuotaParsing. `client1` / `client2` are (user, clientId,
    config entity); every record happens at T0 (the Kafka test never sleeps), so W = 10 s
    (E = 0, padded to numQuotaSamples - 1 = 10 windows)."""
    kwargs = {} if static_default is None else {STATIC_DEFAULT_KW[qt]: static_default}
    qm = make_qm(**kwargs)
    (u1, c1, entity1), (u2, c2, entity2) = client1, client2

    # Case 1: update the quota; the new quota value is returned
    set_quota(qm, qt, entity1, 2000)
    set_quota(qm, qt, entity2, 4000)
    assert qm.quota_limit(qt, *random_client) == random_bound
    assert qm.quota_limit(qt, u1, c1) == 2000
    assert qm.quota_limit(qt, u2, c2) == 4000
    # p1 is throttled using the overridden quota (Kafka: > 0). 2500 * 11 = 27500 B over W = 10 s
    # -> 2750 B/s; (2750 - 2000) / 2000 * 10000 = 3750
    assert qm.record_and_get_throttle_time_ms(qt, u1, c1, 2500 * NUM_QUOTA_SAMPLES,
                                              now_ms=T0) == 3750

    # Case 2: change the quota; the existing sensor uses it: 2750 <= 3000, no longer throttled
    set_quota(qm, qt, entity1, 3000)
    assert qm.quota_limit(qt, u1, c1) == 3000
    assert qm.record_and_get_throttle_time_ms(qt, u1, c1, 0, now_ms=T0) == 0

    # Case 3: change it to 500: throttled again (Kafka: > 0); (2750 - 500) / 500 * 10000 = 45000
    set_quota(qm, qt, entity1, 500)
    assert qm.quota_limit(qt, u1, c1) == 500
    assert qm.record_and_get_throttle_time_ms(qt, u1, c1, 0, now_ms=T0) == 45000

    # Case 4: remove p1's quota, set a high default (4000): same tags, same sensor;
    # (27500 + 11000) / 10 = 3850 B/s <= 4000 -> not throttled
    set_quota(qm, qt, entity1, None)
    set_quota(qm, qt, default_config_entity, 4000)
    assert qm.quota_limit(qt, u1, c1) == 4000
    assert qm.record_and_get_throttle_time_ms(qt, u1, c1, 1000 * NUM_QUOTA_SAMPLES,
                                              now_ms=T0) == 0
    assert qm.measured_rate(qt, u1, c1, now_ms=T0) == 3850.0


# Kafka 2.x ran some of these with ClientQuotaManagerConfig(quotaDefault = 500), i.e. the static
# broker default `quota.producer.default` (kquota: producer_default / consumer_default); the
# random client then gets 500 instead of "no quota".
CURRENT = pytest.param(None, None, id="current")
KAFKA_2X_STATIC_500 = pytest.param(500, 500, id="kafka-2.x-static-default-500")


@pytest.mark.parametrize("static_default,random_bound", [CURRENT, KAFKA_2X_STATIC_500])
def test_kafka_client_id_quota_parsing(make_qm, qt, static_default, random_bound):
    """Kafka ClientQuotaManagerTest.testClientIdQuotaParsing (<client-id> quotas)."""
    _quota_parsing(make_qm, qt,
                   ("ANONYMOUS", "p1", {"client-id": "p1"}),
                   ("ANONYMOUS", "p2", {"client-id": "p2"}),
                   ("ANONYMOUS", "random-client-id"),
                   {"client-id": None},
                   static_default, random_bound)


def test_kafka_user_quota_parsing(make_qm, qt):
    """Kafka ClientQuotaManagerTest.testUserQuotaParsing (<user> quotas; Kafka 2.x ran it with
    quotaDefault = Long.MaxValue, i.e. the same)."""
    _quota_parsing(make_qm, qt,
                   ("User1", "p1", {"user": "User1"}),
                   ("User2", "p2", {"user": "User2"}),
                   ("RandomUser", "random-client-id"),
                   {"user": None})


def test_kafka_user_client_id_quota_parsing(make_qm, qt):
    """Kafka ClientQuotaManagerTest.testUserClientIdQuotaParsing (<user, client-id> quotas)."""
    _quota_parsing(make_qm, qt,
                   ("User1", "p1", {"user": "User1", "client-id": "p1"}),
                   ("User2", "p2", {"user": "User2", "client-id": "p2"}),
                   ("RandomUser", "random-client-id"),
                   {"user": None, "client-id": None})


@pytest.mark.parametrize("static_default,random_bound", [CURRENT, KAFKA_2X_STATIC_500])
def test_kafka_user_quota_parsing_with_default_client_id_quota(make_qm, qt, static_default,
                                                               random_bound):
    """Kafka ClientQuotaManagerTest.testUserQuotaParsingWithDefaultClientIdQuota. Its 2.x form
    had a static client-id default of 500 alongside the user quotas (mixed kinds: the 8-level
    walk; RandomUser falls through to ("", random-client-id) and the static default)."""
    _quota_parsing(make_qm, qt,
                   ("User1", "p1", {"user": "User1"}),
                   ("User2", "p2", {"user": "User2"}),
                   ("RandomUser", "random-client-id"),
                   {"user": None},
                   static_default, random_bound)


@pytest.mark.parametrize("static_default,random_bound", [CURRENT, KAFKA_2X_STATIC_500])
def test_kafka_user_client_quota_parsing_id_with_default_client_id_quota(
        make_qm, qt, static_default, random_bound):
    """Kafka ClientQuotaManagerTest.testUserClientQuotaParsingIdWithDefaultClientIdQuota
    (2.x form: static client-id default of 500 alongside <user, client-id> quotas)."""
    _quota_parsing(make_qm, qt,
                   ("User1", "p1", {"user": "User1", "client-id": "p1"}),
                   ("User2", "p2", {"user": "User2", "client-id": "p2"}),
                   ("RandomUser", "random-client-id"),
                   {"user": None, "client-id": None},
                   static_default, random_bound)


def test_kafka_get_max_value_in_quota_window_with_non_default_quota_window(make_qm):
    """Kafka ClientQuotaManagerTest.testGetMaxValueInQuotaWindowWithNonDefaultQuotaWindow
    (FETCH, numQuotaSamples = 3 + 1)."""
    num_full_quota_windows = 3
    qm = make_qm(window_num=num_full_quota_windows + 1)
    # no quota set: Double.MaxValue in Kafka, inf in kquota
    assert qm.max_value_in_quota_window(FETCH, "userA", "client1") == math.inf
    # default <user> quota 10 B/s: 10 * 3 windows * 1 s
    set_quota(qm, FETCH, {"user": None}, 10)
    assert qm.max_value_in_quota_window(FETCH, "userA", "client1") == 10 * num_full_quota_windows


def test_kafka_set_and_remove_default_user_quota(make_qm, qt):
    """Kafka ClientQuotaManagerTest.testSetAndRemoveDefaultUserQuota."""
    qm = make_qm()
    # no quota yet (quotaTypesEnabled = NoQuotas): not throttled, and nothing is recorded
    check_quota(qm, qt, "userA", "client1", None, 1000, 0, T0)
    assert qm.measured_rate(qt, "userA", "client1", now_ms=T0) == 0.0
    # default <user> quota 10: 11000 B / 10 s = 1100 B/s; (1100 - 10) / 10 * 10000 = 1090000
    set_quota(qm, qt, {"user": None}, 10)
    check_quota(qm, qt, "userA", "client1", 10, 1000, 1_090_000, T0)
    # removed: back to no quota (the sensor stays, now unlimited): 22000 B / 10 s recorded
    set_quota(qm, qt, {"user": None}, None)
    check_quota(qm, qt, "userA", "client1", None, 1000, 0, T0)
    assert qm.measured_rate(qt, "userA", "client1", now_ms=T0) == 2200.0


def test_kafka_set_and_remove_user_quota(make_qm, qt):
    """Kafka ClientQuotaManagerTest.testSetAndRemoveUserQuota."""
    qm = make_qm()
    set_quota(qm, qt, {"user": "userA"}, 10)
    check_quota(qm, qt, "userA", "client1", 10, 1000, 1_090_000, T0)  # (1100 - 10) / 10 * 10000
    set_quota(qm, qt, {"user": "userA"}, None)
    check_quota(qm, qt, "userA", "client1", None, 1000, 0, T0)


def test_kafka_set_and_remove_user_client_quota(make_qm, qt):
    """Kafka ClientQuotaManagerTest.testSetAndRemoveUserClientQuota."""
    qm = make_qm()
    set_quota(qm, qt, {"user": "userA", "client-id": "client1"}, 10)
    check_quota(qm, qt, "userA", "client1", 10, 1000, 1_090_000, T0)  # (1100 - 10) / 10 * 10000
    set_quota(qm, qt, {"user": "userA", "client-id": "client1"}, None)
    check_quota(qm, qt, "userA", "client1", None, 1000, 0, T0)


@pytest.mark.parametrize("static", [False, True], ids=["current-clients-default-500",
                                                       "kafka-2.x-static-default-500"])
def test_kafka_quota_violation_until_bursty_sample_rolls_over(make_qm, qt, static):
    """Kafka ClientQuotaManagerTest.testQuotaViolation, byte-rate part, including the loop Kafka
    leaves unasserted ("Could continue to see delays until the bursty sample disappears"). The
    2.x form used the static default quotaDefault = 500 instead of clients/<default> = 500."""
    if static:
        qm = make_qm(**{STATIC_DEFAULT_KW[qt]: 500})
    else:
        qm = make_qm()
        set_quota(qm, qt, {"client-id": None}, 500)
    h = qm.client("ANONYMOUS", "unknown")
    t = T0
    for _ in range(10):  # 400 B at T0 + 0 s ... 9 s, one sample each
        assert h.record_and_get_throttle_time_ms(qt, 400, now_ms=t) == 0
        t += 1000
    t += 500
    # 400 * 10 + 2300 = 6300 B / 10.5 s = 600 B/s; (600 - 500) / 500 * 10500 = 2100
    throttle = h.record_and_get_throttle_time_ms(qt, 2300, now_ms=t)
    assert throttle == 2100
    t += throttle  # T0 + 12600
    # Each record starts a new sample (samples start at T0 + 0, 1000, ..., 9000, 10500, 12600...).
    # At T0 + 12600 + k s the samples whose last event is >= 11 s old are purged, leaving the
    # 400 B samples started at T0 + (2 + k) s ... 9 s, the 2300 B sample and the k + 1 new ones:
    #   sum = 400 * 8 + 2300 + 400 = 5900 B at every step k = 0..7 (one 400 in, one 400 out),
    #   W = now - (T0 + (2 + k) * 1000) = 10600 ms  ->  (5900 / 10.6 - 500) / 500 * 10600 = 1200
    # k = 8 (T0 + 20600): all 400 B samples before the burst are gone; oldest = the 2300 B one:
    #   sum = 2300 + 9 * 400 = 5900, W = 20600 - 10500 = 10100 -> (5900 - 5050) / 500 * 1000 = 1700
    # k = 9 (T0 + 21600): the burst is purged (21600 - 10500 >= 11000); sum = 10 * 400 = 4000,
    #   oldest start T0 + 12600 -> E = 9000 ms, padded to 10 windows: 400 B/s -> no throttle
    expected = [1200] * 8 + [1700, 0]
    got = []
    for _ in range(10):
        got.append(h.record_and_get_throttle_time_ms(qt, 400, now_ms=t))
        t += 1000
    assert got == expected
    # "Should be unthrottled since bursty sample has rolled over"
    assert h.record_and_get_throttle_time_ms(qt, 0, now_ms=t) == 0


def test_kafka_client_id_not_sanitized(make_qm, qt):
    """Kafka ClientQuotaManagerTest.testClientIdNotSanitized: the quota sensor is keyed by the
    raw client-id ("Produce-:client@#$%"), not a URL-encoded one. (The throttle-time sensor part
    is not ported: kquota has no throttle-time sensors yet.)"""
    client_id = "client@#$%"
    qm = make_qm()
    set_quota(qm, qt, {"client-id": None}, 500)
    assert qm.record_and_get_throttle_time_ms(qt, "ANONYMOUS", client_id, 100, now_ms=T0) == 0
    assert qm.quota_metric_tags(qt, "ANONYMOUS", client_id) == {"user": "", "client-id": client_id}
    assert qm.measured_rate(qt, "ANONYMOUS", client_id, now_ms=T0) == 100 / 10.0
    sanitized = urllib.parse.quote(client_id, safe="")  # client%40%23%24%25: another client-id
    assert sanitized != client_id
    assert qm.measured_rate(qt, "ANONYMOUS", sanitized, now_ms=T0) == 0.0
