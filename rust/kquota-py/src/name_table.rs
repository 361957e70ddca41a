//! The table behind the named-call cache (`name_cache`): set-associative, two choices per key.
//!
//! A key may live in one of two sets of `WAYS` entries: its home set, where it is placed
//! whenever that has room (and where a lookup looks first, and the caller prefetches), or its
//! second set. With one choice, a table at a third of its capacity already had sets with more
//! keys than ways (about 2% of 100k live clients, each of them a slow-path call on every
//! request); with two, a key finds no room only when both sets are full.
//!
//! The table grows by doubling from `MIN_SETS` sets up to `max_sets` (room for twice the
//! kernel's `max_sensors`, at most `MAX_SETS`). Its storage is a `ZeroedArray` (huge pages).

use std::sync::Arc;

use pyo3::ffi;
use quota_core::{ClientQuotaType, QuotaKernel, QuotaSensor};

use crate::zeroed_array::ZeroedArray;

/// Entries per set: a set is one 128-byte aligned block (four 32-byte `Way`s), so a probe reads
/// one place in memory.
pub(crate) const WAYS: usize = 4;
/// 64 entries before the first growth: a process with a handful of clients stays small.
pub(crate) const MIN_SETS: usize = 16;
/// 262,144 entries at most (8 MB of table): room for 100k live clients at a low load.
const MAX_SETS: usize = 1 << 16;

/// At full size, one miss in this many on sets of live entries replaces one of them.
const REPLACE_EVERY: usize = 8;

/// An exact `str`'s hash as CPython caches it in the object, computed (once per object) when
/// unset.
///
/// # Safety
/// `ob` must be an exact `str` and the GIL held.
#[inline(always)]
pub(crate) unsafe fn str_hash(ob: *mut ffi::PyObject) -> u64 {
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
pub(crate) fn mix(user: u64, client: u64, t: ClientQuotaType) -> u64 {
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

/// A cache key: the two strings, their mixed hash and the low `meta` bits (type, tag) an entry
/// for them carries.
#[derive(Clone, Copy)]
pub struct Key {
    pub(crate) user: *mut ffi::PyObject,
    pub(crate) client: *mut ffi::PyObject,
    pub(crate) hash: u64,
    pub(crate) meta: u64,
    pub(crate) quota_type: ClientQuotaType,
}

/// One cached resolution, 32 bytes: a set of four fills one 128-byte aligned pair of lines, so
/// a lookup reads one place in memory (the adjacent-line prefetch brings the pair).
#[repr(C)]
pub(crate) struct Way {
    user: *mut ffi::PyObject,
    client: *mut ffi::PyObject,
    /// From `Arc::into_raw`: the entry owns one reference.
    pub(crate) sensor: *const QuotaSensor,
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
    pub(crate) fn generation(&self) -> u64 {
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
    pub(crate) unsafe fn clear(&mut self) {
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
pub(crate) struct Set {
    pub(crate) ways: [Way; WAYS],
}

pub(crate) struct Table {
    /// All-zero is an empty `Way` (null pointers, `meta` 0).
    pub(crate) sets: ZeroedArray<Set>,
    /// Ways in use.
    pub(crate) filled: usize,
    /// Round-robin victim counter.
    clock: usize,
}

impl Table {
    pub(crate) fn new(sets: usize) -> Self {
        Table {
            // SAFETY: all-zero bytes are `Way::EMPTY` in every way, and a `Set` has no drop
            // (entries are released by `Way::clear`).
            sets: unsafe { ZeroedArray::new(sets) },
            filled: 0,
            clock: 0,
        }
    }

    /// The key's home set: the high bits of its hash (the tag uses bits 8..24).
    #[inline(always)]
    pub(crate) fn home(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.sets.len() - 1)
    }

    /// The key's second set: the home set with other hash bits flipped (never the home set).
    #[inline(always)]
    fn second(&self, hash: u64) -> usize {
        (self.home(hash) ^ ((hash >> 24) as usize | 1)) & (self.sets.len() - 1)
    }

    /// The entry for `key` (current or not), looking in its home set first.
    ///
    /// # Safety
    /// The GIL is held and the key's objects are alive.
    #[inline(always)]
    pub(crate) unsafe fn find(&self, key: &Key) -> Option<&Way> {
        let home = &self.sets[self.home(key.hash)];
        if let Some(w) = home.ways.iter().find(|w| w.holds(key)) {
            return Some(w);
        }
        self.find_second(key)
    }

    #[inline(never)]
    unsafe fn find_second(&self, key: &Key) -> Option<&Way> {
        self.sets[self.second(key.hash)].ways.iter().find(|w| w.holds(key))
    }

    /// The way to overwrite for `key` without evicting a live entry: the key's own (stale)
    /// entry in either set, else an empty way (home set first), else a stale one.
    unsafe fn free_or_victim(&self, key: &Key, kernel: &QuotaKernel) -> Option<(usize, usize)> {
        let sets = [self.home(key.hash), self.second(key.hash)];
        for &i in &sets {
            if let Some(n) = self.sets[i].ways.iter().position(|w| w.holds(key)) {
                return Some((i, n));
            }
        }
        for &i in &sets {
            if let Some(n) = self.sets[i].ways.iter().position(|w| w.meta == 0) {
                return Some((i, n));
            }
        }
        for &i in &sets {
            if let Some(n) = self.sets[i].ways.iter().position(|w| w.is_stale(kernel)) {
                return Some((i, n));
            }
        }
        None
    }

    /// Remembers `sensor`, resolved under `generation`, for `key`: in a free or stale way, else
    /// (sets full) by growing the table once it is half in use, else at full size by replacing
    /// a live entry on one miss in `REPLACE_EVERY` (more live names than the table holds must
    /// not turn every miss into an eviction; the table still follows a changing population).
    ///
    /// # Safety
    /// The GIL is held, the key's objects are alive, and nothing borrows the table.
    pub(crate) unsafe fn put(&mut self, key: &Key, kernel: &QuotaKernel, generation: u64, sensor: Arc<QuotaSensor>) {
        let mut way = self.free_or_victim(key, kernel);
        let full_size = max_sets(kernel);
        if way.is_none() && self.sets.len() < full_size && self.filled * 2 >= self.sets.len() * WAYS {
            self.grow(kernel);
            way = self.free_or_victim(key, kernel);
        }
        let (i, n) = match way {
            Some(at) => at,
            None => {
                self.clock = self.clock.wrapping_add(1);
                if self.sets.len() >= full_size && self.clock % REPLACE_EVERY != 0 {
                    return;
                }
                (self.home(key.hash), (self.clock / REPLACE_EVERY) % WAYS)
            }
        };
        let w = &mut self.sets[i].ways[n];
        if w.meta == 0 {
            self.filled += 1;
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
                let free = [self.home(hash), self.second(hash)].into_iter().find_map(|i| {
                    self.sets[i].ways.iter().position(|x| x.meta == 0).map(|n| (i, n))
                });
                match free {
                    Some((i, n)) => {
                        self.sets[i].ways[n] = std::mem::replace(w, Way::EMPTY);
                        self.filled += 1;
                    }
                    None => w.clear(),
                }
            }
        }
    }

    /// Releases every entry.
    ///
    /// # Safety
    /// The GIL is held.
    pub(crate) unsafe fn clear(&mut self) {
        for set in self.sets.iter_mut() {
            for w in set.ways.iter_mut() {
                w.clear();
            }
        }
        self.filled = 0;
    }
}
