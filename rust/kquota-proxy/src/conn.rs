//! One client connection's state: its slots, what it sent the broker, its mute and principal,
//! shared by the request reader (`requests`), the response reader (`responses`) and Python.
//!
//! Every request holds a slot; answers leave in slot (request) order, whoever made them — the broker, the proxy, or Python for the APIs it
//! handles. A throttled answer mutes the connection afterwards (KIP-219): nothing more is read
//! until the throttle has passed, and a connection throttled within the last quota window is
//! read one request at a time (Kafka reads a channel's next request only once the previous
//! answer has gone). Readers stop while their peer's outbox holds more than `BACKLOG` bytes and
//! at `max_inflight` unanswered requests: memory per connection is bounded both ways.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use quota_core::{ClientHandle, ClientQuotaType, ResponseThrottle};
use tokio::sync::Notify;

use crate::bridge::Registered;
use crate::forwarded::{Fwd, Kind};
use crate::mute::Mute;
use crate::outbox::Outbox;
use crate::producer_gate::{Entry, ProducerGate};
use crate::shared::Shared;
use crate::stream::WriteSide;
use crate::wire::read_i32;

/// acks=0 correlation ids remembered (some brokers answer them anyway).
const MAX_UNANSWERED: usize = 4096;

pub struct Slot {
    pub id: u64,
    done: bool,
    data: Option<Vec<u8>>,
    throttle: i32,
}

pub struct ConnState {
    pub slots: VecDeque<Slot>,
    next_slot: u64,
    pub forwarded: VecDeque<Fwd>,
    pub user: Arc<str>,
    /// The gate of the producer of the connection's latest Produce (`producer_gate`): its
    /// throttles mute the producer's other connections too.
    gate: Option<Arc<ProducerGate>>,
    /// Whether this connection holds that producer's token (a Produce in flight while serial).
    gate_held: bool,
    /// The slot handed to Python and not yet forwarded or settled.
    pub python_waiting: Option<u64>,
    pub unanswered: HashSet<i32>,
    unanswered_order: VecDeque<i32>,
}

pub struct Conn {
    pub id: u64,
    pub node: i32,
    pub shared: Arc<Shared>,
    st: Mutex<ConnState>,
    /// The connection's own mute (`mute`): set by its throttled answers, in slot order.
    pub mute: Mute,
    changed: Notify,
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
        {
            let mut st = self.state();
            if std::mem::take(&mut st.gate_held) {
                if let Some(gate) = &st.gate {
                    gate.leave(self.id);
                }
            }
        }
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

    // ------------------------------------------------------------------ slots

    pub fn push_slot(st: &mut ConnState) -> u64 {
        let id = st.next_slot;
        st.next_slot += 1;
        st.slots.push_back(Slot {
            id,
            done: false,
            data: None,
            throttle: 0,
        });
        id
    }

    /// Records a slot's answer and sends every answer now ready at the head, in order.
    pub fn settle_locked(&self, st: &mut ConnState, slot: u64, data: Option<Vec<u8>>, throttle: i32) {
        let Some(s) = st.slots.iter_mut().find(|s| s.id == slot) else {
            return;
        };
        s.data = data;
        s.throttle = throttle;
        s.done = true;
        while st.slots.front().is_some_and(|s| s.done) {
            let s = st.slots.pop_front().unwrap();
            if let Some(data) = s.data {
                self.to_client.send(data);
            }
            if s.throttle > 0 {
                let window = Duration::from_millis(self.shared.cfg.quota_window_ms);
                let until = Instant::now() + Duration::from_millis(s.throttle as u64);
                let muted = self.mute.throttled(until, window);
                if let Some(gate) = &st.gate {
                    gate.throttled(muted, window);
                }
            }
        }
        if st.gate_held && st.slots.is_empty() {
            st.gate_held = false;
            if let Some(gate) = &st.gate {
                gate.leave(self.id);
            }
        }
        if st.python_waiting == Some(slot) {
            st.python_waiting = None;
        }
    }

