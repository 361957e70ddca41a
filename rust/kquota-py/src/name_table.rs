//! The table behind the named-call cache (`name_cache`): a compact index over a dense arena of
//! entries, the layout of CPython's own dict.
//!
//! The index is what every call probes at a random place, so it is small: 4-byte slots (a
//! 12-bit fingerprint of the key's hash and the entry's arena position) in 64-byte buckets of
//! 16, as many slots as the arena has entries. At 100k live clients it is 512 KiB, where a
//! table of 32-byte entries was 8 MiB; a probe of a cache-resident index costs a few ns, a
//! probe of memory ~100 ns (measured with perf: it was a third of a named call's cost). Each
//! key has two candidate buckets (its home bucket, where it goes when that has room, and a
//! second one), and a full pair makes room by moving one entry to its other bucket.
//!
//! The entries (user str, client str, sensor, generation) sit in the arena in the order they
//! were cached, and growth keeps that order. The arena grows by doubling from `MIN_ENTRIES` up
//! to room for twice the kernel's `max_sensors` (at most `MAX_ENTRIES`). When a key finds no
//! room, stale entries (an older tags generation) are swept out, once per generation change,
//! else the table grows; at full size with every entry live, one miss in `REPLACE_EVERY`
//! replaces an entry of its home bucket (more live names than the table holds must not turn
//! every miss into an eviction; the table still follows a changing population). Storage comes
//! from `ZeroedArray` (huge pages).

use std::sync::Arc;

use pyo3::ffi;
use quota_core::{ClientQuotaType, QuotaKernel, QuotaSensor};

use crate::zeroed_array::ZeroedArray;

/// Entries before the first growth: a process with a handful of clients stays small.
pub(crate) const MIN_ENTRIES: usize = 64;
/// 262,144 entries at most: room for 100k live clients and more.
const MAX_ENTRIES: usize = 1 << 18;
/// Slots per bucket: one 64-byte line.
const SLOTS: usize = 16;
/// A slot: `fingerprint << IDX_BITS | (arena position + 1)`; 0 = empty.
const IDX_BITS: u32 = 20;
const IDX_MASK: u32 = (1 << IDX_BITS) - 1;
/// At full size, one miss in this many replaces a live entry.
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

