//! A lock-free sampled-window rate sensor with the semantics of Kafka's `Rate` over a
//! `WindowedSum` (`SampledStat.java`, `Rate.java`).
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

use portable_atomic::{AtomicI64, AtomicU128, AtomicU64, Ordering};

use crate::token_bucket::TokenBucket;
use crate::types::WindowSpec;

const STARTED: u64 = 1 << 16;
const START_SHIFT: u32 = 17;
const MAX_REL_MS: i64 = (1 << 47) - 1;
/// Times are stored as `t + 2^46` in 47 bits: any `now_ms` within about 2,200 years of 0 (which
/// covers monotonic and Unix-epoch clocks) is exact; times beyond are clamped.
const REL_OFFSET_MS: i64 = 1 << 46;

#[inline]
fn rel_ms(t: i64) -> i64 {
    t.saturating_add(REL_OFFSET_MS).clamp(0, MAX_REL_MS)
}

#[derive(Clone, Copy)]
struct Cell {
    value: f64,
    start_rel: i64,
    started: bool,
    seq: u16,
}

impl Cell {
    #[inline]
    fn pack(self) -> u128 {
        let meta = ((self.start_rel as u64) << START_SHIFT)
            | if self.started { STARTED } else { 0 }
            | self.seq as u64;
        ((meta as u128) << 64) | self.value.to_bits() as u128
    }

    #[inline]
    fn unpack(bits: u128) -> Cell {
        let meta = (bits >> 64) as u64;
        Cell {
            value: f64::from_bits(bits as u64),
            start_rel: (meta >> START_SHIFT) as i64,
            started: meta & STARTED != 0,
            seq: meta as u16,
        }
    }
}

const TAG_MASK: u64 = (1 << 33) - 1;
/// `limit_generation` while a writer updates `limit`.
const WRITING: u64 = u64::MAX;

/// Sum (48-bit signed) and oldest start (47 bits) of the non-current samples, and the low 33
/// bits of the `version` they were read at, packed in 128 bits.
#[derive(Clone, Copy)]
struct Aggregate {
    base_sum: i64,
    oldest_rel: i64,
    tag: u64,
}

impl Aggregate {
    fn pack(self) -> u128 {
        let sum = (self.base_sum as u64) & ((1 << 48) - 1);
        let oldest = (self.oldest_rel as u64) & ((1 << 47) - 1);
        (sum as u128) | ((oldest as u128) << 48) | ((self.tag as u128) << 95)
    }

    #[inline]
    fn unpack(bits: u128) -> Aggregate {
        let sum = (bits as u64) & ((1 << 48) - 1);
        // Sign-extend the 48-bit sum.
        let base_sum = ((sum << 16) as i64) >> 16;
        let oldest_rel = ((bits >> 48) as u64 & ((1 << 47) - 1)) as i64;
        let tag = (bits >> 95) as u64 & TAG_MASK;
        Aggregate {
            base_sum,
            oldest_rel,
            tag,
        }
    }
}

/// Kafka's `Rate.windowSize`: the elapsed time since the oldest sample, topped up to
/// `samples - 1` whole windows, at least 1 ms.
#[inline]
fn window_ms(spec: &WindowSpec, now_rel: i64, oldest_rel: i64) -> i64 {
    let mut elapsed = now_rel - oldest_rel;
    // Java integer division truncates towards zero; so does Rust's.
    let full_windows = elapsed / spec.window_ms;
    let min_full_windows = spec.samples as i64 - 1;
    if full_windows < min_full_windows {
        elapsed += (min_full_windows - full_windows) * spec.window_ms;
    }
    elapsed.max(1)
}

/// What a measurement saw: the windowed sum and Kafka's window length `W` in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub sum: f64,
    pub window_ms: i64,
}

impl Measurement {
    /// `Rate.measure`: the sum per second of `W`.
    #[inline]
    pub fn rate(&self) -> f64 {
        self.sum / (self.window_ms as f64 / 1000.0)
    }
}

