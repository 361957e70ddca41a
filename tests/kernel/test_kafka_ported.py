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
import re
import threading
import urllib.parse

import pytest

from kquota import ClientQuotaEntity, ClientQuotaType, QuotaConfigError

PRODUCE = ClientQuotaType.PRODUCE
FETCH = ClientQuotaType.FETCH
KEY = {PRODUCE: "producer_byte_rate", FETCH: "consumer_byte_rate"}
STATIC_DEFAULT_KW = {PRODUCE: "producer_default", FETCH: "consumer_default"}

T0 = 1_700_000_000_000  # MockTime's start (wall-clock ms); only differences matter

# Kafka's ClientQuotaManagerConfig() defaults: quota.window.num = 11, quota.window.size.seconds = 1
NUM_QUOTA_SAMPLES = 11
QUOTA_WINDOW_SIZE_SECONDS = 1

UNREACHABLE = 2**63 - 1  # stands in for a bare Rate's missing quota (Kafka: Long.MaxValue)


@pytest.fixture(params=[PRODUCE, FETCH], ids=["PRODUCE", "FETCH"])
def qt(request):
    """Kafka's ClientQuotaManager is the same class for Produce and Fetch: run both."""
    return request.param


def set_quota(qm, qt, entity, bound):
    """ClientQuotaManager.updateQuota(entity, Some(new Quota(bound, true))) / None to remove."""
    qm.alter_client_quotas([(entity, {KEY[qt]: bound})])


def rate_sensor(make_qm, window_num, window_size_seconds, client_id="rate-test"):
    """One kquota sensor standing in for a bare Kafka `Rate` with the given MetricConfig."""
    qm = make_qm(window_num=window_num, window_size_seconds=window_size_seconds)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": UNREACHABLE})])
    return qm.client("ANONYMOUS", client_id)


def check_quota(qm, qt, user, client_id, expected_bound, value, expected_throttle, now_ms):
    """ClientQuotaManagerTest.checkQuota: bound, max value in the quota window, then record
    value * numQuotaSamples. Kafka's expectThrottle becomes the exact throttle Kafka computes."""
    assert qm.quota_limit(qt, user, client_id) == expected_bound
    expected_max = (math.inf if expected_bound is None
                    else QUOTA_WINDOW_SIZE_SECONDS * (NUM_QUOTA_SAMPLES - 1) * expected_bound)
    assert qm.max_value_in_quota_window(qt, user, client_id) == expected_max
    got = qm.record_and_get_throttle_time_ms(qt, user, client_id, value * NUM_QUOTA_SAMPLES,
                                             now_ms=now_ms)
    assert got == expected_throttle


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


# ============================================================================================
# clients/src/test/java/org/apache/kafka/common/metrics/MetricsTest.java
# ============================================================================================


def test_kafka_simple_stats_rate(make_qm):
    """Kafka MetricsTest.testSimpleStats, the `test.rate` Meter (a Rate over a WindowedSum) with
    the default MetricConfig (2 samples of 30 s). The Avg / Max / Min / count / percentile
    metrics of that test have no kquota equivalent."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=30)
    total = 0
    for i in range(10):
        h.record_no_throttle(PRODUCE, i, now_ms=T0)
        total += i
    # prior to any time passing: W = 0 padded to (2 - 1) windows = 30 s -> 45 / 30
    assert h.measured_rate(PRODUCE, now_ms=T0) == total / 30.0
    # "pretend 2 seconds passed": elapsedSecs = 30 + 2; "Rate(0...9) = 1.40625"
    assert h.measured_rate(PRODUCE, now_ms=T0 + 2000) == total / 32.0 == 1.40625


def test_kafka_time_windowing(make_qm):
    """Kafka MetricsTest.testTimeWindowing: WindowedCount, 2 samples of 1 ms. Scaled x1000
    (1 s windows) and measured through a Rate of 1-per-event records, whose sum is the count;
    at both measurements W is exactly one window (1 s), so the rate equals the count."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    h.record_no_throttle(PRODUCE, 1.0, now_ms=T0)
    h.record_no_throttle(PRODUCE, 1.0, now_ms=T0 + 1000)
    # samples [T0: 1] [T0+1000: 1]; E = 1000 = one full window -> W = 1000
    assert h.measured_rate(PRODUCE, now_ms=T0 + 1000) == 2.0
    h.record_no_throttle(PRODUCE, 1.0, now_ms=T0 + 2000)  # "oldest event times out"
    # the T0 sample's last event is 2 windows old: purged; oldest start T0 + 1000 -> W = 1000
    assert h.measured_rate(PRODUCE, now_ms=T0 + 2000) == 2.0


