//! A kernel's constructor settings and their defaults (Kafka's broker configs for quotas).

use crate::entity::QuotaEntity;
use crate::error::QuotaError;
use crate::types::{
    ClientQuotaType, WindowSpec, DEFAULT_CONTROLLER_WINDOW_NUM, DEFAULT_CONTROLLER_WINDOW_SIZE_SECONDS,
    DEFAULT_EXPIRY_INTERVAL_SECONDS, DEFAULT_METRICS_NUM_SAMPLES, DEFAULT_METRICS_SAMPLE_WINDOW_MS,
    DEFAULT_NUM_IO_THREADS, DEFAULT_NUM_NETWORK_THREADS, DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_SECONDS,
};
use crate::validate::validate_value;

/// Kafka's `ClientQuotaManager.InactiveSensorExpirationTimeSeconds`.
pub const DEFAULT_SENSOR_EXPIRY_MS: i64 = 3_600_000;

/// `(kernel setting, Kafka broker config, default)` of every setting with a Kafka default.
pub const BROKER_DEFAULTS: [(&str, &str, f64); 10] = [
    ("window_num", "quota.window.num", DEFAULT_WINDOW_NUM as f64),
    (
        "window_size_seconds",
        "quota.window.size.seconds",
        DEFAULT_WINDOW_SIZE_SECONDS as f64,
    ),
    ("num_io_threads", "num.io.threads", DEFAULT_NUM_IO_THREADS as f64),
    (
        "num_network_threads",
        "num.network.threads",
        DEFAULT_NUM_NETWORK_THREADS as f64,
    ),
    (
        "metrics_num_samples",
        "metrics.num.samples",
        DEFAULT_METRICS_NUM_SAMPLES as f64,
    ),
    (
        "metrics_sample_window_ms",
        "metrics.sample.window.ms",
        DEFAULT_METRICS_SAMPLE_WINDOW_MS as f64,
    ),
    (
        "controller_window_num",
        "controller.quota.window.num",
        DEFAULT_CONTROLLER_WINDOW_NUM as f64,
    ),
    (
        "controller_window_size_seconds",
        "controller.quota.window.size.seconds",
        DEFAULT_CONTROLLER_WINDOW_SIZE_SECONDS as f64,
    ),
    (
        "sensor_expiry_seconds",
        "",
        DEFAULT_SENSOR_EXPIRY_MS as f64 / 1000.0,
    ),
    ("expiry_interval_seconds", "", DEFAULT_EXPIRY_INTERVAL_SECONDS),
];
/// Default cap on live sensors per quota type (about 0.5 GB of sensors at 502 B each).
pub const DEFAULT_MAX_SENSORS: usize = 1_000_000;

/// Constructor settings of a [`QuotaKernel`](crate::QuotaKernel).
#[derive(Debug, Clone, Copy)]
pub struct KernelConfig {
    pub window: WindowSpec,
    pub num_io_threads: u32,
    pub num_network_threads: u32,
    pub producer_default: Option<f64>,
    pub consumer_default: Option<f64>,
    /// The broker's `metrics.num.samples` / `metrics.sample.window.ms`: Kafka measures the
    /// quota-less rates `mutation-rate` and `exempt-request-time` over this window, not the quota
    /// window (their sensors are added without a quota `MetricConfig`).
    pub metrics_window: WindowSpec,
    /// `controller.quota.window.num` / `controller.quota.window.size.seconds`: the quota window of
    /// controller mutations (Kafka configures it apart from `quota.window.*`); it sizes the
    /// token bucket's burst.
    pub controller_window: WindowSpec,
    /// Sensors unused for more than this are removed by
    /// [`QuotaKernel::expire_sensors`](crate::QuotaKernel::expire_sensors).
    pub sensor_expiry_ms: i64,
    /// Cap on live sensors per quota type; at the cap new tags share an overflow sensor.
    pub max_sensors: usize,
    /// Budget for the bytes of names held (sensor tags and metric-tag cache keys, all types);
    /// past it new tags share an overflow sensor, as at `max_sensors` (see `name_budget`).
    pub max_name_bytes: usize,
    /// `kquota.max.client.ids.per.principal`: distinct client ids a principal keeps sensors
    /// and names for, per quota type; past it its new client ids share its own overflow sensor
    /// (see `client_ids`).
    pub max_client_ids_per_principal: usize,
    /// `kquota.fetch.answer`: how an over-quota Fetch response is answered (see `fetch_answer`).
    pub fetch_answer: crate::fetch_answer::FetchAnswerRule,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            window: WindowSpec::default(),
            num_io_threads: DEFAULT_NUM_IO_THREADS,
            num_network_threads: DEFAULT_NUM_NETWORK_THREADS,
            producer_default: None,
            consumer_default: None,
            metrics_window: WindowSpec::BROKER_METRICS,
            controller_window: WindowSpec {
                samples: DEFAULT_CONTROLLER_WINDOW_NUM,
                window_ms: DEFAULT_CONTROLLER_WINDOW_SIZE_SECONDS * 1000,
            },
            sensor_expiry_ms: DEFAULT_SENSOR_EXPIRY_MS,
            max_sensors: DEFAULT_MAX_SENSORS,
            max_name_bytes: crate::name_budget::DEFAULT_MAX_NAME_BYTES_HELD,
            max_client_ids_per_principal: crate::client_ids::DEFAULT_MAX_CLIENT_IDS_PER_PRINCIPAL,
            fetch_answer: crate::fetch_answer::FetchAnswerRule::DeliverLarge,
        }
    }
}

