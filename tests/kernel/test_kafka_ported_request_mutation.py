"""Apache Kafka's own tests of the request-time and controller-mutation quota managers, ported.

Sources (apache/kafka): ``core/src/test/scala/unit/kafka/server/ClientRequestQuotaManagerTest.scala``,
``ControllerMutationQuotaManagerTest.scala`` (which also holds ``StrictControllerMutationQuotaTest``
and ``PermissiveControllerMutationQuotaTest``), ``clients/src/test/java/org/apache/kafka/common/
metrics/TokenBucketTest.java`` and the quota set-up and metric checks of ``RequestQuotaTest.scala``.
Every case runs against the kquota kernel and the pure-Python oracle, on a clock that starts at a
wall-clock-like instant as Kafka's ``MockTime`` does.

Left out, because they test Kafka plumbing rather than quota arithmetic:
* the throttled-channel delay queue (``throttle(...)``, ``queue-size``, ``throttledChannelReaper``,
  callbacks) of the manager tests;
* ``AbstractControllerMutationQuota.throttleTime`` decreasing with the clock after a rejection
  (a property of Kafka's per-request quota object; here the equivalent is that a retry later is
  told the remaining time, which is what the ported cases check);
* the ``UnboundedControllerMutationQuota`` / ``StrictControllerMutationQuota`` class identities
  (ported as behaviour: no enforcement while disabled, enforcement once a quota exists);
* ``QuotaUtilsTest`` (it builds ``QuotaViolationException`` objects by hand) and the
  request-building, authorizer and network parts of ``RequestQuotaTest`` and ``KafkaApisTest``
  (KafkaApisTest mocks the request quota manager, so it has no quota arithmetic to port).
"""

import pytest

from conftest import closing_factory
from oracle import NANOS_TO_PERCENT

T0 = 1_700_000_000_000  # MockTime starts at System.currentTimeMillis()
ANON, CLIENT = "ANONYMOUS", "test-client"
MS = 1_000_000


@pytest.fixture
def mk(impl):
    """Factory of managers of the implementation under test, with Kafka's default windows."""
    yield from closing_factory(impl.make)


class Clock:
    """Kafka's MockTime: ``sleep`` moves the clock."""

    def __init__(self, start=T0):
        self.now = start

    def sleep(self, ms):
        self.now += ms


# ============================================================================ ClientRequestQuotaManagerTest


@pytest.mark.parametrize("entry", ["record_request_time", "generic_percent"])
def test_request_percentage_quota_violation(impl, mk, entry):
    """ClientRequestQuotaManagerTest.testRequestPercentageQuotaViolation (default config: 11
    samples of 1 s; ``updateQuota(ANONYMOUS, test-client, 1%)``)."""
    qm = mk()
    qm.alter_client_quotas([({"user": ANON, "client-id": CLIENT}, {"request_percentage": 1})])
    time = Clock()

    def maybe_record(millis):
        if entry == "record_request_time":
            return qm.record_request_time(ANON, CLIENT, millis * MS, now_ms=time.now)
        # millisToPercent(millis) = millis * 1000 * 1000 * NanosToPercentagePerSecond
        return qm.record_and_get_throttle_time_ms(
            impl.REQUEST, ANON, CLIENT, millis * 1000 * 1000 * NANOS_TO_PERCENT, now_ms=time.now)

    # under the quota: no violation
    for _ in range(10):
        assert maybe_record(4) == 0
        time.sleep(1000)

    # spike: 4 * 10 + 67.1 = 107.1 ms / 10.5 s = 10.2 ms/s; (10.2 - 10) / 10 * 10.5 s = 210 ms
    time.sleep(500)
    throttle = maybe_record(67.1)
    assert throttle == 210
    time.sleep(throttle)

    # could continue to see delays until the bursty sample disappears
    for _ in range(11):
        maybe_record(4)
        time.sleep(1000)
    assert maybe_record(0) == 0, "unthrottled once the bursty sample has rolled over"

    # a very large spike needing more than one quota window: throttle bounded at one window
    assert maybe_record(500) == 1000
    for _ in range(10):
        time.sleep(1000)
        assert maybe_record(0) == 1000
    time.sleep(1000)
    assert maybe_record(0) == 0, "unthrottled once the bursty sample has rolled over"


# ============================================================================ RequestQuotaTest


def _request_quota_test_setup(mk):
    """RequestQuotaTest.setUp: clients/<default> 0.01 % (and 2000 B/s byte quotas), an
    unthrottled client-id with 2000 %, small byte quotas for two more client-ids. Kafka does not
    check request_percentage against the thread capacity; kquota does, so the broker here has
    16 + 8 threads (capacity 2400 %)."""
    qm = mk(num_io_threads=16, num_network_threads=8)
    qm.alter_client_quotas([({"client-id": None}, {"request_percentage": 0.01,
                                                   "producer_byte_rate": 2000,
                                                   "consumer_byte_rate": 2000})])
    qm.alter_client_quotas([({"client-id": "unthrottled-client"}, {
        "request_percentage": 2000, "producer_byte_rate": 2000, "consumer_byte_rate": 2000})])
    qm.alter_client_quotas([({"client-id": "small-quota-producer-client"}, {
        "request_percentage": 0.01, "producer_byte_rate": 1, "consumer_byte_rate": 2000})])
    qm.alter_client_quotas([({"client-id": "small-quota-consumer-client"}, {
        "request_percentage": 0.01, "producer_byte_rate": 1, "consumer_byte_rate": 1})])
    return qm


