"""Pure-Python reference model ("oracle") of kquota's client quotas (PRODUCE, FETCH, REQUEST,
CONTROLLER_MUTATION).

Test-only; never shipped. It models the behaviour of Apache Kafka's broker as described in
docs/semantics.md and docs/semantics-notes.md:

* ``SampledStat`` / ``WindowedSum`` / ``Rate`` (clients/.../common/metrics/stats): a ring of
  ``window_num + 1`` samples grown lazily, non-aligned sample starts, purge of samples whose last
  event is ``window_num * window`` or more in the past, the elapsed-window ``W`` rule.
* ``Sensor.record`` + ``checkQuotas``: value recorded first, then measured and compared with
  ``rate > bound``.
* ``QuotaUtils.throttleTime``: ``Math.round((rate - bound) / bound * W)`` (Java half-up), and
  kquota's deliberate difference: saturate at ``2**31 - 1`` instead of wrapping.
* ``ClientQuotaManager`` + its ``DefaultQuotaCallback``: sticky per-type "quota types enabled"
  bits, the tag modes and the 8-level walk, limit lookup from the tags, user sanitization.
* kquota's deliberate per-sensor monotonic clock clamp.
* ``ClientRequestQuotaManager`` (KIP-124): thread time recorded as percent of one thread
  (``nanos * (100.0 / 1e9)``), throttle bounded by one window (``QuotaUtils.boundedThrottleTime``),
  network-thread time recorded unchecked, one shared ``exempt-request-time`` sensor recorded only
  while request quotas are enabled.
* ``ControllerMutationQuotaManager`` + ``TokenBucket`` (KIP-599): a mutation sensor holds a
  ``Rate`` (``mutation-rate``) and a token bucket (``tokens``); permissive, strict and the
  manager's own check-first ``recordAndGetThrottleTimeMs``. As kquota decided: the bucket is full
  at its first use whatever the clock, and untouched while the limit is unlimited.

Only valid input is expected: the oracle does no validation.
"""

import math

from oracle_rate import INT32_MAX, _MutationSensor, _mutation_throttle, _RateSensor, java_round

__all__ = ["OracleQuotaManager", "ThrottlingQuotaExceeded", "sanitize_user", "java_round",
           "INT32_MAX", "NANOS_TO_PERCENT"]

# Per-type "quota types enabled" bits (ClientQuotaManager.QuotaTypes).
CLIENT_ID_BIT = 1
USER_BIT = 2
USER_CLIENT_ID_BIT = 4

KEY_TO_TYPE = {
    "producer_byte_rate": "PRODUCE",
    "consumer_byte_rate": "FETCH",
    "request_percentage": "REQUEST",
    "controller_mutation_rate": "CONTROLLER_MUTATION",
}
QUOTA_TYPES = ("PRODUCE", "FETCH", "REQUEST", "CONTROLLER_MUTATION")

# ClientRequestQuotaManager.NanosToPercentagePerSecond
NANOS_TO_PERCENT = 100.0 / 1e9


class ThrottlingQuotaExceeded(Exception):
    """Strict controller-mutation rejection (kquota raises ThrottlingQuotaExceededError)."""

    def __init__(self, throttle_time_ms):
        super().__init__(throttle_time_ms)
        self.throttle_time_ms = throttle_time_ms


class _Marker:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name


DEFAULT = _Marker("<default>")  # the <default> entity (None in the public API)
ABSENT = _Marker("<absent>")  # entity type not part of the entity


# --------------------------------------------------------------------------------------------
# helpers


def sanitize_user(name):
    """Kafka's ``Sanitizer.sanitize``: ``URLEncoder.encode(name, UTF-8)`` then ``*`` -> ``%2A``
    and ``+`` -> ``%20``.

    URLEncoder keeps ASCII letters, digits and ``. - * _``, turns a space into ``+`` and
    percent-encodes (upper-case hex) every UTF-8 byte of anything else. Java's encoder replaces
    an unpaired surrogate by ``?``; ``errors="replace"`` does the same here.
    """
    out = []
    for ch in name:
        if ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ("0" <= ch <= "9") or ch in ".-_":
            out.append(ch)
        elif ch == "*":
            out.append("%2A")  # kept by URLEncoder, then replaced by Sanitizer
        elif ch == " ":
            out.append("%20")  # '+' from URLEncoder, then replaced by Sanitizer
        else:
            out.extend("%%%02X" % b for b in ch.encode("utf-8", errors="replace"))
    return "".join(out)

def _type_name(quota_type):
    return quota_type if isinstance(quota_type, str) else quota_type.name


def _entity_mapping(entity):
    return dict(entity.entries) if hasattr(entity, "entries") else dict(entity)


