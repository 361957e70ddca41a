//! Request and response headers (request header v1/v2, response header v0/v1; ApiVersions
//! responses always use v0 so that any client can read them).

use std::ops::Range;

use crate::tables::{ApiTables, API_VERSIONS, CONTROLLED_SHUTDOWN};
use crate::wire::{malformed, patch_throttle, read_i32, Cursor, Proto};

#[derive(Debug, Clone)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// Where the client id lies in the frame (empty for a null client id).
    pub client_id: Range<usize>,
    pub body_offset: usize,
}

impl RequestHeader {
    pub fn client_id<'a>(&self, frame: &'a [u8]) -> &'a str {
        // Checked to be UTF-8 when parsed.
        std::str::from_utf8(&frame[self.client_id.clone()]).unwrap_or("")
    }
}

/// Parses a request header; the client id keeps its int16 length even in header v2, as
/// Kafka's `RequestHeader.json` says.
pub fn parse_request_header(frame: &[u8], tables: &ApiTables) -> Proto<RequestHeader> {
    let mut c = Cursor::new(frame, 0);
    let api_key = c.i16()?;
    let api_version = c.i16()?;
    let correlation_id = c.i32()?;
    if api_key == CONTROLLED_SHUTDOWN && api_version == 0 {
        return malformed("ControlledShutdown v0 (header v0) is not supported");
    }
    let client_id = match c.length(false, 2)? {
        None => c.pos..c.pos,
        Some(n) => {
            let start = c.pos;
            let s = c.take(n)?;
            if std::str::from_utf8(s).is_err() {
                return malformed("client id is not UTF-8");
            }
            start..c.pos
        }
    };
    if api_key >= 0 && tables.is_flexible(api_key, api_version) {
        c.skip_tags(true)?;
    }
    Ok(RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id,
        body_offset: c.pos,
    })
}

pub fn response_header_flexible(tables: &ApiTables, key: i16, version: i16) -> bool {
    key != API_VERSIONS && tables.is_flexible(key, version)
}

/// Where a response's body starts (frame without its size prefix).
pub fn response_body_offset(frame: &[u8], tables: &ApiTables, key: i16, version: i16) -> Proto<usize> {
    let mut c = Cursor::new(frame, 4);
    if frame.len() < 4 {
        return malformed("response shorter than its header");
    }
    c.skip_tags(response_header_flexible(tables, key, version))?;
    Ok(c.pos)
}

/// Raises the `ThrottleTimeMs` of a response (a whole frame, size prefix included) to
/// `throttle` if lower: max(broker's, proxy's), in place. Only a response version that begins
/// with the field (`ApiTables::throttle_first`) is patched; any other is left as it is (the mute
/// after it still applies). The one rule for every response the proxy relays or re-encodes,
/// Python's included (`ProxyDataPlane.raise_throttle`).
pub fn raise_response_throttle(
    frame: &mut [u8],
    tables: &ApiTables,
    key: i16,
    version: i16,
    throttle: i32,
) -> Proto<()> {
    if throttle <= 0 || !tables.throttle_first(key, version) {
        return Ok(());
    }
    let at = 4 + response_body_offset(frame.get(4..).unwrap_or_default(), tables, key, version)?;
    if read_i32(frame, at).is_none() {
        return malformed("response shorter than its ThrottleTimeMs");
    }
    patch_throttle(frame, at, throttle);
    Ok(())
}

/// A whole response frame (size prefix included) with the given body.
pub fn response_frame(tables: &ApiTables, corr: i32, key: i16, version: i16, body: &[u8]) -> Vec<u8> {
    let flexible = response_header_flexible(tables, key, version);
    let size = 4 + usize::from(flexible) + body.len();
    let mut out = Vec::with_capacity(4 + size);
    out.extend_from_slice(&(size as i32).to_be_bytes());
    out.extend_from_slice(&corr.to_be_bytes());
    if flexible {
        out.push(0);
    }
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> ApiTables {
        ApiTables {
            flexible_from: vec![9, 12],
            ..Default::default()
        }
    }

    #[test]
    fn flexible_header_skips_tags_and_null_client_id_is_empty() {
        // Fetch v12: key 1, version 12, corr 7, null client id, empty tag section.
        let frame = [0, 1, 0, 12, 0, 0, 0, 7, 0xff, 0xff, 0, 42];
        let h = parse_request_header(&frame, &tables()).unwrap();
        assert_eq!((h.api_key, h.api_version, h.correlation_id), (1, 12, 7));
        assert_eq!(h.client_id(&frame), "");
        assert_eq!(h.body_offset, 11);
    }

    #[test]
    fn throttle_raised_to_the_max_only_where_the_response_begins_with_it() {
        // Fetch (key 1): ThrottleTimeMs first from v1, flexible header from v12.
        let t = ApiTables {
            throttle_first: vec![-1, 1],
            ..tables()
        };
        let frame = |flexible: bool, old: i32| {
            let mut f = vec![0, 0, 0, 0, 0, 0, 0, 7];
            if flexible {
                f.push(0);
            }
            f.extend_from_slice(&old.to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            let size = (f.len() - 4) as i32;
            f[..4].copy_from_slice(&size.to_be_bytes());
            f
        };
        let throttle_at = |f: &[u8], flexible: bool| read_i32(f, 8 + usize::from(flexible)).unwrap();
        for (version, flexible) in [(11, false), (12, true)] {
            let mut f = frame(flexible, 10);
            raise_response_throttle(&mut f, &t, 1, version, 50).unwrap();
            assert_eq!(throttle_at(&f, flexible), 50);
            raise_response_throttle(&mut f, &t, 1, version, 20).unwrap(); // the broker's is larger
            assert_eq!(throttle_at(&f, flexible), 50);
        }
        // No field at the start (Fetch v0, Produce): unchanged; no throttle: unchanged.
        for (key, version, throttle) in [(1, 0, 50), (0, 9, 50), (1, 11, 0)] {
            let mut f = frame(false, 10);
            raise_response_throttle(&mut f, &t, key, version, throttle).unwrap();
            assert_eq!(throttle_at(&f, false), 10);
        }
        // A response cut inside the field (or its header) is malformed, not passed on.
        let mut short = vec![0, 0, 0, 6, 0, 0, 0, 9, 0, 1];
        assert!(raise_response_throttle(&mut short, &t, 1, 11, 50).is_err());
        assert!(raise_response_throttle(&mut [0, 0, 0, 1, 0], &t, 1, 11, 50).is_err());
    }

    #[test]
    fn bad_client_ids_are_refused() {
        assert!(parse_request_header(&[0, 0, 0, 3, 0, 0, 0, 1, 0, 2, 0xff, 0xfe], &tables()).is_err());
        assert!(parse_request_header(&[0, 0, 0, 3, 0, 0, 0, 1, 0, 9, b'a'], &tables()).is_err());
        assert!(parse_request_header(&[0, 7, 0, 0, 0, 0, 0, 1, 0, 0], &tables()).is_err());
    }
}
