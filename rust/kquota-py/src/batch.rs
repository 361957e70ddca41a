//! `_replay`: feeds a whole batch of recorded requests (numpy arrays) through the kernel with the
//! GIL released. The offline pipeline (`kquota.pipeline.replay`) calls it once per broker, so a
//! what-if replay runs the very record path the brokers run.
//!
//! Requests are taken in array order (the caller sorts by time, ties in input order). Each
//! distinct `(user, client_id)` is resolved once into a [`ClientHandle`] before the loop; the
//! loop itself touches no Python object and allocates nothing.
//!
//! Two models:
//! * open loop: request `i` is recorded at `ts_ms[i]`;
//! * closed loop (KIP-219 clients): a client (one `(user, client_id)`) that receives a throttle
//!   of `d` ms for a request sent at `s` sends nothing before `s + d`. A request is sent at
//!   `max(ts_ms[i], ready[client])`, where `ready` is the latest such `s + d` of the client; the
//!   client's requests keep their order. Requests of all clients are recorded in the order of
//!   their send times (ties: array order), which a heap over each client's next request gives.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use quota_core::kernel::MAX_ABS_NOW_MS;
use quota_core::{ClientHandle, ClientQuotaType, QuotaError, QuotaKernel};

use crate::errors::{invalid_argument, PyQuotaErr, PyQuotaResult};

/// Quota type codes of the `types` array: these need to match `kquota.ClientQuotaType`'s values
/// (`kquota/quota_type.py`).
const PRODUCE: i8 = 0;
const FETCH: i8 = 1;
const REQUEST: i8 = 2;

/// A C-contiguous one-dimensional buffer of `T`, as a raw slice valid while `buf` lives.
struct Column<T: Element> {
    _buf: PyBuffer<T>,
    ptr: NonNull<[T]>,
}

impl<T: Element> Column<T> {
    fn get(name: &str, dtype: &str, obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        let what = || {
            format!(
                "{name} must be a C-contiguous one-dimensional {}numpy array of dtype {dtype}",
                if writable { "writable " } else { "" }
            )
        };
        let buf = PyBuffer::<T>::get(obj)
            .map_err(|_| PyTypeError::new_err(format!("{}, not {}", what(), type_desc(obj))))?;
        if buf.dimensions() != 1 || (writable && buf.readonly()) {
            return Err(PyTypeError::new_err(what()));
        }
        let ptr = buf.as_slice_ptr().ok_or_else(|| PyTypeError::new_err(what()))?;
        Ok(Column { _buf: buf, ptr })
    }

    fn len(&self) -> usize {
        self.ptr.len()
    }
}

fn type_desc(obj: &Bound<'_, PyAny>) -> String {
    match obj.getattr("dtype") {
        Ok(d) => format!("dtype {}", d.str().map(|s| s.to_string()).unwrap_or_default()),
        Err(_) => obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into()),
    }
}

/// Raw views moved into the GIL-free section. The Python buffers they point into stay
/// acquired (exporters cannot resize them) until `_replay` returns.
struct Views {
    ts: NonNull<[i64]>,
    types: NonNull<[i8]>,
    ids: NonNull<[i32]>,
    values: NonNull<[f64]>,
    out: NonNull<[i32]>,
    sent: Option<NonNull<[i64]>>,
}

// SAFETY: the pointers stay valid for the whole call (the buffers are held by `_replay`), and
// only this thread writes `out`/`sent` while the call runs; concurrent mutation of the arrays
// by another Python thread is documented as undefined results, as for any numpy C routine.
unsafe impl Send for Views {}

