//! A topic sensor's rate: Kafka's `Rate` over a `WindowedSum` (the same samples, purge and
//! `Rate.windowSize` as a client sensor, see `sample_ring`), with each sample's value split into
//! per-thread stripes that are summed on read, as Java's `LongAdder` does.
//!
//! A topic sensor is recorded by every producer of the topic from every proxy thread; a single
//! value cell per sample would make all of them write one cache line (a client sensor under two
//! threads costs 7.6 times one thread). Here the sample boundaries (start, sequence, last event)
//! are shared and written once per sample or per millisecond, and each thread adds its values
//! into its own stripe's cell. A cell is tagged with the generation of the sample it belongs to:
//! starting or purging a sample gives it a new generation, which empties every stripe's part at
//! once. The sum read is exact: a thread's value is in exactly one live sample, or was retired
//! by a purge that came after it, as with a single cell.
//!
//! The check after a record (record-then-check) needs the window's sum. Reading every stripe on
//! every record would move the other threads' cache lines each time, so each stripe caches the
//! sum of everything but its own current cell, re-read when the ring changes or when the
//! caller's clock passes to the next millisecond: a check sees its own stripe exactly and the
//! other threads' records as of at most one millisecond earlier. With one thread (one stripe)
//! every check equals Kafka's exactly.

use portable_atomic::{AtomicI64, AtomicU128, AtomicU64, Ordering};

use crate::measurement::{window_size_ms, Measurement};
use crate::ring_state::{raise_last_event, rel_ms, RingState, MAX_REL_MS};
use crate::topic_stripes::{
    my_stripe, pack_aggregate, pack_part, stripes, unpack_aggregate, unpack_part, Alone, Line, Meta,
    StripeCache, EVENT_PAD, SUM_LIMIT, TAG_MASK,
};
use crate::types::WindowSpec;

/// A striped sampled rate (see the module comment).
pub struct StripedRate {
    /// Latest time this sensor has been told about (written once per ms).
    latest: Alone<AtomicI64>,
    // Read on every record, written once per sample.
    state: RingState,
    generations: AtomicU64,
    meta: Box<[AtomicU128]>,
    /// Each slot's last-event time at `EVENT_PAD + slot` (written once per ms).
    last_event: Box<[AtomicI64]>,
    /// `STRIPES * lines_per_stripe` lines of parts.
    parts: Box<[Line]>,
    lines_per_stripe: usize,
    caches: Box<[StripeCache]>,
    ring: usize,
    stripes: usize,
}

impl StripedRate {
    /// A rate whose first sample starts at `now` (Kafka creates a sensor on its first record).
    pub fn new(spec: &WindowSpec, now: i64) -> Self {
        let ring = spec.ring_len();
        let start_rel = rel_ms(now);
        let meta = (0..ring)
            .map(|i| {
                AtomicU128::new(
                    Meta {
                        generation: if i == 0 { 1 } else { 0 },
                        start_rel,
                        started: i == 0,
                        seq: 0,
                    }
                    .pack(),
                )
            })
            .collect();
        let lines_per_stripe = ring.div_ceil(8);
        let stripes = stripes();
        StripedRate {
            latest: Alone(AtomicI64::new(now)),
            state: RingState::new(now),
            generations: AtomicU64::new(1),
            meta,
            last_event: (0..ring + 2 * EVENT_PAD).map(|_| AtomicI64::new(now)).collect(),
            parts: (0..stripes * lines_per_stripe)
                .map(|_| Line(std::array::from_fn(|_| AtomicU128::new(0))))
                .collect(),
            lines_per_stripe,
            caches: (0..stripes)
                .map(|_| StripeCache {
                    aggregate: AtomicU128::new(0),
                    at_ms: AtomicI64::new(i64::MIN),
                })
                .collect(),
            ring,
            stripes,
        }
    }

    #[inline]
    fn part(&self, stripe: usize, slot: usize) -> &AtomicU128 {
        &self.parts[stripe * self.lines_per_stripe + slot / 8].0[slot % 8]
    }

    /// Latest time this rate was recorded into or measured at.
    pub fn last_seen_ms(&self) -> i64 {
        self.latest.0.load(Ordering::Acquire)
    }

    #[inline]
    fn effective_time(&self, t: i64) -> i64 {
        let seen = self.latest.0.load(Ordering::Relaxed);
        if t <= seen {
            return seen;
        }
        self.latest.0.fetch_max(t, Ordering::AcqRel).max(t)
    }