/// One quota sensor (one metric-tag set of one quota type).
// Field order is fixed (`repr(C)`) so that fields written on every record sit in the middle
// and the ends hold fields written at most once a window: neighbouring allocations never share
// a cache line with this sensor's hot writes (false sharing cost 25% of two-thread throughput).
#[repr(C)]
pub struct RateSensor {
    /// [`Aggregate`] of the non-current samples, valid while its tag matches `version`.
    aggregate: AtomicU128,
    ring: Ring,
    /// Latest time this sensor has been told about; earlier times are read as this one.
    latest: AtomicI64,
    /// Sequence number of the current sample; its slot is `head % ring_len`.
    head: AtomicU64,
    /// A lower bound of the last-event times of all started samples (they only grow).
    purge_floor: AtomicI64,
    /// Bumped by every change to a sample other than the current one.
    version: AtomicU64,
    /// Cached quota bound (f64 bits; +inf = unlimited), read under `limit_generation`.
    limit: AtomicU64,
    /// The configuration generation `limit` was computed for, or `WRITING` while it changes
    /// (a seqlock: a reader that sees the same generation before and after read a whole value).
    limit_generation: AtomicU64,
}

/// Rings of up to this many slots (`window_num <= 11`, Kafka's default) live inside the sensor,
/// so a sensor is one allocation.
const INLINE_RING: usize = 12;

/// Cells and last-event times of a ring too long to live inline.
type HeapRing = (Box<[AtomicU128]>, Box<[AtomicI64]>);

/// The sample slots and their last-event times: inline for rings of up to `INLINE_RING` slots,
/// else on the heap (the inline arrays then go unused). Slots past the ring's length stay
/// unstarted.
#[repr(C)]
struct Ring {
    cells: [AtomicU128; INLINE_RING],
    last_event: [AtomicI64; INLINE_RING],
    heap: Option<Box<HeapRing>>,
    /// The token bucket of a controller-mutation sensor. It sits here because the ring's
    /// 16-byte alignment leaves 8 bytes of padding after `heap`: byte-rate sensors pay nothing
    /// for it (see the size check in the tests).
    bucket: Option<Box<TokenBucket>>,
}

impl Ring {
    fn new(len: usize, now: i64) -> Ring {
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
        Ring {
            cells: std::array::from_fn(cell),
            last_event: std::array::from_fn(|_| AtomicI64::new(now)),
            heap,
            bucket: None,
        }
    }

    #[inline]
    fn cells(&self) -> &[AtomicU128] {
        match &self.heap {
            None => &self.cells,
            Some(h) => &h.0,
        }
    }

    #[inline]
    fn last_event(&self) -> &[AtomicI64] {
        match &self.heap {
            None => &self.last_event,
            Some(h) => &h.1,
        }
    }
}

impl RateSensor {
    /// A sensor whose first sample starts at `now` (Kafka creates it on the first record).
    pub fn new(spec: &WindowSpec, now: i64) -> Self {
        RateSensor {
            latest: AtomicI64::new(now),
            head: AtomicU64::new(0),
            purge_floor: AtomicI64::new(now),
            version: AtomicU64::new(1),
            aggregate: AtomicU128::new(0),
            limit: AtomicU64::new(f64::INFINITY.to_bits()),
            limit_generation: AtomicU64::new(0),
            ring: Ring::new(spec.ring_len(), now),
        }
    }

    /// A sensor that also keeps a token bucket (a controller-mutation sensor: its `Rate` is
    /// Kafka's `mutation-rate`, the bucket its `tokens`).
    pub fn with_token_bucket(spec: &WindowSpec, now: i64) -> Self {
        let mut s = Self::new(spec, now);
        s.ring.bucket = Some(Box::new(TokenBucket::new()));
        s
    }