/// The most entries for `kernel`: twice its per-type sensor cap (names beyond it share
/// overflow sensors, so caching more of them buys little), within `MIN_ENTRIES..=MAX_ENTRIES`.
fn max_entries(kernel: &QuotaKernel) -> usize {
    kernel
        .settings()
        .max_sensors
        .saturating_mul(2)
        .clamp(MIN_ENTRIES, MAX_ENTRIES)
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

impl Key {
    /// The fingerprint its slots carry (hash bits the bucket choice does not use).
    #[inline(always)]
    fn fingerprint(&self) -> u32 {
        (self.hash >> 8) as u32 & 0xFFF
    }
}

/// One cached resolution, 32 bytes.
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

    #[inline(always)]
    fn quota_type(&self) -> ClientQuotaType {
        ClientQuotaType::ALL[(self.meta & 0xFF) as usize - 1]
    }

    /// Same type and tag as `key`, and the same strings (identical or equal).
    #[inline(always)]
    unsafe fn holds(&self, key: &Key) -> bool {
        self.meta & 0xFF_FFFF == key.meta
            && same_str(self.user, key.user)
            && same_str(self.client, key.client)
    }

    /// The key this (non-empty) entry is for.
    ///
    /// # Safety
    /// The GIL is held.
    unsafe fn key(&self) -> Key {
        Key {
            user: self.user,
            client: self.client,
            hash: mix(str_hash(self.user), str_hash(self.client), self.quota_type()),
            meta: self.meta & 0xFF_FFFF,
            quota_type: self.quota_type(),
        }
    }

    fn is_stale(&self, kernel: &QuotaKernel) -> bool {
        !kernel.is_current(self.quota_type(), self.generation())
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

#[repr(C, align(64))]
pub(crate) struct Bucket {
    slots: [u32; SLOTS],
}

pub(crate) struct Table {
    /// All-zero is an empty slot.
    index: ZeroedArray<Bucket>,
    /// One bit per bucket: some key whose home it is went to its second bucket. Without it a
    /// lookup that misses its home bucket is a miss (no second probe: at a full table most calls
    /// miss, and the bitset stays in cache where a second bucket would not).
    spilled: Vec<u64>,
    /// All-zero is an empty `Way` (null pointers, `meta` 0).
    entries: ZeroedArray<Way>,
    /// Arena positions handed out so far (`entries[..used]`); freed ones are in `free`.
    used: usize,
    free: Vec<u32>,
    /// Entries in use.
    pub(crate) filled: usize,
    /// Tags generation of each type when stale entries were last swept out.
    swept: [u64; 4],
    /// Round-robin victim counter.
    clock: usize,
}

impl Table {
    pub(crate) fn new(entries: usize) -> Self {
        // SAFETY: all-zero bytes are an empty slot and an empty `Way`; neither has a drop
        // (entries are released by `Way::clear`).
        let (index, entries) = unsafe { (ZeroedArray::new(entries / SLOTS), ZeroedArray::new(entries)) };
        Table {
            spilled: vec![0; index.len().div_ceil(64)],
            index,
            entries,
            used: 0,
            free: Vec::new(),
            filled: 0,
            swept: [0; 4],
            clock: 0,
        }
    }

    /// Entries the arena holds.
    pub(crate) fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The key's home bucket: the high bits of its hash (the tag uses bits 8..24).
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.index.len() - 1)
    }

    /// The key's second bucket: the home bucket with other hash bits flipped (never the home).
    #[inline(always)]
    fn second(&self, hash: u64) -> usize {
        (self.home(hash) ^ ((hash >> 24) as usize | 1)) & (self.index.len() - 1)
    }

    /// Where the key's home bucket is (to prefetch it).
    #[inline(always)]
    pub(crate) fn home_bucket(&self, hash: u64) -> *const u8 {
        self.index.as_ptr().wrapping_add(self.home(hash)) as *const u8
    }

    /// `(slot, arena position)` of the key's entry in bucket `b`.
    #[inline(always)]
    unsafe fn find_in(&self, b: usize, key: &Key) -> Option<(usize, usize)> {
        let fp = key.fingerprint();
        for (n, &s) in self.index[b].slots.iter().enumerate() {
            if s != 0 && s >> IDX_BITS == fp {
                let e = (s & IDX_MASK) as usize - 1;
                if self.entries[e].holds(key) {
                    return Some((n, e));
                }
            }
        }
        None
    }

    /// The entry for `key` (current or not), looking in its home bucket first.
    ///
    /// # Safety
    /// The GIL is held and the key's objects are alive.
    #[inline(always)]
    pub(crate) unsafe fn find(&self, key: &Key) -> Option<&Way> {
        self.position(key).map(|e| &self.entries[e])
    }

    /// The arena position of the key's entry.
    #[inline(always)]
    unsafe fn position(&self, key: &Key) -> Option<usize> {
        match self.find_in(self.home(key.hash), key) {
            Some((_, e)) => Some(e),
            None => self.position_second(key),
        }
    }

    #[inline(never)]
    unsafe fn position_second(&self, key: &Key) -> Option<usize> {
        if !self.spilled_from(self.home(key.hash)) {
            return None;
        }
        self.find_in(self.second(key.hash), key).map(|(_, e)| e)
    }

    #[inline(always)]
    fn spilled_from(&self, home: usize) -> bool {
        self.spilled[home / 64] >> (home % 64) & 1 != 0
    }

    /// Puts arena position `e` for `key` in slot `n` of bucket `b` (its home or second bucket).
    fn link(&mut self, key: &Key, b: usize, n: usize, e: usize) {
        let home = self.home(key.hash);
        if b != home {
            self.spilled[home / 64] |= 1 << (home % 64);
        }
        self.index[b].slots[n] = key.fingerprint() << IDX_BITS | (e as u32 + 1);
    }

    /// Remembers `sensor`, resolved under `generation`, for `key` (see the module docs).
    ///
    /// # Safety
    /// The GIL is held, the key's objects are alive, and nothing borrows the table.
    pub(crate) unsafe fn put(
        &mut self,
        key: &Key,
        kernel: &QuotaKernel,
        generation: u64,
        sensor: Arc<QuotaSensor>,
    ) {
        let buckets = [self.home(key.hash), self.second(key.hash)];
        // The key's own (stale) entry: refreshed in place.
        if let Some(e) = self.position(key) {
            let w = &mut self.entries[e];
            w.clear();
            Self::fill(w, key, generation, sensor);
            return;
        }
        if !self.has_room(key) {
            self.make_room(kernel);
        }
        if !self.has_room(key) {
            self.clock = self.clock.wrapping_add(1);
            if self.clock % REPLACE_EVERY != 0 {
                return;
            }
            // Replace a live entry of the home bucket (or of the second, if the home is empty).
            let Some((b, n)) = buckets.into_iter().find_map(|b| {
                let slots = &self.index[b].slots;
                (0..SLOTS)
                    .map(|k| (self.clock / REPLACE_EVERY + k) % SLOTS)
                    .find(|&n| slots[n] != 0)
                    .map(|n| (b, n))
            }) else {
                return;
            };
            self.remove(b, n);
        }
        let Some((b, n)) = self.free_slot(key) else {
            return;
        };
        let e = match self.free.pop() {
            Some(e) => e as usize,
            None => {
                self.used += 1;
                self.used - 1
            }
        };
        Self::fill(&mut self.entries[e], key, generation, sensor);
        self.link(key, b, n, e);
        self.filled += 1;
    }

    unsafe fn fill(w: &mut Way, key: &Key, generation: u64, sensor: Arc<QuotaSensor>) {
        ffi::Py_INCREF(key.user);
        ffi::Py_INCREF(key.client);
        *w = Way {
            user: key.user,
            client: key.client,
            sensor: Arc::into_raw(sensor),
            meta: generation << 24 | key.meta,
        };
    }

    fn empty_in(&self, b: usize) -> Option<usize> {
        self.index[b].slots.iter().position(|&s| s == 0)
    }

    /// An empty slot in the key's home or second bucket. When both are full, one is made by
    /// moving an entry of either to its own other bucket (one cuckoo step: the index then
    /// fills to most of its slots before a key finds no place).
    unsafe fn free_slot(&mut self, key: &Key) -> Option<(usize, usize)> {
        let buckets = [self.home(key.hash), self.second(key.hash)];
        if let Some(at) = buckets.into_iter().find_map(|b| self.empty_in(b).map(|n| (b, n))) {
            return Some(at);
        }
        for b in buckets {
            for n in 0..SLOTS {
                let e = (self.index[b].slots[n] & IDX_MASK) as usize - 1;
                let other = self.entries[e].key();
                let home = self.home(other.hash);
                let alt = if b == home { self.second(other.hash) } else { home };
                if let Some(m) = self.empty_in(alt) {
                    self.index[b].slots[n] = 0;
                    self.link(&other, alt, m, e);
                    return Some((b, n));
                }
            }
        }
        None
    }

    /// A free arena position and a free slot for `key`.
    unsafe fn has_room(&mut self, key: &Key) -> bool {
        (!self.free.is_empty() || self.used < self.entries.len()) && self.free_slot(key).is_some()
    }

    /// Sweeps out stale entries if a generation changed since the last sweep, else grows the
    /// table if it is below its full size.
    #[cold]
    unsafe fn make_room(&mut self, kernel: &QuotaKernel) {
        let now: [u64; 4] = std::array::from_fn(|i| kernel.tags_generation(ClientQuotaType::ALL[i]));
        if now != self.swept {
            self.swept = now;
            for b in 0..self.index.len() {
                for n in 0..SLOTS {
                    let s = self.index[b].slots[n];
                    if s != 0 && self.entries[(s & IDX_MASK) as usize - 1].is_stale(kernel) {
                        self.remove(b, n);
                    }
                }
            }
            if self.filled * 2 <= self.entries.len() {
                return;
            }
        }
        if self.entries.len() < max_entries(kernel) {
            self.grow(kernel);
        }
    }

    /// Frees slot `n` of bucket `b` and its entry.
    unsafe fn remove(&mut self, b: usize, n: usize) {
        let e = self.index[b].slots[n] & IDX_MASK;
        self.index[b].slots[n] = 0;
        self.entries[e as usize - 1].clear();
        self.free.push(e - 1);
        self.filled -= 1;
    }

    /// Doubles the table, dropping stale entries and keeping the others in arena order.
    #[cold]
    unsafe fn grow(&mut self, kernel: &QuotaKernel) {
        let mut old = std::mem::replace(self, Table::new(self.entries.len() * 2));
        self.swept = old.swept;
        self.clock = old.clock;
        for w in old.entries[..old.used].iter_mut() {
            if w.meta == 0 {
                continue;
            }
            if w.is_stale(kernel) {
                w.clear();
                continue;
            }
            let key = w.key();
            match self.free_slot(&key) {
                Some((b, n)) => {
                    let e = self.used;
                    self.entries[e] = std::mem::replace(w, Way::EMPTY);
                    self.link(&key, b, n, e);
                    self.used += 1;
                    self.filled += 1;
                }
                None => w.clear(),
            }
        }
    }

    /// Releases every entry.
    ///
    /// # Safety
    /// The GIL is held.
    pub(crate) unsafe fn clear(&mut self) {
        for w in self.entries[..self.used].iter_mut() {
            w.clear();
        }
        self.filled = 0;
    }
}
