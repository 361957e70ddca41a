//! The cache of named-call resolutions: `(quota type, user str, client-id str)` -> sensor.
//!
//! A broker passes the same `user` / `client_id` objects for every request of a connection
//! (interned, or held by the connection), and a proxy that decodes them per request passes
//! equal strings. Either way the two `str` objects carry their hash, computed once by CPython and
//! cached in the object, so a lookup here is two loads of cached hashes, one probe of a small
//! set and an identity (or, for equal but distinct objects, a length + memcmp) check: no UTF-8
//! conversion, no re-hash, no registry probe. It is an implicit per-connection handle.
//!
//! The table (`name_table`) is a compact index over a dense arena of entries, and grows by
//! doubling up to room for twice the kernel's `max_sensors` (at most 262,144 entries), so it is
//! sized to the live clients it has seen and never unbounded (each entry holds two `str`
//! references and one sensor reference; a flood of distinct names beyond the sensor cap can pin
//! no more names than that). Entries are valid while the quota type's tags generation is the
//! one they were resolved under: an alter that changes tags, a callback change and sensor
//! expiry all bump it.
//!
//! Entries hold strong references to their strings, so an address cannot be reused by another
//! string while cached; only exact `str` objects are cached (their hash and equality run no
//! Python code, their deallocation neither). The table is touched only with the GIL held; a
//! call that re-enters while a lookup's closure runs (a Python callback calling back into the
//! kernel) finds the table busy and takes the slow path. On a free-threaded interpreter it is
//! disabled.

use std::cell::{Cell, UnsafeCell};
use std::sync::Arc;

use pyo3::ffi;
use pyo3::Python;
use quota_core::{ClientQuotaType, QuotaKernel, QuotaSensor};

pub use crate::name_table::Key;
use crate::name_table::{mix, str_hash, Bucket, Table, MIN_ENTRIES};

/// Generations at or past this are never cached (they cannot be packed in `meta`); a kernel
/// would need 2^40 configuration changes to get there.
const MAX_GENERATION: u64 = 1 << 40;

/// Starts loading `len` bytes at `p` into the cache (a hint: no effect off x86-64).
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut off = 0;
        while off < len {
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    p.wrapping_add(off) as *const i8
                )
            };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// See the module documentation.
pub struct NameCache {
    #[cfg(not(Py_GIL_DISABLED))]
    table: UnsafeCell<Table>,
    /// Set while a lookup's closure runs: a re-entrant call must not touch the table.
    busy: Cell<bool>,
    /// Lookups answered from the table (for tests and diagnostics).
    hits: Cell<u64>,
}

// SAFETY: every access happens with the GIL held (see the module docs); on free-threaded builds
// the table is never touched.
unsafe impl Sync for NameCache {}
unsafe impl Send for NameCache {}

impl Default for NameCache {
    fn default() -> Self {
        NameCache {
            #[cfg(not(Py_GIL_DISABLED))]
            table: UnsafeCell::new(Table::new(MIN_ENTRIES)),
            busy: Cell::new(false),
            hits: Cell::new(0),
        }
    }
}

impl Key {
    /// # Safety
    /// The GIL is held and `user` / `client` are live objects.
    #[inline(always)]
    pub unsafe fn new(
        user: *mut ffi::PyObject,
        client: *mut ffi::PyObject,
        t: ClientQuotaType,
    ) -> Option<Key> {
        if cfg!(Py_GIL_DISABLED)
            || ffi::PyUnicode_CheckExact(user) == 0
            || ffi::PyUnicode_CheckExact(client) == 0
        {
            return None;
        }
        let hash = mix(str_hash(user), str_hash(client), t);
        Some(Key {
            user,
            client,
            hash,
            meta: (hash & 0xFF_FF00) | (t.index() as u64 + 1),
            quota_type: t,
        })
    }
}

impl NameCache {
    /// Starts loading the key's set, so its miss overlaps the caller's argument parsing.
    ///
    /// # Safety
    /// The GIL is held.
    #[inline(always)]
    pub unsafe fn prefetch(&self, key: &Key) {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            let table = &*self.table.get();
            prefetch(table.home_bucket(key.hash), std::mem::size_of::<Bucket>());
        }
        #[cfg(Py_GIL_DISABLED)]
        let _ = key;
    }

    /// Runs `f` on the cached, still current sensor for this key.
    ///
    /// # Safety
    /// The GIL is held and the key's objects are alive.
    #[inline(always)]
    pub unsafe fn with<R>(
        &self,
        key: &Key,
        kernel: &QuotaKernel,
        f: impl FnOnce(&QuotaSensor) -> R,
    ) -> Option<R> {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            if self.busy.get() {
                return None;
            }
            let table = &*self.table.get();
            let w = table.find(key)?;
            // With many live clients the sensor is rarely in cache, and the record reads
            // several of its lines, some only after reading others (head, then its sample):
            // asking for all of them now overlaps those misses.
            prefetch(w.sensor as *const u8, std::mem::size_of::<QuotaSensor>());
            if !kernel.is_current(key.quota_type, w.generation()) {
                return None;
            }
            self.hits.set(self.hits.get().wrapping_add(1));
            let _busy = Busy::enter(&self.busy);
            // SAFETY: the entry owns a reference, and the table is not changed while busy.
            Some(f(&*w.sensor))
        }
        #[cfg(Py_GIL_DISABLED)]
        {
            let _ = (key, kernel, f);
            None
        }
    }

    /// `(entries, capacity, hits)`: ways in use, ways in all, lookups answered so far.
    pub fn info(&self, _py: Python<'_>) -> (usize, usize, u64) {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            // SAFETY: the GIL is held (`_py`) and no lookup is running on this thread.
            let table = unsafe { &*self.table.get() };
            (table.filled, table.capacity(), self.hits.get())
        }
        #[cfg(Py_GIL_DISABLED)]
        (0, 0, 0)
    }

    /// Remembers `sensor`, resolved under `generation`, for `key`.
    ///
    /// # Safety
    /// The GIL is held and the key's objects are alive.
    pub unsafe fn put(&self, key: &Key, kernel: &QuotaKernel, generation: u64, sensor: Arc<QuotaSensor>) {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            if self.busy.get() || generation >= MAX_GENERATION {
                return;
            }
            (*self.table.get()).put(key, kernel, generation, sensor);
        }
        #[cfg(Py_GIL_DISABLED)]
        {
            let _ = (key, kernel, generation, sensor);
        }
    }
}

/// Marks the table busy for its lifetime (also when the closure unwinds).
struct Busy<'a>(&'a Cell<bool>);

impl<'a> Busy<'a> {
    #[inline(always)]
    fn enter(flag: &'a Cell<bool>) -> Self {
        flag.set(true);
        Busy(flag)
    }
}

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl Drop for NameCache {
    fn drop(&mut self) {
        #[cfg(not(Py_GIL_DISABLED))]
        {
            // The kernel object is deallocated by CPython with the GIL held; the references
            // were taken in `put`.
            unsafe { self.table.get_mut().clear() };
        }
    }
}
