//! Produce requests not answered yet: an acks=0 one's correlation id, remembered because the
//! broker never answers it (an answer a broker sends anyway is dropped), and the bytes of those
//! awaiting their answer (and each topic's of them, for the produce topic quotas), which decide
//! whether the reader may pipeline the next request.

use super::{Conn, ConnState};
use crate::forwarded::Kind;
use crate::topic_bytes::ProduceTopicBytes;

/// acks=0 correlation ids remembered (some brokers answer them anyway).
const MAX_UNANSWERED: usize = 4096;

impl Conn {
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

    /// Each topic's bytes in those requests (for the produce topic quotas; empty while none
    /// exists, the requests then carry no topics).
    pub fn unanswered_produce_topic_bytes(&self) -> ProduceTopicBytes {
        let mut out = ProduceTopicBytes::new();
        for f in self.state().forwarded.iter() {
            let Kind::Produce { topics, .. } = &f.kind else {
                continue;
            };
            for (name, bytes) in topics {
                match out.iter_mut().find(|(n, _)| n == name) {
                    Some((_, b)) => *b += bytes,
                    None => out.push((name.clone(), *bytes)),
                }
            }
        }
        out
    }

    /// Each topic's bytes of the Produce request in `slot`, streamed to the broker as its
    /// topics were walked: set once its last record batch's length has been read, before that
    /// batch goes on, so the broker cannot have answered it yet.
    pub fn set_produce_topics(&self, slot: u64, bytes: ProduceTopicBytes) {
        let mut st = self.state();
        if let Some(Kind::Produce { topics, .. }) = st.forwarded.iter_mut().find(|f| f.slot == slot).map(|f| &mut f.kind) {
            *topics = bytes;
        }
    }

    /// The request in `slot` never reached the broker whole (its client went away, or lied,
    /// inside it): the broker will not answer it, so the session's end waits for no answer
    /// to it (`record_unread`) and nothing is recorded for it.
    pub fn forget_forwarded(&self, slot: u64) {
        self.state().forwarded.retain(|f| f.slot != slot);
    }
}
