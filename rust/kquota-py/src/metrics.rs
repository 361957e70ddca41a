//! Metrics snapshots, sensor expiry and throttle-time recording for the Python layer
//! (`kquota.metrics`, `kquota.aio`). Module-level functions taking the kernel, so this stays
//! apart from the kernel's own method table.
//!
//! A snapshot is built with the GIL released and kept native; Python converts it in batches
//! (`rows(start, stop)`), so threads recording from Python are not held up for a whole scrape.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use quota_core::{ExpiryTask, MetricsSnapshot};

use crate::errors::to_py;
use crate::quota_type::QuotaTypeArg;
use crate::PyQuotaKernel;

/// One flattened value: `(group, name, sensor row or none, value)`.
pub(crate) struct Flat {
    pub(crate) group: &'static str,
    pub(crate) name: &'static str,
    pub(crate) sensor: Option<u32>,
    pub(crate) value: f64,
}

/// A native copy of every quota metric (see ``QuotaManager.metrics``).
///
/// Compact on purpose: all tags live in one string, so freeing a snapshot (which happens with
/// the GIL held) is a few deallocations instead of one per sensor.
#[pyclass(frozen, module = "kquota._kquota", name = "MetricsSnapshot")]
pub struct PyMetricsSnapshot {
    now_ms: i64,
    /// Every sensor's `user` then `client-id`, back to back.
    text: String,
    /// Per sensor: start of its user tag in `text`, user tag length, client-id tag length.
    tags: Vec<(usize, u32, u32)>,
    pub(crate) flat: Vec<Flat>,
}

impl PyMetricsSnapshot {
    /// Built (and the core snapshot freed) while the GIL is released.
    pub(crate) fn compact(snap: MetricsSnapshot) -> Self {
        let mut text = String::with_capacity(
            snap.sensors
                .iter()
                .map(|r| r.user.len() + r.client_id.len())
                .sum(),
        );
        let mut tags = Vec::with_capacity(snap.sensors.len());
        let mut flat = Vec::with_capacity(snap.value_count());
        for (i, row) in snap.sensors.iter().enumerate() {
            tags.push((text.len(), row.user.len() as u32, row.client_id.len() as u32));
            text.push_str(&row.user);
            text.push_str(&row.client_id);
            for &(name, value) in &row.values {
                flat.push(Flat {
                    group: row.quota_type.metric_group(),
                    name,
                    sensor: Some(i as u32),
                    value,
                });
            }
        }
        for row in &snap.types {
            for &(name, value) in &row.values {
                flat.push(Flat {
                    group: row.quota_type.metric_group(),
                    name,
                    sensor: None,
                    value,
                });
            }
        }
        PyMetricsSnapshot {
            now_ms: snap.now_ms,
            text,
            tags,
            flat,
        }
    }

    pub(crate) fn sensor_tags(&self, i: u32) -> (&str, &str) {
        let (start, ul, cl) = self.tags[i as usize];
        let (ul, cl) = (ul as usize, cl as usize);
        (
            &self.text[start..start + ul],
            &self.text[start + ul..start + ul + cl],
        )
    }
}

#[pymethods]
impl PyMetricsSnapshot {
    /// The time (ms on the callers' clock) the snapshot measured at.
    #[getter]
    fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Number of sensors in the snapshot.
    #[getter]
    fn sensor_rows(&self) -> usize {
        self.tags.len()
    }

    fn __len__(&self) -> usize {
        self.flat.len()
    }

    /// Values ``start`` to ``stop`` as ``(group, name, user, client_id, value)`` tuples;
    /// ``user`` and ``client_id`` are ``None`` for per-type values.
    fn rows<'py>(&self, py: Python<'py>, start: usize, stop: usize) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let stop = stop.min(self.flat.len());
        let start = start.min(stop);
        let mut out = Vec::with_capacity(stop - start);
        for f in &self.flat[start..stop] {
            let group = PyString::intern(py, f.group);
            let name = PyString::intern(py, f.name);
            let t = match f.sensor {
                Some(i) => {
                    let (user, client_id) = self.sensor_tags(i);
                    PyTuple::new(
                        py,
                        [
                            group.into_any(),
                            name.into_any(),
                            PyString::new(py, user).into_any(),
                            PyString::new(py, client_id).into_any(),
                            f.value.into_pyobject(py)?.into_any(),
                        ],
                    )?
                }
                None => PyTuple::new(
                    py,
                    [
                        group.into_any(),
                        name.into_any(),
                        py.None().into_bound(py),
                        py.None().into_bound(py),
                        f.value.into_pyobject(py)?.into_any(),
                    ],
                )?,
            };
            out.push(t);
        }
        Ok(out)
    }
}

