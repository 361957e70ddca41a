//! The proxy's own topics (its `kafka://` store topic and that store's usage topic), closed to
//! clients on the native paths: the broker sees the proxy's principal, so a client's Produce or
//! Fetch of them would write quota records or fleet usage, or read them, as the proxy.
//!
//! Python names them once at start and adds their topic ids as it learns them (from the store's
//! admin client and every Metadata response it relays); Fetch v13+ names topics only by id.
//! A request naming one is answered by the proxy as Kafka answers an unauthorized topic
//! (`TOPIC_AUTHORIZATION_FAILED`), and never reaches the broker. Unlike Kafka, which serves the
//! request's other topics, the whole request is answered: a Produce's every partition gets the
//! error, a Fetch's answer holds only the refused topics (docs/semantics-notes.md).
//!
//! Reads are lock-free (the names fixed once, the ids in atomic slots): every Produce and Fetch
//! asks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::fetch_layout::{FETCH_BY_ID, FETCH_FLEXIBLE};
use crate::produce_layout::PRODUCE_FLEXIBLE;
use crate::produce_topics::walk_produce;
use crate::walk::{at_once, SliceWalk};
use crate::wire::{put_compact_string, put_uvarint, Cursor, Proto};

/// Kafka's TOPIC_AUTHORIZATION_FAILED.
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// Topic ids remembered; past this the oldest is replaced (an own topic deleted and created
/// again this many times: its old ids name no topic any more).
const MAX_IDS: usize = 64;

#[derive(Debug)]
pub struct OwnTopics {
    names: OnceLock<Vec<Box<[u8]>>>,
    /// Each id as two halves (high, low), written before `count` is raised.
    ids: [[AtomicU64; 2]; MAX_IDS],
    count: AtomicUsize,
    writer: Mutex<()>,
}

impl Default for OwnTopics {
    fn default() -> Self {
        OwnTopics {
            names: OnceLock::new(),
            ids: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
            count: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }
}

fn halves(id: &[u8]) -> Option<(u64, u64)> {
    let id: &[u8; 16] = id.try_into().ok()?;
    let hi = u64::from_be_bytes(id[..8].try_into().ok()?);
    let lo = u64::from_be_bytes(id[8..].try_into().ok()?);
    Some((hi, lo))
}

impl OwnTopics {
    /// Names the own topics (once; naming them again with other names is refused).
    pub fn set_names(&self, names: &[String]) -> Result<(), String> {
        let mut wanted: Vec<Box<[u8]>> = names.iter().map(|n| n.as_bytes().into()).collect();
        wanted.sort();
        wanted.dedup();
        if wanted.iter().any(|n| n.is_empty()) {
            return Err("an own topic needs a name".into());
        }
        let set = self.names.get_or_init(|| wanted.clone());
        if *set != wanted {
            return Err("the own topics are already named".into());
        }
        Ok(())
    }

    /// Adds the topic id of an own topic (16 bytes; the zero id, Kafka's "none", is ignored).
    pub fn add_id(&self, id: &[u8]) -> Result<(), String> {
        let (hi, lo) = halves(id).ok_or_else(|| format!("a topic id is 16 bytes, got {}", id.len()))?;
        if (hi, lo) == (0, 0) || self.is_own_id(id) {
            return Ok(());
        }
        let _one_writer = self.writer.lock().unwrap();
        let n = self.count.load(Ordering::Acquire);
        let slot = &self.ids[n % MAX_IDS];
        slot[0].store(hi, Ordering::Release);
        slot[1].store(lo, Ordering::Release);
        self.count.store(n + 1, Ordering::Release);
        Ok(())
    }

    /// Whether any topic is closed (only with a `kafka://` store).
    pub fn any(&self) -> bool {
        self.names.get().is_some_and(|n| !n.is_empty())
    }

    pub fn is_own_name(&self, name: &[u8]) -> bool {
        self.names.get().is_some_and(|n| n.iter().any(|x| **x == *name))
    }

    pub fn is_own_id(&self, id: &[u8]) -> bool {
        let Some((hi, lo)) = halves(id) else {
            return false;
        };
        let n = self.count.load(Ordering::Acquire).min(MAX_IDS);
        self.ids[..n]
            .iter()
            .any(|s| s[0].load(Ordering::Acquire) == hi && s[1].load(Ordering::Acquire) == lo)
    }

    // ------------------------------------------------------------------ Produce

