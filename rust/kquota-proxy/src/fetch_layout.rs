//! Fetch's wire layout, the fields the quota needs (the path is `fetch_path`): the request's,
//! read in place; the max-bytes cap written in place; the throttled empty answer; and the walk
//! of a flexible response to its top-level tagged fields (NodeEndpoints, v16+).

use crate::walk::{array_len, length, skip_tags, Walk};
use crate::wire::{malformed, write_i32, Cursor, Proto};

/// Fetch's first flexible version (`FetchRequest.json`, `FetchResponse.json`: 12+).
pub(crate) const FETCH_FLEXIBLE: i16 = 12;
/// Fetch names topics by id from this version.
pub(crate) const FETCH_BY_ID: i16 = 13;

/// The tag of ReplicaState in Fetch v15+ requests (a follower's fetch).
const REPLICA_STATE: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest {
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub session_epoch: i32,
    /// >= 0 for a follower (at a broker; through the proxy, a client like any other).
    pub replica_id: i32,
    /// Where MaxWaitMs is (MinBytes and MaxBytes follow).
    pub fixed_at: usize,
}

/// Reads a Fetch request (v4+; the proxy offers no older version).
pub fn fetch_request(frame: &[u8], body: usize, version: i16) -> Proto<FetchRequest> {
    if version < 4 {
        return malformed("Fetch below v4");
    }
    let mut c = Cursor::new(frame, body);
    let mut replica_id = if version < 15 { c.i32()? } else { -1 };
    let fixed_at = c.pos;
    c.i32()?; // MaxWaitMs
    let min_bytes = c.i32()?;
    let max_bytes = c.i32()?;
    c.i8()?; // IsolationLevel
    let session_epoch = if version >= 7 {
        c.i32()?;
        c.i32()?
    } else {
        -1
    };
    if version >= 15 {
        for _ in 0..c.array_len(true)? {
            c.skip(16)?; // TopicId
            for _ in 0..c.array_len(true)? {
                // Partition, CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch, LogStartOffset,
                // PartitionMaxBytes.
                c.skip(4 + 4 + 8 + 4 + 8 + 4)?;
                c.skip_tags(true)?;
            }
            c.skip_tags(true)?;
        }
        for _ in 0..c.array_len(true)? {
            c.skip(16)?;
            let n = c.array_len(true)?;
            c.skip(4 * n)?;
            c.skip_tags(true)?;
        }
        c.skip_string(true)?; // RackId
        for (tag, value) in c.tags()? {
            if tag == REPLICA_STATE {
                replica_id = Cursor::new(value, 0).i32()?;
            }
        }
    }
    Ok(FetchRequest {
        min_bytes,
        max_bytes,
        session_epoch,
        replica_id,
        fixed_at,
    })
}

/// Kafka: `fetchMaxBytes = min(maxBytes, quota window bytes)`, `fetchMinBytes = min(minBytes, that)`.
pub fn cap_max_bytes(frame: &mut [u8], req: &FetchRequest, max_bytes: i32) {
    write_i32(frame, req.fixed_at + 4, req.min_bytes.min(max_bytes));
    write_i32(frame, req.fixed_at + 8, max_bytes);
}

/// The body of an empty FetchResponse carrying the throttle, as
/// `FetchContext.getThrottledResponse` (the session id chosen by the caller).
pub fn throttled_body(version: i16, session_id: i32, throttle_ms: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&throttle_ms.to_be_bytes());
    if version >= 7 {
        out.extend_from_slice(&0i16.to_be_bytes());
        out.extend_from_slice(&session_id.to_be_bytes());
    }
    if version >= FETCH_FLEXIBLE {
        out.push(1); // no topics (compact array)
        out.push(0); // no tagged fields
    } else {
        out.extend_from_slice(&0i32.to_be_bytes());
    }
    out
}