/// Replays a batch (`QuotaKernel._replay`). See the module documentation and
/// `kquota.pipeline.replay`.
///
/// `ts_ms` int64, `types` int8 (0 PRODUCE, 1 FETCH, 2 REQUEST; its value is thread-time ns), `entity_ids` int32 indexing
/// `entities` (a list of `(user, client_id)`), `values` float64, `out` int32 (throttles are
/// written there); `sent_ms` int64, when given, receives each request's send time (equal to
/// `ts_ms` in the open model).
#[allow(clippy::too_many_arguments)]
pub fn replay(
    py: Python<'_>,
    core: Arc<QuotaKernel>,
    ts_ms: &Bound<'_, PyAny>,
    types: &Bound<'_, PyAny>,
    entity_ids: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    entities: Vec<(String, String)>,
    out: &Bound<'_, PyAny>,
    closed: bool,
    sent_ms: Option<&Bound<'_, PyAny>>,
) -> PyQuotaResult<()> {
    let ts = Column::<i64>::get("ts_ms", "int64", ts_ms, false)?;
    let ty = Column::<i8>::get("types", "int8", types, false)?;
    let ids = Column::<i32>::get("entity_ids", "int32", entity_ids, false)?;
    let vals = Column::<f64>::get("values", "float64", values, false)?;
    let outc = Column::<i32>::get("out", "int32", out, true)?;
    let sentc = match sent_ms {
        Some(s) => Some(Column::<i64>::get("sent_ms", "int64", s, true)?),
        None => None,
    };
    let n = ts.len();
    for (name, len) in [
        ("types", ty.len()),
        ("entity_ids", ids.len()),
        ("values", vals.len()),
        ("out", outc.len()),
        ("sent_ms", sentc.as_ref().map_or(n, |c| c.len())),
    ] {
        if len != n {
            return Err(invalid_argument(format!(
                "{name} has {len} elements but ts_ms has {n}; all arrays must have the same length"
            )));
        }
    }
    let views = Views {
        ts: ts.ptr,
        types: ty.ptr,
        ids: ids.ptr,
        values: vals.ptr,
        out: outc.ptr,
        sent: sentc.as_ref().map(|c| c.ptr),
    };
    let entity_count = entities.len();
    for (u, c) in &entities {
        quota_core::check_name("user", u)?;
        quota_core::check_name("client_id", c)?;
    }
    py.detach(move || -> Result<(), ReplayError> {
        // Capture the struct whole (its Send impl), not its fields one by one.
        let views = views;
        // SAFETY: see `Views`; the input views are only read, the outputs only written here.
        let (ts, types, ids, values) = unsafe {
            (
                views.ts.as_ref(),
                views.types.as_ref(),
                views.ids.as_ref(),
                views.values.as_ref(),
            )
        };
        // Another thread may write into the caller's arrays while the GIL is released: the
        // columns that index (entity ids) and select (types) are copied before validation, so
        // what was validated is what is used.
        let (ids, types) = (ids.to_vec(), types.to_vec());
        let (ids, types) = (ids.as_slice(), types.as_slice());
        let out = unsafe { &mut *views.out.as_ptr() };
        let sent = views.sent.map(|p| unsafe { &mut *p.as_ptr() });
        validate(&core, ts, types, ids, values, entity_count)?;
        let handles: Vec<ClientHandle> = entities
            .iter()
            .map(|(u, c)| ClientHandle::new(Arc::clone(&core), u, c))
            .collect();
        if closed {
            replay_closed(&handles, ts, types, ids, values, out, sent)
        } else {
            for i in 0..ts.len() {
                out[i] = record(&handles[ids[i] as usize], types[i], values[i], ts[i])
                    .map_err(|e| ReplayError::Kernel(i, e))?;
            }
            if let Some(sent) = sent {
                sent.copy_from_slice(ts);
            }
            Ok(())
        }
    })
    .map_err(ReplayError::into_py)
}

enum ReplayError {
    Kernel(usize, QuotaError),
    Argument(String),
}

impl ReplayError {
    fn into_py(self) -> PyQuotaErr {
        match self {
            ReplayError::Kernel(i, e) => PyQuotaErr::Core(match e {
                QuotaError::InvalidValue(m) => QuotaError::InvalidValue(format!("request {i}: {m}")),
                QuotaError::InvalidArgument(m) => QuotaError::InvalidArgument(format!("request {i}: {m}")),
                QuotaError::Unsupported(m) => QuotaError::Unsupported(format!("request {i}: {m}")),
                other => other,
            }),
            ReplayError::Argument(m) => invalid_argument(m),
        }
    }
}

