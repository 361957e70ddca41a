"""The oracle's sampled rate and token bucket (tests/support/oracle.py): Kafka's ``SampledStat`` /
``WindowedSum`` / ``Rate``, the mutation sensor's ``TokenBucket``, and Java's ``Math.round`` and
``long`` division that their throttles use. Test-only; never shipped."""

import math

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


def java_round(x):
    """Java's ``Math.round(double)``: nearest long, ties towards positive infinity, NaN -> 0,
    saturating at Long.MIN_VALUE / Long.MAX_VALUE."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return LONG_MAX if x > 0 else LONG_MIN
    f = math.floor(x)
    r = f + 1 if (x - f) >= 0.5 else f  # x - floor(x) is exact for doubles
    return max(LONG_MIN, min(LONG_MAX, int(r)))


def _java_long_div(a, b):
    """Java ``long / long`` (truncates towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


# --------------------------------------------------------------------------------------------
# sampled rate


class _Sample:
    __slots__ = ("start", "last", "value")

    def __init__(self, now):
        self.reset(now)

    def reset(self, now):
        self.start = now
        self.last = now
        self.value = 0.0


class _RateSensor:
    """A sensor holding one ``Rate`` over a ``WindowedSum`` (Kafka's byte-rate sensor)."""

    def __init__(self, window_num, window_ms):
        self.window_num = window_num
        self.window_ms = window_ms
        self.samples = []  # grown lazily, at most window_num + 1
        self.current = 0
        self.latest = None  # latest time seen via record or measure (kquota clamp)

    # kquota's deliberate difference: time never goes backwards for one sensor
    def clamp(self, t):
        if self.latest is not None and t < self.latest:
            t = self.latest
        self.latest = t
        return t

    def record(self, value, t):
        if not self.samples:
            self.samples.append(_Sample(t))
            self.current = 0
        sample = self.samples[self.current]
        if t - sample.start >= self.window_ms:
            self.current = (self.current + 1) % (self.window_num + 1)
            if self.current >= len(self.samples):
                sample = _Sample(t)
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample.reset(t)
        sample.value += value
        sample.last = t

    def purge(self, now):
        expire_age = self.window_num * self.window_ms
        for sample in self.samples:
            if now - sample.last >= expire_age:
                sample.reset(now)

    def window_size(self, now):
        """``Rate.windowSize``: W in ms."""
        self.purge(now)
        if not self.samples:  # SampledStat.oldest() creates a sample when there is none
            self.samples.append(_Sample(now))
        elapsed = now - min(s.start for s in self.samples)
        full_windows = _java_long_div(elapsed, self.window_ms)
        min_full_windows = self.window_num - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now):
        """``Rate.measure``: purge, sum in slot order, divide by W seconds."""
        self.purge(now)
        total = 0.0
        for sample in self.samples:
            total += sample.value
        return total / (self.window_size(now) / 1000.0)


class _TokenBucket:
    """Kafka's ``TokenBucket`` stat: ``tokens`` refill at the quota per second up to the burst;
    a record takes its value (possibly below zero). Every measure and record refills first, and
    refilling is stateful (float rounding depends on when it happens), so callers refill exactly
    when kquota does."""

    def __init__(self):
        self.tokens = None  # full at first use (kquota: whatever the clock)
        self.last = None

    def refill(self, quota, burst, t):
        if self.tokens is None:
            self.tokens = burst
        else:
            # MetricsUtils.convert(ms, SECONDS) is ms / 1000.0
            self.tokens = min(burst, self.tokens + quota * ((t - self.last) / 1000.0))
        self.last = t
        return self.tokens

    def fill(self, t):
        self.tokens = math.inf
        self.last = t

    def record(self, quota, burst, value, t):
        self.refill(quota, burst, t)
        self.tokens = min(burst, self.tokens - value)
        return self.tokens


class _MutationSensor(_RateSensor):
    """A controller-mutation sensor: the ``Rate`` is ``mutation-rate``, the bucket ``tokens``."""

    def __init__(self, window_num, window_ms):
        super().__init__(window_num, window_ms)
        self.bucket = _TokenBucket()


def _mutation_throttle(tokens, quota):
    """``ControllerMutationQuotaManager.throttleTimeMs`` for a bucket in debt, saturated."""
    if not tokens < 0:
        return 0
    return max(0, min(INT32_MAX, java_round(-tokens / quota * 1000)))