def test_kafka_old_data_has_no_effect(make_qm):
    """Kafka MetricsTest.testOldDataHasNoEffect: a value recorded samples * window ago is purged
    (Kafka's Max then reports NaN; a Rate reports 0). Scaled x10 (100 ms -> 1 s windows)."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    h.record_no_throttle(PRODUCE, 50, now_ms=T0)
    assert h.measured_rate(PRODUCE, now_ms=T0 + 2 * 1000) == 0.0


def test_kafka_sampled_stat_returns_initial_value_when_no_values_exist(make_qm):
    """Kafka MetricsTest.testSampledStatReturnsInitialValueWhenNoValuesExist: the WindowedSum
    (the stat under Rate) reads its initial value 0 once its only sample expired. Scaled x10
    (2 samples of 100 ms -> 1 s)."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    h.record_no_throttle(PRODUCE, 50, now_ms=T0)
    # just before expiry the sample still counts: 50 B over W = 1999 ms
    assert h.measured_rate(PRODUCE, now_ms=T0 + 1999) == 50 / 1.999
    assert h.measured_rate(PRODUCE, now_ms=T0 + 2000) == 0.0


def test_kafka_quotas(make_qm):
    """Kafka MetricsTest.testQuotas, upper-bound part, on a Rate instead of a CumulativeSum
    (kquota has upper bounds on rates only): a value that reaches the bound exactly is
    acceptable, one more violates, the violating value is recorded anyway, and recording the
    negative amount takes it back. A fresh sensor measures over W = 10 s, so Kafka's sums
    5 / 6 become 50 / 60 B."""
    qm = make_qm()
    set_quota(qm, PRODUCE, {"client-id": None}, 5)
    h = qm.client("ANONYMOUS", "c")
    assert h.record_and_get_throttle_time_ms(PRODUCE, 50, now_ms=T0) == 0  # 5.0 B/s == bound
    # 60 B / 10 s = 6 B/s > 5: "Should have gotten a quota violation"; (6 - 5) / 5 * 10000
    assert h.record_and_get_throttle_time_ms(PRODUCE, 10, now_ms=T0) == 2000
    assert h.measured_rate(PRODUCE, now_ms=T0) == 6.0  # the violating value was recorded
    h.unrecord(PRODUCE, 60, now_ms=T0)  # Kafka: sensor.record(-6.0)
    assert h.measured_rate(PRODUCE, now_ms=T0) == 0.0
    assert h.record_and_get_throttle_time_ms(PRODUCE, 0, now_ms=T0) == 0


def test_kafka_rate_windowing(make_qm):
    """Kafka MetricsTest.testRateWindowing: 3 samples of the default 30 s window. (Its
    count-rate and CumulativeSum totals have no kquota equivalent.)"""
    h = rate_sensor(make_qm, window_num=3, window_size_seconds=30)
    t = T0
    total = 0
    for _ in range(3 - 1):  # advance one window after every record
        h.record_no_throttle(PRODUCE, 100, now_ms=t)
        total += 100
        t += 30_000
    t += 30_000 // 2  # sleep for half the window
    # elapsedSecs = 30 * (3 - 0.5) = 75 s; "Rate(0...2) = 2.666"; Elapsed Time = 75 s, so the
    # rate is exactly 200 / (75000 / 1000.0)
    elapsed_secs = 30 * (3 - 0.5)
    assert h.measured_rate(PRODUCE, now_ms=t) == total / elapsed_secs
    # rates expire after samples * window
    t += 30_000 * 3
    assert h.measured_rate(PRODUCE, now_ms=t) == 0.0


# ============================================================================================
# clients/src/test/java/org/apache/kafka/common/metrics/stats/RateTest.java
# ============================================================================================


@pytest.mark.parametrize("num_sample,sample_window_size_sec", [(1, 1), (1, 11), (11, 1), (11, 11)])
def test_kafka_rate_with_no_prior_available_samples(make_qm, num_sample, sample_window_size_sec):
    """Kafka RateTest.testRateWithNoPriorAvailableSamples: before the first window completes the
    rate assumes N - 1 prior empty samples."""
    h = rate_sensor(make_qm, window_num=num_sample, window_size_seconds=sample_window_size_sec)
    sample_value = 50.0
    h.record_no_throttle(PRODUCE, sample_value, now_ms=T0)
    measurement_time = sample_window_size_sec * 1000 - 1
    observed = h.measured_rate(PRODUCE, now_ms=T0 + measurement_time)
    assert not math.isnan(observed)
    dummy_prior_samples = num_sample - 1
    window_size = measurement_time / 1000.0 + dummy_prior_samples * sample_window_size_sec
    assert abs(observed - sample_value / window_size) <= 0.000001  # Kafka's EPS
    # exactly what Kafka's Rate computes: value / (W / 1000.0), W = E + (N - 1) windows in ms
    w_ms = measurement_time + dummy_prior_samples * sample_window_size_sec * 1000
    assert observed == sample_value / (w_ms / 1000.0)


