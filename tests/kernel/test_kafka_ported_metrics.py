"""Apache Kafka's metrics-library tests (MetricsTest, RateTest, SampledStatTest, MeterTest,
SensorTest, QuotaUtilsTest) ported to kquota: one kquota sensor stands in for a bare ``Rate``.
Source, method and what is not ported: test_kafka_ported.py."""

import math
import threading

import pytest

from kafka_port import (PRODUCE, T0,
                        UNREACHABLE, rate_sensor, set_quota)


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
