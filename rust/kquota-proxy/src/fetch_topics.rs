//! A Fetch's topics, for the topic quotas (the path is `fetch_path`): the topics a request asks
//! for (its cap), and each topic's bytes in a response (the sum of its partitions' records,
//! what the consumer reads of the topic). Before v13 topics are named; from v13 by id, turned
//! into names through [`TopicNames`]: an id it does not know is left out (recorded to no
//! topic), as is a name that is not UTF-8 (no topic has one).

use std::sync::Arc;

use crate::fetch_layout::{walk_fetch_response, FETCH_BY_ID};
use crate::own_topics::walk_fetch;
use crate::topic_names::TopicNames;
use crate::walk::{at_once, SliceWalk};
use crate::wire::{Cursor, Proto};

use crate::topic_bytes::FetchTopicBytes;

fn named(key: &[u8], version: i16, names: &TopicNames) -> Option<Arc<str>> {
    if version >= FETCH_BY_ID {
        names.name(key)
    } else {
        std::str::from_utf8(key).ok().map(Arc::from)
    }
}

/// The topics a Fetch request (v4+, whole; topics from `at`, see `fetch_topics_at`) asks for.
pub fn request_topics(frame: &[u8], at: usize, version: i16, names: &TopicNames) -> Proto<Vec<Arc<str>>> {
    let mut keys: Vec<&[u8]> = Vec::new();
    walk_fetch(frame, at, version, |topic, _| {
        if !keys.last().is_some_and(|k| std::ptr::eq(*k, topic)) {
            keys.push(topic);
        }
    })?;
    Ok(keys.into_iter().filter_map(|k| named(k, version, names)).collect())
}

/// Each topic's bytes in a Fetch response (v4+, whole; `body` where its ThrottleTimeMs is).
pub fn response_topic_bytes(frame: &[u8], body: usize, version: i16, names: &TopicNames) -> Proto<FetchTopicBytes> {
    let mut out = FetchTopicBytes::new();
    let mut w = SliceWalk(Cursor::new(frame, body));
    at_once(walk_fetch_response(&mut w, version, tally(&mut out, version, names)))?;
    Ok(out)
}

/// The `each` of [`walk_fetch_response`] that keeps each known topic's bytes in `out`.
pub fn tally<'a>(out: &'a mut FetchTopicBytes, version: i16, names: &'a TopicNames) -> impl FnMut(&[u8], usize) + 'a {
    move |key, bytes| {
        if let Some(name) = named(key, version, names) {
            out.push((name, bytes as f64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch_layout::throttled_body;
    use crate::wire::put_uvarint;

    const ID: [u8; 16] = [7; 16];

    /// A flexible (v13+) response: `topics` of (id, partitions' record lengths).
    fn response_v13(topics: &[([u8; 16], &[usize])]) -> Vec<u8> {
        let mut b = throttled_body(13, 0, 0);
        b.truncate(b.len() - 2); // no topics, no tags
        put_uvarint(&mut b, topics.len() as u64 + 1);
        for (id, parts) in topics {
            b.extend_from_slice(id);
            put_uvarint(&mut b, parts.len() as u64 + 1);
            for (i, n) in parts.iter().enumerate() {
                b.extend_from_slice(&(i as i32).to_be_bytes());
                b.extend_from_slice(&[0; 2 + 8 + 8 + 8]);
                b.push(2); // one aborted transaction
                b.extend_from_slice(&[0; 16]);
                b.push(0);
                b.extend_from_slice(&(-1i32).to_be_bytes());
                put_uvarint(&mut b, *n as u64 + 1);
                b.extend(std::iter::repeat_n(9u8, *n));
                b.push(0);
            }
            b.push(0);
        }
        b.push(0);
        b
    }

    #[test]
    fn a_v13_response_by_id_counts_known_topics_only() {
        let names = TopicNames::default();
        names.learn(&ID, "orders");
        let frame = response_v13(&[(ID, &[100, 5, 0]), ([8; 16], &[50])]);
        let got = response_topic_bytes(&frame, 0, 13, &names).unwrap();
        assert_eq!(got, vec![(Arc::from("orders"), 105.0)]);
        // Truncated anywhere before the top-level tags (not read): an error, never a panic.
        for cut in 0..frame.len() - 1 {
            assert!(response_topic_bytes(&frame[..cut], 0, 13, &names).is_err(), "{cut}");
        }
    }

    #[test]
    fn a_v4_response_by_name() {
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
        b.extend_from_slice(&1i32.to_be_bytes()); // one topic
        b.extend_from_slice(&6i16.to_be_bytes());
        b.extend_from_slice(b"orders");
        b.extend_from_slice(&2i32.to_be_bytes()); // two partitions
        for n in [10i32, -1] {
            b.extend_from_slice(&[0; 4 + 2 + 8 + 8]);
            b.extend_from_slice(&(-1i32).to_be_bytes()); // null aborted transactions
            b.extend_from_slice(&n.to_be_bytes()); // records (null for the second)
            b.extend(std::iter::repeat_n(1u8, n.max(0) as usize));
        }
        let got = response_topic_bytes(&b, 0, 4, &TopicNames::default()).unwrap();
        assert_eq!(got, vec![(Arc::from("orders"), 10.0)]);
    }

    #[test]
    fn a_v13_request_names_its_known_topics() {
        let names = TopicNames::default();
        names.learn(&ID, "orders");
        let mut f = vec![3]; // two topics
        for id in [ID, [8; 16]] {
            f.extend_from_slice(&id);
            f.push(2); // one partition
            f.extend_from_slice(&[0; 4 + 4 + 8 + 4 + 8 + 4]);
            f.push(0);
            f.push(0);
        }
        let got = request_topics(&f, 0, 13, &names).unwrap();
        assert_eq!(got, vec![Arc::<str>::from("orders")]);
    }
}
