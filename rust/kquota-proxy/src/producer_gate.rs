//! A producer's throttle holds all of its connections. Kafka mutes a throttled *channel*; a
//! client that drops it and reconnects is read again at once, while the requests left on the
//! old channel are still served when its mute ends, so for a while the producer has two
//! channels' worth of requests recorded. librdkafka does exactly that when its pipelined
//! Produce requests wait behind mutes past `socket.timeout.ms` (1 MB batches at 100 KB/s: 10 s
//! per request): 1.19-1.29x the quota over 210 s where a client that waits gets 0.95-0.98x.
//! The proxy enforces one quota for all its broker ports, so it holds the producer (principal
//! and client id) rather than the channel: a throttled answer mutes every connection of the
//! producer, and for a quota window after it the producer has one Produce in flight at a time
//! across its connections, as Kafka's one muted channel would.
//!
//! The registry is looked up when a connection meets a producer for the first time (its handle
//! cache misses); after that a Produce costs two atomic loads while the producer is not
//! throttled. Bounded: a gate no connection holds is dropped once its window has passed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::mute::Mute;

/// Gates kept at most; past it (after dropping unused ones) a new producer gets a gate of its
/// own that no other connection shares (Kafka's per-channel behaviour).
pub const MAX_GATES: usize = 10_000;
/// A Produce in flight longer than this no longer holds the producer's other connections (its
/// broker is slow or gone; `request.timeout.ms`'s default).
pub const MAX_HOLD: Duration = Duration::from_secs(30);

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `t` as milliseconds since the process's base (0: never).
fn ms(t: Instant) -> u64 {
    t.saturating_duration_since(base()).as_millis() as u64 + 1
}

/// One producer's shared mute and its one-at-a-time token.
#[derive(Default)]
pub struct ProducerGate {
    mute: Mute,
    /// The connection whose Produce is in flight while serial (0: none), and since when.
    holder: AtomicU64,
    held_at: AtomicU64,
}

/// What a connection may do with its next Produce.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Send it; nothing to give back.
    Open,
    /// Send it, holding the producer's token until its answer (`leave`).
    Held,
    /// Wait this long (the producer's mute, or another connection's Produce in flight).
    Wait(Duration),
}

/// How often a connection waiting for the producer's token looks again.
pub const TOKEN_POLL: Duration = Duration::from_millis(2);

impl ProducerGate {
    /// A throttled answer: the producer is muted until `until`, and serial for `window` after.
    pub fn throttled(&self, until: Instant, window: Duration) {
        self.mute.throttled(until, window);
    }

    /// Whether connection `conn` may send a Produce now.
    pub fn enter(&self, conn: u64) -> Entry {
        let at = Instant::now();
        if let Some(d) = self.mute.remaining(at) {
            return Entry::Wait(d);
        }
        if !self.mute.is_serial(at) {
            return Entry::Open;
        }
        let now = ms(at);
        let holder = self.holder.load(Ordering::Acquire);
        let stale = holder != 0
            && now.saturating_sub(self.held_at.load(Ordering::Acquire)) > MAX_HOLD.as_millis() as u64;
        if holder == conn {
            return Entry::Held;
        }
        if (holder == 0 || stale)
            && self
                .holder
                .compare_exchange(holder, conn, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.held_at.store(now, Ordering::Release);
            return Entry::Held;
        }
        Entry::Wait(TOKEN_POLL)
    }

