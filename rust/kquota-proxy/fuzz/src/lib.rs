//! The fuzz targets' bodies: each feeds hostile bytes to one of the proxy's wire readers and
//! checks what the proxy relies on besides "no panic" (positions inside the frame, a field
//! written in place read back, a header read the same from a prefix of the stream as from the
//! whole, the proxy's own answer read back as a client reads it). The `fuzz_targets/` binaries
//! are one line each; `scripts/fuzz.sh` runs them.

use std::future::Future;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use kquota_proxy::fetch_layout::{cap_max_bytes, fetch_request, walk_to_top_tags};
use kquota_proxy::walk::SliceWalk;
use kquota_proxy::fetch_topics::{request_topics, response_topic_bytes};
use kquota_proxy::topic_names::TopicNames;
use kquota_proxy::header::{parse_request_header, response_body_offset, response_frame};
use kquota_proxy::own_topics::{fetch_topics_at, OwnTopics, TOPIC_AUTHORIZATION_FAILED};
use kquota_proxy::produce_layout::{produce_acks, produce_layout};
use kquota_proxy::proxy_protocol::{self, ProxyHeaderError, MAX_HEADER_BYTES, MAX_V1_BYTES};
use kquota_proxy::tables::{ApiTables, FETCH, PRODUCE};
use kquota_proxy::wire::{read_i32, Cursor, Proto};

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
        // The versions the proxy parses (`tables::PARSED_VERSIONS`): a Produce or Fetch of any
        // other is refused before a walk.
        parsed: ApiTables::parsed_versions(),
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
    // The topic quotas' walk of the same response: each topic's bytes are bytes the frame holds.
    if let Ok(topics) = response_topic_bytes(frame, body, version, topic_names()) {
        let total: f64 = topics.iter().map(|(_, b)| *b).sum();
        assert!(topics.iter().all(|(_, b)| b.is_finite() && *b >= 0.0));
        assert!(total <= frame.len() as f64, "{total} bytes counted in a frame of {}", frame.len());
        assert!(topics.len() <= frame.len());
    }
}

/// Topic ids the fuzzed Fetch frames may name (`[1; 16]`, `[2; 16]`), as learned from Metadata.
fn topic_names() -> &'static TopicNames {
    static NAMES: OnceLock<TopicNames> = OnceLock::new();
    NAMES.get_or_init(|| {
        let names = TopicNames::with_cap(8);
        assert!(names.learn(&[1; 16], "t1") && names.learn(&[2; 16], "t2"));
        names
    })
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

/// The proxy's own topics as the `own_topics` target sees them: the name `a` and the id
/// 00 01 .. 0f, what tests/fuzz/make_corpus.py writes in every string and uuid of its seeds, so
/// that the seeds name them and the fuzzer starts from requests the proxy refuses.
fn own() -> &'static OwnTopics {
    static OWN: OnceLock<OwnTopics> = OnceLock::new();
    OWN.get_or_init(|| {
        let own = OwnTopics::default();
        own.set_names(&["a".into()]).expect("names");
        let id: Vec<u8> = (0..16).collect();
        own.add_id(&id).expect("an id");
        own
    })
}

