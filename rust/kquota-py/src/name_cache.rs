//! The cache of named-call resolutions: `(quota type, user str, client-id str)` -> sensor.
//!
//! A broker passes the same `user` / `client_id` objects for every request of a connection
//! (interned, or held by the connection), and a proxy that decodes them per request passes
//! equal strings. Either way the two `str` objects carry their hash, computed once by CPython and
//! cached in the object, so a lookup here is two loads of cached hashes, one probe of a small
//! set and an identity (or, for equal but distinct objects, a length + memcmp) check: no UTF-8
//! conversion, no re-hash, no registry probe. It is an implicit per-connection handle.
//!
//! The table is set-associative (`WAYS` entries per set, chosen by the mixed hash) and grows by
//! doubling from `MIN_SETS` sets up to `max_sets` (room for twice the kernel's `max_sensors`,
//! at most `MAX_SETS`), so it is sized to the live clients it has seen and never unbounded
//! (each entry holds two `str` references and one sensor reference; a flood of distinct names
//! beyond the sensor cap can pin no more names than that). A full set gives up a stale entry first; with every
//! way live it grows the table (once half of it is in use), or at full size lets one miss in
//! `REPLACE_EVERY` evict a live entry (more live names than the table holds must not turn every
//! miss into an eviction).
//! Entries are valid while the quota type's tags generation is the one they were
//! resolved under: an alter that changes tags, a callback change and sensor expiry all bump it.
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

/// Entries per set: a set is one 128-byte aligned block (four 32-byte `Way`s), so a probe reads
/// one place in memory.
const WAYS: usize = 4;
/// 64 entries before the first growth: a process with a handful of clients stays small.
const MIN_SETS: usize = 16;
/// 262,144 entries at most (8 MB of table): room for 100k live clients at a low load.
const MAX_SETS: usize = 1 << 16;

/// An exact `str`'s hash as CPython caches it in the object, computed (once per object) when
/// unset.
///
/// # Safety
/// `ob` must be an exact `str` and the GIL held.
#[inline(always)]
unsafe fn str_hash(ob: *mut ffi::PyObject) -> u64 {
    let h = (*(ob as *mut ffi::PyASCIIObject)).hash;
    if h != -1 {
        return h as u64;
    }
    // Computes and caches it; an exact str's hash cannot fail.
    ffi::PyObject_Hash(ob) as u64
}

/// Whether two exact `str` objects are equal (identity first).
///
/// # Safety
/// Both must be exact `str` objects and the GIL held.
#[inline(always)]
unsafe fn same_str(a: *mut ffi::PyObject, b: *mut ffi::PyObject) -> bool {
    a == b
        || (ffi::PyUnicode_GET_LENGTH(a) == ffi::PyUnicode_GET_LENGTH(b) && ffi::PyUnicode_Compare(a, b) == 0)
}

#[inline(always)]
fn mix(user: u64, client: u64, t: ClientQuotaType) -> u64 {
    let mut k = user.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ client.rotate_left(31) ^ (t as u64) << 59;
    k ^= k >> 32;
    k = k.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    k ^ (k >> 29)
}

/// The most sets for `kernel`: ways for twice its per-type sensor cap (names beyond it share
/// overflow sensors, so caching more of them buys little), within `MIN_SETS..=MAX_SETS`.
fn max_sets(kernel: &QuotaKernel) -> usize {
    (kernel.settings().max_sensors.saturating_mul(2) / WAYS)
        .clamp(MIN_SETS, MAX_SETS)
        .next_power_of_two()
}

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

/// At full size, one miss in this many on a set of live entries replaces one of them.
const REPLACE_EVERY: usize = 8;

/// Generations at or past this are never cached (they cannot be packed in `meta`); a kernel
/// would need 2^40 configuration changes to get there.
const MAX_GENERATION: u64 = 1 << 40;

/// One cached resolution, 32 bytes: a set of four fills one 128-byte aligned pair of lines, so
/// a lookup reads one place in memory (the adjacent-line prefetch brings the pair).
#[repr(C)]
struct Way {
    user: *mut ffi::PyObject,
    client: *mut ffi::PyObject,
    /// From `Arc::into_raw`: the entry owns one reference.
    sensor: *const QuotaSensor,
    /// `generation << 24 | tag << 8 | quota type index + 1`; 0 = empty.
    meta: u64,
}

impl Way {
    const EMPTY: Way = Way {
        user: std::ptr::null_mut(),
        client: std::ptr::null_mut(),
        sensor: std::ptr::null(),
        meta: 0,
    };

    #[inline(always)]
    fn generation(&self) -> u64 {
        self.meta >> 24
    }

    /// Same type and tag as `key`, and the same strings (identical or equal).
    #[inline(always)]
    unsafe fn holds(&self, key: &Key) -> bool {
        self.meta & 0xFF_FFFF == key.meta
            && same_str(self.user, key.user)
            && same_str(self.client, key.client)
    }

    #[inline(always)]
    fn is_stale(&self, kernel: &QuotaKernel) -> bool {
        let t = ClientQuotaType::ALL[(self.meta & 0xFF) as usize - 1];
        !kernel.is_current(t, self.generation())
    }

    /// Drops the entry's references at once: these entry points run outside PyO3's GIL
    /// accounting, where a `Py` drop would only be queued (and a stream of distinct names would
    /// keep every evicted str alive). An exact str's deallocation runs no Python code.
    unsafe fn clear(&mut self) {
        if self.meta == 0 {
            return;
        }
        ffi::Py_DECREF(self.user);
        ffi::Py_DECREF(self.client);
        drop(Arc::from_raw(self.sensor));
        *self = Way::EMPTY;
    }
}