/// Checks every request before anything is recorded, so a bad batch changes no sensor.
fn validate(
    core: &QuotaKernel,
    ts: &[i64],
    types: &[i8],
    ids: &[i32],
    values: &[f64],
    entity_count: usize,
) -> Result<(), ReplayError> {
    for i in 0..ts.len() {
        let id = ids[i];
        if id < 0 || id as usize >= entity_count {
            return Err(ReplayError::Argument(format!(
                "entity_ids[{i}] = {id} is not an index into the {entity_count} entities"
            )));
        }
        let t = types[i];
        if !(PRODUCE..=REQUEST).contains(&t) {
            return Err(ReplayError::Argument(format!(
                "types[{i}] = {t} is not a quota type code (0 PRODUCE, 1 FETCH, 2 REQUEST)"
            )));
        }
        let v = values[i];
        let now = ts[i];
        if v.is_nan() || v.is_infinite() || v < 0.0 || now.unsigned_abs() >= MAX_ABS_NOW_MS as u64 {
            // The kernel rejects the value (or time) before recording anything: its own error.
            let err = if t == REQUEST {
                core.record_request_time("", "", v, Some(now)).err()
            } else {
                core.record_and_get_throttle_time_ms(ClientQuotaType::Produce, "", "", v, Some(now))
                    .err()
            };
            let err = err.unwrap_or_else(|| QuotaError::InvalidValue(format!("bad value {v} at time {now}")));
            return Err(ReplayError::Kernel(i, err));
        }
    }
    Ok(())
}

/// One request through its client's handle.
#[inline]
fn record(h: &ClientHandle, t: i8, value: f64, now: i64) -> Result<i32, QuotaError> {
    match t {
        PRODUCE => h.record_and_get_throttle_time_ms(ClientQuotaType::Produce, value, Some(now)),
        FETCH => h.record_and_get_throttle_time_ms(ClientQuotaType::Fetch, value, Some(now)),
        // Validated: the only other code is REQUEST (thread-time nanoseconds).
        _ => h.record_request_time(value, Some(now)),
    }
}

/// The closed-loop model (module docs): a heap of each client's next request keyed by
/// (send time, array index).
fn replay_closed(
    handles: &[ClientHandle],
    ts: &[i64],
    types: &[i8],
    ids: &[i32],
    values: &[f64],
    out: &mut [i32],
    mut sent: Option<&mut [i64]>,
) -> Result<(), ReplayError> {
    let n = ts.len();
    // next[i]: the client's request after i (array order); u32::MAX ends the chain.
    const END: u32 = u32::MAX;
    if n >= END as usize {
        return Err(ReplayError::Argument(format!(
            "a batch holds at most {} requests",
            END - 1
        )));
    }
    let mut next = vec![END; n];
    let mut last = vec![END; handles.len()];
    let mut heap: BinaryHeap<Reverse<(i64, u32)>> = BinaryHeap::new();
    for i in 0..n {
        let e = ids[i] as usize;
        if last[e] == END {
            heap.push(Reverse((ts[i], i as u32)));
        } else {
            next[last[e] as usize] = i as u32;
        }
        last[e] = i as u32;
    }
    while let Some(Reverse((at, i))) = heap.pop() {
        let i = i as usize;
        let throttle = record(&handles[ids[i] as usize], types[i], values[i], at)
            .map_err(|e| ReplayError::Kernel(i, e))?;
        out[i] = throttle;
        if let Some(s) = sent.as_deref_mut() {
            s[i] = at;
        }
        let j = next[i];
        if j != END {
            let ready = at.saturating_add(throttle as i64);
            heap.push(Reverse((ts[j as usize].max(ready), j)));
        }
    }
    Ok(())
}