/// Walks a FetchResponse body (v4+, from its ThrottleTimeMs) to its end, or to its top-level
/// tagged fields in flexible versions (v12+), calling `each(topic name or id, records bytes)`
/// for every topic (the sum of its partitions' records; ids from v13). The one walk of the
/// response's layout: a topic quota's bytes, the NodeEndpoints rewrite (v16+).
pub async fn walk_fetch_response<W: Walk>(w: &mut W, version: i16, mut each: impl FnMut(&[u8], usize)) -> Proto<()> {
    let flexible = version >= FETCH_FLEXIBLE;
    w.skip(4).await?; // ThrottleTimeMs
    if version >= 7 {
        w.skip(2 + 4).await?; // ErrorCode, SessionId
    }
    let mut key = Vec::new();
    for _ in 0..array_len(w, flexible).await? {
        let n = if version >= FETCH_BY_ID {
            16
        } else {
            length(w, flexible, 2).await?.unwrap_or(0)
        };
        if n > w.remaining() {
            return malformed("topic name longer than its frame");
        }
        key.clear();
        key.extend_from_slice(w.bytes(n).await?);
        let mut bytes = 0usize;
        for _ in 0..array_len(w, flexible).await? {
            // PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset (v5+).
            w.skip(4 + 2 + 8 + 8 + if version >= 5 { 8 } else { 0 }).await?;
            for _ in 0..array_len(w, flexible).await? {
                w.skip(8 + 8).await?; // ProducerId, FirstOffset
                skip_tags(w, flexible).await?;
            }
            if version >= 11 {
                w.skip(4).await?; // PreferredReadReplica
            }
            let records = length(w, flexible, 4).await?.unwrap_or(0);
            w.skip(records).await?;
            bytes += records;
            skip_tags(w, flexible).await?;
        }
        skip_tags(w, flexible).await?;
        each(&key, bytes);
    }
    Ok(())
}

/// Walks a flexible FetchResponse body (from its first field) to its top-level tagged fields.
pub async fn walk_to_top_tags<W: Walk>(w: &mut W, version: i16) -> Proto<()> {
    walk_fetch_response(w, version, |_, _| {}).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::SliceWalk;

    fn request_v7() -> Vec<u8> {
        let mut f = vec![0u8; 10]; // a header of 10 bytes
        for v in [-1i32, 500, 1, 50_000_000] {
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.push(0);
        f.extend_from_slice(&7i32.to_be_bytes()); // SessionId
        f.extend_from_slice(&0i32.to_be_bytes()); // SessionEpoch
        f.extend_from_slice(&0i32.to_be_bytes()); // no topics
        f
    }

    #[test]
    fn fields_and_cap_in_place() {
        let mut f = request_v7();
        let req = fetch_request(&f, 10, 7).unwrap();
        assert_eq!(
            (req.replica_id, req.min_bytes, req.max_bytes, req.session_epoch),
            (-1, 1, 50_000_000, 0)
        );
        cap_max_bytes(&mut f, &req, 0);
        let after = fetch_request(&f, 10, 7).unwrap();
        assert_eq!((after.min_bytes, after.max_bytes), (0, 0));
    }

    #[test]
    fn follower_state_tag_is_found_in_v15() {
        let mut f = Vec::new();
        for v in [500i32, 1, 1000] {
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.push(0);
        f.extend_from_slice(&0i32.to_be_bytes());
        f.extend_from_slice(&(-1i32).to_be_bytes());
        f.push(1); // no topics
        f.push(1); // nothing forgotten
        f.push(0); // null rack
        f.extend_from_slice(&[1, 1, 12]); // one tag: ReplicaState, 12 bytes
        f.extend_from_slice(&2i32.to_be_bytes());
        f.extend_from_slice(&5i64.to_be_bytes());
        assert_eq!(fetch_request(&f, 0, 15).unwrap().replica_id, 2);
    }

    #[test]
    fn the_walk_stops_at_the_top_level_tags() {
        let mut body = throttled_body(16, 0, 0);
        body.pop(); // the tag section is checked by the caller
        body.pop();
        body.push(2); // one topic
        body.extend_from_slice(&[9; 16]);
        body.push(2); // one partition
        body.extend_from_slice(&[0; 30]);
        body.push(0); // null aborted transactions
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.push(4); // 3 bytes of records
        body.extend_from_slice(&[1, 2, 3, 0]); // records, partition tags
        body.push(0); // topic tags
        let end = body.len();
        body.extend_from_slice(&[1, 0, 0]); // the top-level section
        let mut w = SliceWalk(Cursor::new(&body, 0));
        let fut = walk_to_top_tags(&mut w, 16);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(fut).unwrap();
        assert_eq!(w.0.pos, end);
    }
}