# --------------------------------------------------------------------------------------------
# quota manager


class OracleQuotaManager:
    def __init__(
        self,
        window_num=11,
        window_size_seconds=1,
        num_io_threads=8,
        num_network_threads=3,
        producer_default=None,
        consumer_default=None,
        metrics_num_samples=2,
        metrics_sample_window_ms=30_000,
        controller_window_num=11,
        controller_window_size_seconds=1,
    ):
        # Kafka's quota-less Rates (mutation-rate, exempt-request-time) use the broker's Metrics
        # config (metrics.num.samples x metrics.sample.window.ms); controller mutations have
        # their own quota window (controller.quota.window.*), which sizes the bucket's burst.
        self.metrics_num_samples = metrics_num_samples
        self.metrics_window_ms = metrics_sample_window_ms
        self.controller_window_num = controller_window_num
        self.controller_window_size_seconds = controller_window_size_seconds
        self.window_num = window_num
        self.window_size_seconds = window_size_seconds
        self.window_ms = window_size_seconds * 1000
        self.num_io_threads = num_io_threads
        self.num_network_threads = num_network_threads
        # raw entity key (user, client) -> {config key: float}; for describe
        self._configs = {}
        # quota type -> {(sanitized user | DEFAULT | ABSENT, client | DEFAULT | ABSENT): limit}
        self._limits = {t: {} for t in QUOTA_TYPES}
        self._bits = {t: 0 for t in QUOTA_TYPES}
        self._static = {t: None for t in QUOTA_TYPES}
        if producer_default is not None:
            self._static["PRODUCE"] = float(producer_default)
            self._bits["PRODUCE"] |= CLIENT_ID_BIT
        if consumer_default is not None:
            self._static["FETCH"] = float(consumer_default)
            self._bits["FETCH"] |= CLIENT_ID_BIT
        self._sensors = {}  # (quota type, user tag, client-id tag) -> _RateSensor
        self._exempt = None  # the shared exempt-request-time sensor, created by its first record

    sanitize_user = staticmethod(sanitize_user)

    # ---------------------------------------------------------------- configuration

    def alter_client_quotas(self, entries, validate_only=False):
        entries = [(_entity_mapping(entity), dict(ops)) for entity, ops in entries]
        if validate_only:
            return
        for mapping, ops in entries:
            user = mapping.get("user", ABSENT)
            client = mapping.get("client-id", ABSENT)
            user = DEFAULT if user is None else user
            client = DEFAULT if client is None else client
            raw_key = (user, client)
            lookup_key = (sanitize_user(user) if isinstance(user, str) else user, client)
            if user is not ABSENT:
                bit = USER_CLIENT_ID_BIT if client is not ABSENT else USER_BIT
            else:
                bit = CLIENT_ID_BIT
            current = self._configs.setdefault(raw_key, {})
            for key, value in ops.items():
                qtype = KEY_TO_TYPE[key]
                if value is None:
                    # Kafka's controller emits no record for removing an absent key: no-op.
                    if key in current:
                        del current[key]
                        del self._limits[qtype][lookup_key]
                        self._bits[qtype] |= bit
                else:
                    current[key] = float(value)
                    self._limits[qtype][lookup_key] = float(value)
                    self._bits[qtype] |= bit
            if not current:
                del self._configs[raw_key]

    def describe_client_quotas(self):
        """{tuple(sorted(entity mapping items)): {key: value}} (public None = <default>)."""
        out = {}
        for (user, client), ops in self._configs.items():
            mapping = {}
            if user is not ABSENT:
                mapping["user"] = None if user is DEFAULT else user
            if client is not ABSENT:
                mapping["client-id"] = None if client is DEFAULT else client
            out[tuple(sorted(mapping.items()))] = dict(ops)
        return out

    # ---------------------------------------------------------------- tags and limits

    def _tags(self, qtype, user, client_id):
        bits = self._bits[qtype]
        su = sanitize_user(user)
        if bits in (0, CLIENT_ID_BIT):
            return ("", client_id)
        if bits == USER_BIT:
            return (su, "")
        if bits == USER_CLIENT_ID_BIT:
            return (su, client_id)
        limits = self._limits[qtype]
        if (su, client_id) in limits:  # 1 users/<u>/clients/<c>
            return (su, client_id)
        if (su, DEFAULT) in limits:  # 2 users/<u>/clients/<default>
            return (su, client_id)
        if (su, ABSENT) in limits:  # 3 users/<u>
            return (su, "")
        if (DEFAULT, client_id) in limits:  # 4 users/<default>/clients/<c>
            return (su, client_id)
        if (DEFAULT, DEFAULT) in limits:  # 5 users/<default>/clients/<default>
            return (su, client_id)
        if (DEFAULT, ABSENT) in limits:  # 6 users/<default>
            return (su, "")
        return ("", client_id)  # 7, 8, static default, unlimited

    def _limit_for_tags(self, qtype, tags):
        user_tag, client_tag = tags
        limits = self._limits[qtype]
        if user_tag and client_tag:
            candidates = [(user_tag, client_tag), (user_tag, DEFAULT),
                          (DEFAULT, client_tag), (DEFAULT, DEFAULT)]
        elif user_tag:
            candidates = [(user_tag, ABSENT), (DEFAULT, ABSENT)]
        elif client_tag:
            candidates = [(ABSENT, client_tag), (ABSENT, DEFAULT)]
        else:
            return None
        for key in candidates:
            if key in limits:
                return limits[key]
        if not user_tag:
            return self._static[qtype]
        return None

    def quota_metric_tags(self, quota_type, user, client_id):
        user_tag, client_tag = self._tags(_type_name(quota_type), user, client_id)
        return {"user": user_tag, "client-id": client_tag}

    def quota_limit(self, quota_type, user, client_id):
        qtype = _type_name(quota_type)
        return self._limit_for_tags(qtype, self._tags(qtype, user, client_id))

    def max_value_in_quota_window(self, quota_type, user, client_id):
        limit = self.quota_limit(quota_type, user, client_id)
        if limit is None:
            return math.inf
        if _type_name(quota_type) == "CONTROLLER_MUTATION":
            return limit * (self.controller_window_num - 1) * self.controller_window_size_seconds
        return limit * (self.window_num - 1) * self.window_size_seconds

    # ---------------------------------------------------------------- per request

    def _sensor(self, qtype, tags, create):
        key = (qtype,) + tags
        sensor = self._sensors.get(key)
        if sensor is None and create:
            if qtype == "CONTROLLER_MUTATION":
                sensor = _MutationSensor(self.metrics_num_samples, self.metrics_window_ms)
            else:
                sensor = _RateSensor(self.window_num, self.window_ms)
            self._sensors[key] = sensor
        return sensor

    def _burst(self, quota):
        """``TokenBucket.burst``: samples * window seconds * quota (controller window)."""
        return self.controller_window_num * (self.controller_window_size_seconds * 1000 / 1000.0) * quota

    def _record(self, quota_type, user, client_id, value, now_ms, check):
        """``check``: None (record only), "throttle" (the type's recordAndGetThrottleTimeMs),
        "permissive" / "strict" (controller mutations)."""
        qtype = _type_name(quota_type)
        if self._bits[qtype] == 0:  # maybeRecordAndGetThrottleTimeMs: quotas not enabled
            return 0
        tags = self._tags(qtype, user, client_id)
        sensor = self._sensor(qtype, tags, create=True)
        t = sensor.clamp(now_ms)
        limit = self._limit_for_tags(qtype, tags)
        if qtype == "CONTROLLER_MUTATION":
            return self._record_mutation(sensor, limit, float(value), t, check)
        sensor.record(float(value), t)
        if check is None:
            return 0
        rate = sensor.measure(t)  # Kafka measures even when unlimited (bound Long.MAX_VALUE)
        if limit is None or not rate > limit:
            return 0
        throttle = java_round((rate - limit) / limit * sensor.window_size(t))
        throttle = max(0, min(INT32_MAX, throttle))
        if qtype == "REQUEST":  # ClientRequestQuotaManager.maxThrottleTimeMs: one window
            throttle = min(throttle, self.window_ms)
        return throttle

    def _record_mutation(self, sensor, limit, value, t, check):
        if limit is None:
            # Kafka runs the bucket with bound Long.MAX_VALUE: any use fills it (practically)
            # without end, so a limit set later finds it full.
            sensor.bucket.fill(t)
            sensor.record(value, t)
            return 0
        bucket, burst = sensor.bucket, self._burst(limit)
        if check in ("throttle", "strict"):
            # quotaSensor synchronized { checkQuotas; record(value, t, false) }
            tokens = bucket.refill(limit, burst, t)
            if tokens < 0:
                throttle = _mutation_throttle(tokens, limit)
                if check == "strict":
                    raise ThrottlingQuotaExceeded(throttle)
                return throttle
            bucket.record(limit, burst, value, t)
            sensor.record(value, t)
            return 0
        tokens = bucket.record(limit, burst, value, t)
        sensor.record(value, t)
        return _mutation_throttle(tokens, limit) if check == "permissive" else 0

    def record_and_get_throttle_time_ms(self, quota_type, user, client_id, value, now_ms):
        return self._record(quota_type, user, client_id, value, now_ms, check="throttle")

    def record_no_throttle(self, quota_type, user, client_id, value, now_ms):
        self._record(quota_type, user, client_id, value, now_ms, check=None)

    def unrecord(self, quota_type, user, client_id, value, now_ms):
        self._record(quota_type, user, client_id, -float(value), now_ms, check=None)

    def measured_rate(self, quota_type, user, client_id, now_ms):
        qtype = _type_name(quota_type)
        if self._bits[qtype] == 0:
            return 0.0
        sensor = self._sensor(qtype, self._tags(qtype, user, client_id), create=False)
        if sensor is None:
            return 0.0
        return sensor.measure(sensor.clamp(now_ms))

    # ---------------------------------------------------------------- request time (KIP-124)

    def record_request_time(self, user, client_id, thread_time_nanos, now_ms):
        return self._record("REQUEST", user, client_id, thread_time_nanos * NANOS_TO_PERCENT,
                            now_ms, check="throttle")

    def record_network_thread_time(self, user, client_id, nanos, now_ms):
        self._record("REQUEST", user, client_id, nanos * NANOS_TO_PERCENT, now_ms, check=None)

    def record_exempt_request_time(self, nanos, now_ms):
        if self._bits["REQUEST"] == 0:  # maybeRecordExempt: only while quotas are enabled
            return
        if self._exempt is None:
            self._exempt = _RateSensor(self.metrics_num_samples, self.metrics_window_ms)
        self._exempt.record(nanos * NANOS_TO_PERCENT, self._exempt.clamp(now_ms))

    def exempt_request_rate(self, now_ms):
        if self._exempt is None:
            return 0.0
        return self._exempt.measure(self._exempt.clamp(now_ms))

    # ---------------------------------------------------------------- controller mutations (KIP-599)

    def record_controller_mutations(self, user, client_id, mutations, now_ms, strict=False):
        return self._record("CONTROLLER_MUTATION", user, client_id, mutations, now_ms,
                            check="strict" if strict else "permissive")

    def controller_mutation_tokens(self, user, client_id, now_ms):
        qtype = "CONTROLLER_MUTATION"
        if self._bits[qtype] == 0:
            return None
        tags = self._tags(qtype, user, client_id)
        sensor = self._sensor(qtype, tags, create=False)
        limit = self._limit_for_tags(qtype, tags)
        if sensor is None:
            return None
        if limit is None:  # reading the metric is a use of Kafka's unbounded bucket
            sensor.bucket.fill(sensor.clamp(now_ms))
            return None
        return sensor.bucket.refill(limit, self._burst(limit), sensor.clamp(now_ms))

    def client(self, user, client_id):
        return _OracleHandle(self, user, client_id)


