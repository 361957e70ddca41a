"""What the ported Kafka tests share (tests/kernel/test_kafka_ported*.py): Kafka's quota-type
keys, MockTime's start, ClientQuotaManagerConfig's defaults and the helpers that stand in for
Kafka's test utilities (see test_kafka_ported.py for how a Kafka test becomes a kquota test)."""

import math

from kquota import ClientQuotaType

PRODUCE = ClientQuotaType.PRODUCE
FETCH = ClientQuotaType.FETCH
KEY = {PRODUCE: "producer_byte_rate", FETCH: "consumer_byte_rate"}
STATIC_DEFAULT_KW = {PRODUCE: "producer_default", FETCH: "consumer_default"}

T0 = 1_700_000_000_000  # MockTime's start (wall-clock ms); only differences matter

# Kafka's ClientQuotaManagerConfig() defaults: quota.window.num = 11, quota.window.size.seconds = 1
NUM_QUOTA_SAMPLES = 11
QUOTA_WINDOW_SIZE_SECONDS = 1

UNREACHABLE = 2**63 - 1  # stands in for a bare Rate's missing quota (Kafka: Long.MaxValue)


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
