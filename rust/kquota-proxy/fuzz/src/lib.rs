//! The fuzz targets' bodies: each feeds hostile bytes to one of the proxy's wire readers and
//! checks what the proxy relies on besides "no panic" (positions inside the frame, a field
//! written in place read back, a header read the same from a prefix of the stream as from the
//! whole). The `fuzz_targets/` binaries are one line each; `scripts/fuzz.sh` runs them.

use std::future::Future;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use kquota_proxy::fetch_layout::{cap_max_bytes, fetch_request, walk_to_top_tags, SliceWalk};
use kquota_proxy::header::{parse_request_header, response_body_offset};
use kquota_proxy::produce_layout::{produce_acks, produce_layout};
use kquota_proxy::proxy_protocol::{self, ProxyHeaderError, MAX_HEADER_BYTES, MAX_V1_BYTES};
use kquota_proxy::tables::{ApiTables, FETCH, PRODUCE};
use kquota_proxy::wire::Cursor;

/// Kafka's first flexible version per API key (index = key; -1: never), as the proxy's Python
/// side passes them in from the schema data (`kquota.kafka.protocol.codec.is_flexible`).
const FLEXIBLE_FROM: [i16; 88] = [
    9, 12, 6, 9, 4, 2, 6, 3, 8, 6, 3, 6, 4, 4, 4, 5, 3, -1, 3, 5, 4, 2, 2, 4, 3, 3, 3, 1, 3, 2, 2, 2, 4, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 0, 0, -1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

fn tables() -> &'static ApiTables {
    static TABLES: OnceLock<ApiTables> = OnceLock::new();
    TABLES.get_or_init(|| ApiTables {
        flexible_from: FLEXIBLE_FROM.to_vec(),
        ..Default::default()
    })
}

/// The client's byte stream as the request reader takes it: size-prefixed frames, each header
/// parsed, then Produce's `acks` or Fetch's fields (and its max-bytes cap written in place).
pub fn request_reader(data: &[u8]) {
    let mut rest = data;
    while rest.len() >= 4 {
        let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        // The reader refuses a negative size and reads exactly `size` bytes.
        let Ok(size) = usize::try_from(size) else { return };
        let Some(frame) = rest.get(4..4 + size) else {
            return;
        };
        rest = &rest[4 + size..];
        request_frame(frame);
    }
}

fn request_frame(frame: &[u8]) {
    let t = tables();
    let Ok(h) = parse_request_header(frame, t) else {
        return;
    };
    assert!(h.body_offset <= frame.len());
    assert!(
        8 <= h.client_id.start && h.client_id.start <= h.client_id.end && h.client_id.end <= h.body_offset
    );
    assert_eq!(
        h.client_id(frame).as_bytes(),
        &frame[h.client_id.clone()],
        "client id not UTF-8"
    );
    // A streamed frame's header is read from its head: a head that parses parses as the whole.
    let head = &frame[..frame.len() / 2];
    if let Ok(early) = parse_request_header(head, t) {
        assert_eq!(
            (
                early.api_key,
                early.api_version,
                early.correlation_id,
                early.client_id,
                early.body_offset
            ),
            (
                h.api_key,
                h.api_version,
                h.correlation_id,
                h.client_id.clone(),
                h.body_offset
            )
        );
    }
    match h.api_key {
        PRODUCE => {
            let acks = produce_acks(frame, h.body_offset, h.api_version);
            if h.body_offset <= head.len() {
                if let Ok(early) = produce_acks(head, h.body_offset, h.api_version) {
                    assert_eq!(Some(early), acks.ok());
                }
            }
        }
        FETCH => fetch(frame, h.body_offset, h.api_version),
        _ => {}
    }
}

fn fetch(frame: &[u8], body: usize, version: i16) {
    let Ok(req) = fetch_request(frame, body, version) else {
        return;
    };
    assert!(req.fixed_at + 12 <= frame.len());
    let cap = (req.max_bytes / 2).max(0);
    let mut capped = frame.to_vec();
    cap_max_bytes(&mut capped, &req, cap);
    let after = fetch_request(&capped, body, version).expect("a capped Fetch still reads");
    assert_eq!(after.max_bytes, cap);
    assert_eq!(after.min_bytes, req.min_bytes.min(cap));
    assert_eq!(
        (after.replica_id, after.session_epoch, after.fixed_at),
        (req.replica_id, req.session_epoch, req.fixed_at)
    );
}

/// A broker's Produce response (v3-v13; the first input byte picks the version): where the
/// throttle is patched in place and where the top-level tags (NodeEndpoints) are.
pub fn produce_response(data: &[u8]) {
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let version = 3 + i16::from(pick % 11);
    let Ok(body) = response_body_offset(frame, tables(), PRODUCE, version) else {
        return;
    };
    let Ok(layout) = produce_layout(frame, body, version) else {
        return;
    };
    assert_eq!(layout.throttle_at + 4, layout.tags.start);
    assert!(body <= layout.throttle_at && layout.tags.end == frame.len());
    let mut patched = frame.to_vec();
    patched[layout.throttle_at..layout.throttle_at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(produce_layout(&patched, body, version).ok(), Some(layout));
}

/// A broker's flexible Fetch response (v12-v17): the walk to its top-level tagged fields, which
/// completes at once over a frame held whole.
pub fn fetch_response(data: &[u8]) {
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let version = 12 + i16::from(pick % 6);
    let Ok(body) = response_body_offset(frame, tables(), FETCH, version) else {
        return;
    };
    let mut walk = SliceWalk(Cursor::new(frame, body));
    let done = {
        let mut fut = std::pin::pin!(walk_to_top_tags(&mut walk, version));
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(done) => done,
            Poll::Pending => panic!("a walk over a whole frame waited"),
        }
    };
    if done.is_ok() {
        assert!(walk.0.pos <= frame.len());
    }
}

/// The first bytes of a connection from a balancer: a PROXY v1/v2 header, read as the accept
/// path reads it (more bytes while the answer is Incomplete).
pub fn proxy_header(data: &[u8]) {
    match proxy_protocol::parse(data) {
        Ok(h) => {
            assert!(h.version == 1 || h.version == 2);
            assert!(0 < h.length && h.length <= data.len() && h.length <= MAX_HEADER_BYTES);
            assert!(h.version == 2 || h.length <= MAX_V1_BYTES);
            // The header alone reads the same, and each shorter prefix asks for more bytes:
            // a reader fed byte by byte never refuses a header that is valid once whole.
            assert_eq!(proxy_protocol::parse(&data[..h.length]), Ok(h));
            let step = (h.length / 64).max(1);
            for n in (0..h.length).step_by(step).chain([h.length - 1]) {
                assert_eq!(
                    proxy_protocol::parse(&data[..n]),
                    Err(ProxyHeaderError::Incomplete),
                    "prefix {n}"
                );
            }
        }
        // Never more than the longest header before deciding.
        Err(ProxyHeaderError::Incomplete) => assert!(data.len() < MAX_HEADER_BYTES),
        Err(_) => {}
    }
}
