//! Kafka's rules exposed to Python once, so the Python layer keeps no copy of them: the
//! Sanitizer, the dynamic config keys, the entity-side codes, alter validation without a kernel,
//! the 8-level precedence walk (Kafka's `DefaultQuotaCallback`) over a plain quota table for
//! plugins, the proxy's answer to a recorded Fetch response and Kafka's throttle combination. Every rule itself lives in
//! `quota-core`; this file converts arguments only.

use std::sync::RwLock;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use quota_core::entity::{CLIENT_ID_QUOTAS, USER_CLIENT_ID_QUOTAS, USER_QUOTAS};
use quota_core::precedence::TypeConfig;
use quota_core::{ClientQuotaType as CoreType, KernelConfig, QuotaEntity};

use crate::entity::{
    config_keys, entity_name, quota_changes, ChangeTuple, ENTITY_ABSENT, ENTITY_DEFAULT, ENTITY_NAMED,
};
use crate::errors::PyQuotaResult;
use crate::handle::{byte_type_arg, fetch_answer_name, throttle_ms_arg};
use crate::names::{replace_surrogates, Name};
use crate::numeric_args::Int;
use crate::quota_type::{member, QuotaTypeArg};

/// Kafka's ``Sanitizer.sanitize``: a principal's user tag and ZooKeeper node name. A lone
/// surrogate (no UTF-8 form) becomes ``?`` first, as Java's encoder writes it.
#[pyfunction]
fn sanitize(name: &Bound<'_, PyString>) -> PyResult<String> {
    Ok(match name.to_cow() {
        Ok(text) => quota_core::sanitize::sanitize(&text),
        Err(_) => quota_core::sanitize::sanitize(&replace_surrogates(name.as_borrowed())?),
    })
}

/// Kafka's ``Sanitizer.desanitize`` (Java's ``URLDecoder.decode(name, "UTF-8")``): the name
/// back from a sanitized node name; ``QuotaValueError`` (a ``ValueError``) on a broken ``%``
/// escape. A lone surrogate reads as ``?``, as in ``sanitize``.
#[pyfunction]
fn desanitize(node_name: &Bound<'_, PyString>) -> PyQuotaResult<String> {
    Ok(match node_name.to_cow() {
        Ok(text) => quota_core::sanitize::desanitize(&text)?,
        Err(_) => quota_core::sanitize::desanitize(&replace_surrogates(node_name.as_borrowed())?)?,
    })
}

/// Validates change tuples ``(user_kind, user, client_kind, client, config_key, value)`` as an
/// alter does, without a kernel (no thread, nothing kept). ``capacity_percent`` bounds
/// ``request_percentage`` (``None``: the default kernel's ``(8 + 3) * 100``).
#[pyfunction]
#[pyo3(signature = (changes, capacity_percent=None))]
fn validate_quota_changes(changes: Vec<ChangeTuple>, capacity_percent: Option<f64>) -> PyQuotaResult<()> {
    let changes = quota_changes(changes)?;
    let capacity = capacity_percent.unwrap_or_else(|| KernelConfig::default().capacity_percent());
    Ok(quota_core::validate_changes(&changes, capacity)?)
}

/// How the proxy answers a recorded Fetch response of ``size`` bytes, given the quota window's
/// bytes (``math.inf`` without a quota) and the throttle recording it gave: ``"deliver"``,
/// ``"empty"`` (Kafka's throttled answer, its size taken back) or ``"deliver_muted"``
/// (delivered, kept recorded, muted for at least ``size / quota``): `quota_core::FetchAnswer`'s
/// variants in snake case. ``rule`` is ``kquota.fetch.answer``: ``"deliver-large"`` (the
/// default) or ``"kafka"`` (every throttled response answered empty, as Kafka's broker does).
#[pyfunction]
#[pyo3(signature = (size, window_bytes, throttle_ms, rule="deliver-large"))]
fn fetch_answer(size: f64, window_bytes: f64, throttle_ms: i32, rule: &str) -> PyQuotaResult<&'static str> {
    let rule = quota_core::FetchAnswerRule::from_name(rule).ok_or_else(|| {
        crate::errors::invalid_argument(format!("rule must be \"deliver-large\" or \"kafka\", got {rule:?}"))
    })?;
    Ok(fetch_answer_name(quota_core::fetch_answer(size, window_bytes, throttle_ms, rule)))
}

/// Whether Kafka accepts ``name`` as a topic name (``Topic.validate``: 1 to 249 of
/// ``[a-zA-Z0-9._-]``, not ``.`` or ``..``): the kernel's one rule, which every Python check uses.
#[pyfunction]
fn is_legal_topic_name(name: &str) -> bool {
    quota_core::is_legal_topic_name(name)
}