def test_request_quota_test_setup_quotas(impl, mk):
    """RequestQuotaTest.setUp's checks of ``quota(user, client-id)``."""
    qm = _request_quota_test_setup(mk)
    assert qm.quota_limit(impl.REQUEST, "some-user", "some-client") == 0.01
    assert qm.quota_limit(impl.REQUEST, "some-user", "unthrottled-client") == 2000
    assert qm.quota_limit(impl.PRODUCE, "some-user", "small-quota-producer-client") == 1
    assert qm.quota_limit(impl.FETCH, "some-user", "small-quota-consumer-client") == 1


def test_unthrottled_client(impl, mk):
    """RequestQuotaTest.testUnthrottledClient: the 2000 % client is never throttled, while a
    client under the 0.01 % default is throttled by its first sizeable request."""
    qm = _request_quota_test_setup(mk)
    time = Clock()
    for _ in range(50):
        assert qm.record_request_time(ANON, "unthrottled-client", 50 * MS, now_ms=time.now) == 0
        time.sleep(10)
    assert qm.record_request_time(ANON, "some-client", 50 * MS, now_ms=time.now) > 0


def test_exempt_request_time(impl, mk):
    """RequestQuotaTest.testExemptRequestTime: exempt (cluster action) requests raise the
    ``exempt-request-time`` metric and never throttle the client that sent them."""
    qm = _request_quota_test_setup(mk)
    time = Clock()
    before = qm.exempt_request_rate(now_ms=time.now)
    for _ in range(5):
        qm.record_exempt_request_time(20 * MS, now_ms=time.now)
        time.sleep(10)
    assert qm.exempt_request_rate(now_ms=time.now) > before + 0.02
    assert qm.measured_rate(impl.REQUEST, ANON, "LEADER_AND_ISR", now_ms=time.now) == 0.0
    assert qm.record_request_time(ANON, "LEADER_AND_ISR", 0, now_ms=time.now) == 0


# ============================================================================ TokenBucketTest


def _token_bucket(mk):
    """Rate 5/s, a controller window of 10 samples of 2 s: burst 100. A first zero record creates the sensor (kquota
    reports tokens only for existing sensors)."""
    qm = mk(controller_window_num=10, controller_window_size_seconds=2)
    qm.alter_client_quotas([({"user": ANON}, {"controller_mutation_rate": 5})])
    return qm


def test_token_bucket_record(impl, mk):
    """TokenBucketTest.testRecord."""
    qm = _token_bucket(mk)
    CM = impl.CONTROLLER_MUTATION
    time = Clock()
    qm.record_no_throttle(CM, ANON, CLIENT, 0, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(100, abs=0.1)
    qm.record_no_throttle(CM, ANON, CLIENT, 60, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(40, abs=0.1)
    time.sleep(2000)
    qm.record_no_throttle(CM, ANON, CLIENT, 5, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(45, abs=0.1)
    time.sleep(2000)
    qm.record_no_throttle(CM, ANON, CLIENT, 60, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(-5, abs=0.1)


def test_token_bucket_unrecord(impl, mk):
    """TokenBucketTest.testUnrecord (``record(-60)`` is ``unrecord(60)``)."""
    qm = _token_bucket(mk)
    CM = impl.CONTROLLER_MUTATION
    time = Clock()
    qm.record_no_throttle(CM, ANON, CLIENT, 0, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(100, abs=0.1)
    qm.unrecord(CM, ANON, CLIENT, 60, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(100, abs=0.1)
    time.sleep(2000)
    qm.record_no_throttle(CM, ANON, CLIENT, 60, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(40, abs=0.1)
    time.sleep(2000)
    qm.unrecord(CM, ANON, CLIENT, 60, now_ms=time.now)
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=time.now) == pytest.approx(100, abs=0.1)


# ============================================================================ ControllerMutationQuotaManagerTest


def _mutation_manager(mk, rate=10):
    """``new ClientQuotaManagerConfig(10, 1)``: 10 samples of 1 s (a broker builds this manager's
    config from ``controller.quota.window.*``); quota on (ANONYMOUS, test-client)."""
    qm = mk(controller_window_num=10, controller_window_size_seconds=1)
    qm.alter_client_quotas([({"user": ANON, "client-id": CLIENT},
                             {"controller_mutation_rate": rate})])
    return qm


def test_strict_controller_mutation_quota_violation(impl, mk):
    """StrictControllerMutationQuotaTest.testControllerMutationQuotaViolation: quota 10, 10
    samples of 1 s (burst 100)."""
    qm = _mutation_manager(mk)
    time = Clock()
    # 90 at T: 10 tokens left, accepted
    assert qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now, strict=True) == 0
    # 90 at T: -80, still accepted (the bucket was not in debt)
    assert qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now, strict=True) == 0
    # 90 at T: rejected, throttle 8000
    with pytest.raises(impl.ThrottlingError) as info:
        qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now, strict=True)
    assert info.value.throttle_time_ms == 8000
    # the throttle shrinks with time: 5 s later 3000 ms remain
    time.sleep(5000)
    with pytest.raises(impl.ThrottlingError) as info:
        qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now, strict=True)
    assert info.value.throttle_time_ms == 3000


def test_permissive_controller_mutation_quota_violation(impl, mk):
    """PermissiveControllerMutationQuotaTest.testControllerMutationQuotaViolation."""
    qm = _mutation_manager(mk)
    time = Clock()
    assert qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now) == 0  # 10
    assert qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now) == 8000  # -80
    # accepted even though the quota is exhausted: -170
    assert qm.record_controller_mutations(ANON, CLIENT, 90, now_ms=time.now) == 17000
    time.sleep(5000)
    assert qm.record_controller_mutations(ANON, CLIENT, 0, now_ms=time.now) == 12000


