//! `kquota._kquota.TopicQuotas`: a kernel's topic quotas (KIP-1010 `topic` entities), a view
//! `QuotaKernel._topics` returns. Argument conversion only; the rules live in `quota-core`'s
//! `topic_config` / `topic_quotas`.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::prelude::*;
use quota_core::{ClientQuotaType as CoreType, QuotaError, QuotaKernel as CoreKernel, TopicShareMap};

use crate::errors::PyQuotaResult;
use crate::quota_type::QuotaTypeArg;

/// The topic quotas of one kernel (``producer_byte_rate`` / ``consumer_byte_rate`` of a topic).
#[pyclass(frozen, module = "kquota._kquota", name = "TopicQuotas")]
pub struct PyTopicQuotas {
    pub(crate) kernel: Arc<CoreKernel>,
}

#[pymethods]
impl PyTopicQuotas {
    /// Sets (``value``) or removes (``None``) the topic quota ``key`` (``producer_byte_rate`` or
    /// ``consumer_byte_rate``) of ``topic`` (``None``: ``<default>``). The public entry point is
    /// ``QuotaManager.alter_client_quotas`` with a ``topic`` entity.
    #[pyo3(signature = (topic, key, value))]
    fn set(&self, topic: Option<&str>, key: &str, value: Option<f64>) -> PyQuotaResult<()> {
        let t = match key {
            "producer_byte_rate" => CoreType::Produce,
            "consumer_byte_rate" => CoreType::Fetch,
            other => {
                return Err(QuotaError::InvalidConfig {
                    entity: format!("topic={}", topic.unwrap_or("<default>")),
                    key: other.to_owned(),
                    reason: "a topic quota is producer_byte_rate or consumer_byte_rate".into(),
                }
                .into())
            }
        };
        if self.kernel.is_closed() {
            return Err(QuotaError::Closed.into());
        }
        Ok(self.kernel.topics.set(topic, t, value)?)
    }

    /// Every configured topic quota as ``(topic or None for <default>, key, value)``.
    fn describe(&self) -> Vec<(Option<String>, &'static str, f64)> {
        self.kernel
            .topics
            .describe()
            .into_iter()
            .map(|(topic, t, v)| (topic, t.config_key(), v))
            .collect()
    }

    /// Sets this kernel's fleet share of every topic quota of ``quota_type`` (``PRODUCE`` or
    /// ``FETCH``) in one step: ``shares`` maps a topic to a fraction in [0, 1], ``default`` is the
    /// fraction of topics not named (1.0 and ``{}``: whole quotas, the ``proxy`` scope).
    fn set_shares(
        &self,
        quota_type: QuotaTypeArg,
        default: f64,
        shares: HashMap<String, f64>,
    ) -> PyQuotaResult<()> {
        if self.kernel.is_closed() {
            return Err(QuotaError::Closed.into());
        }
        let map = TopicShareMap {
            default,
            by_topic: shares,
        };
        Ok(self.kernel.topics.set_shares(quota_type.0, map)?)
    }

    /// ``(default, {topic: fraction})``: the fleet shares of ``quota_type``'s topic quotas now.
    fn shares(&self, quota_type: QuotaTypeArg) -> (f64, HashMap<String, f64>) {
        let m = self.kernel.topics.shares(quota_type.0);
        (m.default, m.by_topic)
    }

    /// ``(live sensors, topics sent to the overflow sensor)`` of the topic quotas of a type.
    fn sensor_stats(&self, quota_type: QuotaTypeArg) -> (usize, u64) {
        let t = &self.kernel.topics;
        (t.sensor_count(quota_type.0), t.overflowed(quota_type.0))
    }
}
