//! The samples of a rate sensor: Kafka's `SampledStat` sample list as a lock-free ring.
//!
//! Each sample lives in one 128-bit atomic cell: the f64 value in the low half and, in the high
//! half, the sample's start (ms, offset by 2^46 into 47 bits), a "started" bit (Kafka grows
//! its sample list lazily; unstarted slots take no part in purge, sum or oldest) and a 16-bit
//! sequence number saying which turn of the ring the slot holds. Adding a value, advancing to the
//! next sample and purging a stale sample are each one compare-and-swap on that cell, so a
//! recorder can never add into a sample that another thread has just reset: its CAS fails and it
//! retries. The sample's last-event time sits beside the cell and only ever grows (`fetch_max`),
//! and a recorder raises it *before* adding its value, so a purger that read an old last-event
//! time can only win its CAS if no value landed in between.

use portable_atomic::{AtomicI64, AtomicU128, Ordering};

use crate::ring_state::{pack_cell, raise_last_event, rel_ms, unpack_cell, RingState};
use crate::token_bucket::TokenBucket;
use crate::types::WindowSpec;

/// One sample, unpacked from its cell.
#[derive(Clone, Copy)]
pub(crate) struct Cell {
    pub(crate) value: f64,
    pub(crate) start_rel: i64,
    pub(crate) started: bool,
    seq: u16,
}

impl Cell {
    #[inline]
    fn pack(self) -> u128 {
        pack_cell(self.value.to_bits(), self.start_rel, self.started, self.seq)
    }

    #[inline]
    pub(crate) fn unpack(bits: u128) -> Cell {
        let (value, start_rel, started, seq) = unpack_cell(bits);
        Cell {
            value: f64::from_bits(value),
            start_rel,
            started,
            seq,
        }
    }
}

/// Rings of up to this many slots (`window_num <= 11`, Kafka's default) live inside the sensor,
/// so a sensor is one allocation.
const INLINE_RING: usize = 12;

/// Cells and last-event times of a ring too long to live inline.
type HeapSlots = (Box<[AtomicU128]>, Box<[AtomicI64]>);

/// The sample slots and their last-event times: inline for rings of up to `INLINE_RING` slots,
/// else on the heap (the inline arrays then go unused). Slots past the ring's length stay
/// unstarted.
#[repr(C)]
pub(crate) struct Slots {
    cells: [AtomicU128; INLINE_RING],
    last_event: [AtomicI64; INLINE_RING],
    heap: Option<Box<HeapSlots>>,
    /// The token bucket of a controller-mutation sensor. It sits here because the ring's
    /// 16-byte alignment leaves 8 bytes of padding after `heap`: byte-rate sensors pay nothing
    /// for it (see the size check in `rate`'s tests).
    pub(crate) bucket: Option<Box<TokenBucket>>,
}

impl Slots {
    fn new(len: usize, now: i64) -> Slots {
        let start_rel = rel_ms(now);
        let cell = |i: usize| {
            AtomicU128::new(
                Cell {
                    value: 0.0,
                    start_rel,
                    started: i == 0,
                    seq: 0,
                }
                .pack(),
            )
        };
        let heap = (len > INLINE_RING).then(|| {
            Box::new((
                (0..len).map(cell).collect::<Box<[_]>>(),
                (0..len).map(|_| AtomicI64::new(now)).collect::<Box<[_]>>(),
            ))
        });
        Slots {
            cells: std::array::from_fn(cell),
            last_event: std::array::from_fn(|_| AtomicI64::new(now)),
            heap,
            bucket: None,
        }
    }
}

/// The ring and its clock. `repr(C)`: the clock words, read on every record, come first (they
/// join the sensor's hot head, see `RateSensor`), then the slots.
#[repr(C)]
pub(crate) struct SampleRing {
    /// Latest time this sensor has been told about; earlier times are read as this one.
    latest: AtomicI64,
    /// The current sample's sequence number, the purge floor and the version.
    state: RingState,
    pub(crate) slots: Slots,
}

impl SampleRing {
    /// A ring whose first sample starts at `now` (Kafka creates the sensor on the first record).
    pub(crate) fn new(spec: &WindowSpec, now: i64) -> Self {
        SampleRing {
            latest: AtomicI64::new(now),
            state: RingState::new(now),
            slots: Slots::new(spec.ring_len(), now),
        }
    }

    #[inline]
    pub(crate) fn cells(&self) -> &[AtomicU128] {
        match &self.slots.heap {
            None => &self.slots.cells,
            Some(h) => &h.0,
        }
    }