def test_kafka_rate_is_consistent_after_the_first_window(make_qm):
    """Kafka RateTest.testRateIsConsistentAfterTheFirstWindow: 2 samples of 1 s, an event every
    ~100 ms; from the second window on the rate stays within [10, 11] and is repeatable."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    steps = [0, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    t = T0
    for step in steps:  # first window: events at 0, 99, 199, ..., 999 ms
        t += step
        h.record_no_throttle(PRODUCE, 1, now_ms=t)
    t += 101  # a gap of 100 ms between windows
    for k, step in enumerate(steps):  # second window: events at 1100, 1199, ..., 2099 ms
        t += step
        h.record_no_throttle(PRODUCE, 1, now_ms=t)
        observed = h.measured_rate(PRODUCE, now_ms=t)
        assert 10 <= observed <= 11
        assert h.measured_rate(PRODUCE, now_ms=t) == observed  # repeatable
        # Kafka's Rate: both samples kept (the first one's last event, T0 + 999, is < 2 s old),
        # oldest start T0, E >= 1 window: W = t - T0; sum = 11 + (k + 1) events
        assert observed == (11 + k + 1) / ((t - T0) / 1000.0)


# ============================================================================================
# clients/src/test/java/org/apache/kafka/common/metrics/stats/SampledStatTest.java
# (Kafka counts samples with a test-only stat; here the samples are summed by WindowedSum, as in
# Rate: each `completeSample` records 1 at its start and 1 at its end, so it holds 2.)
# ============================================================================================


def _complete_sample(h, t):
    """SampledStatTest.completeSample: events at the start and the end; clock to the end."""
    h.record_no_throttle(PRODUCE, 1, now_ms=t)
    t += 1000 - 1
    h.record_no_throttle(PRODUCE, 1, now_ms=t)
    return t + 1


def test_kafka_sample_is_purged_if_doesnt_overlap(make_qm):
    """Kafka SampledStatTest.testSampleIsPurgedIfDoesntOverlap (2 samples of 1 s)."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    t = _complete_sample(h, T0)
    t += 2500
    # last event at T0 + 999, now T0 + 3500: 2501 ms >= 2 * 1000 -> purged (Kafka: 0 samples)
    assert h.measured_rate(PRODUCE, now_ms=t) == 0.0


