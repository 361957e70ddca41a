//! Produce through the proxy (KafkaApis.handleProduceRequest): the request size (header + body)
//! is recorded when the broker answers, by the kernel's response step
//! (`ClientHandle::produce_response`), whose throttle is written into `ThrottleTimeMs`;
//! NodeEndpoints (v10+) rewritten to the proxy's addresses. acks=0 requests, which get no
//! answer, are recorded on arrival ([`on_request`]). A large request's batches are relayed
//! cut-through, unread, also while its topics are walked (topic quotas, the request log). A client that leaves before its answers is still charged for what the
//! broker appended ([`record_unread`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use quota_core::{ClientHandle, ClientQuotaType};

use crate::conn::Conn;
use crate::frame::{Frame, RequestSource};
use crate::endpoints::rewrite_section;
use crate::forwarded::{Fwd, Kind};
use crate::header::{response_body_offset, response_frame, RequestHeader};
use crate::io::read_rest;
use crate::produce_topics::{produce_topic_bytes, walk_produce, ProduceTopicBytes, TopicTally};
use crate::topic_bytes::topic_refs;
use crate::walk::PumpWalk;
use crate::produce_layout::{produce_acks, produce_layout};
use crate::tables::PRODUCE;
use crate::wire::{patch_throttle, ProtoError};

