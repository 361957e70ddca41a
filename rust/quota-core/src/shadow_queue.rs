//! The shadow's queue: a response's shadow inputs are handed to one background thread, which
//! steps the shadow kernel, instead of the response step doing it. A shadow is a second kernel
//! step (sensors, request time, throttle), as costly as the enforced one; on the response path it
//! added 57-80% to the step (`benches/results/shadow_record.md`). Handing its inputs over is a
//! few stores into a ring the calling thread owns.
//!
//! - Each thread that steps a shadow owns one ring (single producer: no read-modify-write on the
//!   path); one consumer at a time drains every ring under `drain`'s lock.
//! - An entry names its shadow step (`shadow::ShadowHandle`) by id; the registry keeps the handle alive until its
//!   enforced handle is dropped (a `Close` entry, queued behind its last responses).
//! - A pass takes what every ring holds and evaluates it in the order of the entries' clocks, so
//!   a handle whose connection moved between threads is stepped in time order; the steps use
//!   the clock each response had, so when a pass runs changes nothing but its latency.
//! - A full ring (the consumer behind) is drained by the producer itself before it pushes: the
//!   shadow loses nothing and its memory stays bounded (`RING_CAPACITY` entries per thread).
//! - Readers of the shadow's totals call [`flush`] first, so they see every response stepped.
//! - An entry carries how long before its response the request was read ([`request_age`]), so
//!   the shadow can tell a request read before its would-be mute from one read during it.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::{Acquire, Relaxed, Release}};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use parking_lot::Mutex;


/// Entries per thread's ring: 160 KiB.
const RING_CAPACITY: usize = 4096;
/// The consumer's pass interval. Its passes are what the shadow costs beyond the response path
/// (a wakeup each, about as dear as a small pass on this VM): every millisecond they added 59%
/// to the proxy's CPU per MB at 4.5 MB/s (`benches/results/shadow_cost.md`). Rarely is enough,
/// because each response carries its own clock and readers flush; a producer whose ring is half
/// full wakes the consumer sooner.
const PASS_INTERVAL: Duration = Duration::from_millis(50);

/// A shadow step the queue's consumer runs (`shadow::ShadowHandle`).
pub(crate) trait Queued: Send + Sync {
    /// Steps one queued response: answered at `now`, its request read at `read`.
    fn evaluate(&self, op: Op, size: f64, nanos: f64, now: i64, read: i64);
}

/// What a response asks of its shadow step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Op {
    Produce { answered: bool },
    Fetch,
    Request,
    /// The enforced handle was dropped: the shadow handle leaves the registry.
    Close,
}

/// One response's shadow inputs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub id: u64,
    pub op: Op,
    pub size: f64,
    pub nanos: f64,
    pub now: i64,
    /// How long (ms) before `now` its request was read; 0 when the caller did not say.
    pub age_ms: u32,
}

impl Entry {
    /// When its request was read.
    fn read(self) -> i64 {
        self.now.saturating_sub(i64::from(self.age_ms))
    }

    fn op_code(self) -> u64 {
        match self.op {
            Op::Produce { answered: false } => 0,
            Op::Produce { answered: true } => 1,
            Op::Fetch => 2,
            Op::Request => 3,
            Op::Close => 4,
        }
    }

    fn op_of(code: u64) -> Op {
        match code {
            0 => Op::Produce { answered: false },
            1 => Op::Produce { answered: true },
            2 => Op::Fetch,
            3 => Op::Request,
            _ => Op::Close,
        }
    }
}

/// A ring slot: an entry's five words (the op and the request's age share one), each written by the producer before it publishes `head`
/// (release) and read by the consumer after it reads `head` (acquire).
#[derive(Default)]
struct Slot([AtomicU64; 5]);

struct Ring {
    slots: Box<[Slot]>,
    /// Entries pushed; written by the owning thread only.
    head: AtomicUsize,
    /// Entries taken; written by the consumer only (under `Queue::drain`).
    tail: AtomicUsize,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            slots: (0..RING_CAPACITY).map(|_| Slot::default()).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Appends the ring's entries to `out` and frees their slots. Consumer only.
    fn take(&self, out: &mut Vec<Entry>) {
        let tail = self.tail.load(Relaxed);
        let head = self.head.load(Acquire);
        for i in tail..head {
            let w = &self.slots[i % RING_CAPACITY].0;
            out.push(Entry {
                id: w[0].load(Relaxed),
                op: Entry::op_of(w[1].load(Relaxed) & 0xff),
                size: f64::from_bits(w[2].load(Relaxed)),
                nanos: f64::from_bits(w[3].load(Relaxed)),
                now: w[4].load(Relaxed) as i64,
                age_ms: (w[1].load(Relaxed) >> 8) as u32,
            });
        }
        self.tail.store(head, Release);
    }
}

