//! The connection's membership of its producer's gate (`producer_gate`): a Produce waits while
//! the producer is muted, or while another of its connections holds the token in the window
//! after a throttle; the token is given back when the Produce is answered.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Conn, ConnState};
use crate::producer_gate::{Entry, ProducerGate};

impl Conn {
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

    /// The producer's token given back, if this connection holds it (its Produce answered, or
    /// the connection closed).
    pub(super) fn leave_gate(&self, st: &mut ConnState) {
        if std::mem::take(&mut st.gate_held) {
            if let Some(gate) = &st.gate {
                gate.leave(self.id);
            }
        }
    }
}
