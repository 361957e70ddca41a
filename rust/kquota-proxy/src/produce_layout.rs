//! Produce's wire layout, the fields the quota needs (the path is `produce_path`): `acks` from
//! the request's head, and where the response keeps `ThrottleTimeMs` (after the partition
//! responses) and its top-level tagged fields (NodeEndpoints, v10+).

use std::ops::Range;

use crate::wire::{malformed, Cursor, Proto};

/// Produce's first flexible version (`ProduceRequest.json`, `ProduceResponse.json`: 9+).
pub(crate) const PRODUCE_FLEXIBLE: i16 = 9;

/// The `acks` of a Produce request (after the transactional id in v3+).
pub fn produce_acks(frame: &[u8], body: usize, version: i16) -> Proto<i16> {
    if version < 3 {
        return malformed("Produce below v3");
    }
    let mut c = Cursor::new(frame, body);
    c.skip_string(version >= PRODUCE_FLEXIBLE)?;
    c.i16()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceLayout {
    /// Where `ThrottleTimeMs` is.
    pub throttle_at: usize,
    /// The top-level tagged-field section (empty range before v9).
    pub tags: Range<usize>,
}

/// Walks a Produce response body (v3+).
pub fn produce_layout(frame: &[u8], body: usize, version: i16) -> Proto<ProduceLayout> {
    let flexible = version >= PRODUCE_FLEXIBLE;
    let mut c = Cursor::new(frame, body);
    for _ in 0..c.array_len(flexible)? {
        c.skip_string(flexible)?;
        for _ in 0..c.array_len(flexible)? {
            // Index, ErrorCode, BaseOffset, LogAppendTimeMs, LogStartOffset (v5+).
            c.skip(4 + 2 + 8 + 8 + if version >= 5 { 8 } else { 0 })?;
            if version >= 8 {
                for _ in 0..c.array_len(flexible)? {
                    c.skip(4)?;
                    c.skip_string(flexible)?;
                    c.skip_tags(flexible)?;
                }
                c.skip_string(flexible)?; // ErrorMessage
            }
            c.skip_tags(flexible)?;
        }
        c.skip_tags(flexible)?;
    }
    let throttle_at = c.pos;
    c.i32()?;
    let start = c.pos;
    c.skip_tags(flexible)?;
    if c.pos != frame.len() {
        return malformed("bytes after the Produce response");
    }
    Ok(ProduceLayout {
        throttle_at,
        tags: start..c.pos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_after_the_transactional_id() {
        let classic = [0, 2, b't', b'x', 0xff, 0xff];
        assert_eq!(produce_acks(&classic, 0, 8).unwrap(), -1);
        let compact = [0, 0, 1];
        assert_eq!(produce_acks(&compact, 0, 9).unwrap(), 1);
        assert!(produce_acks(&[0, 9], 0, 8).is_err());
    }

    #[test]
    fn layout_of_a_v10_response() {
        let mut f = vec![0, 0, 0, 1, 0]; // corr, header tags
        f.push(2); // one topic
        f.extend_from_slice(&[2, b'a']); // "a"
        f.push(2); // one partition
        f.extend_from_slice(&[0; 4 + 2 + 8 + 8 + 8]);
        f.push(1); // no record errors
        f.push(0); // null error message
        f.push(0); // partition tags
        f.push(0); // topic tags
        let at = f.len();
        f.extend_from_slice(&7i32.to_be_bytes());
        f.extend_from_slice(&[1, 0, 1, 1]); // one tag: NodeEndpoints, empty array
        let layout = produce_layout(&f, 5, 10).unwrap();
        assert_eq!(layout.throttle_at, at);
        assert_eq!(layout.tags, at + 4..f.len());
        assert!(produce_layout(&f[..f.len() - 1], 5, 10).is_err());
    }
}