/// A thread's ring and what it last saw of the consumer's `tail` (read again only when the ring
/// looks full, so a push touches no line the consumer writes).
struct Local {
    queue: &'static Queue,
    ring: Arc<Ring>,
    seen_tail: Cell<usize>,
}

impl Local {
    fn new(queue: &'static Queue) -> Local {
        let ring = Arc::new(Ring::new());
        queue.rings.lock().push(Arc::clone(&ring));
        Local {
            queue,
            ring,
            seen_tail: Cell::new(0),
        }
    }

    #[inline]
    fn push(&self, e: Entry) {
        let ring = &*self.ring;
        let head = ring.head.load(Relaxed);
        if head - self.seen_tail.get() >= RING_CAPACITY {
            self.seen_tail.set(ring.tail.load(Acquire));
            if head - self.seen_tail.get() >= RING_CAPACITY {
                // The consumer is behind: drain every ring here, then there is room.
                self.queue.drain_pass();
                self.seen_tail.set(ring.tail.load(Acquire));
            }
        }
        let w = &ring.slots[head % RING_CAPACITY].0;
        w[0].store(e.id, Relaxed);
        w[1].store(e.op_code() | u64::from(e.age_ms) << 8, Relaxed);
        w[2].store(e.size.to_bits(), Relaxed);
        w[3].store(e.nanos.to_bits(), Relaxed);
        w[4].store(e.now as u64, Relaxed);
        ring.head.store(head + 1, Release);
        if head + 1 - self.seen_tail.get() == RING_CAPACITY / 2 {
            self.queue.wake();
        }
    }
}

thread_local! {
    /// The age of the request whose response this thread steps next ([`request_age`]).
    static REQUEST_AGE_MS: Cell<u32> = const { Cell::new(0) };
    static LOCAL: Local = {
        let q = queue();
        q.start_consumer();
        Local::new(q)
    };
}

#[derive(Default)]
struct Drain {
    entries: Vec<Entry>,
    order: Vec<(i64, usize)>,
    /// Handles closed in the previous pass, removed at the end of this one: a response pushed on
    /// another thread before the close may have been published after that pass read its ring.
    closed: Vec<u64>,
    closing: Vec<u64>,
}

struct Queue {
    rings: Mutex<Vec<Arc<Ring>>>,
    handles: Mutex<HashMap<u64, Arc<dyn Queued>>>,
    /// The one consumer's lock, and its buffers (kept, so a pass allocates only when they grow).
    drain: Mutex<Drain>,
    consumer: OnceLock<Thread>,
    next_id: AtomicU64,
}

fn queue() -> &'static Queue {
    static QUEUE: OnceLock<Queue> = OnceLock::new();
    QUEUE.get_or_init(Queue::new)
}

impl Queue {
    fn new() -> Queue {
        Queue {
            rings: Mutex::default(),
            handles: Mutex::default(),
            drain: Mutex::default(),
            consumer: OnceLock::new(),
            next_id: AtomicU64::new(1),
        }
    }