/// Sends a Produce request (prefixed frame whose head is in `buf`, `rest` bytes of its `size`
/// still unread) to the broker; returns whether the connection's unanswered Produce requests
/// would throttle its client, or one of their topics, once recorded (Kafka's throttle is only
/// known from the answer: the reader then waits for it instead of pipelining).
///
/// acks=0: no answer will come, so the request is recorded, logged and its slot settled (and
/// muted, in order) here; it is exempt from the request quota, as in Kafka.
pub async fn on_request(conn: &Arc<Conn>, frame: Frame, src: &mut RequestSource) -> Result<bool, String> {
    let shared = &conn.shared;
    let Frame {
        header,
        mut buf,
        mut rest,
        size,
        t0,
    } = frame;
    let h = &header;
    let RequestSource {
        rd,
        relay,
        handles,
        user,
    } = src;
    let acks = match produce_acks(&buf[4..], h.body_offset, h.api_version) {
        Ok(a) => a,
        Err(_) if rest > 0 => {
            read_rest(rd, &mut buf, &mut rest).await?;
            produce_acks(&buf[4..], h.body_offset, h.api_version).map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    let handle = handles.get(shared, user, h.client_id(&buf[4..]))?;
    let own = &shared.cfg.own_topics;
    let walked = own.any() || handle.kernel().topics.enabled(ClientQuotaType::Produce) || shared.cfg.request_log;
    if walked && rest > 0 && acks != 0 && !own.any() {
        // No own topic to refuse before anything is sent: walked as it goes on to the broker.
        let mut w = PumpWalk {
            buf,
            pos: 4 + h.body_offset,
            rd,
            relay,
            left: rest,
            out: &conn.to_broker,
        };
        let (slot, walked) = stream_walked(conn, h, size, t0, &handle, &mut w).await;
        let sent = match walked {
            Ok(()) => w.finish_unread().await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            conn.forget_forwarded(slot);
            return Err(e);
        }
        return Ok(would_throttle(conn, &handle));
    }
    let mut topics = Vec::new();
    if walked {
        // The proxy's own topics (refused before anything is sent), acks=0 (recorded before it
        // is sent) or a request held whole already: read whole, its topics in one walk.
        if rest > 0 {
            read_rest(rd, &mut buf, &mut rest).await?;
        }
        let (named, owned) =
            produce_topic_bytes(|name| own.is_own_name(name), &buf[4..], h.body_offset, h.api_version)
                .map_err(|e| e.to_string())?;
        if owned && refuse_own_topics(conn, h, &buf, acks, size, t0, &handle)? {
            return Ok(false);
        }
        topics = named;
    }
    if acks == 0 {
        // No answer, but recorded and muted in order; exempt from the request quota.
        let ns = t0.elapsed().as_nanos() as f64;
        let throttle = handle
            .produce_response_with_topics(size as f64, ns, false, &topic_refs(&topics), None)
            .map_or(0, |r| r.mute_ms());
        let ts = conn.log(&handle, ClientQuotaType::Produce, size as f64, throttle);
        conn.log_topics(&handle, ClientQuotaType::Produce, &topics, ts);
        {
            let mut st = conn.state();
            let slot = Conn::push_slot(&mut st);
            conn.settle_locked(&mut st, slot, None, throttle);
            Conn::remember_unanswered(&mut st, h.correlation_id);
            conn.to_broker.send(buf);
        }
        if rest > 0 {
            shared.counters.streamed_requests.fetch_add(1, Ordering::Relaxed);
            relay.relay(rd, &conn.to_broker, rest).await?;
        }
        return Ok(false);
    }
    let fwd = Fwd::new(
        h,
        t0,
        t0.elapsed().as_nanos() as u64,
        Kind::Produce {
            handle: Arc::clone(&handle),
            size,
            topics,
        },
    );
    let slot = conn.forward_new(fwd, buf);
    if rest > 0 {
        shared.counters.streamed_requests.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = relay.relay(rd, &conn.to_broker, rest).await {
            conn.forget_forwarded(slot);
            return Err(e);
        }
    }
    Ok(would_throttle(conn, &handle))
}

/// Sends a large Produce request on to the broker while walking its topics (`w` over the
/// client's socket): its record batches are relayed unread, and each topic's bytes are given
/// to the request's slot once the last batch's length is read, before that batch goes on.
/// Returns the slot, and the walk's result (an error: the request never reached the broker
/// whole).
async fn stream_walked(
    conn: &Arc<Conn>,
    h: &RequestHeader,
    size: usize,
    t0: Instant,
    handle: &Arc<ClientHandle>,
    w: &mut PumpWalk<'_>,
) -> (u64, Result<(), String>) {
    let kind = Kind::Produce {
        handle: Arc::clone(handle),
        size,
        topics: ProduceTopicBytes::new(),
    };
    let slot = conn.forward_new(Fwd::new(h, t0, t0.elapsed().as_nanos() as u64, kind), Vec::new());
    conn.shared.counters.streamed_requests.fetch_add(1, Ordering::Relaxed);
    let own = &conn.shared.cfg.own_topics;
    let mut tally = TopicTally::default();
    let walked = walk_produce(w, h.api_version, |p| {
        tally.add(&p, |name| own.is_own_name(name));
        if p.last {
            conn.set_produce_topics(slot, std::mem::take(&mut tally.topics));
        }
    })
    .await
    .map_err(|e| e.to_string());
    (slot, walked)
}

/// Whether the connection's unanswered Produce requests would throttle its client, or one of
/// their topics (peeked while a produce topic quota exists), once recorded.
fn would_throttle(conn: &Conn, handle: &ClientHandle) -> bool {
    let unanswered = conn.unanswered_produce_bytes() as f64;
    let client = handle
        .peek_throttle_time_ms(ClientQuotaType::Produce, unanswered, None)
        .unwrap_or(0);
    client > 0
        || (handle.kernel().topics.enabled(ClientQuotaType::Produce) && {
            let topics = conn.unanswered_produce_topic_bytes();
            handle
                .peek_topic_throttle_ms(ClientQuotaType::Produce, &topic_refs(&topics), None)
                .unwrap_or(0)
                > 0
        })
}

/// A Produce naming one of the proxy's own topics (`own_topics`, as the caller found) is answered here, every
/// partition `TOPIC_AUTHORIZATION_FAILED`, and recorded as Kafka records a refused Produce (its
/// size, in the response step); with acks=0 the connection is closed, as Kafka closes one whose
/// acks=0 Produce failed. Returns whether it was.
fn refuse_own_topics(
    conn: &Arc<Conn>,
    h: &RequestHeader,
    buf: &[u8],
    acks: i16,
    size: usize,
    t0: Instant,
    handle: &Arc<ClientHandle>,
) -> Result<bool, String> {
    let own = &conn.shared.cfg.own_topics;
    let (frame, v) = (&buf[4..], h.api_version);
    if acks == 0 {
        return Err("an acks=0 Produce to a topic of the proxy's own (TOPIC_AUTHORIZATION_FAILED)".into());
    }
    let body = own
        .refused_produce(frame, h.body_offset, v)
        .map_err(|e| e.to_string())?;
    let answer = response_frame(&conn.shared.cfg.tables, h.correlation_id, PRODUCE, v, &body);
    // Refused: nothing reaches a topic, so no topic quota is charged.
    let kind = Kind::Produce {
        handle: Arc::clone(handle),
        size,
        topics: Vec::new(),
    };
    let mut fwd = Fwd::new(h, t0, 0, kind);
    fwd.slot = Conn::push_slot(&mut conn.state());
    let (answer, throttle) = on_response(conn, &fwd, handle, size, &[], answer, t0)?;
    conn.settle(fwd.slot, Some(answer), throttle);
    Ok(true)
}

/// The answer (prefixed frame) and its throttle: the largest of the client's, the topics'
/// (`topics`: each topic's bytes in the request) and the request quota's.
pub fn on_response(
    conn: &Arc<Conn>,
    fwd: &Fwd,
    handle: &Arc<ClientHandle>,
    req_size: usize,
    topics: &[(Box<str>, f64)],
    mut buf: Vec<u8>,
    t0: Instant,
) -> Result<(Vec<u8>, i32), String> {
    let ns = fwd.ns + t0.elapsed().as_nanos() as u64;
    fwd.tell_shadow(handle);
    let throttle = handle
        .produce_response_with_topics(req_size as f64, ns as f64, true, &topic_refs(topics), None)
        .map_or(0, |r| r.mute_ms());
    let ts = conn.log(handle, ClientQuotaType::Produce, req_size as f64, throttle);
    conn.log_topics(handle, ClientQuotaType::Produce, topics, ts);
    conn.log(handle, ClientQuotaType::Request, ns as f64, 0);
    let v = fwd.version;
    if v >= 10 || throttle > 0 {
        let tables = &conn.shared.cfg.tables;
        let body = response_body_offset(&buf[4..], tables, PRODUCE, v).map_err(|e| e.to_string())?;
        let layout = produce_layout(&buf[4..], body, v).map_err(|e| format!("Produce v{v} response: {e}"))?;
        if throttle > 0 {
            patch_throttle(&mut buf, 4 + layout.throttle_at, throttle);
        }
        if v >= 10 && layout.tags.len() > 1 {
            let (start, end) = (4 + layout.tags.start, 4 + layout.tags.end);
            let section = buf[start..end].to_vec();
            let shared = Arc::clone(&conn.shared);
            let mut resolve = |n: i32, h: &str, p: i32| shared.resolve(n, h, p).map_err(ProtoError);
            if let Some(new) = rewrite_section(&section, false, &mut resolve).map_err(|e| e.to_string())? {
                buf.truncate(start);
                buf.extend_from_slice(&new);
                let size = (buf.len() - 4) as i32;
                buf[..4].copy_from_slice(&size.to_be_bytes());
            }
        }
    }
    Ok((buf, throttle))
}

/// The connection's session is over (its client reset or left, or a write failed) while
/// Produce requests it sent are unanswered: the broker appends them all the same, so the
/// response reader (`responses`, not yet finished) runs on until they are answered and
/// recorded, within the drain time. Their answers go nowhere; their throttles mute the
/// producer's other connections (`producer_gate`).
pub async fn record_unread<F: Future>(conn: &Conn, responses: Pin<&mut F>) {
    let in_flight = |st: &crate::conn::ConnState| {
        st.forwarded
            .iter()
            .any(|f| matches!(f.kind, Kind::Produce { .. }))
    };
    if conn.is_closed() || !in_flight(&conn.state()) {
        return;
    }
    tokio::select! {
        _ = responses => {}
        _ = conn.wait_until(|st| !in_flight(st)) => {}
        _ = tokio::time::sleep(conn.shared.cfg.drain) => {}
    }
}
