//! The per-request record path: find the sensor of (principal, client-id), record, check
//! (Kafka's `recordAndGetThrottleTimeMs`). No allocation and no lock once the sensor exists.

use std::sync::atomic::Ordering;

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::measurement::Measurement;
use crate::precedence::direct_tags;
use crate::record_mode::RecordMode;
use crate::sensor::QuotaSensor;
use crate::throttle::throttle_time_ms;
use crate::throttle_time_avg::ThrottleAvg;
use crate::types::ClientQuotaType;
use crate::validate::{check_record_value, check_unrecord_value};

impl QuotaKernel {
    /// Records into a resolved sensor and applies the check.
    // Kept small so it inlines into every per-request entry point: the byte-rate path stays
    // straight-line code, the other types branch out to `record_other`.
    #[inline(always)]
    pub(crate) fn record_into(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        mode: RecordMode,
    ) -> Result<i32, QuotaError> {
        if self.types[t.index()].poll_reset.load(Ordering::Relaxed) {
            self.poll_reset_required(t);
        }
        if matches!(t, ClientQuotaType::Produce | ClientQuotaType::Fetch) {
            return Ok(self.record_rate(t, sensor, value, now, mode));
        }
        self.record_other(t, sensor, value, now, mode)
    }

    /// REQUEST and CONTROLLER_MUTATION records.
    #[inline(never)]
    fn record_other(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        mode: RecordMode,
    ) -> Result<i32, QuotaError> {
        match t {
            ClientQuotaType::ControllerMutation => self.record_mutation(sensor, value, now, mode),
            _ => Ok(self.request_throttle(self.record_rate(t, sensor, value, now, mode))),
        }
    }

    /// The sampled-rate path (PRODUCE, FETCH, REQUEST): record, then check.
    #[inline(always)]
    fn record_rate(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        mode: RecordMode,
    ) -> i32 {
        let spec = &self.settings.window;
        if mode == RecordMode::Unchecked {
            sensor.rate.record(spec, value, now);
            return 0;
        }
        let m = sensor.rate.record_and_measure(spec, value, now);
        self.throttle_at_limit(t, sensor, &m)
    }

    /// The throttle of a measurement against the sensor's bound.
    #[inline(always)]
    fn throttle_at_limit(&self, t: ClientQuotaType, sensor: &QuotaSensor, m: &Measurement) -> i32 {
        let bound = self.limit_of(t, sensor);
        if bound == f64::INFINITY {
            return 0;
        }
        if bound <= 0.0 {
            // A callback's limit of 0 blocks (Kafka would divide by zero and not throttle).
            return i32::MAX;
        }
        throttle_time_ms(m, bound)
    }

    /// The throttle that recording `value` into a sampled-rate sensor (PRODUCE, FETCH, REQUEST)
    /// at `now` would give, recording nothing and moving no clock. An upper bound: a record
    /// could also retire the oldest sample. A proxy asks it before reading a connection's next
    /// request while earlier ones are unanswered (Kafka reads a connection one request at a time,
    /// so no request may overtake the throttle an unanswered one will bring).
    pub(crate) fn peek_rate_throttle(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
    ) -> i32 {
        let mut m = sensor.rate.peek(&self.settings.window, now);
        m.sum += value;
        let throttle = self.throttle_at_limit(t, sensor, &m);
        if t == ClientQuotaType::Request {
            self.request_throttle(throttle)
        } else {
            throttle
        }
    }

    /// Records by name: `value` has been checked by the caller (and is negative for `unrecord`).
    pub(crate) fn record_named(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
        mode: RecordMode,
    ) -> Result<i32, QuotaError> {
        let now = resolve_now(now)?;
        let rt = &self.types[t.index()];
        let kinds = rt.kinds.load(Ordering::Acquire);
        if kinds == 0 {
            return Ok(0);
        }
        // While tags are fixed by the kind bits and the user name needs no escaping, the tags
        // are the names themselves: search the registry directly, recording while its guard is
        // held (no reference-count traffic). Otherwise the metric-tag cache answers.
        crate::name_budget::check_names(user, client_id)?;
        let sensor = match direct_tags(kinds, user, client_id) {
            Some((tu, tc)) => {
                if let Some(r) = rt
                    .sensors
                    .with(tu, tc, |s| self.record_into(t, s, value, now, mode))
                {
                    return r;
                }
                self.resolve(t, user, client_id, now)?.sensor
            }
            None => self.resolve_current(t, user, client_id, now)?.sensor,
        };
        self.record_into(t, &sensor, value, now, mode)
    }

    /// Records `value` and returns the throttle in ms (0 = none).
    pub fn record_and_get_throttle_time_ms(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        check_record_value(value)?;
        self.record_named(t, user, client_id, value, now, RecordMode::Throttle)
    }

    pub fn record_no_throttle(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        check_record_value(value)?;
        self.record_named(t, user, client_id, value, now, RecordMode::Unchecked)
            .map(|_| ())
    }

    pub fn unrecord(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        check_unrecord_value(value)?;
        self.record_named(t, user, client_id, -value, now, RecordMode::Unchecked)
            .map(|_| ())
    }

    /// `record_and_get_throttle_time_ms` into an already resolved, current sensor.
    #[inline]
    pub fn record_resolved(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        check_record_value(value)?;
        let now = resolve_now(now)?;
        self.record_into(t, sensor, value, now, RecordMode::Throttle)
    }

    /// Records a throttle applied to a response of type `t` into the type's `throttle-time`
    /// average (Kafka records it in `ClientQuotaManager.throttle`, only when > 0).
    pub fn record_throttle_time(
        &self,
        t: ClientQuotaType,
        throttle_ms: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        check_record_value(throttle_ms)?;
        let now = resolve_now(now)?;
        if throttle_ms <= 0.0 {
            return Ok(());
        }
        // Kafka's throttle-time sensor (an `Avg`) has no quota config: the broker's metrics window.
        let spec = &self.settings.metrics_window;
        self.throttle_time[t.index()]
            .get_or_init(|| ThrottleAvg::new(spec, now))
            .record(spec, throttle_ms, now);
        Ok(())
    }

    /// Records a throttle into the `throttle-time` of the entity tagged `(user, client_id)`
    /// (`ClientQuotaManager.throttle`'s `throttleTimeSensor`); `now` resolved by the caller.
    pub(crate) fn record_entity_throttle_time(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        throttle_ms: f64,
        now: i64,
    ) {
        if throttle_ms <= 0.0 {
            return;
        }
        let spec = &self.settings.metrics_window;
        self.entity_throttle_time[t.index()].record(
            spec,
            user,
            client_id,
            throttle_ms,
            now,
            self.settings.max_sensors,
        );
    }
}
