//! Controller mutation quotas (KIP-599, Kafka's `ControllerMutationQuotaManager`): the sensor's
//! `Rate` (`mutation-rate`) records what was recorded, its token bucket (`tokens`) enforces the
//! quota, strictly or permissively.

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::record_mode::RecordMode;
use crate::sensor::QuotaSensor;
use crate::throttle::mutation_throttle_time_ms;
use crate::token_bucket::StrictTake;
use crate::types::ClientQuotaType;
use crate::validate::check_mutations;

impl QuotaKernel {
    /// `TokenBucket.burst`: `samples * window seconds * quota`.
    fn burst(&self, quota: f64) -> f64 {
        let spec = &self.settings.controller_window;
        spec.samples as f64 * (spec.window_ms as f64 / 1000.0) * quota
    }

    /// The controller-mutation record path.
    pub(crate) fn record_mutation(
        &self,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        mode: RecordMode,
    ) -> Result<i32, QuotaError> {
        let spec = &self.settings.metrics_window;
        let now = sensor.rate.clamp_time(now);
        let quota = self.limit_of(ClientQuotaType::ControllerMutation, sensor);
        let Some(bucket) = sensor.rate.token_bucket() else {
            sensor.rate.record(spec, value, now);
            return Ok(0);
        };
        if quota == f64::INFINITY {
            bucket.fill(now);
            sensor.rate.record(spec, value, now);
            return Ok(0);
        }
        if quota <= 0.0 {
            // A callback's limit of 0 blocks: no tokens ever.
            return match mode {
                RecordMode::Unchecked => {
                    sensor.rate.record(spec, value, now);
                    Ok(0)
                }
                RecordMode::Permissive => {
                    sensor.rate.record(spec, value, now);
                    Ok(i32::MAX)
                }
                RecordMode::Throttle => Ok(i32::MAX),
                RecordMode::Strict => Err(QuotaError::ThrottlingQuotaExceeded {
                    throttle_time_ms: i32::MAX,
                }),
            };
        }
        let burst = self.burst(quota);
        let throttle = match mode {
            RecordMode::Unchecked => {
                bucket.record(quota, burst, value, now);
                0
            }
            RecordMode::Permissive => {
                mutation_throttle_time_ms(bucket.record(quota, burst, value, now), quota)
            }
            RecordMode::Throttle | RecordMode::Strict => match bucket.take_strict(quota, burst, value, now) {
                StrictTake::Taken => 0,
                StrictTake::Rejected { tokens } => {
                    let throttle_time_ms = mutation_throttle_time_ms(tokens, quota);
                    if mode == RecordMode::Strict {
                        return Err(QuotaError::ThrottlingQuotaExceeded { throttle_time_ms });
                    }
                    return Ok(throttle_time_ms);
                }
            },
        };
        sensor.rate.record(spec, value, now);
        Ok(throttle)
    }

    /// Records `mutations` against the (principal, client-id)'s token bucket. Permissive: record,
    /// then return the throttle if the bucket is in debt. Strict: if the bucket is already in
    /// debt, record nothing and fail with [`QuotaError::ThrottlingQuotaExceeded`]; else record
    /// (tokens may go negative) and return 0.
    pub fn record_controller_mutations(
        &self,
        user: &str,
        client_id: &str,
        mutations: f64,
        now: Option<i64>,
        strict: bool,
    ) -> Result<i32, QuotaError> {
        check_mutations(mutations)?;
        self.record_named(
            ClientQuotaType::ControllerMutation,
            user,
            client_id,
            mutations,
            now,
            RecordMode::for_mutations(strict),
        )
    }

    /// [`record_controller_mutations`](Self::record_controller_mutations) into an already
    /// resolved, current sensor.
    #[inline]
    pub fn record_resolved_mutations(
        &self,
        sensor: &QuotaSensor,
        mutations: f64,
        now: Option<i64>,
        strict: bool,
    ) -> Result<i32, QuotaError> {
        check_mutations(mutations)?;
        let now = resolve_now(now)?;
        self.record_into(
            ClientQuotaType::ControllerMutation,
            sensor,
            mutations,
            now,
            RecordMode::for_mutations(strict),
        )
    }

    /// The tokens left in the (principal, client-id)'s bucket at `now` (Kafka's `tokens` metric),
    /// `None` while there is no sensor or no quota.
    pub fn controller_mutation_tokens(
        &self,
        user: &str,
        client_id: &str,
        now: Option<i64>,
    ) -> Result<Option<f64>, QuotaError> {
        let now = resolve_now(now)?;
        let t = ClientQuotaType::ControllerMutation;
        if !self.enabled(t) {
            return Ok(None);
        }
        let (u, c) = self.tags_of(t, user, client_id);
        let tokens = self.types[t.index()].sensors.with(&u, &c, |s| {
            let quota = self.limit_of(t, s);
            let now = s.rate.clamp_time(now);
            match s.rate.token_bucket() {
                Some(b) if quota == f64::INFINITY => {
                    // Reading Kafka's `tokens` metric refills it like any use (see `fill`).
                    b.fill(now);
                    None
                }
                Some(b) => Some(b.measure(quota, self.burst(quota), now)),
                None => None,
            }
        });
        Ok(tokens.flatten())
    }

    /// A mutation sensor's tokens at `now` without touching the bucket (metrics); `None` for
    /// other sensors and without a finite quota.
    pub(crate) fn peek_tokens(&self, sensor: &QuotaSensor, limit: Option<f64>, now: i64) -> Option<f64> {
        let quota = limit.filter(|l| l.is_finite() && *l > 0.0)?;
        let bucket = sensor.rate.token_bucket()?;
        Some(bucket.peek(quota, self.burst(quota), now.max(sensor.rate.last_seen_ms())))
    }
}
