//! A topic rate's striped cells (see `topic_rate`): a sample's shared description packed in one
//! 128-bit word, each stripe's part of a sample tagged with the sample's generation, each
//! stripe's cached sum of the others, and which stripe a thread writes. Each stripe's cells sit
//! on cache lines of their own, so threads recording into one topic do not share a line.

use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

use portable_atomic::{AtomicI64, AtomicU128};

use crate::ring_state::{pack_cell, unpack_cell};

/// Most stripes per sensor.
const MAX_STRIPES: usize = 8;

/// Stripes per sensor: the machine's cores (as Java's `LongAdder` grows to), at most
/// [`MAX_STRIPES`]; threads are spread over them in the order they first record into any topic
/// sensor.
pub(crate) fn stripes() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(MAX_STRIPES, |n| n.get())
            .clamp(1, MAX_STRIPES)
    })
}

/// A sample's shared description: its generation, start, whether it has started and its
/// sequence number in the ring, in one 128-bit word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) generation: u64,
    pub(crate) start_rel: i64,
    pub(crate) started: bool,
    pub(crate) seq: u16,
}

impl Meta {
    #[inline]
    pub(crate) fn pack(self) -> u128 {
        pack_cell(self.generation, self.start_rel, self.started, self.seq)
    }

    #[inline]
    pub(crate) fn unpack(bits: u128) -> Meta {
        let (generation, start_rel, started, seq) = unpack_cell(bits);
        Meta {
            generation,
            start_rel,
            started,
            seq,
        }
    }
}

/// One stripe's part of a sample: the value and the sample generation it belongs to.
#[inline]
pub(crate) fn pack_part(value: f64, generation: u64) -> u128 {
    ((generation as u128) << 64) | value.to_bits() as u128
}

#[inline]
pub(crate) fn unpack_part(bits: u128) -> (f64, u64) {
    (f64::from_bits(bits as u64), (bits >> 64) as u64)
}

/// Eight cells: one or two cache lines of one stripe, never shared with another stripe.
#[repr(C, align(128))]
pub(crate) struct Line(pub(crate) [AtomicU128; 8]);

/// A stripe's cached sum of everything but its own current cell (see the module comment).
#[repr(C, align(128))]
pub(crate) struct StripeCache {
    /// Sum (48-bit signed) and oldest start (47 bits) and the low 33 bits of the ring version.
    pub(crate) aggregate: AtomicU128,
    /// The caller time (ms) the aggregate was read at.
    pub(crate) at_ms: AtomicI64,
}

pub(crate) const TAG_MASK: u64 = (1 << 33) - 1;
pub(crate) const SUM_LIMIT: u64 = 1 << 43;

pub(crate) fn pack_aggregate(sum: i64, oldest_rel: i64, version: u64) -> u128 {
    let s = (sum as u64) & ((1 << 48) - 1);
    let o = (oldest_rel as u64) & ((1 << 47) - 1);
    (s as u128) | ((o as u128) << 48) | (((version & TAG_MASK) as u128) << 95)
}

pub(crate) fn unpack_aggregate(bits: u128) -> (i64, i64, u64) {
    let s = (bits as u64) & ((1 << 48) - 1);
    let sum = ((s << 16) as i64) >> 16;
    let oldest = ((bits >> 48) as u64 & ((1 << 47) - 1)) as i64;
    (sum, oldest, (bits >> 95) as u64 & TAG_MASK)
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, StdOrdering::Relaxed) % stripes();
}

/// This thread's stripe.
#[inline]
pub(crate) fn my_stripe() -> usize {
    STRIPE.with(|s| *s)
}

/// A word on a line (pair) of its own: written about once per ms, it must not make the words
/// every record reads miss.
#[repr(C, align(128))]
pub(crate) struct Alone<T>(pub(crate) T);

/// Padding on each side of the last-event times, so that they share no line with other data.
pub(crate) const EVENT_PAD: usize = 16;
