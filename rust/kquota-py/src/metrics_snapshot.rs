//! The native metrics snapshot (`QuotaKernel._metrics_snapshot`, read by `kquota.metrics`).
//!
//! A snapshot is built with the GIL released and kept native; Python converts it in batches
//! (`rows(start, stop)`), so threads recording from Python are not held up for a whole scrape.

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use quota_core::MetricsSnapshot;

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
    /// Topic sensors' values: `(group, name, topic, value)`.
    pub(crate) topics: Vec<(&'static str, &'static str, Box<str>, f64)>,
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
        let mut topics = Vec::with_capacity(snap.topics.len() * 2);
        for row in snap.topics {
            let group = row.quota_type.metric_group();
            topics.push((group, "byte-rate", row.topic.clone(), row.byte_rate));
            if row.limit != f64::INFINITY {
                topics.push((
                    group,
                    quota_core::metrics::LIMIT_METRIC,
                    row.topic.clone(),
                    row.limit,
                ));
            }
            // As for client sensors: only once a throttle was enforced for the topic.
            if !row.throttle_time.is_nan() {
                topics.push((group, "throttle-time", row.topic, row.throttle_time));
            }
        }
        PyMetricsSnapshot {
            now_ms: snap.now_ms,
            text,
            tags,
            flat,
            topics,
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

    /// Topic sensors' values (topic quotas) as ``(group, name, topic, value)`` tuples.
    fn topic_rows(&self) -> Vec<(&'static str, &'static str, &str, f64)> {
        self.topics
            .iter()
            .map(|(g, n, t, v)| (*g, *n, &**t, *v))
            .collect()
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
