//! `kquota._kquota`: the PyO3 face of `quota-core`. Argument conversion and error mapping only;
//! every rule lives in the core crate.
//!
//! Classes: `kernel` (QuotaKernel), `handle` (ClientHandle), `metrics_snapshot` (MetricsSnapshot),
//! `exposition` (PrometheusStream); the per-request entry points of the first two are
//! installed by `fast`. `ClientQuotaType` is a Python enum (`kquota/quota_type.py`) that
//! `quota_type` reads.

mod batch;
mod callback;
mod connections;
mod deferred_exception;
mod entity;
mod errors;
mod expiry;
mod exposition;
mod fast;
mod handle;
mod kernel;
mod metrics_snapshot;
mod name_cache;
mod name_table;
mod names;
mod numeric_args;
mod proxy;
mod proxy_bridge;
mod proxy_rows;
mod proxy_tables;
mod quota_type;
mod rules;
mod settings;
mod tls;
mod topic_quotas;
mod utilization;
mod zeroed_array;

use pyo3::prelude::*;

#[pymodule]
fn _kquota(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<kernel::PyQuotaKernel>()?;
    m.add_class::<handle::PyClientHandle>()?;
    m.add_class::<metrics_snapshot::PyMetricsSnapshot>()?;
    m.add_class::<exposition::PyPrometheusStream>()?;
    m.add_class::<proxy::PyProxyDataPlane>()?;
    m.add_class::<topic_quotas::PyTopicQuotas>()?;
    m.add_function(wrap_pyfunction!(quota_type::_quota_types, m)?)?;
    m.add_function(wrap_pyfunction!(quota_type::_quota_type_value, m)?)?;
    m.add_function(wrap_pyfunction!(quota_type::_register_quota_type, m)?)?;
    m.add_function(wrap_pyfunction!(callback::_register_tag_decoder, m)?)?;
    m.add("_noop", fast::noop_function(m)?)?;
    errors::register(m)?;
    rules::register(m)?;
    connections::register(m)?;
    tls::register(m)?;
    proxy_tables::register(m)?;
    fast::install(m.py())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "__build_profile__",
        if cfg!(debug_assertions) { "dev" } else { "release" },
    )?;
    Ok(())
}