class _OracleHandle:
    """Same shape as kquota's per-connection handle (``qm.client(user, client_id)``)."""

    def __init__(self, qm, user, client_id):
        self._qm, self._user, self._client_id = qm, user, client_id

    def record_and_get_throttle_time_ms(self, quota_type, value, now_ms):
        return self._qm.record_and_get_throttle_time_ms(
            quota_type, self._user, self._client_id, value, now_ms)

    def record_no_throttle(self, quota_type, value, now_ms):
        self._qm.record_no_throttle(quota_type, self._user, self._client_id, value, now_ms)

    def unrecord(self, quota_type, value, now_ms):
        self._qm.unrecord(quota_type, self._user, self._client_id, value, now_ms)

    def quota_metric_tags(self, quota_type):
        return self._qm.quota_metric_tags(quota_type, self._user, self._client_id)

    def quota_limit(self, quota_type):
        return self._qm.quota_limit(quota_type, self._user, self._client_id)

    def max_value_in_quota_window(self, quota_type):
        return self._qm.max_value_in_quota_window(quota_type, self._user, self._client_id)

    def measured_rate(self, quota_type, now_ms):
        return self._qm.measured_rate(quota_type, self._user, self._client_id, now_ms)

    def record_request_time(self, thread_time_nanos, now_ms):
        return self._qm.record_request_time(self._user, self._client_id, thread_time_nanos, now_ms)

    def record_network_thread_time(self, nanos, now_ms):
        self._qm.record_network_thread_time(self._user, self._client_id, nanos, now_ms)

    def record_controller_mutations(self, mutations, now_ms, strict=False):
        return self._qm.record_controller_mutations(self._user, self._client_id, mutations,
                                                    now_ms, strict=strict)

    def controller_mutation_tokens(self, now_ms):
        return self._qm.controller_mutation_tokens(self._user, self._client_id, now_ms)