def test_kafka_sample_is_kept_if_overlaps(make_qm):
    """Kafka SampledStatTest.testSampleIsKeptIfOverlaps (2 samples of 1 s)."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    t = _complete_sample(h, T0)
    t += 1500
    # last event at T0 + 999, now T0 + 2500: 1501 ms < 2000 -> kept (Kafka: 1 sample);
    # sum 2, W = 2500 ms
    assert h.measured_rate(PRODUCE, now_ms=t) == 2 / 2.5


def test_kafka_sample_is_kept_if_overlaps_and_extra(make_qm):
    """Kafka SampledStatTest.testSampleIsKeptIfOverlapsAndExtra: the samples + 1 ring slot keeps
    the overlapping sample (Kafka: 3 samples)."""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=1)
    t = _complete_sample(h, T0)  # sample [T0, T0 + 999]
    t += 100
    t = _complete_sample(h, t)  # sample [T0 + 1100, T0 + 2099]
    t += 100
    h.record_no_throttle(PRODUCE, 1, now_ms=t)  # third sample at T0 + 2200
    # all 3 kept (first last event 1201 ms ago < 2000); sum 2 + 2 + 1, W = 2200 ms
    assert h.measured_rate(PRODUCE, now_ms=t) == 5 / 2.2


# ============================================================================================
# clients/src/test/java/org/apache/kafka/common/metrics/stats/MeterTest.java
# ============================================================================================


def test_kafka_meter(make_qm):
    """Kafka MeterTest.testMeter, the Rate half (default MetricConfig: 2 samples of 30 s): values
    0, 5, 10, ... every 100 ms for 100 s; at each whole second the rate is the sum of the values
    inside [now - W, now) divided by W. (The CumulativeSum half has no kquota equivalent.)"""
    h = rate_sensor(make_qm, window_num=2, window_size_seconds=30)
    now, next_value, delta, interval = 0, 0.0, 5.0, 100
    for i in range(1, 101):
        while now < i * 1000:
            h.record_no_throttle(PRODUCE, next_value, now_ms=T0 + now)
            now += interval
            next_value += delta
        # Kafka reads W from Rate.windowSize; derived here: samples start every 30 s (a record
        # finds the current one complete) and the ring holds 3. The last record, at now - 100,
        # is in the sample starting at sc. The sample before it is always kept; the one before
        # that (last event sc - 30100) only while now - sc < 29900 (purge at >= 60000 ms).
        # With a single sample, E < 1 window is padded by one window.
        k = (now - 100) // 30_000
        sc = 30_000 * k
        if k >= 2 and now - sc < 29_900:
            oldest = sc - 60_000
        elif k >= 1:
            oldest = sc - 30_000
        else:
            oldest = 0
        window_size_ms = now - oldest
        if window_size_ms // 30_000 < 1:
            window_size_ms += 30_000
        window_start_ms = max(now - window_size_ms, 0)
        sampled_total = 0.0
        prev_value = next_value - delta
        time_ms = now - 100
        while time_ms >= window_start_ms:
            sampled_total += prev_value
            time_ms -= interval
            prev_value -= delta
        # Kafka: assertEquals(sampledTotal * 1000 / windowSizeMs, rate, 1e-7); the totals are
        # exact integers, so Rate's own arithmetic (sum / (W / 1000.0)) is asserted exactly
        expected = sampled_total / (window_size_ms / 1000.0)
        assert h.measured_rate(PRODUCE, now_ms=T0 + now) == expected


# ============================================================================================
# clients/src/test/java/org/apache/kafka/common/metrics/SensorTest.java
# ============================================================================================


def test_kafka_strict_quota_enforcement_with_rate(make_qm):
    """Kafka SensorTest.testStrictQuotaEnforcementWithRate: quota 2, 11 samples of 1 s.
    Kafka's strictRecord checks the quota first and records only if it holds; here a 0-byte
    checked record is the check and record_no_throttle the record."""
    qm = make_qm()
    set_quota(qm, PRODUCE, {"client-id": None}, 2)
    h = qm.client("ANONYMOUS", "c")

    def strict_record(value, t):
        throttle = h.record_and_get_throttle_time_ms(PRODUCE, 0, now_ms=t)
        if throttle > 0:
            return throttle  # Kafka: QuotaViolationException, nothing recorded
        h.record_no_throttle(PRODUCE, value, now_ms=t)
        return 0

    # a first value at T+0 brings the avg rate to 30 / 10 = 3, already above the quota
    assert strict_record(30, T0) == 0
    assert h.measured_rate(PRODUCE, now_ms=T0) == 3.0
    # "we should wait 5s": ((30 / 10) - 2) / 2 * 10 = 5 s; but after 5 s the rate is still
    # 30 / (5000 + 5 padded windows) = 3, so the second value is rejected
    t = T0 + 5000
    assert h.measured_rate(PRODUCE, now_ms=t) == 3.0
    assert strict_record(30, t) == 5000  # (3 - 2) / 2 * 10000
    assert h.measured_rate(PRODUCE, now_ms=t) == 3.0  # nothing recorded


def test_kafka_check_quotas_in_multi_threads(make_qm):
    """Kafka SensorTest.testCheckQuotasInMultiThreads: 10 threads record j * index (j < 20) and
    check the quota (bound Double.MAX_VALUE; kquota: 2^63 - 1) concurrently; none may fail.
    Kafka's 1 ms window is 1 s here (kquota's smallest); 100 samples as in Kafka."""
    qm = make_qm(window_num=100)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": UNREACHABLE})])
    # one record before the threads start, so the oldest sample's start is known
    assert qm.record_and_get_throttle_time_ms(PRODUCE, "ANONYMOUS", "sensor", 0, now_ms=T0) == 0
    barrier = threading.Barrier(10)
    errors, throttles = [], []

    def worker(index):
        try:
            barrier.wait(5)
            for j in range(20):
                throttles.append(qm.record_and_get_throttle_time_ms(
                    PRODUCE, "ANONYMOUS", "sensor", j * index, now_ms=T0 + j))
                qm.measured_rate(PRODUCE, "ANONYMOUS", "sensor", now_ms=T0 + j)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert not any(th.is_alive() for th in threads)
    assert errors == [], "Sensor#checkQuotas SHOULD be thread-safe!"
    assert throttles == [0] * 200
    # every value landed in the first sample: sum_{index<10} sum_{j<20} j * index = 45 * 190;
    # W = 19 ms + 99 padded windows
    rate = qm.measured_rate(PRODUCE, "ANONYMOUS", "sensor", now_ms=T0 + 19)
    assert rate == 8550 / (99_019 / 1000.0)


def test_kafka_updating_metric_config_is_reflected_in_the_sensor(make_qm):
    """Kafka SensorTest.testUpdatingMetricConfigIsReflectedInTheSensor: after the quota of an
    existing metric changes, its next record / check uses the new bound. Kafka uses mock stats;
    here the real Rate with values x10 (record 100 at t = 1, check at 2, bound 5 -> 10, record
    100 at 3, check at 4)."""
    qm = make_qm()
    set_quota(qm, PRODUCE, {"client-id": None}, 5)
    h = qm.client("ANONYMOUS", "c")
    h.record_no_throttle(PRODUCE, 100, now_ms=T0 + 1)
    # W = 1 + 10 * 1000 = 10001: (100 / 10.001 - 5) / 5 * 10001 = (100000 - 50005) / 5 = 9999
    assert h.record_and_get_throttle_time_ms(PRODUCE, 0, now_ms=T0 + 2) == 9999
    set_quota(qm, PRODUCE, {"client-id": None}, 10)
    h.record_no_throttle(PRODUCE, 100, now_ms=T0 + 3)
    # W = 10003: (200 / 10.003 - 10) / 10 * 10003 = (200000 - 100030) / 10 = 9997
    # (with the old bound 5 it would be (200000 - 50015) / 5 = 29997)
    assert h.record_and_get_throttle_time_ms(PRODUCE, 0, now_ms=T0 + 4) == 9997


# ============================================================================================
# server-common/src/test/java/org/apache/kafka/server/quota/QuotaUtilsTest.java
# (Kafka builds a QuotaViolationException on a fresh Rate, whose W is (numSamples - 1) windows of
# 1 s, and calls QuotaUtils.throttleTime. Here a fresh sensor gets numSamples - 1 seconds' worth
# of the observed rate in one record, so its rate is exactly the observed value over the same W.
# Byte-rate quotas must be whole numbers, so Kafka's 16.5 / 20.4 are scaled x10.)
# ============================================================================================


@pytest.mark.parametrize("num_samples", [10, 11])
def test_kafka_throttle_time_observed_rate_equals_quota(make_qm, num_samples):
    """Kafka QuotaUtilsTest.testThrottleTimeObservedRateEqualsQuota (16.5 -> 165 B/s): 0,
    independent of the window size."""
    observed = 165
    qm = make_qm(window_num=num_samples)
    set_quota(qm, PRODUCE, {"client-id": None}, observed)
    value = observed * (num_samples - 1)  # 1485 / 9.0 == 1650 / 10.0 == 165.0 exactly
    assert qm.record_and_get_throttle_time_ms(PRODUCE, "u", "c", value, now_ms=T0) == 0
    assert qm.measured_rate(PRODUCE, "u", "c", now_ms=T0) == observed


@pytest.mark.parametrize("num_samples", [10, 11])
def test_kafka_throttle_time_observed_rate_below_quota(make_qm, num_samples):
    """Kafka QuotaUtilsTest.testThrottleTimeObservedRateBelowQuota (16.5 vs 20.4 -> 165 vs 204
    B/s). Kafka's raw throttleTime() is negative there; the record path never calls it below the
    bound, so the public result is no throttle (0)."""
    qm = make_qm(window_num=num_samples)
    set_quota(qm, PRODUCE, {"client-id": None}, 204)
    value = 165 * (num_samples - 1)
    assert qm.record_and_get_throttle_time_ms(PRODUCE, "u", "c", value, now_ms=T0) == 0
    assert qm.measured_rate(PRODUCE, "u", "c", now_ms=T0) == 165.0


def test_kafka_throttle_time_observed_rate_above_quota(make_qm):
    """Kafka QuotaUtilsTest.testThrottleTimeObservedRateAboveQuota: quota 50, observed 100, 3
    samples (W = 2 s): (100 - 50) / 50 * 2000 = 2000."""
    qm = make_qm(window_num=3)
    set_quota(qm, PRODUCE, {"client-id": None}, 50)
    assert qm.record_and_get_throttle_time_ms(PRODUCE, "u", "c", 200, now_ms=T0) == 2000
    assert qm.measured_rate(PRODUCE, "u", "c", now_ms=T0) == 100.0


# ============================================================================================
# clients/src/test/java/org/apache/kafka/common/utils/SanitizerTest.java
# (Sanitizer.sanitize is what ClientQuotaManager applies to the principal for the user tag.)
# ============================================================================================


def _user_tag(qm, user):
    return qm.quota_metric_tags(PRODUCE, user, "c")["user"]


def test_kafka_sanitize(qm):
    """Kafka SanitizerTest.testSanitize: the sanitized principal uses only [a-zA-Z0-9._-] apart
    from %-escapes, and URL-decodes back to the principal."""
    set_quota(qm, PRODUCE, {"user": None}, 1000)
    principal = "CN=Some characters !@#$%&*()_-+=';:,/~"
    sanitized = _user_tag(qm, principal)
    assert re.fullmatch(r"[a-zA-Z0-9._\-]+", sanitized.replace("%", "_"))
    assert urllib.parse.unquote_plus(sanitized) == principal  # Java's URLDecoder.decode
    # exact form (URLEncoder, then * -> %2A and + -> %20)
    assert sanitized == ("CN%3DSome%20characters%20%21%40%23%24%25%26%2A%28%29_-%2B%3D%27%3B"
                         "%3A%2C%2F%7E")


def test_kafka_jmx_sanitize(qm):
    """Kafka SanitizerTest.testJmxSanitize, the part about Sanitizer.sanitize: for every char c
    (0..65535, lone surrogates included) the sanitized "value" + c is JMX-safe, i.e. matches
    jmxSanitize's MBEAN_PATTERN [\\w-%\\. \\t]* (Java's \\w is ASCII) so it is never quoted."""
    set_quota(qm, PRODUCE, {"user": None}, 1000)
    mbean = re.compile(r"[A-Za-z0-9_\-%. \t]*")
    bad = []
    for i in range(65536):
        value = "value" + chr(i)
        tag = _user_tag(qm, value)
        if not mbean.fullmatch(tag):
            bad.append((i, tag))
    assert bad == []
    # the encoder Java uses turns a lone surrogate into '?' (%3F)
    assert _user_tag(qm, "value\ud800") == "value%3F"


# ============================================================================================
# core/src/test/scala/unit/kafka/server/ClientQuotasRequestTest.scala
# (AlterClientQuotas / DescribeClientQuotas against a broker -> alter_client_quotas /
# describe_client_quotas on one manager; Kafka's describe filters by the entity, here it is read
# from the full description.)
# ============================================================================================

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"


def alter_entity_quotas(qm, entity, alter, validate_only):
    qm.alter_client_quotas([(entity, alter)], validate_only=validate_only)


def verify_describe_entity_quotas(qm, entity, quotas):
    described = qm.describe_client_quotas()
    if not quotas:
        assert ClientQuotaEntity(entity) not in described
    else:
        assert described[ClientQuotaEntity(entity)] == quotas


def test_kafka_alter_client_quotas_request(qm):
    """Kafka ClientQuotasRequestTest.testAlterClientQuotasRequest."""
    entity = {"user": "user", "client-id": "client-id"}
    verify_describe_entity_quotas(qm, entity, {})  # expect an empty configuration

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 10000.0, CONSUMER_BYTE_RATE: 20000.0},
                        validate_only=False)  # add two configuration entries
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 10000.0,
                                               CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 15000.0}, validate_only=False)  # update
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 15000.0,
                                               CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: None}, validate_only=False)  # remove
    verify_describe_entity_quotas(qm, entity, {CONSUMER_BYTE_RATE: 20000.0})

    # remove a non-existent configuration entry: no change
    alter_entity_quotas(qm, entity, {REQUEST_PERCENTAGE: None}, validate_only=False)
    verify_describe_entity_quotas(qm, entity, {CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 5000.0}, validate_only=False)  # add back
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 5000.0,
                                               CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0, CONSUMER_BYTE_RATE: None,
                                     REQUEST_PERCENTAGE: 12.3}, validate_only=False)  # mixed
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0,
                                               REQUEST_PERCENTAGE: 12.3})


def test_kafka_alter_client_quotas_request_validate_only(qm):
    """Kafka ClientQuotasRequestTest.testAlterClientQuotasRequestValidateOnly."""
    entity = {"user": "user"}
    expected = {PRODUCER_BYTE_RATE: 20000.0, REQUEST_PERCENTAGE: 23.45}
    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0, REQUEST_PERCENTAGE: 23.45},
                        validate_only=False)
    verify_describe_entity_quotas(qm, entity, expected)
    for alter in [
        {CONSUMER_BYTE_RATE: 50000.0},  # validate-only addition
        {PRODUCER_BYTE_RATE: 10000.0},  # validate-only modification
        {REQUEST_PERCENTAGE: None},  # validate-only removal
        {PRODUCER_BYTE_RATE: 10000.0, CONSUMER_BYTE_RATE: 50000.0,
         REQUEST_PERCENTAGE: None},  # validate-only mixed update
    ]:
        alter_entity_quotas(qm, entity, alter, validate_only=True)
        verify_describe_entity_quotas(qm, entity, expected)
    # and the limits in force are unchanged
    assert qm.quota_limit(PRODUCE, "user", "any") == 20000.0
    assert qm.quota_limit(FETCH, "user", "any") is None


@pytest.mark.parametrize("entity,alter", [
    ({"user": ""}, {REQUEST_PERCENTAGE: 12.34}),
    ({"client-id": ""}, {REQUEST_PERCENTAGE: 12.34}),
    ({"": "name"}, {REQUEST_PERCENTAGE: 12.34}),
    ({}, {PRODUCER_BYTE_RATE: 10000.5}),
    ({"user": "user"}, {"bad": 1.0}),
    ({"user": "user"}, {PRODUCER_BYTE_RATE: 10000.5}),
], ids=["empty-user", "empty-client-id", "empty-entity-type", "empty-entity", "bad-key",
        "fractional-byte-rate"])
def test_kafka_alter_client_quotas_invalid_requests(qm, entity, alter):
    """Kafka ClientQuotasRequestTest.testAlterClientQuotasInvalidRequests (validateOnly = true;
    Kafka's InvalidRequestException is QuotaConfigError)."""
    with pytest.raises(QuotaConfigError):
        alter_entity_quotas(qm, entity, alter, validate_only=True)
    assert qm.describe_client_quotas() == {}


def test_kafka_client_quotas_sanitized(qm):
    """Kafka ClientQuotasRequestTest.testClientQuotasSanitized: a user name that must be
    sanitized is described back by its raw name."""
    entity = {"user": "user with spaces"}
    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0}, validate_only=False)
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0})
    # the broker applies it to that principal, whose metric tag is the sanitized name
    assert qm.quota_limit(PRODUCE, "user with spaces", "c") == 20000.0
    assert qm.quota_metric_tags(PRODUCE, "user with spaces", "c") == {
        "user": "user%20with%20spaces", "client-id": ""}