/// Builds a metrics snapshot with the GIL released.
#[pyfunction]
#[pyo3(signature = (kernel, now_ms=None))]
pub fn _metrics_snapshot(
    py: Python<'_>,
    kernel: PyRef<'_, PyQuotaKernel>,
    now_ms: Option<crate::args::Int>,
) -> PyResult<PyMetricsSnapshot> {
    let k = std::sync::Arc::clone(&kernel.kernel);
    drop(kernel);
    py.detach(move || k.metrics_snapshot(crate::args::ms(now_ms)).map(PyMetricsSnapshot::compact))
        .map_err(to_py)
}

/// Removes idle sensors now; returns ``(removed, now_ms)``.
#[pyfunction]
#[pyo3(signature = (kernel, now_ms=None))]
pub fn _expire_sensors(
    py: Python<'_>,
    kernel: PyRef<'_, PyQuotaKernel>,
    now_ms: Option<crate::args::Int>,
) -> PyResult<(usize, i64)> {
    let k = std::sync::Arc::clone(&kernel.kernel);
    drop(kernel);
    py.detach(move || k.expire_sensors(crate::args::ms(now_ms)))
        .map(|r| (r.removed, r.now_ms))
        .map_err(to_py)
}

/// Records a throttle applied to a response into the type's ``throttle-time`` average.
#[pyfunction]
#[pyo3(signature = (kernel, quota_type, throttle_time_ms, now_ms=None))]
pub fn _record_throttle_time(
    kernel: PyRef<'_, PyQuotaKernel>,
    quota_type: QuotaTypeArg,
    throttle_time_ms: crate::args::Real,
    now_ms: Option<crate::args::Int>,
) -> PyResult<()> {
    kernel
        .kernel
        .record_throttle_time(quota_type.0, throttle_time_ms.0, crate::args::ms(now_ms))
        .map_err(to_py)
}

/// The kernel's estimate of the callers' clock (ms).
#[pyfunction]
pub fn _estimated_now_ms(py: Python<'_>, kernel: PyRef<'_, PyQuotaKernel>) -> i64 {
    let k = std::sync::Arc::clone(&kernel.kernel);
    drop(kernel);
    py.detach(move || k.estimated_now_ms())
}

/// ``(live sensors, overflowed resolutions, expired sensors)`` of a quota type.
#[pyfunction]
pub fn _sensor_stats(kernel: PyRef<'_, PyQuotaKernel>, quota_type: QuotaTypeArg) -> (usize, u64, u64) {
    let k = &kernel.kernel;
    (
        k.sensor_count(quota_type.0),
        k.overflowed_resolutions(quota_type.0),
        k.expired_sensors(quota_type.0),
    )
}

/// Starts the background expiry thread (replacing a running one); `interval_s` seconds apart.
pub(crate) fn start_expiry(kernel: &PyQuotaKernel, interval_s: f64) -> PyResult<()> {
    let task = ExpiryTask::start(&kernel.kernel, Duration::from_secs_f64(interval_s)).map_err(|e| {
        pyo3::exceptions::PyOSError::new_err(format!("cannot start the sensor expiry thread: {e}"))
    })?;
    *kernel.expiry.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    Ok(())
}

/// Stops the background expiry thread (waits for a pass in progress); no-op if none runs.
#[pyfunction]
pub fn _stop_expiry(py: Python<'_>, kernel: PyRef<'_, PyQuotaKernel>) {
    let task = kernel.expiry.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(kernel);
    if let Some(mut t) = task {
        py.detach(move || t.stop());
    }
}

/// Whether the background expiry thread runs.
#[pyfunction]
pub fn _expiry_running(kernel: PyRef<'_, PyQuotaKernel>) -> bool {
    kernel
        .expiry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(ExpiryTask::is_running)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMetricsSnapshot>()?;
    m.add_function(wrap_pyfunction!(_metrics_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(_expire_sensors, m)?)?;
    m.add_function(wrap_pyfunction!(_record_throttle_time, m)?)?;
    m.add_function(wrap_pyfunction!(_estimated_now_ms, m)?)?;
    m.add_function(wrap_pyfunction!(_sensor_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_stop_expiry, m)?)?;
    m.add_function(wrap_pyfunction!(_expiry_running, m)?)?;
    Ok(())
}
