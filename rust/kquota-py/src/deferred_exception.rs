//! Re-raising a `BaseException` that is not an `Exception` (KeyboardInterrupt, SystemExit) met
//! where nothing can raise: inside a callback hook, below the kernel's call. It is kept and
//! raised by a pending call, which CPython runs in the main thread at its next check.

use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;

static PENDING: Mutex<Option<PyErr>> = Mutex::new(None);

extern "C" fn raise_pending(_: *mut c_void) -> c_int {
    // SAFETY: CPython runs pending calls with the thread attached.
    let py = unsafe { Python::assume_attached() };
    match PENDING.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(err) => {
            err.restore(py);
            -1
        }
        None => 0,
    }
}

/// Keeps `err` (the first one, if several arrive before the check) and schedules its raise.
pub fn raise_later(_py: Python<'_>, err: PyErr) {
    let mut slot = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(err);
        drop(slot);
        // SAFETY: a plain function pointer and a null argument; callable with the GIL held.
        unsafe { ffi::Py_AddPendingCall(Some(raise_pending), std::ptr::null_mut()) };
    }
}