/// A client's request frame (no size prefix) walked for the proxy's own topics, as the Produce
/// and Fetch paths walk a whole request: whether it names one, and the answer refusing it. The
/// question and the answer walk alike (both read, or both fail); a walk that completes over a
/// prefix of the frame answers the same over the whole; the answer reads back, to its last
/// byte, as a client reads that version's response: every partition TOPIC_AUTHORIZATION_FAILED,
/// a Fetch answer naming own topics only (none where the request names none).
pub fn own_topics(frame: &[u8]) {
    let t = tables();
    let Ok(h) = parse_request_header(frame, t) else {
        return;
    };
    if t.check_version(h.api_key, h.api_version).is_err() {
        return;
    }
    let (v, own) = (h.api_version, own());
    let half = frame.len() / 2;
    let (found, answer, early) = match h.api_key {
        PRODUCE => (
            own.in_produce(frame, h.body_offset, v),
            own.refused_produce(frame, h.body_offset, v),
            (h.body_offset <= half).then(|| own.in_produce(&frame[..half], h.body_offset, v)),
        ),
        FETCH => {
            let Ok(req) = fetch_request(frame, h.body_offset, v) else {
                return;
            };
            let at = fetch_topics_at(req.fixed_at, v);
            assert!(at <= frame.len());
            // The topic quotas' walk of the same request finds the topics the frame names.
            if let Ok(topics) = request_topics(frame, at, v, topic_names()) {
                assert!(topics.iter().all(|t| t.len() < frame.len()));
            }
            let early = own.in_fetch(&frame[..half.max(at)], at, v);
            (
                own.in_fetch(frame, at, v),
                own.refused_fetch(frame, at, v),
                Some(early),
            )
        }
        _ => return,
    };
    assert_eq!(
        found.is_ok(),
        answer.is_ok(),
        "the question and the answer walk alike"
    );
    if let Some(Ok(early)) = early {
        assert_eq!(
            found.as_ref().ok(),
            Some(&early),
            "a walk complete over a prefix answers the same"
        );
    }
    let (Ok(found), Ok(body)) = (found, answer) else {
        return;
    };
    let answer = response_frame(t, h.correlation_id, h.api_key, v, &body);
    assert_eq!(read_i32(&answer, 0), Some(answer.len() as i32 - 4));
    let frame = &answer[4..];
    let at = response_body_offset(frame, t, h.api_key, v).expect("the answer's header");
    let refused = refusal(frame, at, h.api_key, v).expect("the answer reads as the response of its version");
    assert!(refused
        .iter()
        .all(|(_, error)| *error == TOPIC_AUTHORIZATION_FAILED));
    if h.api_key == PRODUCE {
        // The Produce path patches the throttle and the NodeEndpoints of its answer as of a
        // broker's: its own reader of the broker's answers must read it.
        let layout = produce_layout(frame, at, v).expect("the Produce path reads its own answer");
        assert_eq!(read_i32(frame, layout.throttle_at), Some(0));
    } else {
        assert!(refused.iter().all(|(topic, _)| if v >= 13 {
            own.is_own_id(topic)
        } else {
            own.is_own_name(topic)
        }));
        assert!(found || refused.is_empty());
        if v >= 12 {
            let mut walk = SliceWalk(Cursor::new(frame, at));
            let mut fut = std::pin::pin!(walk_to_top_tags(&mut walk, v));
            let done = fut.as_mut().poll(&mut Context::from_waker(Waker::noop()));
            assert!(
                matches!(done, Poll::Ready(Ok(()))),
                "the Fetch path reads its own answer"
            );
        }
    }
}

/// (topic name or id, error code) of every partition of a Produce (v3+) or Fetch (v4+)
/// response body, read to the frame's last byte (Kafka's schemas: ProduceResponse,
/// FetchResponse).
fn refusal(frame: &[u8], body: usize, key: i16, v: i16) -> Proto<Vec<(Vec<u8>, i16)>> {
    let produce = key == PRODUCE;
    let flexible = v >= if produce { 9 } else { 12 };
    let mut c = Cursor::new(frame, body);
    if !produce {
        c.i32()?; // ThrottleTimeMs
        if v >= 7 {
            c.skip(2 + 4)?; // ErrorCode, SessionId
        }
    }
    let mut out = Vec::new();
    for _ in 0..c.array_len(flexible)? {
        let topic = if !produce && v >= 13 {
            c.take(16)?
        } else {
            let n = c.length(flexible, 2)?.unwrap_or(0);
            c.take(n)?
        };
        for _ in 0..c.array_len(flexible)? {
            c.i32()?; // the partition
            out.push((topic.to_vec(), c.i16()?));
            // BaseOffset, LogAppendTimeMs | HighWatermark, LastStableOffset; LogStartOffset (v5+)
            c.skip(16 + if v >= 5 { 8 } else { 0 })?;
            if produce && v >= 8 {
                for _ in 0..c.array_len(flexible)? {
                    c.i32()?; // BatchIndex
                    c.skip_string(flexible)?;
                    c.skip_tags(flexible)?;
                }
                c.skip_string(flexible)?; // ErrorMessage
            }
            if !produce {
                for _ in 0..c.array_len(flexible)? {
                    c.skip(16)?; // AbortedTransactions: ProducerId, FirstOffset
                    c.skip_tags(flexible)?;
                }
                if v >= 11 {
                    c.i32()?; // PreferredReadReplica
                }
                let n = c.length(flexible, 4)?.unwrap_or(0); // Records
                c.skip(n)?;
            }
            c.skip_tags(flexible)?;
        }
        c.skip_tags(flexible)?;
    }
    if produce {
        c.i32()?; // ThrottleTimeMs
    }
    c.skip_tags(flexible)?;
    if c.pos != frame.len() {
        return kquota_proxy::wire::malformed("bytes after the response");
    }
    Ok(out)
}