    fn start_consumer(&'static self) {
        self.consumer.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("kquota-shadow".into())
                .spawn(move || loop {
                    self.drain_pass();
                    std::thread::park_timeout(PASS_INTERVAL);
                });
            match spawned {
                Ok(h) => h.thread().clone(),
                // No thread to be had: producers drain their own rings when full, and readers
                // flush, so the shadow stays whole, stepped later.
                Err(_) => std::thread::current(),
            }
        });
    }

    fn wake(&self) {
        if let Some(t) = self.consumer.get() {
            t.unpark();
        }
    }

    /// Takes every ring's entries and steps them in clock order; returns how many.
    fn drain_pass(&self) -> usize {
        let mut d = self.drain.lock();
        let Drain {
            entries,
            order,
            closed,
            closing,
        } = &mut *d;
        {
            let mut rings = self.rings.lock();
            for r in rings.iter() {
                r.take(entries);
            }
            // A ring whose thread has ended, emptied above, goes.
            rings.retain(|r| Arc::strong_count(r) > 1 || r.head.load(Acquire) != r.tail.load(Relaxed));
        }
        let n = entries.len();
        if n > 0 || !closed.is_empty() || !closing.is_empty() {
            // Clock order; a ring's own order among equal clocks (its index breaks ties).
            order.extend(entries.iter().enumerate().map(|(i, e)| (e.now, i)));
            order.sort_unstable();
            let mut handles = self.handles.lock();
            // A connection's responses come in runs: its step looked up once per run.
            let mut last: Option<(u64, Option<&Arc<dyn Queued>>)> = None;
            for &(_, i) in order.iter() {
                let e = entries[i];
                if e.op == Op::Close {
                    closing.push(e.id);
                    continue;
                }
                let h = match last {
                    Some((id, h)) if id == e.id => h,
                    _ => handles.get(&e.id),
                };
                last = Some((e.id, h));
                if let Some(h) = h {
                    h.evaluate(e.op, e.size, e.nanos, e.now, e.read());
                }
            }
            for id in closed.drain(..) {
                handles.remove(&id);
            }
            std::mem::swap(closed, closing);
            entries.clear();
            order.clear();
        }
        n
    }
}

/// Registers the shadow step `make` builds with the id its entries will carry.
pub(crate) fn register<T: Queued + 'static>(make: impl FnOnce(u64) -> Arc<T>) -> Arc<T> {
    queue().register(make)
}

impl Queue {
    fn register<T: Queued + 'static>(&self, make: impl FnOnce(u64) -> Arc<T>) -> Arc<T> {
        let id = self.next_id.fetch_add(1, Relaxed);
        let h = make(id);
        self.handles.lock().insert(id, Arc::clone(&h) as Arc<dyn Queued>);
        h
    }
}

/// Queues a response's shadow step on this thread's ring; a thread whose ring is already gone
/// (it is ending) steps it itself, after everything queued before.
#[inline]
pub(crate) fn push(e: Entry) {
    if LOCAL.try_with(|l| l.push(e)).is_err() {
        let q = queue();
        q.drain_pass();
        let mut one_consumer = q.drain.lock();
        if e.op == Op::Close {
            one_consumer.closing.push(e.id);
        } else if let Some(h) = q.handles.lock().get(&e.id) {
            h.evaluate(e.op, e.size, e.nanos, e.now, e.read());
        }
    }
}

/// The response this thread steps next is of a request read `ms` before it. A proxy that
/// pipelines a connection's requests says so before each response step of a handle with a
/// shadow: it records a request read before its mute when that request is answered, during the
/// mute, and the shadow must too to predict it. Kept per thread because the response step's
/// callers (Python's among them) do not pass it; taken, and reset to 0 (read when answered), by
/// the shadow's next queued entry on this thread.
pub fn request_age(ms: u32) {
    REQUEST_AGE_MS.set(ms);
}

/// The age [`request_age`] set for this thread's next entry, reset to 0.
#[inline]
pub(crate) fn take_request_age() -> u32 {
    REQUEST_AGE_MS.replace(0)
}

