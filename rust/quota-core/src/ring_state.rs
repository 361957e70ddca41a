//! What a ring of samples does the same whatever its cells hold: the turn of the ring, the purge
//! floor and the version, advancing to the next sample and purging stale samples (Kafka's
//! `SampledStat.record` moving on and `purgeObsoleteSamples`). A client sensor's `SampleRing`
//! keeps each sample's value in its cell; a topic sensor's `StripedRate` keeps a generation
//! there, its value being in per-thread stripes. Both start a sample and reset a stale one with
//! one compare-and-swap on its cell, so the protocol is written once, here.

use portable_atomic::{AtomicI64, AtomicU128, AtomicU64, Ordering};

pub(crate) const MAX_REL_MS: i64 = (1 << 47) - 1;
/// Times are stored as `t + 2^46` in 47 bits: any `now_ms` within about 2,200 years of 0 (which
/// covers monotonic and Unix-epoch clocks) is exact; times beyond are clamped.
const REL_OFFSET_MS: i64 = 1 << 46;

/// `t` as a ring stores it (offset into 47 bits).
#[inline]
pub(crate) fn rel_ms(t: i64) -> i64 {
    t.saturating_add(REL_OFFSET_MS).clamp(0, MAX_REL_MS)
}

const STARTED: u64 = 1 << 16;
const START_SHIFT: u32 = 17;

/// A sample's 128-bit cell: what the ring keeps in it (`low`: a value's bits, or a generation)
/// in the low half and, in the high half, the sample's start (as `rel_ms` stores it, in 47
/// bits), a "started" bit (Kafka grows its sample list lazily; unstarted slots take no part in
/// purge, sum or oldest) and the 16-bit sequence number of the ring's turn it holds.
#[inline]
pub(crate) fn pack_cell(low: u64, start_rel: i64, started: bool, seq: u16) -> u128 {
    let high = ((start_rel as u64) << START_SHIFT) | if started { STARTED } else { 0 } | seq as u64;
    ((high as u128) << 64) | low as u128
}

/// A cell's `(low, start_rel, started, seq)` (see [`pack_cell`]).
#[inline]
pub(crate) fn unpack_cell(bits: u128) -> (u64, i64, bool, u16) {
    let high = (bits >> 64) as u64;
    (
        bits as u64,
        (high >> START_SHIFT) as i64,
        high & STARTED != 0,
        high as u16,
    )
}

/// Raises a sample's last-event time to `t`: it only ever grows.
#[inline]
pub(crate) fn raise_last_event(last_event: &AtomicI64, t: i64) {
    if last_event.load(Ordering::Relaxed) < t {
        last_event.fetch_max(t, Ordering::AcqRel);
    }
}

/// The ring's turn, purge floor and version.
#[repr(C)]
pub(crate) struct RingState {
    /// Sequence number of the current sample; its slot is `head % ring_len`.
    pub(crate) head: AtomicU64,
    /// A lower bound of the last-event times of all started samples (they only grow).
    pub(crate) purge_floor: AtomicI64,
    /// Bumped by every change to a sample other than the current one.
    pub(crate) version: AtomicU64,
}

impl RingState {
    /// The state of a ring whose first sample starts at `now`.
    pub(crate) fn new(now: i64) -> Self {
        RingState {
            head: AtomicU64::new(0),
            purge_floor: AtomicI64::new(now),
            version: AtomicU64::new(1),
        }
    }

    /// Starts sample `h + 1` as the cell `fresh` (started, of that turn) at `t` in the next of
    /// `ring` slots of `cells` (a fresh sample, or the oldest one reset) and publishes it; any
    /// thread that finds the current sample complete may do or finish this. `last_event[slot]`
    /// is the last-event time of `cells[slot]`.
    #[cold]
    pub(crate) fn advance(
        &self,
        cells: &[AtomicU128],
        last_event: &[AtomicI64],
        ring: u64,
        h: u64,
        t: i64,
        fresh: u128,
    ) {
        let next_seq = h.wrapping_add(1);
        debug_assert_eq!(unpack_cell(fresh).3, next_seq as u16);
        let next_slot = (next_seq % ring) as usize;
        loop {
            let bits = cells[next_slot].load(Ordering::Acquire);
            let (_, _, started, seq) = unpack_cell(bits);
            if started && seq == next_seq as u16 {
                break; // another recorder already started it
            }
            if self.head.load(Ordering::Acquire) != h {
                return; // the ring moved on without us
            }
            // May fail against a purge of the slot's old contents: read it again.
            if cells[next_slot]
                .compare_exchange(bits, fresh, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                raise_last_event(&last_event[next_slot], t);
                break;
            }
        }
        if self
            .head
            .compare_exchange(h, next_seq, Ordering::SeqCst, Ordering::Acquire)
            .is_ok()
        {
            self.version.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `SampledStat.purgeObsoleteSamples`: every started sample of `cells` whose last event is
    /// `expire` ms or more before `now` is replaced by `reset(its cell, now as the ring stores
    /// it)` (the sample restarted at `now`, empty), then `purge_floor` is raised.
    #[cold]
    pub(crate) fn purge(
        &self,
        cells: &[AtomicU128],
        last_event: &[AtomicI64],
        now: i64,
        expire: i64,
        mut reset: impl FnMut(u128, i64) -> u128,
    ) {
        let now_rel = rel_ms(now);
        let mut floor = i64::MAX;
        for (slot, cell) in cells.iter().enumerate() {
            let mut bits = cell.load(Ordering::Acquire);
            loop {
                let (_, _, started, _) = unpack_cell(bits);
                if !started {
                    break;
                }
                let last = last_event[slot].load(Ordering::Acquire);
                if now.saturating_sub(last) < expire {
                    floor = floor.min(last);
                    break;
                }
                match cell.compare_exchange(bits, reset(bits, now_rel), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        raise_last_event(&last_event[slot], now);
                        self.version.fetch_add(1, Ordering::SeqCst);
                        floor = floor.min(now);
                        break;
                    }
                    Err(actual) => bits = actual,
                }
            }
        }
        if floor != i64::MAX {
            self.purge_floor.fetch_max(floor, Ordering::AcqRel);
        }
    }
}