impl KernelConfig {
    /// `(num_io_threads + num_network_threads) * 100`: the most `request_percentage` can be.
    pub fn capacity_percent(&self) -> f64 {
        (self.num_io_threads as f64 + self.num_network_threads as f64) * 100.0
    }

    /// `Err(InvalidArgument)` naming the first setting a kernel cannot run with.
    pub fn validate(&self) -> Result<(), QuotaError> {
        let capacity = self.capacity_percent();
        for (t, v, name) in [
            (
                ClientQuotaType::Produce,
                self.producer_default,
                "producer_default",
            ),
            (ClientQuotaType::Fetch, self.consumer_default, "consumer_default"),
        ] {
            if let Some(v) = v {
                let broker = QuotaEntity {
                    user: None,
                    client_id: None,
                };
                validate_value(&broker, t, v, capacity).map_err(|_| {
                    QuotaError::InvalidArgument(format!(
                        "{name} must be a whole number of bytes per second > 0, got {v}"
                    ))
                })?;
            }
        }
        if self.num_io_threads == 0 || self.num_network_threads == 0 {
            return Err(QuotaError::InvalidArgument(
                "num_io_threads and num_network_threads must be >= 1".into(),
            ));
        }
        if self.max_sensors == 0 {
            return Err(QuotaError::InvalidArgument(
                "max_sensors must be >= 1 (None for the default)".into(),
            ));
        }
        if self.max_client_ids_per_principal == 0 {
            return Err(QuotaError::InvalidArgument(
                "max_client_ids_per_principal must be >= 1 (None for the default)".into(),
            ));
        }
        if self.sensor_expiry_ms <= 0 {
            return Err(QuotaError::InvalidArgument(format!(
                "sensor expiry must be > 0 ms, got {}",
                self.sensor_expiry_ms
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        assert!(KernelConfig::default().validate().is_ok());
        let bad = |c: KernelConfig| c.validate().unwrap_err().to_string();
        let d = KernelConfig::default();
        assert!(bad(KernelConfig {
            producer_default: Some(1.5),
            ..d
        })
        .contains("producer_default"));
        assert!(bad(KernelConfig {
            consumer_default: Some(0.0),
            ..d
        })
        .contains("consumer_default"));
        assert!(bad(KernelConfig {
            num_io_threads: 0,
            ..d
        })
        .contains("num_io_threads"));
        assert!(bad(KernelConfig { max_sensors: 0, ..d }).contains("max_sensors"));
        assert!(bad(KernelConfig {
            max_client_ids_per_principal: 0,
            ..d
        })
        .contains("max_client_ids_per_principal"));
        assert!(bad(KernelConfig {
            sensor_expiry_ms: 0,
            ..d
        })
        .contains("expiry"));
        assert_eq!(d.capacity_percent(), 1100.0);
    }
}
