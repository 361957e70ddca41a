//! Shadow quotas: a second configuration (its own [`QuotaKernel`]) evaluated on the same
//! traffic by the same response step and never enforced. Its throttles are never written into a
//! response nor used to mute; they give, per entity, the would-be throttle time and the
//! would-be delayed bytes.
//!
//! The shadow follows the client it would have throttled: a shadow throttle of `t` ms at `now`
//! would have muted the connection until `now + t` (KIP-219), so a response the shadow step sees
//! before then, to a request read after `now`, belongs to a request that client could not have
//! sent yet. A request read before the mute began is recorded when answered, even during the
//! mute, as the enforcing proxy records it: it pipelines, and muting stops only its reads (the
//! proxy says when each request was read, `shadow_queue::request_age`). In `bench_shadow.py`
//! this moved nothing (delayed bytes predicted 15% over promotion's before, 17% after): the
//! proxy reads serially during a mute and for a window after it, so few requests are in flight
//! when one begins. Such a response is not
//! recorded into the shadow kernel then (the would-be client's rate is the one its quota allows,
//! as it would be once enforced): its bytes are held as the would-be client's *backlog* (per
//! connection, Produce and Fetch; at most what the client sent, dropped with the connection).
//! The would-be *throttle time* is the sum of the throttles the shadow step gives the responses
//! it records: what Kafka's `throttle-time` sensor would sum for that entity. Without the mute
//! the shadow would throttle every response of a client sending over its quota, a far larger sum
//! than enforcing that quota gives.
//!
//! The backlog is what makes the throttle time a prediction rather than a lower bound. A producer
//! keeps what it cannot send (librdkafka's buffer, its requests queued on the muted connection)
//! and, once unmuted, the proxy reads those requests one after another, each recorded, until one
//! is throttled. So the first Produce response at or after the would-be mute's end is recorded,
//! then the backlog after it, request by request (the response's size each, merged to at most
//! [`MAX_DRAIN_STEPS`] records), until one is throttled; the rest stays held. A consumer does
//! not queue fetches: its next Fetch returns what it missed, at most what a Fetch may ask for
//! (the rest stays held). Measured (`benches/bench_shadow.py`, librdkafka at 2.5x its quota):
//! without the backlog the throttle time was predicted 34% short (a client resuming at its pace
//! after each mute); with the whole backlog recorded in one burst at the mute's end 40% over (the
//! shadow let the client's whole demand through, enforcing 1.1x to 1.4x the quota); drained
//! request by request until throttled, within 4% in three runs (`benches/results/shadow.md`).
//!
//! The would-be *delayed bytes* are what the backlog grows by beyond its peak since it was last
//! empty: bytes held in place of drained ones are not counted (the client sent as many
//! meanwhile), a drained backlog's bytes are counted once, when held. That is the bytes the quota
//! holds back over a window, what promotion measures (the client's demand less what it sent).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::handle::{ClientHandle, ShadowStep};
use crate::kernel::QuotaKernel;
use crate::response::ResponseThrottle;
use crate::shadow_queue::{self, Entry, Op, Queued};
pub use crate::shadow_queue::{flush, request_age};
use crate::types::ClientQuotaType;

/// Entities with totals of their own at most; the others are summed in one row.
pub const MAX_SHADOW_ENTITIES: usize = 10_000;

/// The most records a Produce response drains the would-be producer's backlog in (its queued
/// requests are merged to fit): the step's cost stays bounded whatever the backlog.
pub const MAX_DRAIN_STEPS: u64 = 32;

/// One entity's (raw user, raw client id) shadow totals since the shadow started.
#[derive(Default)]
pub struct ShadowTotals {
    /// Would-be throttle time (ms), by the quota type the shadow would have enforced.
    throttle_ms: [AtomicU64; 4],
    /// Would-be delayed bytes: Produce and Fetch.
    delayed_bytes: [AtomicU64; 2],
}

/// A row of [`ShadowKernel::totals`]: `user` and `client_id` `None` for the entities beyond
/// [`MAX_SHADOW_ENTITIES`], summed.
#[derive(Clone, Debug, PartialEq)]
pub struct ShadowRow {
    pub user: Option<Arc<str>>,
    pub client_id: Option<Arc<str>>,
    pub quota_type: ClientQuotaType,
    pub throttle_time_ms: u64,
    pub delayed_bytes: u64,
}