def test_kafka_client_quotas_with_default_name(qm):
    """Kafka ClientQuotasRequestTest.testClientQuotasWithDefaultName: a client-id literally
    named "<default>" is not the default entity."""
    entity = {"client-id": "<default>"}
    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0}, validate_only=False)
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0})
    # "This should not match": no quota for the default client-id entity
    assert ClientQuotaEntity({"client-id": None}) not in qm.describe_client_quotas()
    assert qm.quota_limit(PRODUCE, "u", "<default>") == 20000.0
    assert qm.quota_limit(PRODUCE, "u", "other") is None


# ============================================================================================
# metadata/src/test/java/org/apache/kafka/controller/ClientQuotaControlManagerTest.java
# (Kafka's "INVALID_REQUEST and no records" is QuotaConfigError with nothing applied.)
# ============================================================================================


def assert_invalid_quota(qm, entity, quotas):
    before = qm.describe_client_quotas()
    with pytest.raises(QuotaConfigError):
        qm.alter_client_quotas([(entity, quotas)])
    assert qm.describe_client_quotas() == before


@pytest.mark.parametrize("entity", [
    {"foo": "bar"},  # unknown type "foo"
    {None: "null"},  # null type
    {"user": "user-1", "foo": "bar"},  # valid + unknown combo
    {"foo": "bar", "ip": "1.2.3.4"},
    {"user": "user-1", "ip": "1.2.3.4"},  # invalid combinations
    {"client-id": "user-1", "ip": "1.2.3.4"},
    {},  # empty
], ids=["unknown", "null-type", "user+unknown", "unknown+ip", "user+ip", "client+ip", "empty"])
def test_kafka_invalid_entity_types(qm, entity):
    """Kafka ClientQuotaControlManagerTest.testInvalidEntityTypes (producer_byte_rate 10000)."""
    assert_invalid_quota(qm, entity, {PRODUCER_BYTE_RATE: 10000.0})