/// Steps every queued shadow entry now (in clock order). Readers of a shadow's totals, backlog
/// or logged values call it to see every response so far.
pub fn flush() {
    queue().drain_pass();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it is stepped with.
    #[derive(Default)]
    struct Seen(Mutex<Vec<(Op, i64)>>, Mutex<Vec<i64>>);

    impl Queued for Seen {
        fn evaluate(&self, op: Op, _size: f64, _nanos: f64, now: i64, read: i64) {
            self.0.lock().push((op, now));
            self.1.lock().push(read);
        }
    }

    /// A queue of its own, with no consumer thread: passes run only when the test (or a full
    /// ring) runs them.
    fn own_queue() -> &'static Queue {
        Box::leak(Box::new(Queue::new()))
    }

    fn entry(id: u64, op: Op, now: i64) -> Entry {
        Entry {
            id,
            op,
            size: 1.0,
            nanos: 0.0,
            now,
            age_ms: 0,
        }
    }

    #[test]
    fn an_entry_carries_its_requests_age_beside_its_op() {
        let q = own_queue();
        let seen = q.register(|_| Arc::new(Seen::default()));
        let a = Local::new(q);
        for (op, age) in [(Op::Produce { answered: true }, 7), (Op::Close, 0), (Op::Fetch, u32::MAX)] {
            a.push(Entry { age_ms: age, ..entry(1, op, 10_000_000_000) });
        }
        q.drain_pass();
        assert_eq!(
            seen.0.lock().clone(),
            vec![(Op::Produce { answered: true }, 10_000_000_000), (Op::Fetch, 10_000_000_000)]
        );
        assert_eq!(
            seen.1.lock().clone(),
            vec![10_000_000_000 - 7, 10_000_000_000 - i64::from(u32::MAX)]
        );
    }

    #[test]
    fn a_requests_age_is_taken_once_and_only_on_its_thread() {
        request_age(25);
        std::thread::spawn(|| assert_eq!(take_request_age(), 0)).join().unwrap();
        assert_eq!(take_request_age(), 25);
        assert_eq!(take_request_age(), 0, "the next response's request was read when answered");
    }

    #[test]
    fn a_pass_steps_every_ring_in_clock_order() {
        let q = own_queue();
        let seen = q.register(|_| Arc::new(Seen::default()));
        let id = 1;
        let (a, b) = (Local::new(q), Local::new(q));
        a.push(entry(id, Op::Fetch, 30));
        b.push(entry(id, Op::Request, 10));
        a.push(entry(id, Op::Produce { answered: true }, 40));
        b.push(entry(id, Op::Produce { answered: false }, 30));
        assert!(seen.0.lock().is_empty(), "queued, not stepped");
        assert_eq!(q.drain_pass(), 4);
        let got = seen.0.lock().clone();
        assert_eq!(
            got,
            vec![
                (Op::Request, 10),
                (Op::Fetch, 30), // the first ring's entry first among equal clocks
                (Op::Produce { answered: false }, 30),
                (Op::Produce { answered: true }, 40)
            ]
        );
        assert_eq!(q.drain_pass(), 0);
    }

    #[test]
    fn a_full_ring_is_drained_by_its_producer_and_nothing_is_lost() {
        let q = own_queue();
        let seen = q.register(|_| Arc::new(Seen::default()));
        let a = Local::new(q);
        for i in 0..RING_CAPACITY as i64 * 3 + 5 {
            a.push(entry(1, Op::Fetch, i));
        }
        // Full twice over: the producer stepped what its ring held before pushing on.
        assert_eq!(seen.0.lock().len(), RING_CAPACITY * 3);
        q.drain_pass();
        let got = seen.0.lock().clone();
        assert_eq!(got.len(), RING_CAPACITY * 3 + 5);
        assert!(got.windows(2).all(|w| w[0].1 < w[1].1), "in order");
    }

    #[test]
    fn a_closed_handle_leaves_the_registry_a_pass_later_its_responses_stepped() {
        let q = own_queue();
        let seen = q.register(|_| Arc::new(Seen::default()));
        let (a, b) = (Local::new(q), Local::new(q));
        a.push(entry(1, Op::Fetch, 5));
        b.push(entry(1, Op::Close, i64::MAX));
        q.drain_pass();
        assert_eq!(Arc::strong_count(&seen), 2, "kept one pass more");
        // A response pushed before the close but published after the pass read its ring.
        a.push(entry(1, Op::Fetch, 6));
        q.drain_pass();
        assert_eq!(seen.0.lock().clone(), vec![(Op::Fetch, 5), (Op::Fetch, 6)]);
        assert_eq!(Arc::strong_count(&seen), 1, "released");
        // An entry for an id no longer registered is dropped.
        a.push(entry(1, Op::Fetch, 7));
        q.drain_pass();
        assert_eq!(seen.0.lock().len(), 2);
    }

    #[test]
    fn the_ring_of_an_ended_thread_is_drained_then_dropped() {
        let q = own_queue();
        let seen = q.register(|_| Arc::new(Seen::default()));
        std::thread::spawn(move || Local::new(q).push(entry(1, Op::Request, 1)))
            .join()
            .unwrap();
        assert_eq!(q.rings.lock().len(), 1);
        q.drain_pass();
        assert_eq!(seen.0.lock().len(), 1);
        assert_eq!(q.rings.lock().len(), 0);
    }
}