type EntityKey = (Arc<str>, Arc<str>);

/// The shadow configuration's kernel and the totals of every entity it has seen.
pub struct ShadowKernel {
    kernel: Arc<QuotaKernel>,
    entities: Mutex<HashMap<EntityKey, Arc<ShadowTotals>>>,
    rest: Arc<ShadowTotals>,
}

impl std::fmt::Debug for ShadowKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowKernel")
            .field("entities", &self.entities.lock().len())
            .finish_non_exhaustive()
    }
}

impl ShadowKernel {
    pub fn new(kernel: Arc<QuotaKernel>) -> Arc<ShadowKernel> {
        Arc::new(ShadowKernel {
            kernel,
            entities: Mutex::default(),
            rest: Arc::default(),
        })
    }

    pub fn kernel(&self) -> &Arc<QuotaKernel> {
        &self.kernel
    }

    /// The shadow step of a connection's `(user, client_id)`: made once per handle (one lock),
    /// never on a record.
    pub fn step(&self, user: &str, client_id: &str) -> Arc<ShadowHandle> {
        let totals = {
            let mut entities = self.entities.lock();
            let key: EntityKey = (Arc::from(user), Arc::from(client_id));
            match entities.get(&key) {
                Some(t) => Arc::clone(t),
                None if entities.len() >= MAX_SHADOW_ENTITIES => Arc::clone(&self.rest),
                None => Arc::clone(entities.entry(key).or_default()),
            }
        };
        shadow_queue::register(|id| {
            Arc::new(ShadowHandle {
                id,
                handle: ClientHandle::new(Arc::clone(&self.kernel), user, client_id),
                totals,
                muted_until_ms: AtomicI64::new(i64::MIN),
                mute_start_ms: AtomicI64::new(i64::MIN),
                backlog: Default::default(),
                backlog_peak: Default::default(),
                logged_throttle_ms: Default::default(),
                logged_delayed_bytes: Default::default(),
            })
        })
    }

    /// Every entity's totals (a row per quota type with a non-zero total), the rest summed last;
    /// every response queued so far stepped first.
    pub fn totals(&self) -> Vec<ShadowRow> {
        shadow_queue::flush();
        let mut rows = Vec::new();
        let entities = self.entities.lock();
        let mut keys: Vec<&EntityKey> = entities.keys().collect();
        keys.sort();
        let each = keys
            .into_iter()
            .map(|k| (Some(k), &entities[k]))
            .chain(std::iter::once((None, &self.rest)));
        for (key, t) in each {
            for qt in ClientQuotaType::ALL {
                let throttle = t.throttle_ms[qt.index()].load(Relaxed);
                let delayed = t.delayed_bytes.get(qt.index()).map_or(0, |b| b.load(Relaxed));
                if throttle > 0 || delayed > 0 {
                    rows.push(ShadowRow {
                        user: key.map(|k| Arc::clone(&k.0)),
                        client_id: key.map(|k| Arc::clone(&k.1)),
                        quota_type: qt,
                        throttle_time_ms: throttle,
                        delayed_bytes: delayed,
                    });
                }
            }
        }
        rows
    }
}

/// A connection's shadow step: its handle on the shadow kernel and its would-be mute.
pub struct ShadowHandle {
    /// The id its queued entries carry (`shadow_queue`).
    id: u64,
    handle: ClientHandle,
    totals: Arc<ShadowTotals>,
    /// Until when (ms) the would-be connection is muted.
    muted_until_ms: AtomicI64,
    /// When (ms) its current (or last) would-be mute began: requests read before are recorded.
    mute_start_ms: AtomicI64,
    /// The would-be client's backlog (Produce, Fetch): the bytes that came while it was muted,
    /// recorded with its first response after the mute. At most what the client sent meanwhile;
    /// dropped with the connection.
    backlog: [AtomicU64; 2],
    /// The backlog's largest since it was last empty.
    backlog_peak: [AtomicU64; 2],
    /// Not yet taken by the request log, by quota type: the would-be throttle (ms), and the
    /// delayed bytes (Produce, Fetch). By type so that a row takes only its own type's: a
    /// produce throttle never lands on the Request row of the same response, nor on another
    /// request's row of the connection.
    logged_throttle_ms: [AtomicI32; 4],
    logged_delayed_bytes: [AtomicU64; 2],
}