@pytest.mark.parametrize("quotas", [
    {"not.a.quota.key": 0.0, REQUEST_PERCENTAGE: 99.9},  # invalid + valid keys
    {REQUEST_PERCENTAGE: 99.9, "not.a.quota.key": 0.0},  # valid + invalid keys
    {None: 99.9},  # null key
], ids=["invalid-then-valid", "valid-then-invalid", "null-key"])
def test_kafka_invalid_quota_keys(qm, quotas):
    """Kafka ClientQuotaControlManagerTest.testInvalidQuotaKeys."""
    assert_invalid_quota(qm, {"user": "user-1"}, quotas)


def test_kafka_alter_and_remove(qm):
    """Kafka ClientQuotaControlManagerTest.testAlterAndRemove."""
    user_entity = ClientQuotaEntity({"user": "user-1"})

    def data():
        return qm.describe_client_quotas().get(user_entity)

    qm.alter_client_quotas([(user_entity, {PRODUCER_BYTE_RATE: 10000.0})])  # add one quota
    assert data() == {PRODUCER_BYTE_RATE: 10000.0}
    # replace it and add another
    qm.alter_client_quotas([(user_entity, {PRODUCER_BYTE_RATE: 10001.0,
                                           CONSUMER_BYTE_RATE: 20000.0})])
    assert data() == {PRODUCER_BYTE_RATE: 10001.0, CONSUMER_BYTE_RATE: 20000.0}
    # remove one of the quotas, the other remains
    qm.alter_client_quotas([(user_entity, {PRODUCER_BYTE_RATE: None})])
    assert data() == {CONSUMER_BYTE_RATE: 20000.0}
    # remove non-existent quota, no change
    qm.alter_client_quotas([(user_entity, {REQUEST_PERCENTAGE: None})])
    assert data() == {CONSUMER_BYTE_RATE: 20000.0}
    # all quotas removed: the entity is gone
    qm.alter_client_quotas([(user_entity, {CONSUMER_BYTE_RATE: None})])
    assert user_entity not in qm.describe_client_quotas()
    # remove non-existent quota, again no change
    qm.alter_client_quotas([(user_entity, {CONSUMER_BYTE_RATE: None})])
    assert user_entity not in qm.describe_client_quotas()
    # mixed update
    qm.alter_client_quotas([(user_entity, {REQUEST_PERCENTAGE: 99.0,
                                           CONTROLLER_MUTATION_RATE: None,
                                           PRODUCER_BYTE_RATE: 10002.0,
                                           CONSUMER_BYTE_RATE: 20001.0})])
    assert data() == {CONSUMER_BYTE_RATE: 20001.0, PRODUCER_BYTE_RATE: 10002.0,
                      REQUEST_PERCENTAGE: 99.0}


