//! Small value types shared by every module of the kernel.

use crate::error::QuotaError;

/// Kafka's `ClientQuotaType`. The discriminant indexes per-type state arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ClientQuotaType {
    Produce = 0,
    Fetch = 1,
    Request = 2,
    ControllerMutation = 3,
}

impl ClientQuotaType {
    pub const ALL: [ClientQuotaType; 4] = [
        ClientQuotaType::Produce,
        ClientQuotaType::Fetch,
        ClientQuotaType::Request,
        ClientQuotaType::ControllerMutation,
    ];

    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_index(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
    }

    /// The dynamic config key that sets this type's quota.
    pub fn config_key(self) -> &'static str {
        match self {
            ClientQuotaType::Produce => "producer_byte_rate",
            ClientQuotaType::Fetch => "consumer_byte_rate",
            ClientQuotaType::Request => "request_percentage",
            ClientQuotaType::ControllerMutation => "controller_mutation_rate",
        }
    }

    pub fn from_config_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.config_key() == key)
    }

    /// Kafka's metric group (`QuotaType.toString`).
    pub fn metric_group(self) -> &'static str {
        match self {
            ClientQuotaType::Produce => "Produce",
            ClientQuotaType::Fetch => "Fetch",
            ClientQuotaType::Request => "Request",
            ClientQuotaType::ControllerMutation => "ControllerMutation",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClientQuotaType::Produce => "PRODUCE",
            ClientQuotaType::Fetch => "FETCH",
            ClientQuotaType::Request => "REQUEST",
            ClientQuotaType::ControllerMutation => "CONTROLLER_MUTATION",
        }
    }
}

// Kafka's broker defaults of the settings a kernel takes (`KafkaConfig` / `QuotaConfig`): the one
// definition; `settings::BROKER_DEFAULTS` lists them for the binding and the Python layer.
/// `quota.window.num`.
pub const DEFAULT_WINDOW_NUM: u32 = 11;
/// `quota.window.size.seconds`.
pub const DEFAULT_WINDOW_SIZE_SECONDS: i64 = 1;
/// `num.io.threads`.
pub const DEFAULT_NUM_IO_THREADS: u32 = 8;
/// `num.network.threads`.
pub const DEFAULT_NUM_NETWORK_THREADS: u32 = 3;
/// `metrics.num.samples`.
pub const DEFAULT_METRICS_NUM_SAMPLES: u32 = 2;
/// `metrics.sample.window.ms`.
pub const DEFAULT_METRICS_SAMPLE_WINDOW_MS: i64 = 30_000;
/// `controller.quota.window.num`.
pub const DEFAULT_CONTROLLER_WINDOW_NUM: u32 = 11;
/// `controller.quota.window.size.seconds`.
pub const DEFAULT_CONTROLLER_WINDOW_SIZE_SECONDS: i64 = 1;
/// How often Kafka's `ClientQuotaManager` expires idle sensors (`Metrics`' 30 s sensor purge).
pub const DEFAULT_EXPIRY_INTERVAL_SECONDS: f64 = 30.0;

/// `quota.window.num` and `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    /// Number of samples in the quota window (Kafka's `samples()`); the ring has one more slot.
    pub samples: u32,
    /// Length of one sample in milliseconds.
    pub window_ms: i64,
}

/// The largest `window_num` accepted; keeps a sensor's ring (and the 16-bit sample sequence
/// numbers used by the lock-free advance) far from wrapping within one ring turn.
pub const MAX_WINDOW_NUM: u32 = 1000;

impl WindowSpec {
    pub fn new(window_num: i64, window_size_seconds: i64) -> Result<Self, QuotaError> {
        if !(1..=MAX_WINDOW_NUM as i64).contains(&window_num) {
            return Err(QuotaError::InvalidArgument(format!(
                "window_num must be an integer from 1 to {MAX_WINDOW_NUM}, got {window_num}"
            )));
        }
        if !(1..=86_400).contains(&window_size_seconds) {
            return Err(QuotaError::InvalidArgument(format!(
                "window_size_seconds must be an integer from 1 to 86400, got {window_size_seconds}"
            )));
        }
        Ok(WindowSpec {
            samples: window_num as u32,
            window_ms: window_size_seconds * 1000,
        })
    }

    /// A window given in milliseconds (the broker's `metrics.num.samples` and
    /// `metrics.sample.window.ms`, which Kafka's quota-less rates use).
    pub fn from_millis(samples: i64, window_ms: i64) -> Result<Self, QuotaError> {
        if !(1..=MAX_WINDOW_NUM as i64).contains(&samples) {
            return Err(QuotaError::InvalidArgument(format!(
                "metrics_num_samples must be an integer from 1 to {MAX_WINDOW_NUM}, got {samples}"
            )));
        }
        if !(1..=86_400_000).contains(&window_ms) {
            return Err(QuotaError::InvalidArgument(format!(
                "metrics_sample_window_ms must be an integer from 1 to 86400000, got {window_ms}"
            )));
        }
        Ok(WindowSpec {
            samples: samples as u32,
            window_ms,
        })
    }

    /// Kafka's broker `Metrics` default (`metrics.num.samples`, `metrics.sample.window.ms`).
    pub const BROKER_METRICS: WindowSpec = WindowSpec {
        samples: DEFAULT_METRICS_NUM_SAMPLES,
        window_ms: DEFAULT_METRICS_SAMPLE_WINDOW_MS,
    };

    /// Samples whose last event is this old or older are reset before measuring.
    #[inline]
    pub fn expire_age_ms(&self) -> i64 {
        self.samples as i64 * self.window_ms
    }

    /// Slots in the ring: the window's samples plus the one overlapping its start.
    #[inline]
    pub fn ring_len(&self) -> usize {
        self.samples as usize + 1
    }

    /// Kafka's `getMaxValueInQuotaWindow` factor: `(samples - 1) * window seconds`.
    #[inline]
    pub fn max_value_factor(&self) -> f64 {
        (self.samples as f64 - 1.0) * (self.window_ms / 1000) as f64
    }
}

impl Default for WindowSpec {
    fn default() -> Self {
        // Kafka's `quota.window.num` and `quota.window.size.seconds`.
        WindowSpec {
            samples: DEFAULT_WINDOW_NUM,
            window_ms: DEFAULT_WINDOW_SIZE_SECONDS * 1000,
        }
    }
}
