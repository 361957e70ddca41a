//! The Prometheus text exposition (format 0.0.4), streamed: a scrape renders chunks of at most
//! about [`CHUNK_BYTES`] from one compact snapshot instead of building the whole text (157 MB
//! at 1M sensors) and a copy of it. The snapshot is built and each chunk rendered with the GIL
//! released, so threads recording from Python are not held up.
//!
//! Samples of one family must be contiguous, so the stream keeps an order of the snapshot's
//! values grouped by family (families in order of first appearance, samples in snapshot order).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use quota_core::{QuotaKernel, ENCODED_TAGS_PREFIX};

use crate::errors::PyQuotaResult;
use crate::metrics_snapshot::PyMetricsSnapshot;

/// Target size of one chunk.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// ``kafka_server_<group>_<name>``: the Prometheus family of a metric (``group`` in snake case,
/// ``-`` as ``_``), without the ``_total`` a counter's sample adds. The one naming rule:
/// ``kquota.prometheus.prometheus_name`` is this function.
#[pyfunction]
#[pyo3(name = "prometheus_name")]
pub fn family_name(group: &str, name: &str) -> String {
    let mut out = String::from("kafka_server_");
    for (i, c) in group.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '-' {
            // Kafka's `socket-server-metrics`: a Prometheus name has no '-'.
            out.push('_');
        } else {
            out.push(c);
        }
    }
    out.push('_');
    out.extend(name.chars().map(|c| if c == '-' { '_' } else { c }));
    if let Some(base) = out.strip_suffix("_total") {
        out.truncate(base.len());
    }
    out
}

/// A Prometheus text-format label value.
fn push_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample value as prometheus_client writes it.
fn push_value(out: &mut String, v: f64) {
    use std::fmt::Write;
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v:?}");
    }
}

/// `{name="value",...}`, nothing for no labels.
fn push_labels(out: &mut String, labels: &[(String, String)]) {
    for (i, (name, value)) in labels.iter().enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        out.push_str(name);
        out.push_str("=\"");
        push_label_value(out, value);
        out.push('"');
    }
    if !labels.is_empty() {
        out.push('}');
    }
}

struct Family {
    /// Prometheus family name (without `_total`), HELP text, counter or gauge.
    name: String,
    help: String,
    counter: bool,
    /// Range of this family's entries in `Stream::order`.
    start: usize,
    end: usize,
}

/// A row beside the snapshot: `(group, name, labels, value)`; the labels are Prometheus label
/// names and values (`ip`, `listener`, ...), none for a per-type value.
pub type ExtraRow = (String, String, Vec<(String, String)>, f64);

struct Stream {
    snap: PyMetricsSnapshot,
    /// Rows after the snapshot's (delay queues, watcher, budget, connection quotas).
    extra: Vec<ExtraRow>,
    families: Vec<Family>,
    /// Entry indices grouped by family: `< snap.flat.len()` a snapshot value, else an extra row.
    order: Vec<u32>,
    family: usize,
    pos: usize,
}

impl Stream {
    fn new(snap: PyMetricsSnapshot, extra: Vec<ExtraRow>, help: &HashMap<String, String>) -> Self {
        let n = snap.flat.len();
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        let mut keys: Vec<(String, String)> = Vec::new();
        let mut of_entry: Vec<u32> = Vec::with_capacity(n + extra.len());
        let entries = snap
            .flat
            .iter()
            .map(|f| (f.group, f.name))
            .chain(extra.iter().map(|(g, m, _, _)| (g.as_str(), m.as_str())));
        for (g, m) in entries {
            let next = keys.len();
            let fam = *index.entry((g, m)).or_insert(next);
            if fam == next {
                keys.push((g.to_owned(), m.to_owned()));
            }
            of_entry.push(fam as u32);
        }
        // A counting sort by family keeps each family's samples in snapshot order.
        let mut counts = vec![0usize; keys.len() + 1];
        for &f in &of_entry {
            counts[f as usize + 1] += 1;
        }
        for i in 1..counts.len() {
            counts[i] += counts[i - 1];
        }
        let mut families: Vec<Family> = keys
            .iter()
            .enumerate()
            .map(|(i, (g, m))| Family {
                name: family_name(g, m),
                help: help.get(m).cloned().unwrap_or_else(|| m.clone()),
                counter: m.ends_with("-total"),
                start: counts[i],
                end: counts[i + 1],
            })
            .collect();
        let mut fill = counts;
        let mut order = vec![0u32; of_entry.len()];
        for (e, &f) in of_entry.iter().enumerate() {
            order[fill[f as usize]] = e as u32;
            fill[f as usize] += 1;
        }
        families.retain(|f| f.end > f.start);
        Stream {
            snap,
            extra,
            families,
            order,
            family: 0,
            pos: usize::MAX,
        }
    }