def test_kafka_entity_types(qm):
    """Kafka ClientQuotaControlManagerTest.testEntityTypes: every user / client-id entity shape
    (named and <default>) is accepted and stored with its value."""
    quotas_to_test = {
        ClientQuotaEntity({"user": "user-1", "client-id": "client-id-1"}): 50.50,
        ClientQuotaEntity({"user": "user-2", "client-id": "client-id-1"}): 51.51,
        ClientQuotaEntity({"user": "user-3", "client-id": "client-id-2"}): 52.52,
        ClientQuotaEntity({"user": None, "client-id": "client-id-1"}): 53.53,
        ClientQuotaEntity({"user": "user-1", "client-id": None}): 54.54,
        ClientQuotaEntity({"user": "user-3", "client-id": None}): 55.55,
        ClientQuotaEntity({"user": "user-1"}): 56.56,
        ClientQuotaEntity({"user": "user-2"}): 57.57,
        ClientQuotaEntity({"user": "user-3"}): 58.58,
        ClientQuotaEntity({"user": None}): 59.59,
        ClientQuotaEntity({"client-id": "client-id-2"}): 60.60,
    }
    qm.alter_client_quotas([(e, {REQUEST_PERCENTAGE: v}) for e, v in quotas_to_test.items()])
    assert qm.describe_client_quotas() == {
        e: {REQUEST_PERCENTAGE: v} for e, v in quotas_to_test.items()}


