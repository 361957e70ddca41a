//! A Produce request's topics (v3+): every partition's record batches met in one walk of the
//! request's layout, for the topic quotas, the request log's topic rows and the proxy's own
//! topics. The walk runs over a request held whole or over one still arriving (`walk`): a large
//! request is then sent on to the broker as it is walked, its record batches spliced unread, so
//! counting a request's topics costs no copy of its records.

use crate::produce_layout::PRODUCE_FLEXIBLE;
use crate::walk::{array_len, at_once, i32, length, skip_tags, SliceWalk, Walk};
use crate::wire::{malformed, Cursor, Proto};

pub use crate::topic_bytes::ProduceTopicBytes;

/// One partition of a Produce request, as the walk meets it.
pub struct Partition<'n> {
    /// The topic's place in the request (a topic named twice is met as two).
    pub topic: usize,
    pub name: &'n [u8],
    /// `None` for a topic listed without partitions.
    pub partition: Option<i32>,
    /// Its record batches' bytes (read before they are passed).
    pub records: usize,
    /// No record batch follows this one's: every topic's bytes are known from here on, while
    /// the batch itself and at least its length are not yet sent on.
    pub last: bool,
}

/// Calls `each` for every partition of a Produce request (and once for a topic without
/// partitions), from the request's body (TransactionalId) to its last partition's tags.
pub async fn walk_produce<W: Walk>(w: &mut W, version: i16, mut each: impl FnMut(Partition<'_>)) -> Proto<()> {
    if version < 3 {
        return malformed("Produce below v3");
    }
    let flexible = version >= PRODUCE_FLEXIBLE;
    let id = length(w, flexible, 2).await?.unwrap_or(0);
    w.skip(id).await?; // TransactionalId
    w.skip(2 + 4).await?; // Acks, TimeoutMs
    let topics = array_len(w, flexible).await?;
    let mut name = Vec::new();
    for topic in 0..topics {
        let n = length(w, flexible, 2).await?.unwrap_or(0);
        if n > w.remaining() {
            return malformed("topic name longer than its frame");
        }
        name.clear();
        name.extend_from_slice(w.bytes(n).await?);
        let last_topic = topic + 1 == topics;
        let partitions = array_len(w, flexible).await?;
        if partitions == 0 {
            each(Partition {
                topic,
                name: &name,
                partition: None,
                records: 0,
                last: last_topic,
            });
        }
        for p in 0..partitions {
            let partition = i32(w).await?;
            let records = length(w, flexible, 4).await?.unwrap_or(0);
            each(Partition {
                topic,
                name: &name,
                partition: Some(partition),
                records,
                last: last_topic && p + 1 == partitions,
            });
            w.skip(records).await?;
            skip_tags(w, flexible).await?;
        }
        skip_tags(w, flexible).await?;
    }
    Ok(())
}

/// Each topic's bytes (the sum of its partitions' record batches) as a walk meets them, and
/// whether one of them is one of the proxy's own topics. Names that are not UTF-8 are left out
/// (no topic has one).
#[derive(Default)]
pub struct TopicTally {
    pub topics: ProduceTopicBytes,
    pub owned: bool,
    /// The topic being summed (its place in the request), and whether it is kept.
    at: Option<(usize, bool)>,
}

impl TopicTally {
    /// Adds a partition; `is_own` is asked of each topic's name once.
    pub fn add(&mut self, p: &Partition<'_>, is_own: impl FnOnce(&[u8]) -> bool) {
        let kept = match self.at {
            Some((topic, kept)) if topic == p.topic => kept,
            _ => {
                self.owned |= is_own(p.name);
                let name = std::str::from_utf8(p.name).ok();
                if let Some(name) = name {
                    self.topics.push((name.into(), 0.0));
                }
                self.at = Some((p.topic, name.is_some()));
                name.is_some()
            }
        };
        if let (true, Some((_, bytes))) = (kept, self.topics.last_mut()) {
            *bytes += p.records as f64;
        }
    }
}

/// A Produce request's (v3+, whole) topics and the bytes of each, and whether it names a topic
/// `is_own` says is the proxy's, from one walk.
pub fn produce_topic_bytes(
    is_own: impl Fn(&[u8]) -> bool,
    frame: &[u8],
    body: usize,
    version: i16,
) -> Proto<(ProduceTopicBytes, bool)> {
    let mut tally = TopicTally::default();
    let mut w = SliceWalk(Cursor::new(frame, body));
    at_once(walk_produce(&mut w, version, |p| tally.add(&p, &is_own)))?;
    Ok((tally.topics, tally.owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Produce v9 body (compact): `(name, [(partition, records bytes)])` per topic.
    fn produce_v9(topics: &[(&str, &[(i32, usize)])]) -> Vec<u8> {
        let mut f = vec![0, 0, 1, 0, 0, 0, 100]; // null TransactionalId, acks 1, TimeoutMs
        f.push(topics.len() as u8 + 1);
        for (name, parts) in topics {
            f.push(name.len() as u8 + 1);
            f.extend_from_slice(name.as_bytes());
            f.push(parts.len() as u8 + 1);
            for (p, n) in *parts {
                f.extend_from_slice(&p.to_be_bytes());
                f.push(*n as u8 + 1);
                f.extend(std::iter::repeat_n(7, *n));
                f.push(0); // partition tags
            }
            f.push(0); // topic tags
        }
        f.push(0); // top-level tags
        f
    }

    /// (topic's place, name, partition, records bytes, last) per partition met.
    type Met = (usize, String, Option<i32>, usize, bool);

    fn partitions(frame: &[u8]) -> Proto<Vec<Met>> {
        let mut out = Vec::new();
        let mut w = SliceWalk(Cursor::new(frame, 0));
        at_once(walk_produce(&mut w, 9, |p| {
            out.push((p.topic, String::from_utf8_lossy(p.name).into(), p.partition, p.records, p.last))
        }))?;
        Ok(out)
    }

    #[test]
    fn the_last_record_batch_is_marked_once() {
        let f = produce_v9(&[("a", &[(0, 3), (1, 5)]), ("b", &[]), ("a", &[(2, 0)])]);
        let got = partitions(&f).unwrap();
        let want = [
            (0, "a".to_string(), Some(0), 3, false),
            (0, "a".into(), Some(1), 5, false),
            (1, "b".into(), None, 0, false),
            (2, "a".into(), Some(2), 0, true),
        ];
        assert_eq!(got, want);
        // A last topic without partitions is the mark; no topics, no mark.
        let got = partitions(&produce_v9(&[("a", &[(0, 3)]), ("b", &[])])).unwrap();
        assert_eq!(got.iter().map(|p| p.4).collect::<Vec<_>>(), [false, true]);
        assert!(partitions(&produce_v9(&[])).unwrap().is_empty());
    }

    #[test]
    fn a_topic_named_twice_is_tallied_twice_and_bad_names_are_left_out() {
        let f = produce_v9(&[("a", &[(0, 3), (1, 5)]), ("\u{fffd}", &[(0, 4)]), ("a", &[(2, 1)])]);
        let mut bad = f.clone();
        let at = bad.windows(3).position(|w| w == "\u{fffd}".as_bytes()).unwrap();
        bad[at] = 0xff; // not UTF-8
        let (topics, owned) = produce_topic_bytes(|_| false, &bad, 0, 9).unwrap();
        assert!(!owned);
        assert_eq!(topics, [("a".into(), 8.0), ("a".into(), 1.0)]);
    }

    #[test]
    fn lengths_past_the_frame_are_refused() {
        let f = produce_v9(&[("a", &[(0, 3)])]);
        for cut in 0..f.len() - 1 {
            assert!(partitions(&f[..cut]).is_err(), "cut at {cut}");
        }
        // A topic count or name length larger than the bytes left.
        let mut many = f.clone();
        many[7] = 100;
        assert!(partitions(&many).is_err());
        let mut long = f.clone();
        long[8] = 120;
        assert!(partitions(&long).is_err());
    }
}