    fn new_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Adds `value` at `t` into this thread's stripe; returns the time recorded at, the slot, the
    /// sample it went into and this stripe's part of that sample right after the add.
    #[inline]
    fn add(&self, spec: &WindowSpec, value: f64, t: i64, stripe: usize) -> (i64, usize, Meta, f64) {
        let t = self.effective_time(t);
        let t_rel = rel_ms(t);
        loop {
            let h = self.state.head.load(Ordering::SeqCst);
            let slot = (h % self.ring as u64) as usize;
            let m = Meta::unpack(self.meta[slot].load(Ordering::Acquire));
            if !m.started || m.seq != h as u16 {
                continue;
            }
            if t_rel - m.start_rel >= spec.window_ms {
                self.advance(h, t, t_rel);
                continue;
            }
            // Raised before the add: a purge that read the old last event can then only retire
            // this sample if it changes the generation, which the check below sees.
            raise_last_event(&self.last_event[EVENT_PAD + slot], t);
            let cell = self.part(stripe, slot);
            let mut bits = cell.load(Ordering::Acquire);
            let part = loop {
                let (v, g) = unpack_part(bits);
                let base = if g == m.generation { v } else { 0.0 };
                let next = base + value;
                match cell.compare_exchange(
                    bits,
                    pack_part(next, m.generation),
                    Ordering::SeqCst,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break next,
                    Err(actual) => bits = actual,
                }
            };
            let now_meta = Meta::unpack(self.meta[slot].load(Ordering::SeqCst));
            if now_meta.generation != m.generation {
                // The sample was purged (or reused) between our read and our add: the value
                // went into a retired generation, so it is recorded again into the live one.
                continue;
            }
            if self.state.head.load(Ordering::SeqCst) != h {
                // A value landing in a sample that is no longer current changes the others' sum.
                self.state.version.fetch_add(1, Ordering::SeqCst);
            }
            return (t, slot, m, part);
        }
    }

    #[cold]
    fn advance(&self, h: u64, t: i64, t_rel: i64) {
        let fresh = Meta {
            generation: self.new_generation(),
            start_rel: t_rel,
            started: true,
            seq: h.wrapping_add(1) as u16,
        };
        let last_event = &self.last_event[EVENT_PAD..];
        self.state
            .advance(&self.meta, last_event, self.ring as u64, h, t, fresh.pack());
    }

    /// `SampledStat.purgeObsoleteSamples`: every started sample whose last event is `expire` ms
    /// or more before `now` restarts at `now`, empty (a new generation).
    #[cold]
    fn purge(&self, now: i64, expire: i64) {
        let last_event = &self.last_event[EVENT_PAD..];
        self.state
            .purge(&self.meta, last_event, now, expire, |bits, now_rel| {
                Meta {
                    generation: self.new_generation(),
                    start_rel: now_rel,
                    ..Meta::unpack(bits)
                }
                .pack()
            });
    }

    /// A sample's value: the parts of every stripe that belong to its generation.
    #[inline]
    fn sample_value(&self, slot: usize, generation: u64) -> f64 {
        let mut v = 0.0;
        for stripe in 0..self.stripes {
            let (p, g) = unpack_part(self.part(stripe, slot).load(Ordering::Acquire));
            if g == generation {
                v += p;
            }
        }
        v
    }

    /// The windowed sum in slot order (Kafka's double sum over its samples) and the oldest start;
    /// also the sum without `skip` (stripe, slot) as an integer, when every part is a whole number
    /// below 2^43.
    fn sum_all(&self, skip: Option<(usize, usize)>) -> (f64, i64, Option<i64>) {
        let mut sum = 0.0f64;
        let mut int_sum: i64 = 0;
        let mut exact = true;
        let mut oldest = i64::MAX;
        for (slot, cell) in self.meta.iter().enumerate() {
            let m = Meta::unpack(cell.load(Ordering::Acquire));
            if !m.started {
                continue;
            }
            oldest = oldest.min(m.start_rel);
            let mut sample = 0.0;
            for stripe in 0..self.stripes {
                let (p, g) = unpack_part(self.part(stripe, slot).load(Ordering::Acquire));
                if g != m.generation {
                    continue;
                }
                sample += p;
                if skip == Some((stripe, slot)) {
                    continue;
                }
                let i = p as i64;
                exact &= (i as f64 == p) & (i.unsigned_abs() < SUM_LIMIT);
                int_sum = int_sum.wrapping_add(i);
            }
            sum += sample;
        }
        exact &= int_sum.unsigned_abs() < SUM_LIMIT;
        (sum, oldest, exact.then_some(int_sum))
    }