    #[inline]
    pub(crate) fn last_event(&self) -> &[AtomicI64] {
        match &self.slots.heap {
            None => &self.slots.last_event,
            Some(h) => &h.1,
        }
    }

    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.state.head.load(Ordering::SeqCst)
    }

    #[inline]
    pub(crate) fn version(&self) -> u64 {
        self.state.version.load(Ordering::SeqCst)
    }

    #[inline]
    pub(crate) fn purge_floor(&self) -> i64 {
        self.state.purge_floor.load(Ordering::Acquire)
    }

    /// Latest time this ring was recorded into or measured at.
    #[inline]
    pub(crate) fn latest(&self) -> i64 {
        self.latest.load(Ordering::Acquire)
    }

    /// Moves the ring's clock to `t` if that is later, and returns the time to act at.
    #[inline]
    pub(crate) fn effective_time(&self, t: i64) -> i64 {
        let seen = self.latest.load(Ordering::Relaxed);
        if t <= seen {
            return seen;
        }
        let prev = self.latest.fetch_max(t, Ordering::AcqRel);
        prev.max(t)
    }

    /// Adds `value` at time `t` (Kafka's `SampledStat.record`); returns the time it was recorded
    /// at (`t`, or the latest time if `t` is earlier) and the sample the value went into as it
    /// was right after the add.
    // Always inlined: as a call of its own it cost the record-then-check 20% (measured with
    // benches/record.rs); `CheckCache::record_and_measure` is its hot caller.
    #[inline(always)]
    pub(crate) fn add(&self, spec: &WindowSpec, value: f64, t: i64) -> (i64, Cell) {
        let t = self.effective_time(t);
        let t_rel = rel_ms(t);
        let ring = spec.ring_len() as u64;
        loop {
            let h = self.state.head.load(Ordering::SeqCst);
            let slot = (h % ring) as usize;
            let bits = self.cells()[slot].load(Ordering::Acquire);
            let cur = Cell::unpack(bits);
            if !cur.started || cur.seq != h as u16 {
                // The ring moved on under us; read the head again.
                continue;
            }
            if t_rel - cur.start_rel >= spec.window_ms {
                self.advance(h, ring, t, t_rel);
                continue;
            }
            raise_last_event(&self.last_event()[slot], t);
            let next = Cell {
                value: cur.value + value,
                ..cur
            };
            if self.cells()[slot]
                .compare_exchange(bits, next.pack(), Ordering::SeqCst, Ordering::Acquire)
                .is_ok()
            {
                // A value that lands in a sample another thread has just left behind changes
                // what the aggregate of non-current samples must hold.
                if self.state.head.load(Ordering::SeqCst) != h {
                    self.state.version.fetch_add(1, Ordering::SeqCst);
                }
                return (t, next);
            }
        }
    }

    /// Starts sample `h + 1` at `t` in the next slot (a fresh sample, or the oldest one reset)
    /// and publishes it; any thread that finds the current sample complete may do or finish this.
    #[cold]
    fn advance(&self, h: u64, ring: u64, t: i64, t_rel: i64) {
        let fresh = Cell {
            value: 0.0,
            start_rel: t_rel,
            started: true,
            seq: h.wrapping_add(1) as u16,
        };
        self.state
            .advance(self.cells(), self.last_event(), ring, h, t, fresh.pack());
    }

    /// Resets every started sample whose last event is `expire` ms or more before `now`
    /// (`SampledStat.purgeObsoleteSamples`), then raises `purge_floor`.
    #[cold]
    pub(crate) fn purge(&self, now: i64, expire: i64) {
        self.state
            .purge(self.cells(), self.last_event(), now, expire, |bits, now_rel| {
                Cell {
                    value: 0.0,
                    start_rel: now_rel,
                    ..Cell::unpack(bits)
                }
                .pack()
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring_state::MAX_REL_MS;

    #[test]
    fn samples_are_not_aligned_to_the_clock() {
        let sp = WindowSpec::default();
        let s = SampleRing::new(&sp, 250);
        s.add(&sp, 1.0, 250);
        s.add(&sp, 1.0, 1249); // same sample: 999 ms after its start
        s.add(&sp, 1.0, 1250); // complete: the next sample starts at 1250
        assert_eq!(s.head(), 1);
        let c = Cell::unpack(s.cells()[1].load(Ordering::Relaxed));
        assert_eq!(c.start_rel, rel_ms(1250));
        assert_eq!(c.value, 1.0);
    }

    #[test]
    fn cells_round_trip() {
        let c = Cell {
            value: -2.5,
            start_rel: MAX_REL_MS,
            started: true,
            seq: 65_535,
        };
        let u = Cell::unpack(c.pack());
        assert_eq!(
            (u.value, u.start_rel, u.started, u.seq),
            (-2.5, MAX_REL_MS, true, 65_535)
        );
    }
}