    /// Whether a Produce request (v3+, whole) names an own topic.
    pub fn in_produce(&self, frame: &[u8], body: usize, version: i16) -> Proto<bool> {
        let mut found = false;
        let mut w = SliceWalk(Cursor::new(frame, body));
        at_once(walk_produce(&mut w, version, |p| found |= self.is_own_name(p.name)))?;
        Ok(found)
    }

    /// The body of the answer to a Produce naming an own topic: every partition of the
    /// request refused (`ProduceResponse` v3+, no throttle yet).
    pub fn refused_produce(&self, frame: &[u8], body: usize, version: i16) -> Proto<Vec<u8>> {
        let flexible = version >= PRODUCE_FLEXIBLE;
        // (the topic's place in the request, its name, its partitions)
        let mut topics: Vec<(usize, Vec<u8>, Vec<i32>)> = Vec::new();
        let mut w = SliceWalk(Cursor::new(frame, body));
        at_once(walk_produce(&mut w, version, |p| match topics.last_mut() {
            Some((t, _, parts)) if *t == p.topic => parts.extend(p.partition),
            _ => topics.push((p.topic, p.name.to_vec(), p.partition.into_iter().collect())),
        }))?;
        let mut out = Vec::new();
        put_array_len(&mut out, topics.len(), flexible);
        for (_, name, partitions) in &topics {
            put_string(&mut out, name, flexible);
            put_array_len(&mut out, partitions.len(), flexible);
            for p in partitions {
                out.extend_from_slice(&p.to_be_bytes());
                out.extend_from_slice(&TOPIC_AUTHORIZATION_FAILED.to_be_bytes());
                out.extend_from_slice(&(-1i64).to_be_bytes()); // BaseOffset
                out.extend_from_slice(&(-1i64).to_be_bytes()); // LogAppendTimeMs
                if version >= 5 {
                    out.extend_from_slice(&(-1i64).to_be_bytes()); // LogStartOffset
                }
                if version >= 8 {
                    put_array_len(&mut out, 0, flexible); // RecordErrors
                    put_null_string(&mut out, flexible); // ErrorMessage
                }
                if flexible {
                    out.push(0);
                }
            }
            if flexible {
                out.push(0);
            }
        }
        out.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
        if flexible {
            out.push(0);
        }
        Ok(out)
    }

    // ------------------------------------------------------------------ Fetch

    /// Whether a Fetch request (v4+, whole) names an own topic (by name before v13, by id after).
    pub fn in_fetch(&self, frame: &[u8], topics_at: usize, version: i16) -> Proto<bool> {
        let mut found = false;
        walk_fetch(frame, topics_at, version, |topic, _| {
            found |= self.is_own_topic(topic, version);
        })?;
        Ok(found)
    }

    fn is_own_topic(&self, topic: &[u8], version: i16) -> bool {
        if version >= FETCH_BY_ID {
            self.is_own_id(topic)
        } else {
            self.is_own_name(topic)
        }
    }

    /// The body of the answer to a Fetch naming an own topic: its partitions refused, nothing
    /// fetched (`FetchResponse` v4+, no throttle yet, no session).
    pub fn refused_fetch(&self, frame: &[u8], topics_at: usize, version: i16) -> Proto<Vec<u8>> {
        let flexible = version >= FETCH_FLEXIBLE;
        let mut topics: Vec<(&[u8], Vec<i32>)> = Vec::new();
        walk_fetch(frame, topics_at, version, |topic, partition| {
            if !self.is_own_topic(topic, version) {
                return;
            }
            match topics.last_mut() {
                Some((t, parts)) if partition.is_some() && std::ptr::eq(*t, topic) => parts.extend(partition),
                _ => topics.push((topic, partition.into_iter().collect())),
            }
        })?;
        let mut out = Vec::new();
        out.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
        if version >= 7 {
            out.extend_from_slice(&0i16.to_be_bytes()); // ErrorCode
            out.extend_from_slice(&0i32.to_be_bytes()); // SessionId: none
        }
        put_array_len(&mut out, topics.len(), flexible);
        for (topic, partitions) in &topics {
            if version >= FETCH_BY_ID {
                out.extend_from_slice(topic);
            } else {
                put_string(&mut out, topic, flexible);
            }
            put_array_len(&mut out, partitions.len(), flexible);
            for p in partitions {
                out.extend_from_slice(&p.to_be_bytes());
                out.extend_from_slice(&TOPIC_AUTHORIZATION_FAILED.to_be_bytes());
                out.extend_from_slice(&(-1i64).to_be_bytes()); // HighWatermark
                out.extend_from_slice(&(-1i64).to_be_bytes()); // LastStableOffset
                if version >= 5 {
                    out.extend_from_slice(&(-1i64).to_be_bytes()); // LogStartOffset
                }
                put_array_len(&mut out, 0, flexible); // AbortedTransactions
                if version >= 11 {
                    out.extend_from_slice(&(-1i32).to_be_bytes()); // PreferredReadReplica
                }
                put_array_len(&mut out, 0, flexible); // Records: empty
                if flexible {
                    out.push(0);
                }
            }
            if flexible {
                out.push(0);
            }
        }
        if flexible {
            out.push(0);
        }
        Ok(out)
    }
}

fn put_array_len(out: &mut Vec<u8>, n: usize, compact: bool) {
    if compact {
        put_uvarint(out, n as u64 + 1);
    } else {
        out.extend_from_slice(&(n as i32).to_be_bytes());
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8], compact: bool) {
    if compact {
        put_compact_string(out, Some(s));
    } else {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
        out.extend_from_slice(s);
    }
}

fn put_null_string(out: &mut Vec<u8>, compact: bool) {
    if compact {
        out.push(0);
    } else {
        out.extend_from_slice(&(-1i16).to_be_bytes());
    }
}

fn string<'a>(c: &mut Cursor<'a>, compact: bool) -> Proto<&'a [u8]> {
    let n = c.length(compact, 2)?.unwrap_or(0);
    c.take(n)
}

