//! Topic ids to names, for the Fetch topic quotas: Fetch v13+ names its topics only by id, and a
//! topic quota is a topic name's. Python teaches the map every (id, name) pair of the Metadata
//! responses it relays (the broker's answers: a client cannot make one up); Fetch only looks up.
//!
//! Bounded: at most [`MAX_TOPIC_IDS`] entries; past it the pair learned first is forgotten
//! (FIFO), so a cluster with more topics than that costs a Fetch of a forgotten topic its topic
//! quota until a Metadata response names it again. Only legal topic names with a non-zero id are
//! kept (at most 249 bytes each). Lookups are lock-free; learning takes one lock when a pair is
//! new.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use quota_core::is_legal_topic_name;

/// Most ids remembered (as many as the topic sensors of a type: ids past it would meter no
/// topic of their own anyway).
pub const MAX_TOPIC_IDS: usize = quota_core::MAX_TOPIC_SENSORS;

/// A topic id (Kafka's Uuid, 16 bytes).
pub type TopicId = [u8; 16];

#[derive(Debug)]
pub struct TopicNames {
    map: papaya::HashMap<TopicId, Arc<str>>,
    /// The ids in the order they were learned (the first is forgotten first).
    order: Mutex<VecDeque<TopicId>>,
    cap: usize,
}

impl Default for TopicNames {
    fn default() -> Self {
        Self::with_cap(MAX_TOPIC_IDS)
    }
}

impl TopicNames {
    /// A map of at most `cap` ids.
    pub fn with_cap(cap: usize) -> Self {
        TopicNames {
            map: papaya::HashMap::new(),
            order: Mutex::new(VecDeque::new()),
            cap: cap.max(1),
        }
    }

    /// Learns that `id` names topic `name`; returns whether the map changed. The zero id
    /// (Kafka's "none"), ids that are not 16 bytes and names Kafka refuses are ignored.
    pub fn learn(&self, id: &[u8], name: &str) -> bool {
        let Ok(id) = TopicId::try_from(id) else {
            return false;
        };
        if id == [0; 16] || !is_legal_topic_name(name) {
            return false;
        }
        if self.map.pin().get(&id).is_some_and(|n| **n == *name) {
            return false;
        }
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        let map = self.map.pin();
        if map.insert(id, Arc::from(name)).is_none() {
            order.push_back(id);
            while order.len() > self.cap {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
        true
    }

    /// The name of topic `id`, if learned.
    #[inline]
    pub fn name(&self, id: &[u8]) -> Option<Arc<str>> {
        let id = TopicId::try_from(id).ok()?;
        self.map.pin().get(&id).cloned()
    }

    /// Ids remembered now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Most ids remembered.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> TopicId {
        let mut id = [0u8; 16];
        id[12..].copy_from_slice(&n.to_be_bytes());
        id[0] = 1;
        id
    }

    #[test]
    fn learns_legal_pairs_and_ignores_the_rest() {
        let t = TopicNames::default();
        assert!(t.learn(&id(1), "orders"));
        assert!(!t.learn(&id(1), "orders"));
        assert_eq!(t.name(&id(1)).as_deref(), Some("orders"));
        assert!(!t.learn(&[0; 16], "zero"));
        assert!(!t.learn(&[1; 15], "short"));
        assert!(!t.learn(&id(2), "a/b"));
        assert!(!t.learn(&id(2), &"x".repeat(250)));
        assert!(t.name(&id(2)).is_none() && t.name(&[1; 3]).is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn past_the_bound_the_first_learned_is_forgotten() {
        let t = TopicNames::with_cap(100);
        for n in 0..10_000 {
            t.learn(&id(n), &format!("t{n}"));
            assert!(t.len() <= 100);
        }
        assert_eq!(t.len(), 100);
        assert!(t.name(&id(9_899)).is_none());
        assert_eq!(t.name(&id(9_900)).as_deref(), Some("t9900"));
        // A renamed id (a topic the broker now names otherwise) keeps its place.
        assert!(t.learn(&id(9_999), "renamed"));
        assert_eq!((t.len(), t.name(&id(9_999)).as_deref()), (100, Some("renamed")));
    }
}