impl ShadowHandle {
    /// Whether the would-be client is muted at `now`, and was when the request was `read`: then
    /// the response's `bytes` (of type `t`) are delayed and it is not recorded.
    #[inline]
    fn muted(&self, now: i64, read: i64, t: ClientQuotaType, bytes: f64) -> bool {
        if !self.in_mute(now) || read < self.mute_start_ms.load(Relaxed) {
            return false;
        }
        let i = t.index();
        if let (Some(q), Some(peak), Some(d)) = (
            self.backlog.get(i),
            self.backlog_peak.get(i),
            self.totals.delayed_bytes.get(i),
        ) {
            let b = bytes as u64;
            let held = q.fetch_add(b, Relaxed).saturating_add(b);
            // Delayed: what the backlog grows beyond its peak (bytes held in place of drained
            // ones are not: the client sent as many meanwhile).
            let grown = held.saturating_sub(peak.fetch_max(held, Relaxed));
            if grown > 0 {
                d.fetch_add(grown, Relaxed);
                self.logged_delayed_bytes[i].fetch_add(grown, Relaxed);
            }
        }
        true
    }

    /// Whether `now` is inside the would-be mute (its backlog is not drained then).
    #[inline]
    fn in_mute(&self, now: i64) -> bool {
        now < self.muted_until_ms.load(Relaxed)
    }

    /// Puts back the `rest` of a drained backlog of index `i`; an emptied backlog's peak is 0
    /// again (what it holds next is delayed anew).
    #[inline]
    fn hold_rest(&self, i: usize, rest: u64) {
        if rest > 0 {
            self.backlog[i].fetch_add(rest, Relaxed);
        } else if self.backlog[i].load(Relaxed) == 0 {
            self.backlog_peak[i].store(0, Relaxed);
        }
    }

    /// The would-be throttle `r` of a recorded response: totalled, and the would-be mute (a
    /// throttle during a mute extends it, as the proxy's mute keeps the later end).
    #[inline]
    fn throttled(&self, r: ResponseThrottle, now: i64) {
        let Some(t) = r.enforce else { return };
        if r.throttle_time_ms <= 0 {
            return;
        }
        self.totals.throttle_ms[t.index()].fetch_add(r.throttle_time_ms as u64, Relaxed);
        self.logged_throttle_ms[t.index()].fetch_add(r.throttle_time_ms, Relaxed);
        if !self.in_mute(now) {
            self.mute_start_ms.store(now, Relaxed);
        }
        self.muted_until_ms
            .fetch_max(now.saturating_add(i64::from(r.mute_ms())), Relaxed);
    }

    /// The bytes to record for an unmuted Fetch response of `bytes`: the backlog the would-be
    /// consumer held during its mute fetched now with this response, at most `cap` (a Fetch
    /// cannot ask for more than its quota window allows: the rest stays).
    #[inline]
    fn fetch_burst(&self, bytes: f64, cap: f64, now: i64) -> f64 {
        let q = &self.backlog[ClientQuotaType::Fetch.index()];
        if q.load(Relaxed) == 0 || bytes >= cap || self.in_mute(now) {
            return bytes;
        }
        let held = q.swap(0, Relaxed) as f64;
        let sent = (bytes + held).min(cap);
        self.hold_rest(ClientQuotaType::Fetch.index(), (bytes + held - sent) as u64);
        sent
    }

    /// The would-be client's backlog of type `t` (bytes), every queued response stepped: for
    /// tests and metrics.
    pub fn backlog_bytes(&self, t: ClientQuotaType) -> u64 {
        shadow_queue::flush();
        self.backlog.get(t.index()).map_or(0, |q| q.load(Relaxed))
    }

    /// The shadow kernel's handle (its sensors, for tests and metrics).
    pub fn handle(&self) -> &ClientHandle {
        &self.handle
    }
}

