//! The kernel's constructor arguments (Kafka's broker config names) as a `KernelConfig`.

use quota_core::{FetchAnswerRule, KernelConfig, QuotaError, WindowSpec};

use crate::errors::{invalid_argument, PyQuotaResult};

/// The constructor's arguments, converted (see `PyQuotaKernel::new` for names and defaults).
pub struct KernelArgs {
    pub window_num: i64,
    pub window_size_seconds: i64,
    pub num_io_threads: i64,
    pub num_network_threads: i64,
    pub producer_default: Option<f64>,
    pub consumer_default: Option<f64>,
    pub metrics_num_samples: i64,
    pub metrics_sample_window_ms: i64,
    pub controller_window_num: i64,
    pub controller_window_size_seconds: i64,
    pub sensor_expiry_seconds: f64,
    pub max_sensors: Option<i64>,
    pub expiry_interval_seconds: Option<f64>,
    pub max_name_bytes: Option<i64>,
    pub max_client_ids_per_principal: Option<i64>,
    /// `kquota.fetch.answer`: `"deliver-large"` (`None`: the default) or `"kafka"`.
    pub fetch_answer: Option<String>,
}

/// A lifecycle duration in seconds as whole ms: finite, at least 1 ms, at most about 100 years.
fn lifecycle_ms(name: &str, seconds: f64) -> PyQuotaResult<i64> {
    if seconds.is_finite() && (0.001..=3.2e9).contains(&seconds) {
        Ok((seconds * 1000.0).round() as i64)
    } else {
        Err(invalid_argument(format!(
            "{name} must be a number of seconds from 0.001 to 3.2e9, got {seconds}"
        )))
    }
}

fn thread_count(name: &str, v: i64) -> PyQuotaResult<u32> {
    if (1..=100_000).contains(&v) {
        Ok(v as u32)
    } else {
        Err(invalid_argument(format!(
            "{name} must be an integer from 1 to 100000, got {v}"
        )))
    }
}

/// `None` for the default, else at least 1.
fn at_least_one(name: &str, v: Option<i64>, default: usize) -> PyQuotaResult<usize> {
    match v {
        None => Ok(default),
        Some(n) if n >= 1 => Ok(n as usize),
        Some(n) => Err(invalid_argument(format!("{name} must be >= 1 or None, got {n}"))),
    }
}

impl KernelArgs {
    /// The kernel's settings and the expiry thread's interval in ms (`None`: no thread).
    pub fn into_config(self) -> PyQuotaResult<(KernelConfig, Option<i64>)> {
        let settings = KernelConfig {
            window: WindowSpec::new(self.window_num, self.window_size_seconds)?,
            num_io_threads: thread_count("num_io_threads", self.num_io_threads)?,
            num_network_threads: thread_count("num_network_threads", self.num_network_threads)?,
            producer_default: self.producer_default,
            consumer_default: self.consumer_default,
            metrics_window: WindowSpec::from_millis(self.metrics_num_samples, self.metrics_sample_window_ms)?,
            // The same rule as the quota window's, reported under the controller's names.
            controller_window: WindowSpec::new(
                self.controller_window_num,
                self.controller_window_size_seconds,
            )
            .map_err(|e| match e {
                QuotaError::InvalidArgument(m) => QuotaError::InvalidArgument(
                    m.replace("window_num", "controller_window_num")
                        .replace("window_size_seconds", "controller_window_size_seconds"),
                ),
                other => other,
            })?,
            sensor_expiry_ms: lifecycle_ms("sensor_expiry_seconds", self.sensor_expiry_seconds)?,
            max_sensors: at_least_one(
                "max_sensors",
                self.max_sensors,
                quota_core::expiry::DEFAULT_MAX_SENSORS,
            )?,
            max_name_bytes: at_least_one(
                "max_name_bytes",
                self.max_name_bytes,
                quota_core::name_budget::DEFAULT_MAX_NAME_BYTES_HELD,
            )?,
            max_client_ids_per_principal: at_least_one(
                "max_client_ids_per_principal",
                self.max_client_ids_per_principal,
                quota_core::client_ids::DEFAULT_MAX_CLIENT_IDS_PER_PRINCIPAL,
            )?,
            fetch_answer: match self.fetch_answer.as_deref() {
                None => FetchAnswerRule::default(),
                Some(name) => FetchAnswerRule::from_name(name).ok_or_else(|| {
                    invalid_argument(format!(
                        "fetch_answer must be \"deliver-large\" or \"kafka\", got {name:?}"
                    ))
                })?,
            },
        };
        let interval = self
            .expiry_interval_seconds
            .map(|s| lifecycle_ms("expiry_interval_seconds", s))
            .transpose()?;
        Ok((settings, interval))
    }
}