#[repr(C, align(128))]
struct Set {
    ways: [Way; WAYS],
}

struct Table {
    sets: Box<[Set]>,
    /// Ways in use.
    filled: usize,
    /// Round-robin victim counter.
    clock: usize,
}

impl Table {
    fn new(sets: usize) -> Self {
        Table {
            sets: (0..sets)
                .map(|_| Set {
                    ways: [Way::EMPTY, Way::EMPTY, Way::EMPTY, Way::EMPTY],
                })
                .collect(),
            filled: 0,
            clock: 0,
        }
    }

    #[inline(always)]
    fn set_of(&self, hash: u64) -> usize {
        // The high bits (the tag uses bits 8..24).
        (hash >> 32) as usize & (self.sets.len() - 1)
    }

    /// The way to overwrite in `set` without evicting a live entry: the key's own (stale)
    /// entry, an empty way, or a stale one.
    unsafe fn free_or_victim(&self, i: usize, key: &Key, kernel: &QuotaKernel) -> Option<usize> {
        let set = &self.sets[i];
        let mut stale = None;
        for (n, w) in set.ways.iter().enumerate() {
            if w.meta == 0 || w.holds(key) {
                return Some(n);
            }
            if stale.is_none() && w.is_stale(kernel) {
                stale = Some(n);
            }
        }
        stale
    }

    /// Doubles the table, dropping stale entries on the way.
    #[cold]
    unsafe fn grow(&mut self, kernel: &QuotaKernel) {
        let mut old = std::mem::replace(self, Table::new(self.sets.len() * 2));
        for set in old.sets.iter_mut() {
            for w in set.ways.iter_mut() {
                if w.meta == 0 {
                    continue;
                }
                if w.is_stale(kernel) {
                    w.clear();
                    continue;
                }
                let hash = mix(
                    str_hash(w.user),
                    str_hash(w.client),
                    ClientQuotaType::ALL[(w.meta & 0xFF) as usize - 1],
                );
                let i = self.set_of(hash);
                match self.sets[i].ways.iter().position(|x| x.meta == 0) {
                    Some(n) => {
                        self.sets[i].ways[n] = std::mem::replace(w, Way::EMPTY);
                        self.filled += 1;
                    }
                    None => w.clear(),
                }
            }
        }
    }
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
            table: UnsafeCell::new(Table::new(MIN_SETS)),
            busy: Cell::new(false),
            hits: Cell::new(0),
        }
    }
}

/// A cache key: the two strings, their mixed hash and the low `meta` bits (type, tag) an entry
/// for them carries; `None` when either is not an exact `str`.
#[derive(Clone, Copy)]
pub struct Key {
    user: *mut ffi::PyObject,
    client: *mut ffi::PyObject,
    hash: u64,
    meta: u64,
    quota_type: ClientQuotaType,
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
            prefetch(
                table.sets.as_ptr().wrapping_add(table.set_of(key.hash)) as *const u8,
                std::mem::size_of::<Set>(),
            );
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
            for w in table.sets[table.set_of(key.hash)].ways.iter() {
                if w.holds(key) {
                    // With many live clients the sensor is rarely in cache, and the record reads
                    // several of its lines, some only after reading others (head, then its
                    // sample): asking for all of them now overlaps those misses.
                    prefetch(w.sensor as *const u8, std::mem::size_of::<QuotaSensor>());
                    if !kernel.is_current(key.quota_type, w.generation()) {
                        return None;
                    }
                    self.hits.set(self.hits.get().wrapping_add(1));
                    let _busy = Busy::enter(&self.busy);
                    // SAFETY: the entry owns a reference, and the table is not changed while busy.
                    return Some(f(&*w.sensor));
                }
            }
            None
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
            (table.filled, table.sets.len() * WAYS, self.hits.get())
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
            let table = &mut *self.table.get();
            let mut i = table.set_of(key.hash);
            let mut way = table.free_or_victim(i, key, kernel);
            let full_size = max_sets(kernel);
            if way.is_none() && table.sets.len() < full_size && table.filled * 2 >= table.sets.len() * WAYS {
                // Full sets at a moderate load: more live clients than the table was sized for.
                table.grow(kernel);
                i = table.set_of(key.hash);
                way = table.free_or_victim(i, key, kernel);
            }
            let n = match way {
                Some(n) => n,
                None => {
                    table.clock = table.clock.wrapping_add(1);
                    // At full size with every way live, more clients are active than the table
                    // holds: replacing on every miss would only trade one miss for another at
                    // the cost of an eviction, so only one miss in `REPLACE_EVERY` takes a way
                    // (the table still follows a changing population, slowly).
                    if table.sets.len() >= full_size && table.clock % REPLACE_EVERY != 0 {
                        return;
                    }
                    (table.clock / REPLACE_EVERY) % WAYS
                }
            };
            let w = &mut table.sets[i].ways[n];
            if w.meta == 0 {
                table.filled += 1;
            } else {
                w.clear();
            }
            ffi::Py_INCREF(key.user);
            ffi::Py_INCREF(key.client);
            *w = Way {
                user: key.user,
                client: key.client,
                sensor: Arc::into_raw(sensor),
                meta: generation << 24 | key.meta,
            };
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
            // The kernel object is deallocated by CPython with the GIL held.
            for set in self.table.get_mut().sets.iter_mut() {
                for w in set.ways.iter_mut() {
                    // SAFETY: see above; the references were taken in `put`.
                    unsafe { w.clear() };
                }
            }
        }
    }
}
