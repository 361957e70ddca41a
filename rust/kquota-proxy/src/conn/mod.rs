//! One client connection's state: its slots, what it sent the broker, its mute and principal,
//! shared by the request reader (`requests`), the response reader (`responses`) and Python.
//! This file holds the connection and its life (made, waited on, closed); each other concern
//! has its own file, since each is read and changed apart from the others:
//! - `slots`: a slot per request, answers in request order, a throttled answer muting after it;
//! - `gate`: the connection's membership of its producer's gate (`producer_gate`);
//! - `python`: what Python does to the connection (forward a request, settle a slot, set its
//!   principal) through the `Registered` contract;
//! - `request_step`: the request quota of the APIs relayed unparsed, and the request log;
//! - `unanswered`: acks=0 Produce requests, which the broker does not answer.
//!
//! Every request holds a slot; answers leave in slot (request) order, whoever made them — the broker, the proxy, or Python for the APIs it
//! handles. A throttled answer mutes the connection afterwards (KIP-219): nothing more is read
//! until the throttle has passed, and a connection throttled within the last quota window is
//! read one request at a time (Kafka reads a channel's next request only once the previous
//! answer has gone). Readers stop while their peer's outbox holds more than `BACKLOG` bytes and
//! at `max_inflight` unanswered requests: memory per connection is bounded both ways.

mod gate;
mod python;
mod request_step;
mod slots;
mod unanswered;

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::forwarded::Fwd;
use crate::mute::Mute;
use crate::outbox::Outbox;
use crate::producer_gate::ProducerGate;
use crate::shared::Shared;
use crate::stream::WriteSide;

pub use slots::Slot;

pub struct ConnState {
    pub slots: VecDeque<Slot>,
    pub(super) next_slot: u64,
    pub forwarded: VecDeque<Fwd>,
    pub user: Arc<str>,
    /// The gate of the producer of the connection's latest Produce (`producer_gate`): its
    /// throttles mute the producer's other connections too.
    pub(super) gate: Option<Arc<ProducerGate>>,
    /// Whether this connection holds that producer's token (a Produce in flight while serial).
    pub(super) gate_held: bool,
    /// The slot handed to Python and not yet forwarded or settled.
    pub python_waiting: Option<u64>,
    pub unanswered: HashSet<i32>,
    pub(super) unanswered_order: VecDeque<i32>,
}

pub struct Conn {
    pub id: u64,
    pub node: i32,
    pub shared: Arc<Shared>,
    st: Mutex<ConnState>,
    /// The connection's own mute (`mute`): set by its throttled answers, in slot order.
    pub mute: Mute,
    pub(super) changed: Notify,
    pub to_client: Arc<Outbox>,
    pub to_broker: Arc<Outbox>,
    closed: AtomicBool,
    pub reason: Mutex<Option<String>>,
}

impl Conn {
    pub fn new(
        shared: &Arc<Shared>,
        id: u64,
        node: i32,
        cw: WriteSide,
        uw: WriteSide,
        failed: &Arc<Notify>,
    ) -> (Arc<Conn>, [tokio::task::JoinHandle<()>; 2]) {
        let (to_client, wc) = Outbox::new(cw, Arc::clone(failed));
        let (to_broker, wb) = Outbox::new(uw, Arc::clone(failed));
        let writers = [tokio::spawn(wc), tokio::spawn(wb)];
        let conn = Arc::new(Conn {
            id,
            node,
            shared: Arc::clone(shared),
            st: Mutex::new(ConnState {
                slots: VecDeque::new(),
                next_slot: 0,
                forwarded: VecDeque::new(),
                gate: None,
                gate_held: false,
                user: Arc::from("ANONYMOUS"),
                python_waiting: None,
                unanswered: HashSet::new(),
                unanswered_order: VecDeque::new(),
            }),
            mute: Mute::default(),
            changed: Notify::new(),
            to_client,
            to_broker,
            closed: AtomicBool::new(false),
            reason: Mutex::new(None),
        });
        (conn, writers)
    }

    /// Ends the connection (idempotent); Python is told.
    pub fn close(&self, reason: Option<String>) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.reason.lock().unwrap() = reason.clone();
        self.leave_gate(&mut self.state());
        self.changed.notify_waiters();
        self.shared.conns.lock().unwrap().remove(&self.id);
        self.shared.bridge.on_close(self.id, reason);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn wake(&self) {
        self.changed.notify_waiters();
    }

    pub async fn until_closed(&self) {
        self.wait_until(|_| false).await;
    }

    pub fn state(&self) -> MutexGuard<'_, ConnState> {
        self.st.lock().unwrap()
    }

    /// Returns once `cond` holds (or the connection is closed).
    pub async fn wait_until(&self, mut cond: impl FnMut(&ConnState) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_closed() || cond(&self.state()) {
                return;
            }
            changed.await;
        }
    }

    pub fn mute_delay(&self) -> Option<Duration> {
        self.mute.remaining(Instant::now())
    }
}
