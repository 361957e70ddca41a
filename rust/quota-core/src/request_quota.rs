//! Request quotas (KIP-124, Kafka's `ClientRequestQuotaManager`): thread time as percent of one
//! thread, the throttle bounded by one window, and the shared `exempt-request-time` sensor.

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::rate::RateSensor;
use crate::record_mode::RecordMode;
use crate::types::ClientQuotaType;
use crate::validate::thread_time_percent;

impl QuotaKernel {
    /// `ClientRequestQuotaManager.throttleTime`: bounded by one window.
    #[inline]
    pub(crate) fn request_throttle(&self, throttle_ms: i32) -> i32 {
        throttle_ms.min(self.max_request_throttle_ms)
    }

    /// I/O-thread time of a request (`ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs`):
    /// records `nanos` as percent of a thread and returns the throttle, at most one window.
    pub fn record_request_time(
        &self,
        user: &str,
        client_id: &str,
        nanos: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        let percent = thread_time_percent(nanos)?;
        self.record_named(
            ClientQuotaType::Request,
            user,
            client_id,
            percent,
            now,
            RecordMode::Throttle,
        )
    }

    /// Network-thread time of a request: recorded without a check, it weighs on later requests.
    pub fn record_network_thread_time(
        &self,
        user: &str,
        client_id: &str,
        nanos: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        let percent = thread_time_percent(nanos)?;
        self.record_named(
            ClientQuotaType::Request,
            user,
            client_id,
            percent,
            now,
            RecordMode::Unchecked,
        )
        .map(|_| ())
    }

    /// Thread time of a request exempt from quotas, recorded into the one shared
    /// `exempt-request-time` sensor (only while request quotas are enabled, as in Kafka).
    pub fn record_exempt_request_time(&self, nanos: f64, now: Option<i64>) -> Result<(), QuotaError> {
        let percent = thread_time_percent(nanos)?;
        let now = resolve_now(now)?;
        self.check_open()?;
        if !self.enabled(ClientQuotaType::Request) {
            return Ok(());
        }
        let spec = &self.settings.metrics_window;
        // Kafka's Rate starts its first sample at the first record.
        self.exempt
            .get_or_init(|| RateSensor::new(spec, now))
            .record(spec, percent, now);
        Ok(())
    }

    /// The `exempt-request-time` rate (percent); 0.0 before any exempt time was recorded.
    pub fn exempt_request_rate(&self, now: Option<i64>) -> Result<f64, QuotaError> {
        let now = resolve_now(now)?;
        Ok(match self.exempt.get() {
            Some(s) => s.measure(&self.settings.metrics_window, now).rate(),
            None => 0.0,
        })
    }

    /// The `exempt-request-time` rate at `now` without touching the sensor (metrics).
    pub(crate) fn peek_exempt_rate(&self, now: i64) -> f64 {
        self.exempt
            .get()
            .map_or(0.0, |s| s.peek(&self.settings.metrics_window, now).rate())
    }
}