    /// Purges stale samples at `now` (already the effective time) and measures exactly.
    fn measure_at(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let expire = spec.expire_age_ms();
        if now.saturating_sub(self.state.purge_floor.load(Ordering::Acquire)) >= expire {
            self.purge(now, expire);
        }
        let (sum, oldest, _) = self.sum_all(None);
        let now_rel = rel_ms(now);
        let oldest = if oldest == i64::MAX { now_rel } else { oldest };
        Measurement {
            sum,
            window_ms: window_size_ms(spec, now_rel, oldest),
        }
    }

    /// Purges stale samples at `now` and returns the windowed sum and `W`, summing every stripe.
    pub fn measure(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let now = self.effective_time(now);
        self.measure_at(spec, now)
    }

    /// Adds `value` at `t` (Kafka's `SampledStat.record`).
    #[inline]
    pub fn record(&self, spec: &WindowSpec, value: f64, t: i64) {
        self.add(spec, value, t, my_stripe());
    }

    /// Records `value` at `t` and measures at the same instant (record-then-check): this
    /// thread's stripe exactly, the other stripes as of its cache (see the module comment).
    #[inline]
    pub fn record_and_measure(&self, spec: &WindowSpec, value: f64, t: i64) -> Measurement {
        let stripe = my_stripe();
        let (t, slot, m, part) = self.add(spec, value, t, stripe);
        let cache = &self.caches[stripe];
        let version = self.state.version.load(Ordering::SeqCst);
        let part_int = part as i64;
        let whole = part_int as f64 == part && part_int.unsigned_abs() < SUM_LIMIT;
        if whole
            && cache.at_ms.load(Ordering::Relaxed) == t
            && t.saturating_sub(self.state.purge_floor.load(Ordering::Acquire)) < spec.expire_age_ms()
        {
            let (others, oldest, tag) = unpack_aggregate(cache.aggregate.load(Ordering::Acquire));
            if tag == version & TAG_MASK {
                return Measurement {
                    sum: (others + part_int) as f64,
                    window_ms: window_size_ms(spec, rel_ms(t), oldest.min(m.start_rel)),
                };
            }
        }
        self.measure_and_cache(spec, t, stripe, slot)
    }

    #[cold]
    fn measure_and_cache(&self, spec: &WindowSpec, t: i64, stripe: usize, slot: usize) -> Measurement {
        let expire = spec.expire_age_ms();
        if t.saturating_sub(self.state.purge_floor.load(Ordering::Acquire)) >= expire {
            self.purge(t, expire);
        }
        let version = self.state.version.load(Ordering::SeqCst);
        let (sum, oldest, others) = self.sum_all(Some((stripe, slot)));
        let t_rel = rel_ms(t);
        let oldest = if oldest == i64::MAX { t_rel } else { oldest };
        if let Some(others) = others {
            let cache = &self.caches[stripe];
            cache.aggregate.store(
                pack_aggregate(others, oldest.min(MAX_REL_MS), version),
                Ordering::Release,
            );
            cache.at_ms.store(t, Ordering::Relaxed);
        }
        Measurement {
            sum,
            window_ms: window_size_ms(spec, t_rel, oldest),
        }
    }

    /// The measurement [`measure`](Self::measure) would return at `now`, changing nothing (for
    /// metrics and expiry): samples a purge would retire count as empty samples starting at `now`.
    pub fn peek(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let now = now.max(self.last_seen_ms());
        let expire = spec.expire_age_ms();
        let now_rel = rel_ms(now);
        let mut sum = 0.0;
        let mut oldest = i64::MAX;
        for (slot, cell) in self.meta.iter().enumerate() {
            let m = Meta::unpack(cell.load(Ordering::Acquire));
            if !m.started {
                continue;
            }
            if now.saturating_sub(self.last_event[EVENT_PAD + slot].load(Ordering::Acquire)) >= expire {
                oldest = oldest.min(now_rel);
            } else {
                sum += self.sample_value(slot, m.generation);
                oldest = oldest.min(m.start_rel);
            }
        }
        let oldest = if oldest == i64::MAX { now_rel } else { oldest };
        Measurement {
            sum,
            window_ms: window_size_ms(spec, now_rel, oldest),
        }
    }
}