/// ``KafkaApis``' combination of a response's byte-rate throttle (``byte_quota_type``: PRODUCE
/// or FETCH) and request-time throttle: ``(throttle_time_ms, enforced type or None)``, the
/// byte-rate quota enforced only when its throttle is strictly larger. Records nothing.
#[pyfunction]
fn combine_throttles<'py>(
    py: Python<'py>,
    byte_quota_type: QuotaTypeArg,
    byte_throttle_ms: Int,
    request_throttle_ms: Int,
) -> PyQuotaResult<(i32, Option<Bound<'py, PyAny>>)> {
    let r = quota_core::combine_throttles(
        byte_type_arg(byte_quota_type)?,
        throttle_ms_arg("byte_throttle_ms", byte_throttle_ms.0)?,
        throttle_ms_arg("request_throttle_ms", request_throttle_ms.0)?,
    );
    Ok((r.throttle_time_ms, r.enforce.map(|t| member(py, t)).transpose()?))
}

/// Quotas per (type, entity) with Kafka's precedence, for plugins that honour the quotas the
/// manager forwards to them (``update_quota`` / ``remove_quota``). The tags always come from
/// the 8-level walk: the kernel's "kinds ever configured" shortcut does not apply, and there is
/// no static broker default. Thread-safe.
#[pyclass(frozen, module = "kquota._kquota", name = "QuotaConfig")]
pub struct PyQuotaConfig {
    types: RwLock<Vec<TypeConfig>>,
}

#[pymethods]
impl PyQuotaConfig {
    #[new]
    fn new() -> Self {
        let walk = || {
            let mut cfg = TypeConfig::with_static_default(None);
            // Every kind set: `metric_tags` always walks the levels that exist now.
            cfg.kinds = CLIENT_ID_QUOTAS | USER_QUOTAS | USER_CLIENT_ID_QUOTAS;
            cfg
        };
        PyQuotaConfig {
            types: RwLock::new(CoreType::ALL.iter().map(|_| walk()).collect()),
        }
    }

    /// Sets (a number) or removes (``None``) the quota of one entity, given by side codes.
    #[pyo3(signature = (quota_type, user_kind, user, client_kind, client, value))]
    fn set(
        &self,
        quota_type: QuotaTypeArg,
        user_kind: u8,
        user: String,
        client_kind: u8,
        client: String,
        value: Option<f64>,
    ) -> PyQuotaResult<()> {
        let entity = QuotaEntity {
            user: entity_name(user_kind, user)?,
            client_id: entity_name(client_kind, client)?,
        };
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        types[quota_type.0.index()].set(&entity, value);
        Ok(())
    }

    /// ``(user tag, client-id tag)`` of the most specific configured level for a request of
    /// ``user`` (raw principal name) with ``client_id``.
    fn metric_tags(&self, quota_type: QuotaTypeArg, user: Name<'_>, client_id: Name<'_>) -> (String, String) {
        let types = self.types.read().unwrap_or_else(|e| e.into_inner());
        let tags = types[quota_type.0.index()].metric_tags(&user, &client_id);
        (tags.user.into_owned(), tags.client_id.into_owned())
    }

    /// Kafka's ``quotaLimit`` for the tags; ``None`` when unlimited.
    fn limit(&self, quota_type: QuotaTypeArg, user_tag: &str, client_tag: &str) -> Option<f64> {
        let types = self.types.read().unwrap_or_else(|e| e.into_inner());
        types[quota_type.0.index()].limit(user_tag, client_tag)
    }
}

/// Adds this file's functions, class and constants to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sanitize, m)?)?;
    m.add_function(wrap_pyfunction!(validate_quota_changes, m)?)?;
    m.add_function(wrap_pyfunction!(fetch_answer, m)?)?;
    m.add_function(wrap_pyfunction!(is_legal_topic_name, m)?)?;
    m.add("MAX_TOPIC_NAME_LENGTH", quota_core::MAX_TOPIC_NAME_LENGTH)?;
    m.add_function(wrap_pyfunction!(combine_throttles, m)?)?;
    m.add_class::<PyQuotaConfig>()?;
    m.add_function(wrap_pyfunction!(desanitize, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exposition::family_name, m)?)?;
    m.add("CONFIG_KEYS", PyTuple::new(m.py(), config_keys())?)?;
    m.add("MAX_NAME_BYTES", quota_core::MAX_NAME_BYTES)?;
    m.add("INTERNAL_TAG_PREFIX", quota_core::INTERNAL_TAG_PREFIX)?;
    m.add("ENCODED_TAGS_PREFIX", quota_core::ENCODED_TAGS_PREFIX)?;
    let defaults = PyDict::new(m.py());
    for (setting, kafka_config, value) in quota_core::BROKER_DEFAULTS {
        // Kafka's broker configs are integers; the two timing constants are seconds as floats.
        if kafka_config.is_empty() {
            defaults.set_item(setting, value)?;
        } else {
            defaults.set_item(setting, value as i64)?;
        }
    }
    m.add("BROKER_DEFAULTS", defaults)?;
    m.add("ENTITY_ABSENT", ENTITY_ABSENT)?;
    m.add("ENTITY_DEFAULT", ENTITY_DEFAULT)?;
    m.add("ENTITY_NAMED", ENTITY_NAMED)?;
    Ok(())
}