    /// The token bucket, for controller-mutation sensors.
    #[inline]
    pub fn token_bucket(&self) -> Option<&TokenBucket> {
        self.ring.bucket.as_deref()
    }

    /// Moves `t` to this sensor's latest time if it is earlier (and the latest time to `t` if
    /// later): every stat of the sensor then sees time move forward only.
    #[inline]
    pub fn clamp_time(&self, t: i64) -> i64 {
        self.effective_time(t)
    }

    /// Moves the sensor's clock to `t` if that is later, and returns the time to act at.
    #[inline]
    fn effective_time(&self, t: i64) -> i64 {
        let seen = self.latest.load(Ordering::Relaxed);
        if t <= seen {
            return seen;
        }
        let prev = self.latest.fetch_max(t, Ordering::AcqRel);
        prev.max(t)
    }

    #[inline]
    fn rel(&self, t: i64) -> i64 {
        rel_ms(t)
    }

    #[inline]
    fn raise_last_event(&self, slot: usize, t: i64) {
        let cell = &self.ring.last_event()[slot];
        if cell.load(Ordering::Relaxed) < t {
            cell.fetch_max(t, Ordering::AcqRel);
        }
    }

    /// Adds `value` at time `t` (Kafka's `SampledStat.record`); returns the time it was recorded
    /// at (`t`, or the sensor's latest time if `t` is earlier).
    pub fn record(&self, spec: &WindowSpec, value: f64, t: i64) -> i64 {
        self.add(spec, value, t).0
    }

    /// [`record`](Self::record), also returning the sample the value went into as it was right
    /// after the add, and that sample's sequence number.
    #[inline]
    fn add(&self, spec: &WindowSpec, value: f64, t: i64) -> (i64, u64, Cell) {
        let t = self.effective_time(t);
        let t_rel = self.rel(t);
        let ring = spec.ring_len() as u64;
        loop {
            let h = self.head.load(Ordering::SeqCst);
            let slot = (h % ring) as usize;
            let bits = self.ring.cells()[slot].load(Ordering::Acquire);
            let cur = Cell::unpack(bits);
            if !cur.started || cur.seq != h as u16 {
                // The ring moved on under us; read the head again.
                continue;
            }
            if t_rel - cur.start_rel >= spec.window_ms {
                self.advance(h, ring, t, t_rel);
                continue;
            }
            self.raise_last_event(slot, t);
            let next = Cell {
                value: cur.value + value,
                ..cur
            };
            if self.ring.cells()[slot]
                .compare_exchange(bits, next.pack(), Ordering::SeqCst, Ordering::Acquire)
                .is_ok()
            {
                // A value that lands in a sample another thread has just left behind changes
                // what the aggregate of non-current samples must hold.
                if self.head.load(Ordering::SeqCst) != h {
                    self.version.fetch_add(1, Ordering::SeqCst);
                }
                return (t, h, next);
            }
        }
    }