/// Where a Fetch request's topics start, from where its MaxWaitMs is (`FetchRequest::fixed_at`).
pub fn fetch_topics_at(fixed_at: usize, version: i16) -> usize {
    // MaxWaitMs, MinBytes, MaxBytes, IsolationLevel; SessionId and SessionEpoch (v7+).
    fixed_at + 13 + if version >= 7 { 8 } else { 0 }
}

/// Calls `each(topic name or id, partition)` for every partition of a Fetch request's topics
/// (and once with `None` for a topic without partitions).
pub(crate) fn walk_fetch<'a>(
    frame: &'a [u8],
    at: usize,
    version: i16,
    mut each: impl FnMut(&'a [u8], Option<i32>),
) -> Proto<()> {
    let flexible = version >= FETCH_FLEXIBLE;
    let mut c = Cursor::new(frame, at);
    for _ in 0..c.array_len(flexible)? {
        let topic = if version >= FETCH_BY_ID {
            c.take(16)?
        } else {
            string(&mut c, flexible)?
        };
        let partitions = c.array_len(flexible)?;
        if partitions == 0 {
            each(topic, None);
        }
        for _ in 0..partitions {
            each(topic, Some(c.i32()?));
            // CurrentLeaderEpoch (v9+), FetchOffset, LastFetchedEpoch (v12+), LogStartOffset
            // (v5+), PartitionMaxBytes.
            let mut n = 8 + 4;
            if version >= 9 {
                n += 4;
            }
            if version >= 12 {
                n += 4;
            }
            if version >= 5 {
                n += 8;
            }
            c.skip(n)?;
            c.skip_tags(flexible)?;
        }
        c.skip_tags(flexible)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce_topics::produce_topic_bytes;

    fn own() -> OwnTopics {
        let o = OwnTopics::default();
        o.set_names(&["q".into(), "q.usage".into()]).unwrap();
        o
    }

    fn produce_v8(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut f = vec![0xff, 0xff, 0, 1, 0, 0, 0, 100]; // null txn id, acks 1, timeout
        f.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (name, parts) in topics {
            f.extend_from_slice(&(name.len() as i16).to_be_bytes());
            f.extend_from_slice(name.as_bytes());
            f.extend_from_slice(&(parts.len() as i32).to_be_bytes());
            for p in *parts {
                f.extend_from_slice(&p.to_be_bytes());
                f.extend_from_slice(&3i32.to_be_bytes());
                f.extend_from_slice(&[7, 7, 7]);
            }
        }
        f
    }

    #[test]
    fn names_are_fixed_once_and_ids_are_added() {
        let o = own();
        assert!(o.any() && o.is_own_name(b"q") && !o.is_own_name(b"qq"));
        assert!(o.set_names(&["other".into()]).is_err());
        assert!(o.set_names(&["q.usage".into(), "q".into()]).is_ok());
        let id = [5u8; 16];
        assert!(!o.is_own_id(&id));
        o.add_id(&id).unwrap();
        o.add_id(&[0; 16]).unwrap();
        assert!(o.is_own_id(&id) && !o.is_own_id(&[0; 16]));
        assert!(o.add_id(&[1; 3]).is_err());
        assert!(!OwnTopics::default().any());
    }

    #[test]
    fn ids_past_the_bound_replace_the_oldest() {
        let o = own();
        for i in 0..=MAX_IDS as u8 {
            o.add_id(&[i + 1; 16]).unwrap();
        }
        assert!(o.is_own_id(&[MAX_IDS as u8 + 1; 16]) && o.is_own_id(&[2; 16]) && !o.is_own_id(&[1; 16]));
    }

    #[test]
    fn a_produce_naming_an_own_topic_is_refused_whole() {
        let o = own();
        let plain = produce_v8(&[("a", &[0, 1])]);
        assert!(!o.in_produce(&plain, 0, 8).unwrap());
        let mixed = produce_v8(&[("a", &[0]), ("q", &[0, 2])]);
        assert!(o.in_produce(&mixed, 0, 8).unwrap());
        let body = o.refused_produce(&mixed, 0, 8).unwrap();
        // Two topics; "a" with partition 0, "q" with 0 and 2, each refused.
        let mut c = Cursor::new(&body, 0);
        assert_eq!(c.array_len(false).unwrap(), 2);
        let mut seen = Vec::new();
        for _ in 0..2 {
            let name = string(&mut c, false).unwrap().to_vec();
            for _ in 0..c.array_len(false).unwrap() {
                let p = c.i32().unwrap();
                assert_eq!(c.i16().unwrap(), TOPIC_AUTHORIZATION_FAILED);
                c.skip(24).unwrap();
                assert_eq!(c.array_len(false).unwrap(), 0);
                assert_eq!(c.length(false, 2).unwrap(), None);
                seen.push((name.clone(), p));
            }
        }
        assert_eq!(c.i32().unwrap(), 0);
        assert_eq!(c.pos, body.len());
        assert_eq!(seen, [(b"a".to_vec(), 0), (b"q".to_vec(), 0), (b"q".to_vec(), 2)]);
        assert!(o.in_produce(&mixed[..mixed.len() - 1], 0, 8).is_err());
    }

    #[test]
    fn a_produces_topic_bytes_and_own_topics_come_from_one_walk() {
        let o = own();
        // Each partition's records are 3 bytes: "a" has 2 partitions, "b" 1, then "a" again.
        let f = produce_v8(&[("a", &[0, 1]), ("b", &[4]), ("a", &[2])]);
        let (topics, owned) = produce_topic_bytes(|n| o.is_own_name(n), &f, 0, 8).unwrap();
        assert!(!owned);
        assert_eq!(topics, [("a".into(), 6.0), ("b".into(), 3.0), ("a".into(), 3.0)]);
        let (_, owned) = produce_topic_bytes(|n| o.is_own_name(n), &produce_v8(&[("a", &[0]), ("q", &[])]), 0, 8).unwrap();
        assert!(owned);
        // A truncated or lying request is an error, not a guess.
        assert!(produce_topic_bytes(|n| o.is_own_name(n), &f[..f.len() - 1], 0, 8).is_err());
        let mut lying = produce_v8(&[("a", &[0])]);
        let at = lying.len() - 7;
        lying[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(produce_topic_bytes(|n| o.is_own_name(n), &lying, 0, 8).is_err());
    }

    #[test]
    fn a_fetch_by_id_is_refused_only_for_known_ids() {
        let o = own();
        let mut f = Vec::new();
        f.push(2); // one topic
        f.extend_from_slice(&[9; 16]);
        f.push(2); // one partition
        f.extend_from_slice(&4i32.to_be_bytes());
        f.extend_from_slice(&[0; 4 + 8 + 4 + 8 + 4]);
        f.push(0); // partition tags
        f.push(0); // topic tags
        assert!(!o.in_fetch(&f, 0, 13).unwrap());
        o.add_id(&[9; 16]).unwrap();
        assert!(o.in_fetch(&f, 0, 13).unwrap());
        let body = o.refused_fetch(&f, 0, 13).unwrap();
        let mut c = Cursor::new(&body, 10);
        assert_eq!(c.array_len(true).unwrap(), 1);
        assert_eq!(c.take(16).unwrap(), &[9; 16]);
        assert_eq!(c.array_len(true).unwrap(), 1);
        assert_eq!(c.i32().unwrap(), 4);
        assert_eq!(c.i16().unwrap(), TOPIC_AUTHORIZATION_FAILED);
        assert!(o.in_fetch(&f[..20], 0, 13).is_err());
    }
}