impl Queued for ShadowHandle {
    /// Steps one queued response (`shadow_queue`'s consumer, in clock order).
    fn evaluate(&self, op: Op, size: f64, request_nanos: f64, now: i64, read: i64) {
        match op {
            Op::Produce { answered } => self.produce_step(size, request_nanos, answered, now, read),
            Op::Fetch => self.fetch_step(size, request_nanos, now, read),
            Op::Request => self.request_step(request_nanos, now, read),
            Op::Close => {}
        }
    }
}

impl ShadowHandle {
    fn produce_step(&self, size: f64, request_nanos: f64, answered: bool, now: i64, read: i64) {
        if self.muted(now, read, ClientQuotaType::Produce, size) {
            return;
        }
        // Inputs were checked by the enforced step; a shadow error is never the client's.
        let Ok(mut r) = self.handle.produce_response(size, request_nanos, answered, Some(now)) else {
            return;
        };
        let q = &self.backlog[ClientQuotaType::Produce.index()];
        if r.throttle_time_ms <= 0 && q.load(Relaxed) > 0 && !self.in_mute(now) {
            // The would-be client's queued requests, read one after another as this one was,
            // until one is throttled (it is muted again) or none is left. Not during the mute
            // (a request read before it, answered now): they wait for its end.
            let mut held = q.swap(0, Relaxed);
            let chunk = (size as u64).max(held / MAX_DRAIN_STEPS).max(1);
            while held > 0 && r.throttle_time_ms <= 0 {
                let c = chunk.min(held);
                held -= c;
                match self.handle.produce_response(c as f64, 0.0, answered, Some(now)) {
                    Ok(next) => r = next,
                    Err(_) => break,
                }
            }
            self.hold_rest(ClientQuotaType::Produce.index(), held);
        }
        self.throttled(r, now);
    }

    fn fetch_step(&self, size: f64, request_nanos: f64, now: i64, read: i64) {
        if self.muted(now, read, ClientQuotaType::Fetch, size) {
            return;
        }
        let cap = self.handle.fetch_request_cap();
        let size = self.fetch_burst(size, cap, now);
        if let Ok(step) = self.handle.fetch_response(size, cap, request_nanos, Some(now)) {
            self.throttled(step.throttle, now);
        }
    }

    fn request_step(&self, request_nanos: f64, now: i64, read: i64) {
        if self.muted(now, read, ClientQuotaType::Request, 0.0) {
            return;
        }
        if let Ok(r) = self.handle.request_response(request_nanos, Some(now)) {
            self.throttled(r, now);
        }
    }

    /// Queues a response, with the age its caller gave its request (`request_age`).
    #[inline]
    fn queue(&self, op: Op, size: f64, nanos: f64, now: i64) {
        self.push(op, size, nanos, now, shadow_queue::take_request_age());
    }

    #[inline]
    fn push(&self, op: Op, size: f64, nanos: f64, now: i64, age_ms: u32) {
        shadow_queue::push(Entry {
            id: self.id,
            op,
            size,
            nanos,
            now,
            age_ms,
        });
    }
}

/// The response step hands each response to the shadow's queue (`shadow_queue`): the shadow
/// kernel is stepped off the response path, in the order of the responses' clocks.
impl ShadowStep for ShadowHandle {
    #[inline]
    fn produce(&self, size: f64, request_nanos: f64, answered: bool, now: i64) {
        self.queue(Op::Produce { answered }, size, request_nanos, now);
    }

    #[inline]
    fn fetch(&self, size: f64, request_nanos: f64, now: i64) {
        self.queue(Op::Fetch, size, request_nanos, now);
    }

    #[inline]
    fn request(&self, request_nanos: f64, now: i64) {
        self.queue(Op::Request, 0.0, request_nanos, now);
    }

    fn close(&self) {
        // Last in its pass whatever clock the responses used.
        // No request: the age a response's caller set is left for that response.
        self.push(Op::Close, 0.0, 0.0, i64::MAX, 0);
    }

    /// Not flushed (the request log takes it on every response): the responses stepped so far;
    /// one still queued is logged on a later row of type `t` of the connection.
    fn take_logged(&self, t: ClientQuotaType) -> (i32, f64) {
        let i = t.index();
        let throttle = self.logged_throttle_ms.get(i).map_or(0, |a| a.swap(0, Relaxed));
        let delayed = self.logged_delayed_bytes.get(i).map_or(0, |a| a.swap(0, Relaxed));
        (throttle, delayed as f64)
    }
}