def test_throttle_time(impl, mk):
    """ControllerMutationQuotaManagerTest.testThrottleTime: throttleTimeMs(tokens, bound 10) is
    0 at 0 tokens, 500 at -5, 1000 at -10 (reached here by taking tokens)."""
    qm = _mutation_manager(mk)
    t = T0
    assert qm.record_controller_mutations(ANON, CLIENT, 100, now_ms=t) == 0  # 0 tokens
    assert qm.record_controller_mutations(ANON, CLIENT, 5, now_ms=t) == 500  # -5
    assert qm.record_controller_mutations(ANON, CLIENT, 5, now_ms=t) == 1000  # -10


def test_controller_mutation_quota_violation(impl, mk):
    """ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation, through the
    manager's own ``recordAndGetThrottleTimeMs`` (check first, record only if not in debt)."""
    qm = _mutation_manager(mk)
    CM = impl.CONTROLLER_MUTATION
    time = Clock()

    def maybe_record(value):
        return qm.record_and_get_throttle_time_ms(CM, ANON, CLIENT, value, now_ms=time.now)

    for _ in range(10):
        assert maybe_record(10) == 0
        time.sleep(1000)
    # 100 tokens: the spike of 110 is accepted (checked before recording)
    assert maybe_record(110) == 0, "Should not be throttled"
    # -10 tokens: rejected without recording; 10 / 10 = 1 s
    throttle = maybe_record(110)
    assert throttle == 1000, "Should be throttled"
    time.sleep(throttle)
    # 0 tokens after waiting: accepted
    assert maybe_record(110) == 0


def test_new_strict_quota_for_returns_unbounded_quota_when_quota_is_disabled(impl, mk):
    """ControllerMutationQuotaManagerTest.testNewStrictQuotaForReturnsUnboundedQuotaWhenQuotaIs
    Disabled: without any controller_mutation_rate nothing is enforced or recorded."""
    qm = mk(window_num=10, window_size_seconds=1)
    for _ in range(3):
        assert qm.record_controller_mutations(ANON, CLIENT, 1e6, now_ms=T0, strict=True) == 0
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=T0) is None
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, ANON, CLIENT, now_ms=T0) == 0.0


def test_new_strict_quota_for_returns_strict_quota_when_quota_is_enabled(impl, mk):
    """ControllerMutationQuotaManagerTest.testNewStrictQuotaForReturnsStrictQuotaWhenQuotaIs
    Enabled: once a quota exists, strict mode rejects a bucket in debt."""
    qm = _mutation_manager(mk)
    assert qm.record_controller_mutations(ANON, CLIENT, 101, now_ms=T0, strict=True) == 0
    with pytest.raises(impl.ThrottlingError):
        qm.record_controller_mutations(ANON, CLIENT, 1, now_ms=T0, strict=True)


def test_new_permissive_quota_for_returns_unbounded_quota_when_quota_is_disabled(impl, mk):
    """ControllerMutationQuotaManagerTest.testNewPermissiveQuotaForReturnsUnboundedQuotaWhen
    QuotaIsDisabled."""
    qm = mk(window_num=10, window_size_seconds=1)
    assert qm.record_controller_mutations(ANON, CLIENT, 1e6, now_ms=T0) == 0
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=T0) is None


def test_new_permissive_quota_for_returns_permissive_quota_when_quota_is_enabled(impl, mk):
    """ControllerMutationQuotaManagerTest.testNewPermissiveQuotaForReturnsStrictQuotaWhenQuota
    IsEnabled (the Kafka name says Strict; the test checks for a permissive quota): the value is
    recorded and a throttle reported, never raised."""
    qm = _mutation_manager(mk)
    assert qm.record_controller_mutations(ANON, CLIENT, 110, now_ms=T0) == 1000
    assert qm.record_controller_mutations(ANON, CLIENT, 10, now_ms=T0) == 2000
    assert qm.controller_mutation_tokens(ANON, CLIENT, now_ms=T0) == -20.0