    /// Waits until the producer `gate` lets this connection send a Produce (its mute, or its
    /// token while serial, held by another connection); the gate becomes the connection's.
    pub async fn enter_gate(&self, gate: &Arc<ProducerGate>) {
        let mut waited = false;
        loop {
            match gate.enter(self.id) {
                Entry::Open => break,
                Entry::Held => {
                    self.state().gate_held = true;
                    break;
                }
                Entry::Wait(d) => {
                    waited = true;
                    tokio::time::sleep(d).await;
                }
            }
            if self.is_closed() {
                break;
            }
        }
        if waited {
            self.shared
                .counters
                .producer_waits
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The connection now produces for `gate`'s producer.
    pub fn set_gate(&self, gate: &Arc<ProducerGate>) {
        let mut st = self.state();
        if st.gate_held {
            if let Some(old) = &st.gate {
                old.leave(self.id);
            }
            st.gate_held = false;
        }
        st.gate = Some(Arc::clone(gate));
    }

    pub fn settle(&self, slot: u64, data: Option<Vec<u8>>, throttle: i32) {
        self.settle_locked(&mut self.state(), slot, data, throttle);
        self.changed.notify_waiters();
    }

    /// Sends a request (prefixed frame) to the broker, its answer expected in `fwd`.
    pub fn forward_locked(&self, st: &mut ConnState, fwd: Fwd, prefixed: Vec<u8>) {
        if st.python_waiting == Some(fwd.slot) {
            st.python_waiting = None;
        }
        st.forwarded.push_back(fwd);
        self.to_broker.send(prefixed);
    }

    /// Python forwards the request of its slot (frame without prefix).
    pub fn python_forward(&self, slot: u64, frame: &[u8]) -> Result<(), String> {
        if frame.len() < 8 {
            return Err("a request shorter than its header".into());
        }
        let mut prefixed = Vec::with_capacity(4 + frame.len());
        prefixed.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        prefixed.extend_from_slice(frame);
        let fwd = Fwd {
            slot,
            corr: read_i32(frame, 4).unwrap_or(0),
            key: i16::from_be_bytes([frame[0], frame[1]]),
            version: i16::from_be_bytes([frame[2], frame[3]]),
            ns: 0,
            kind: Kind::Python,
        };
        self.forward_locked(&mut self.state(), fwd, prefixed);
        self.changed.notify_waiters();
        Ok(())
    }

    pub fn set_user(&self, user: &str) {
        self.state().user = Arc::from(user);
    }

    pub fn user(&self) -> String {
        self.state().user.to_string()
    }

    pub fn remember_unanswered(st: &mut ConnState, corr: i32) {
        if st.unanswered.insert(corr) {
            st.unanswered_order.push_back(corr);
        }
        if st.unanswered_order.len() > MAX_UNANSWERED {
            if let Some(old) = st.unanswered_order.pop_front() {
                st.unanswered.remove(&old);
            }
        }
    }

    // ------------------------------------------------------------------ quotas

    /// Kafka's response step for a relayed API other than Produce and Fetch: its proxy time
    /// recorded (KIP-124 on proxy time) and the request quota's throttle enforced; returns it.
    pub fn request_step(&self, key: i16, handle: Option<&Arc<ClientHandle>>, ns: u64) -> i32 {
        let shared = &self.shared;
        match handle {
            Some(h) if !shared.cfg.tables.is_exempt(key) => {
                let r = h
                    .request_response(ns as f64, None)
                    .unwrap_or(ResponseThrottle::NONE);
                self.log(h, ClientQuotaType::Request, ns as f64);
                r.mute_ms()
            }
            _ => {
                let _ = shared.kernel.record_exempt_request_time(ns as f64, None);
                0
            }
        }
    }

    pub fn log(&self, h: &ClientHandle, t: ClientQuotaType, value: f64) {
        if self.shared.cfg.request_log {
            let user: Arc<str> = Arc::from(h.user());
            self.shared.log_request(&user, h.client_id(), t as u8, value);
        }
    }

    /// Bytes of Produce requests sent to the broker and not yet answered (so not yet recorded).
    pub fn unanswered_produce_bytes(&self) -> usize {
        self.state()
            .forwarded
            .iter()
            .map(|f| match f.kind {
                Kind::Produce { size, .. } => size,
                _ => 0,
            })
            .sum()
    }

    /// A new slot for `fwd`, and the request sent.
    pub fn forward_new(&self, mut fwd: Fwd, prefixed: Vec<u8>) {
        let mut st = self.state();
        fwd.slot = Self::push_slot(&mut st);
        self.forward_locked(&mut st, fwd, prefixed);
    }

    /// Returns once `slot` is the next answer due (a streamed answer goes straight out).
    pub async fn wait_at_head(&self, slot: u64) -> Result<(), String> {
        self.wait_until(|st| st.slots.front().map(|s| s.id) == Some(slot))
            .await;
        if self.is_closed() {
            return Err("closed".into());
        }
        Ok(())
    }
}

impl Registered for Conn {
    fn close(&self, reason: Option<String>) {
        Conn::close(self, reason);
    }

    fn wake(&self) {
        Conn::wake(self);
    }

    fn settle(&self, slot: u64, data: Option<Vec<u8>>, throttle: i32) {
        Conn::settle(self, slot, data, throttle);
    }

    fn python_forward(&self, slot: u64, frame: &[u8]) -> Result<(), String> {
        Conn::python_forward(self, slot, frame)
    }

    fn set_user(&self, user: &str) {
        Conn::set_user(self, user);
    }

    fn user(&self) -> String {
        Conn::user(self)
    }
}
