//! A slot per request: answers leave in slot (request) order, whoever made them (the broker, the
//! proxy, or Python), and a throttled answer mutes the connection after it has gone (KIP-219),
//! and its producer's other connections with it (`producer_gate`).

use std::time::{Duration, Instant};

use super::{Conn, ConnState};
use crate::forwarded::Fwd;

pub struct Slot {
    pub id: u64,
    done: bool,
    data: Option<Vec<u8>>,
    throttle: i32,
}

impl Conn {
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
        if st.slots.is_empty() {
            self.leave_gate(st);
        }
        if st.python_waiting == Some(slot) {
            st.python_waiting = None;
        }
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

    /// A new slot for `fwd`, and the request sent; returns the slot.
    pub fn forward_new(&self, mut fwd: Fwd, prefixed: Vec<u8>) -> u64 {
        let mut st = self.state();
        let slot = Self::push_slot(&mut st);
        fwd.slot = slot;
        self.forward_locked(&mut st, fwd, prefixed);
        slot
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