    /// The next chunk, `None` at the end.
    fn next_chunk(&mut self) -> Option<String> {
        if self.family >= self.families.len() {
            return None;
        }
        let mut out = String::with_capacity(CHUNK_BYTES + 4096);
        while out.len() < CHUNK_BYTES && self.family < self.families.len() {
            let fam = &self.families[self.family];
            let total = if fam.counter { "_total" } else { "" };
            if self.pos == usize::MAX {
                // Text format 0.0.4 names a counter's family by its `_total` sample, as
                // prometheus_client writes it.
                out.push_str("# HELP ");
                out.push_str(&fam.name);
                out.push_str(total);
                out.push(' ');
                out.push_str(&fam.help);
                out.push_str("\n# TYPE ");
                out.push_str(&fam.name);
                out.push_str(total);
                out.push_str(if fam.counter { " counter\n" } else { " gauge\n" });
                self.pos = fam.start;
            }
            while self.pos < fam.end && out.len() < CHUNK_BYTES {
                let e = self.order[self.pos] as usize;
                self.pos += 1;
                out.push_str(&fam.name);
                out.push_str(total);
                let value = match self.snap.flat.get(e) {
                    Some(f) => {
                        if let Some(i) = f.sensor {
                            let (user, client_id) = self.snap.sensor_tags(i);
                            out.push_str("{user=\"");
                            // A callback's tag map other than {user, client-id} is kept as its
                            // JSON (see kquota.callback.encode_tags), without the prefix.
                            push_label_value(
                                &mut out,
                                user.strip_prefix(ENCODED_TAGS_PREFIX).unwrap_or(user),
                            );
                            out.push_str("\",client_id=\"");
                            push_label_value(&mut out, client_id);
                            out.push_str("\"}");
                        }
                        f.value
                    }
                    None => {
                        let (_, _, labels, value) = &self.extra[e - self.snap.flat.len()];
                        push_labels(&mut out, labels);
                        *value
                    }
                };
                out.push(' ');
                push_value(&mut out, value);
                out.push('\n');
            }
            if self.pos >= fam.end {
                self.family += 1;
                self.pos = usize::MAX;
            }
        }
        Some(out)
    }
}

/// An iterator of ``bytes`` chunks of one scrape's exposition (see the module docs).
#[pyclass(frozen, module = "kquota._kquota", name = "PrometheusStream")]
pub struct PyPrometheusStream {
    inner: Mutex<Stream>,
}

#[pymethods]
impl PyPrometheusStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let chunk = py.detach(|| self.inner.lock().unwrap_or_else(|e| e.into_inner()).next_chunk())?;
        Some(PyBytes::new(py, chunk.as_bytes()))
    }
}

/// The exposition of every metric plus `extra` rows (``(group, name, labels, value)``) as a
/// stream of chunks; ``help`` maps Kafka metric names to HELP texts. The snapshot is taken and
/// indexed with the GIL released.
pub fn stream(
    py: Python<'_>,
    kernel: Arc<QuotaKernel>,
    now_ms: Option<i64>,
    extra: Vec<ExtraRow>,
    help: HashMap<String, String>,
) -> PyQuotaResult<PyPrometheusStream> {
    let stream = py.detach(move || {
        kernel.metrics_snapshot(now_ms).map(|s| {
            let snap = PyMetricsSnapshot::compact(s);
            // Topic sensors carry a `topic` label in their groups' families.
            let mut extra = extra;
            extra.extend(snap.topics.iter().map(|(g, n, t, v)| {
                (
                    (*g).to_owned(),
                    (*n).to_owned(),
                    vec![("topic".to_owned(), t.to_string())],
                    *v,
                )
            }));
            Stream::new(snap, extra, &help)
        })
    })?;
    Ok(PyPrometheusStream {
        inner: Mutex::new(stream),
    })
}