ALL_CLIENT_KEYS = {PRODUCER_BYTE_RATE: 1000, CONSUMER_BYTE_RATE: 2000,
                   CONTROLLER_MUTATION_RATE: 10.0, REQUEST_PERCENTAGE: 50.0}


@pytest.mark.parametrize("entity", [
    {"user": "foo"}, {"client-id": "foo"}, {"client-id": "foo", "user": "foo"},
], ids=["testConfigKeysForEntityTypeWithUser", "testConfigKeysForEntityTypeWithClientId",
        "testConfigKeysForEntityTypeWithUserAndClientId"])
def test_kafka_config_keys_for_entity_type(qm, entity):
    """Kafka ClientQuotaControlManagerTest.testConfigKeysForEntityTypeWith{User,ClientId,
    UserAndClientId}: exactly producer_byte_rate, consumer_byte_rate, controller_mutation_rate
    and request_percentage are valid for these entities."""
    for key, value in ALL_CLIENT_KEYS.items():
        qm.alter_client_quotas([(entity, {key: value})], validate_only=True)
    qm.alter_client_quotas([(entity, ALL_CLIENT_KEYS)])
    assert qm.describe_client_quotas() == {
        ClientQuotaEntity(entity): {k: float(v) for k, v in ALL_CLIENT_KEYS.items()}}
    assert_invalid_quota(qm, entity, {"connection_creation_rate": 10.0})  # the IP-entity key


def test_kafka_config_keys_for_empty_entity(qm):
    """Kafka ClientQuotaControlManagerTest.testConfigKeysForEmptyEntity: "Invalid empty client
    quota entity"."""
    for key, value in ALL_CLIENT_KEYS.items():
        assert_invalid_quota(qm, {}, {key: value})


@pytest.mark.parametrize("key,value,valid", [
    pytest.param("foobar", 1.0, False, id="testValidateQuotaKeyValueForUnknownQuota"),
    pytest.param(PRODUCER_BYTE_RATE, 0.0, False, id="testValidateQuotaKeyValueForZeroQuota"),
    pytest.param(CONSUMER_BYTE_RATE, -2.0, False, id="testValidateQuotaKeyValueForNegativeQuota"),
    pytest.param(CONSUMER_BYTE_RATE, 1234.0, True,
                 id="testValidateQuotaKeyValueForValidConsumerByteRate"),
    pytest.param(CONSUMER_BYTE_RATE, 36893488147419103232.4, False,
                 id="testValidateQuotaKeyValueForConsumerByteRateTooLarge"),
    pytest.param(CONSUMER_BYTE_RATE, 2.245, False,
                 id="testValidateQuotaKeyValueForFractionalConsumerByteRate"),
    # Kafka accepts 1235.0000001: getErrorForIntegralQuotaValue rejects only
    # |value % 1.0| > 1e-6 (here 1.0000008e-7), and the value is kept as given.
    pytest.param(CONSUMER_BYTE_RATE, 1235.0000001, True,
                 id="testValidateQuotaKeyValueForValidConsumerByteRate2"),
    pytest.param(REQUEST_PERCENTAGE, 56.62367, True,
                 id="testValidateQuotaKeyValueForValidRequestPercentage"),
])
def test_kafka_validate_quota_key_value(qm, key, value, valid):
    """Kafka ClientQuotaControlManagerTest.testValidateQuotaKeyValueFor* (keys valid for a
    client-id entity)."""
    entity = {"client-id": "foo"}
    if valid:
        qm.alter_client_quotas([(entity, {key: value})], validate_only=True)
        qm.alter_client_quotas([(entity, {key: value})])
        assert qm.describe_client_quotas() == {ClientQuotaEntity(entity): {key: value}}
    else:
        with pytest.raises(QuotaConfigError) as info:
            qm.alter_client_quotas([(entity, {key: value})], validate_only=True)
        assert key in str(info.value)  # Kafka's messages name the key too
        assert_invalid_quota(qm, entity, {key: value})