    /// Connection `conn`'s Produce was answered (or the connection ended): the token is free.
    pub fn leave(&self, conn: u64) {
        let _ = self
            .holder
            .compare_exchange(conn, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    fn unused(&self, now: Instant) -> bool {
        !self.mute.is_serial(now) && self.holder.load(Ordering::Acquire) == 0
    }
}

/// A producer: its principal and client id.
type Producer = (Box<str>, Box<str>);

/// Every producer's gate.
#[derive(Default)]
pub struct ProducerGates {
    gates: Mutex<HashMap<Producer, Arc<ProducerGate>>>,
}

impl ProducerGates {
    /// The gate of producer `(user, client)` (made on first use).
    pub fn get(&self, user: &str, client: &str) -> Arc<ProducerGate> {
        let mut gates = self.gates.lock().unwrap();
        let key = (Box::<str>::from(user), Box::<str>::from(client));
        if let Some(g) = gates.get(&key) {
            return Arc::clone(g);
        }
        if gates.len() >= MAX_GATES {
            let now = Instant::now();
            gates.retain(|_, g| Arc::strong_count(g) > 1 || !g.unused(now));
            if gates.len() >= MAX_GATES {
                return Arc::default();
            }
        }
        Arc::clone(gates.entry(key).or_default())
    }

    pub fn len(&self) -> usize {
        self.gates.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A connection's gate for the producer of its latest Produce (the registry is read only when
/// the producer changes).
#[derive(Default)]
pub struct GateCache {
    user: Option<Arc<str>>,
    client: String,
    gate: Option<Arc<ProducerGate>>,
}

impl GateCache {
    /// The gate of `(user, client)`, and whether it is new to this connection.
    pub fn get(
        &mut self,
        gates: &ProducerGates,
        user: &Arc<str>,
        client: &str,
    ) -> (&Arc<ProducerGate>, bool) {
        let hit = self.user.as_ref().is_some_and(|u| Arc::ptr_eq(u, user)) && self.client == client;
        if !hit || self.gate.is_none() {
            self.user = Some(Arc::clone(user));
            self.client.clear();
            self.client.push_str(client);
            self.gate = Some(gates.get(user, client));
        }
        (self.gate.as_ref().unwrap(), !hit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(300);

    #[test]
    fn an_unthrottled_producer_is_never_held() {
        let gates = ProducerGates::default();
        let g = gates.get("alice", "p1");
        assert_eq!(g.enter(1), Entry::Open);
        assert_eq!(g.enter(2), Entry::Open);
        assert!(Arc::ptr_eq(&g, &gates.get("alice", "p1")));
        assert!(!Arc::ptr_eq(&g, &gates.get("alice", "p2")));
        assert!(!Arc::ptr_eq(&g, &gates.get("bob", "p1")));
    }

    #[test]
    fn a_throttle_mutes_every_connection_then_one_produce_at_a_time() {
        let g = ProducerGate::default();
        g.throttled(Instant::now() + Duration::from_millis(100), WINDOW);
        for conn in [1, 2] {
            match g.enter(conn) {
                Entry::Wait(d) => assert!(d > Duration::from_millis(50) && d <= Duration::from_millis(101)),
                e => panic!("{e:?}"),
            }
        }
        std::thread::sleep(Duration::from_millis(110));
        assert_eq!(g.enter(1), Entry::Held);
        assert_eq!(g.enter(1), Entry::Held); // its own connection is serial already
        assert_eq!(g.enter(2), Entry::Wait(TOKEN_POLL));
        g.leave(2); // not the holder: nothing changes
        assert_eq!(g.enter(2), Entry::Wait(TOKEN_POLL));
        g.leave(1);
        assert_eq!(g.enter(2), Entry::Held);
        g.leave(2);
        std::thread::sleep(WINDOW);
        assert_eq!(g.enter(3), Entry::Open); // the window after the mute has passed
    }

    #[test]
    fn unused_gates_are_dropped_when_the_registry_is_full() {
        let gates = ProducerGates::default();
        let held = gates.get("u", "held");
        held.throttled(Instant::now() + Duration::from_secs(60), WINDOW);
        for i in 0..MAX_GATES + 10 {
            drop(gates.get("u", &i.to_string()));
        }
        assert!(gates.len() <= MAX_GATES);
        assert!(Arc::ptr_eq(&held, &gates.get("u", "held")));
    }
}