    /// Starts sample `h + 1` at `t` in the next slot (a fresh sample, or the oldest one reset)
    /// and publishes it; any thread that finds the current sample complete may do or finish this.
    #[cold]
    fn advance(&self, h: u64, ring: u64, t: i64, t_rel: i64) {
        let next_seq = h.wrapping_add(1);
        let next_slot = (next_seq % ring) as usize;
        let fresh = Cell {
            value: 0.0,
            start_rel: t_rel,
            started: true,
            seq: next_seq as u16,
        };
        loop {
            let bits = self.ring.cells()[next_slot].load(Ordering::Acquire);
            let c = Cell::unpack(bits);
            if c.started && c.seq == next_seq as u16 {
                break; // another recorder already started it
            }
            if self.head.load(Ordering::Acquire) != h {
                return; // the ring moved on without us
            }
            // May fail against a purge of the slot's old contents: read it again.
            if self.ring.cells()[next_slot]
                .compare_exchange(bits, fresh.pack(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.raise_last_event(next_slot, t);
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

    /// Purges stale samples at `now` and returns the windowed sum and `W`
    /// (`SampledStat.measure` + `Rate.windowSize`).
    pub fn measure(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let now = self.effective_time(now);
        self.measure_at(spec, now)
    }

    fn measure_at(&self, spec: &WindowSpec, now: i64) -> Measurement {
        self.measure_exact(spec, now).0
    }

    /// [`measure_at`](Self::measure_at), also telling whether every sample is a whole number
    /// below 2^43 (only then can the non-current samples be cached as an integer aggregate).
    #[inline]
    fn measure_exact(&self, spec: &WindowSpec, now: i64) -> (Measurement, bool) {
        let expire = spec.expire_age_ms();
        // Every started sample's last event is at least `purge_floor`, so when that is recent
        // no sample can be stale and the purge pass is skipped.
        if now.saturating_sub(self.purge_floor.load(Ordering::Acquire)) >= expire {
            self.purge(now, expire);
        }
        // Kafka adds the samples as doubles in slot order. When every value is a whole number
        // below 2^43 (always so for bytes) every partial sum is exact, so an integer sum equals
        // that double sum bit for bit. Both are taken in the one pass over the ring (fractional
        // values, e.g. request time in percent, would otherwise cost a second pass).
        let mut int_sum: i64 = 0;
        let mut float_sum = 0.0f64;
        let mut exact = true;
        let mut oldest = i64::MAX;
        for cell in self.ring.cells().iter() {
            let c = Cell::unpack(cell.load(Ordering::Acquire));
            if c.started {
                let as_int = c.value as i64;
                exact &= (as_int as f64 == c.value) & (as_int.unsigned_abs() < 1 << 43);
                int_sum = int_sum.wrapping_add(as_int);
                float_sum += c.value;
                oldest = oldest.min(c.start_rel);
            }
        }
        let sum = if exact { int_sum as f64 } else { float_sum };
        let now_rel = self.rel(now);
        let oldest = if oldest == i64::MAX { now_rel } else { oldest };
        let m = Measurement {
            sum,
            window_ms: window_ms(spec, now_rel, oldest),
        };
        (m, exact)
    }

    /// Resets every started sample whose last event is `expire` ms or more before `now`
    /// (`SampledStat.purgeObsoleteSamples`), then raises `purge_floor`.
    #[cold]
    fn purge(&self, now: i64, expire: i64) {
        let now_rel = self.rel(now);
        let mut floor = i64::MAX;
        for (slot, cell) in self.ring.cells().iter().enumerate() {
            let mut bits = cell.load(Ordering::Acquire);
            loop {
                let c = Cell::unpack(bits);
                if !c.started {
                    break;
                }
                let last = self.ring.last_event()[slot].load(Ordering::Acquire);
                if now.saturating_sub(last) < expire {
                    floor = floor.min(last);
                    break;
                }
                let reset = Cell {
                    value: 0.0,
                    start_rel: now_rel,
                    ..c
                };
                match cell.compare_exchange(bits, reset.pack(), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.raise_last_event(slot, now);
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

    /// Records `value` at `t` and measures at the same instant (record-then-check).
    ///
    /// Between structural changes (a new sample, a purge) only the current sample changes, so
    /// the sum and oldest start of the other samples are cached in `aggregate`, tagged with the
    /// `version` they were computed at; the check is then O(1) instead of a pass over the ring.
    #[inline]
    pub fn record_and_measure(&self, spec: &WindowSpec, value: f64, t: i64) -> Measurement {
        let (t, _, cur) = self.add(spec, value, t);
        let version = self.version.load(Ordering::SeqCst);
        let agg = Aggregate::unpack(self.aggregate.load(Ordering::Acquire));
        let cur_int = cur.value as i64;
        if agg.tag == version & TAG_MASK
            && t.saturating_sub(self.purge_floor.load(Ordering::Acquire)) < spec.expire_age_ms()
            && cur_int as f64 == cur.value
            && cur_int.unsigned_abs() < 1 << 43
        {
            let sum = (agg.base_sum + cur_int) as f64;
            return Measurement {
                sum,
                window_ms: window_ms(spec, self.rel(t), agg.oldest_rel.min(cur.start_rel)),
            };
        }
        self.measure_and_cache(spec, t)
    }

    /// A full measurement that also refreshes the aggregate when it is exact.
    #[cold]
    fn measure_and_cache(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let version = self.version.load(Ordering::SeqCst);
        let (m, exact) = self.measure_exact(spec, now);
        if !exact {
            return m; // fractional samples: no integer aggregate to cache
        }
        let version_after = self.version.load(Ordering::SeqCst);
        if version != version_after {
            return m; // something moved while we looked; the next call tries again
        }
        let ring = spec.ring_len() as u64;
        let h = self.head.load(Ordering::SeqCst);
        let current = (h % ring) as usize;
        let mut base: i64 = 0;
        let mut oldest = i64::MAX;
        for (slot, cell) in self.ring.cells().iter().enumerate() {
            let c = Cell::unpack(cell.load(Ordering::Acquire));
            if !c.started || slot == current {
                continue;
            }
            let v = c.value as i64;
            if v as f64 != c.value || v.unsigned_abs() >= 1 << 43 {
                return m;
            }
            base += v;
            oldest = oldest.min(c.start_rel);
        }
        if base.unsigned_abs() < 1 << 46 && self.version.load(Ordering::SeqCst) == version {
            let agg = Aggregate {
                base_sum: base,
                oldest_rel: oldest.min(MAX_REL_MS),
                tag: version & TAG_MASK,
            };
            self.aggregate.store(agg.pack(), Ordering::Release);
        }
        m
    }

    /// The bound cached for configuration generation `generation`, if that is the one cached.
    #[inline]
    pub fn cached_limit(&self, generation: u64) -> Option<f64> {
        if self.limit_generation.load(Ordering::Acquire) != generation {
            return None;
        }
        let bits = self.limit.load(Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Acquire);
        (self.limit_generation.load(Ordering::Relaxed) == generation).then(|| f64::from_bits(bits))
    }

    /// Caches `limit` for `generation` unless a newer generation is cached or another thread is
    /// writing (it then simply is not cached this time).
    pub fn store_limit(&self, limit: f64, generation: u64) {
        let cur = self.limit_generation.load(Ordering::Acquire);
        if cur == WRITING || cur >= generation {
            return;
        }
        if self
            .limit_generation
            .compare_exchange(cur, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        std::sync::atomic::fence(Ordering::Release);
        self.limit.store(limit.to_bits(), Ordering::Relaxed);
        self.limit_generation.store(generation, Ordering::Release);
    }

    /// The last bound cached for any generation, if one ever was.
    pub fn last_limit(&self) -> Option<f64> {
        let generation = self.limit_generation.load(Ordering::Acquire);
        if generation == 0 || generation == WRITING {
            return None;
        }
        self.cached_limit(generation)
    }

    /// Latest time this sensor was recorded into or measured at.
    pub fn last_seen_ms(&self) -> i64 {
        self.latest.load(Ordering::Acquire)
    }
}

/// Read-only access for observers (metrics, expiry): nothing here changes the sensor or counts
/// as a use of it.
impl RateSensor {
    /// The measurement [`measure`](Self::measure) would return at `now` (or at the sensor's latest
    /// time if that is later), without purging or moving the sensor's clock: samples a
    /// measurement would purge count as empty samples starting at `now`, exactly as a purge
    /// leaves them. A metrics scrape must not count as use (Kafka's metric reads do not touch
    /// `lastRecordTime`), or no scraped sensor would ever expire.
    pub fn peek(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let now = now.max(self.latest.load(Ordering::Acquire));
        let expire = spec.expire_age_ms();
        let now_rel = self.rel(now);
        let mut sum = 0.0f64;
        let mut oldest = i64::MAX;
        let last_event = self.ring.last_event();
        for (slot, cell) in self.ring.cells().iter().enumerate() {
            let c = Cell::unpack(cell.load(Ordering::Acquire));
            if !c.started {
                continue;
            }
            if now.saturating_sub(last_event[slot].load(Ordering::Acquire)) >= expire {
                oldest = oldest.min(now_rel);
            } else {
                sum += c.value;
                oldest = oldest.min(c.start_rel);
            }
        }
        let oldest = if oldest == i64::MAX { now_rel } else { oldest };
        Measurement {
            sum,
            window_ms: window_ms(spec, now_rel, oldest),
        }
    }
}

/// Kafka's `QuotaUtils.throttleTime`: `round((rate - bound) / bound * W)` when the rate exceeds
/// the bound, else 0; saturated at `i32::MAX` instead of wrapping like Kafka's `.toInt`.
#[inline]
pub fn throttle_time_ms(m: &Measurement, bound: f64) -> i32 {
    let rate = m.rate();
    // Written so that a NaN rate never throttles.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(rate > bound) {
        return 0;
    }
    let raw = (rate - bound) / bound * m.window_ms as f64;
    // f64::round is half away from zero, which is Java's Math.round for the positive values here.
    let rounded = raw.round();
    if rounded >= i32::MAX as f64 {
        i32::MAX
    } else if rounded > 0.0 {
        rounded as i32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WindowSpec {
        WindowSpec::default()
    }

    #[test]
    fn fresh_sensor_assumes_n_minus_one_windows() {
        let s = RateSensor::new(&spec(), 0);
        let m = s.record_and_measure(&spec(), 5000.0, 0);
        assert_eq!(m.window_ms, 10_000);
        assert_eq!(m.sum, 5000.0);
        assert_eq!(m.rate(), 500.0);
    }

    #[test]
    fn public_example_fresh_sensor() {
        // quota 1000 B/s: 5000 B at 0, 5000 B at 200 ms, 1000 B at 1 s, 0 B at 6 s -> 0, 0, 1000, 1000
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        let got: Vec<i32> = [(5000.0, 0), (5000.0, 200), (1000.0, 1000), (0.0, 6000)]
            .iter()
            .map(|&(v, t)| throttle_time_ms(&s.record_and_measure(&sp, v, t), 1000.0))
            .collect();
        assert_eq!(got, vec![0, 0, 1000, 1000]);
    }

    #[test]
    fn public_example_default_client_quota() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        for i in 0..10 {
            let m = s.record_and_measure(&sp, 400.0, i * 1000);
            assert_eq!(throttle_time_ms(&m, 500.0), 0, "t={i}s");
        }
        let m = s.record_and_measure(&sp, 2300.0, 10_500);
        assert_eq!(m.window_ms, 10_500);
        assert_eq!(throttle_time_ms(&m, 500.0), 2100);
    }

    /// A request-time sensor alone: thread time as percent of a thread (KIP-124), fractional
    /// values through Kafka's slot-order double sum. semantics.md's REQUEST example.
    #[test]
    fn request_time_sensor_public_example() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        let pct = |nanos: f64| nanos * crate::kernel::NANOS_TO_PERCENT;
        for i in 0..10 {
            let m = s.record_and_measure(&sp, pct(4e6), i * 1000);
            assert_eq!(throttle_time_ms(&m, 1.0), 0);
        }
        let m = s.record_and_measure(&sp, pct(67.1e6), 10_500);
        assert_eq!(m.window_ms, 10_500);
        assert_eq!(throttle_time_ms(&m, 1.0), 210);
        // The same sum as Kafka's: doubles added in slot order.
        let mut kafka = 0.0f64;
        for v in [
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
        ] {
            kafka += v;
        }
        kafka += pct(67.1e6);
        assert_eq!(m.sum, kafka);
    }

    #[test]
    fn samples_are_not_aligned_to_the_clock() {
        let sp = spec();
        let s = RateSensor::new(&sp, 250);
        s.record(&sp, 1.0, 250);
        s.record(&sp, 1.0, 1249); // same sample: 999 ms after its start
        s.record(&sp, 1.0, 1250); // complete: the next sample starts at 1250
        assert_eq!(s.head.load(Ordering::Relaxed), 1);
        let c = Cell::unpack(s.ring.cells()[1].load(Ordering::Relaxed));
        assert_eq!(c.start_rel, rel_ms(1250));
        assert_eq!(c.value, 1.0);
    }

    #[test]
    fn stale_samples_are_purged_by_last_event() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        s.record(&sp, 100.0, 0);
        s.record(&sp, 100.0, 5000);
        // 11 s after the first event: that sample is reset, the one from 5 s is kept.
        let m = s.measure(&sp, 11_000);
        assert_eq!(m.sum, 100.0);
        // E = 11000 - 5000 = 6000 -> 6 full windows < 10 -> W = 6000 + 4000
        assert_eq!(m.window_ms, 10_000);
        let m = s.measure(&sp, 10_999 + 5000);
        assert_eq!(m.sum, 100.0);
        let m = s.measure(&sp, 11_000 + 5000);
        assert_eq!(m.sum, 0.0);
    }

    #[test]
    fn earlier_time_is_read_as_latest() {
        let sp = spec();
        let s = RateSensor::new(&sp, 10_000);
        s.record(&sp, 1000.0, 10_000);
        let t = s.record(&sp, 1000.0, 2_000);
        assert_eq!(t, 10_000);
        let m = s.measure(&sp, 0);
        assert_eq!(m.window_ms, 10_000);
        assert_eq!(m.sum, 2000.0);
    }

    #[test]
    fn backwards_time_acts_like_the_latest_time() {
        // With one sample Kafka's W can be 1 ms; a record "in the past" must act exactly like one
        // at the sensor's latest time instead of shrinking W further or going negative.
        let sp = WindowSpec::new(1, 1).unwrap();
        let past = RateSensor::new(&sp, 5000);
        past.record(&sp, 10.0, 5000);
        let m_past = past.record_and_measure(&sp, 10.0, 1000);
        let same = RateSensor::new(&sp, 5000);
        same.record(&sp, 10.0, 5000);
        let m_same = same.record_and_measure(&sp, 10.0, 5000);
        assert_eq!(m_past, m_same);
        assert_eq!(throttle_time_ms(&m_past, 1000.0), 19);
    }

    #[test]
    fn fractional_values_are_summed_in_slot_order_like_kafka() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        s.record(&sp, 0.1, 0);
        s.record(&sp, 0.2, 1000);
        s.record(&sp, 0.3, 2000);
        let expected = ((0.0 + 0.1) + 0.2) + 0.3; // 0.6000000000000001, not 0.6
        assert_eq!(s.measure(&sp, 2000).sum, expected);
        // Whole numbers take the integer path and agree with the double sum.
        let s = RateSensor::new(&sp, 0);
        s.record(&sp, 9_007_199_254.0, 0);
        s.record(&sp, 3.0, 1000);
        assert_eq!(s.measure(&sp, 1000).sum, 9_007_199_254.0 + 3.0);
        // Above 2^43 the double path is used.
        let s = RateSensor::new(&sp, 0);
        let big = 2f64.powi(53);
        s.record(&sp, big, 0);
        s.record(&sp, 1.0, 1000);
        assert_eq!(s.measure(&sp, 1000).sum, big + 1.0);
    }

    /// The O(1) check must equal a full pass over the ring after every record, whatever the
    /// traffic: bursts, idle gaps that purge, unrecords, fractional values, late times.
    #[test]
    fn cached_check_equals_full_measurement() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for (window_num, secs) in [(11, 1), (1, 1), (2, 3), (5, 2), (30, 1)] {
            let sp = WindowSpec::new(window_num, secs).unwrap();
            let fast = RateSensor::new(&sp, 0);
            let full = RateSensor::new(&sp, 0);
            let mut t = 0i64;
            for _ in 0..20_000 {
                t += match next(10) {
                    0 => next(30_000) as i64,
                    1 => -(next(500) as i64),
                    _ => next(400) as i64,
                };
                let v = match next(8) {
                    0 => -(next(1000) as f64), // an unrecord
                    1 => next(1000) as f64 + 0.25,
                    _ => next(100_000) as f64,
                };
                let a = fast.record_and_measure(&sp, v, t);
                let ft = full.record(&sp, v, t);
                let b = full.measure_at(&sp, ft);
                assert_eq!(a, b, "window_num={window_num} t={t} v={v}");
            }
        }
    }

    /// Memory per sensor is a budget (<= 512 B resident per live sensor at 1M sensors): the
    /// token bucket pointer must live in padding, not grow every byte-rate sensor.
    #[test]
    fn sensor_size_is_unchanged_by_the_bucket_pointer() {
        assert_eq!(std::mem::size_of::<Ring>(), 304);
        assert_eq!(std::mem::size_of::<RateSensor>(), 368);
    }

    #[test]
    fn peek_equals_measure_and_changes_nothing() {
        let sp = spec();
        let filled = || {
            let s = RateSensor::new(&sp, 0);
            for (v, t) in [(100.0, 0), (0.25, 1500), (300.0, 4000), (7.0, 9000)] {
                s.record(&sp, v, t);
            }
            s
        };
        let a = filled();
        for now in [9000, 12_000, 14_999, 15_000, 20_000, 40_000] {
            let peeked = a.peek(&sp, now);
            assert_eq!(a.last_seen_ms(), 9000, "peek must not move the clock");
            assert_eq!(peeked, filled().measure(&sp, now), "now={now}");
        }
        // An earlier time is read as the latest time, as in measure.
        assert_eq!(a.peek(&sp, 0), a.peek(&sp, 9000));
    }

    #[test]
    fn throttle_saturates() {
        let m = Measurement {
            sum: 1e30,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), i32::MAX);
        let m = Measurement {
            sum: 10.0,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), 0);
    }

    #[test]
    fn throttle_rounds_half_up() {
        // rate 1.00005 over bound 1 with W = 10000 -> 0.5 ms -> 1
        let m = Measurement {
            sum: 10.0005,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), 1);
    }

    #[test]
    fn limit_cache_keeps_newest_generation() {
        let s = RateSensor::new(&spec(), 0);
        assert_eq!(s.cached_limit(1), None);
        s.store_limit(5.0, 2);
        s.store_limit(4.0, 1);
        assert_eq!(s.cached_limit(2), Some(5.0));
        assert_eq!(s.cached_limit(1), None);
    }

    #[test]
    fn ring_wraps_and_reuses_oldest_slot() {
        let sp = WindowSpec::new(2, 1).unwrap(); // 3 slots
        let s = RateSensor::new(&sp, 0);
        for i in 0..7 {
            s.record(&sp, 1.0, i * 1000);
        }
        // Only the last window_num (2) samples have last events within 2 s of 6000; the third
        // slot (started at 4000) is kept too: its last event is 4000, 2000 ms old -> purged.
        let m = s.measure(&sp, 6000);
        assert_eq!(m.sum, 2.0);
    }

    #[test]
    fn concurrent_records_lose_nothing() {
        use std::sync::Arc;
        let sp = spec();
        let s = Arc::new(RateSensor::new(&sp, 0));
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for i in 0..50_000i64 {
                        // Times move through several windows so advances race with adds.
                        s.record(&sp, 1.0, i / 10_000 * 1000 + k);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let m = s.measure(&sp, 4003);
        assert_eq!(m.sum, 200_000.0);
    }
}
