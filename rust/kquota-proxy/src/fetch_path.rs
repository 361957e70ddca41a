//! Fetch through the proxy (KafkaApis.handleFetchRequest): max bytes capped to what the quota
//! window allows; the response size recorded; over quota, the answer is `fetch_answer`'s:
//! empty with the throttle and the size unrecorded, or, for a large share of the window,
//! delivered and muted (a `replica_id` exempts nothing through the proxy). Large responses are relayed
//! cut-through; v16+ responses are walked as they pass to rewrite NodeEndpoints in their
//! top-level tagged fields, to the same length (the size prefix has gone out).
//!
//! Topic quotas (`consumer_byte_rate` of a topic): while one exists, the request is capped to
//! each asked topic's window too, and the response is held until each topic's bytes are
//! counted (`fetch_topics`) for the kernel's response step (the throttle is its first field):
//! a large one over plain TCP is walked with its records waiting in the relay's pipe as far as
//! the pipe holds them, read past that; a small one, or one through TLS, is read whole. Without
//! one neither the request's topics nor the response's are walked.

use std::sync::Arc;
use std::time::Instant;

use quota_core::{ClientHandle, ClientQuotaType, FetchAnswer};

use crate::conn::Conn;
use crate::endpoints::rewrite_section;
use crate::fetch_layout::{
    cap_max_bytes, fetch_request, throttled_body, walk_fetch_response, walk_to_top_tags, FetchRequest,
};
use crate::fetch_topics::{request_topics, response_topic_bytes, tally};
use crate::topic_bytes::topic_refs;
use crate::forwarded::{FetchState, Fwd, Kind};
use crate::header::{response_body_offset, response_frame, RequestHeader};
use crate::io::{read_response_rest, Reader, STREAM_MIN};
use crate::walk::{HoldWalk, PumpWalk, SliceWalk};
use crate::own_topics::fetch_topics_at;
use crate::relay::{Held, Relay};
use crate::tables::FETCH;
use crate::wire::{malformed, patch_throttle, read_i16, read_i32, Cursor, Proto, ProtoError};

/// Tagged fields longer than this at the end of a response are refused.
const MAX_TAIL: usize = 1 << 20;

/// Reads the request, caps its max bytes in place, and says how its answer is handled
/// (`None`: answered here, see [`refuse_own_topics`]). A `replica_id` exempts nothing: brokers
/// do not replicate through the proxy, so a client naming itself a follower is a client.
pub fn on_request(
    conn: &Conn,
    h: &RequestHeader,
    buf: &mut [u8],
    handle: Arc<ClientHandle>,
    t0: Instant,
) -> Result<Option<Kind>, String> {
    let req = fetch_request(&buf[4..], h.body_offset, h.api_version).map_err(|e| e.to_string())?;
    if conn.shared.cfg.own_topics.any() && refuse_own_topics(conn, h, buf, &req, &handle, t0)? {
        return Ok(None);
    }
    let cap = if handle.kernel().topics.enabled(ClientQuotaType::Fetch) {
        let at = fetch_topics_at(req.fixed_at, h.api_version);
        let names = &conn.shared.cfg.topic_names;
        let topics = request_topics(&buf[4..], at, h.api_version, names).map_err(|e| e.to_string())?;
        handle.fetch_request_cap_for_topics(&topics.iter().map(|t| &**t).collect::<Vec<_>>())
    } else {
        handle.fetch_request_cap()
    };
    if cap < f64::from(req.max_bytes) {
        cap_max_bytes(&mut buf[4..], &req, cap.max(0.0) as i32);
    }
    Ok(Some(Kind::Fetch(FetchState { handle, cap, req })))
}

/// A Fetch naming one of the proxy's own topics (`own_topics`; by id from v13) is answered
/// here: their partitions `TOPIC_AUTHORIZATION_FAILED`, nothing fetched, no fetch session (the
/// broker never sees the request), with the request quota's step on its proxy time. Returns
/// whether it was.
fn refuse_own_topics(
    conn: &Conn,
    h: &RequestHeader,
    buf: &[u8],
    req: &FetchRequest,
    handle: &Arc<ClientHandle>,
    t0: Instant,
) -> Result<bool, String> {
    let own = &conn.shared.cfg.own_topics;
    let (frame, v) = (&buf[4..], h.api_version);
    let at = fetch_topics_at(req.fixed_at, v);
    if !own.in_fetch(frame, at, v).map_err(|e| e.to_string())? {
        return Ok(false);
    }
    let mut body = own.refused_fetch(frame, at, v).map_err(|e| e.to_string())?;
    let throttle = conn.request_step(FETCH, Some(handle), t0.elapsed().as_nanos() as u64);
    patch_throttle(&mut body, 0, throttle);
    let answer = response_frame(&conn.shared.cfg.tables, h.correlation_id, FETCH, v, &body);
    let mut st = conn.state();
    let slot = Conn::push_slot(&mut st);
    conn.settle_locked(&mut st, slot, Some(answer), throttle);
    drop(st);
    conn.wake();
    Ok(true)
}

fn fit_size(buf: &mut [u8]) {
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
}

/// Answers a Fetch response of `size` bytes whose head (or whole) is in `buf` (prefixed).
pub async fn on_response(
    conn: &Arc<Conn>,
    fwd: Fwd,
    mut buf: Vec<u8>,
    size: usize,
    rd: &mut Reader,
    relay: &mut Relay,
    t0: Instant,
) -> Result<(), String> {
    let Kind::Fetch(fs) = &fwd.kind else {
        return Err("not a fetch".into());
    };
    let shared = Arc::clone(&conn.shared);
    let tables = &shared.cfg.tables;
    let v = fwd.version;
    let head = buf.len() - 4;
    let body = response_body_offset(&buf[4..], tables, FETCH, v).map_err(|e| e.to_string())?;
    if body + if v >= 7 { 10 } else { 4 } > head {
        return Err(format!("Fetch v{v} response shorter than its fixed fields"));
    }
    let mut topics = Vec::new();
    // A large response held for its topics: its pieces after `buf` (the first), some waiting in
    // the relay's pipe, and where its top-level tags start in the last.
    let mut held: Vec<Held> = Vec::new();
    let mut tags_at = 0;
    if fs.handle.kernel().topics.enabled(ClientQuotaType::Fetch) {
        // Each topic's bytes are counted before the answer is chosen (the throttle is the
        // response's first field), so the response is held until it is walked: a large one's
        // records wait in the relay's pipe (no copy) as far as it holds them, the rest (or a
        // response through TLS) is read into one buffer sized for it. Only a large one makes
        // the connection's pipe.
        let names = &shared.cfg.topic_names;
        let room = if size - head >= STREAM_MIN { relay.hold_room(rd) } else { 0 };
        if room > 0 {
            let mut w = HoldWalk::new(buf, 4 + body, rd, relay, size - head, room);
            walk_fetch_response(&mut w, v, tally(&mut topics, v, names))
                .await
                .map_err(|e| format!("Fetch v{v} response: {e}"))?;
            let (pieces, at) = w.finish().await.map_err(|e| e.to_string())?;
            let mut pieces = pieces.into_iter();
            let Some(Held::Read(first)) = pieces.next() else {
                return Err("a held Fetch response without its head".into());
            };
            (buf, held, tags_at) = (first, pieces.collect(), at);
        } else {
            read_response_rest(rd, &mut buf, size - head).await?;
            topics = response_topic_bytes(&buf[4..], body, v, names).map_err(|e| format!("Fetch v{v} response: {e}"))?;
        }
    }
    let head = buf.len() - 4 + held_len(&held);
    let ns = fwd.ns + t0.elapsed().as_nanos() as u64;
    fwd.tell_shadow(&fs.handle);
    let step = fs
        .handle
        .fetch_response_with_topics(size as f64, fs.cap, ns as f64, &topic_refs(&topics), None)
        .map_err(|e| e.to_string())?;
    let throttle = step.throttle.mute_ms();
    conn.log(&fs.handle, ClientQuotaType::Request, ns as f64, throttle);
    let rest = size - head;
    let empty = match step.answer {
        FetchAnswer::Empty => v < 7 || read_i16(&buf, 4 + body + 4) == Some(0),
        FetchAnswer::Deliver | FetchAnswer::DeliverMuted => {
            let ts = conn.log(&fs.handle, ClientQuotaType::Fetch, size as f64, 0);
            // Walked only while a consumer topic quota exists: without one, no Fetch topic rows.
            conn.log_topics(&fs.handle, ClientQuotaType::Fetch, &topics, ts);
            false
        }
    };
    if empty {
        // FetchContext.getThrottledResponse. A sessionless fetch (epoch -1) gets no session; an
        // incremental one keeps its own; a full one (epoch 0) keeps the session the broker has
        // just created for it (the proxy cannot stop the broker creating it), so the client
        // continues incrementally instead of opening a new session each throttled fetch.
        let session = if v >= 7 && fs.req.session_epoch >= 0 {
            read_i32(&buf, 4 + body + 6).unwrap_or(0)
        } else {
            0
        };
        if rest > 0 {
            shared
                .counters
                .streamed_responses
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            crate::io::skip(rd, rest).await?;
        }
        if !held.is_empty() {
            relay.discard();
        }
        let answer = response_frame(tables, fwd.corr, FETCH, v, &throttled_body(v, session, throttle));
        conn.settle(fwd.slot, Some(answer), throttle);
        return Ok(());
    }
    if throttle > 0 {
        patch_throttle(&mut buf, 4 + body, throttle);
    }
    let mut resolve = |n: i32, h: &str, p: i32| shared.resolve(n, h, p).map_err(ProtoError);
    if !held.is_empty() {
        if v >= 16 {
            if let Some(Held::Read(last)) = held.last_mut() {
                if let Some(new) = rewrite_section(&last[tags_at..], true, &mut resolve).map_err(|e| e.to_string())? {
                    last[tags_at..].copy_from_slice(&new);
                }
            }
        }
        shared
            .counters
            .streamed_responses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        conn.wait_at_head(fwd.slot).await?;
        held.insert(0, Held::Read(buf));
        relay.release(held, &conn.to_client).await?;
        conn.settle(fwd.slot, None, throttle);
        return Ok(());
    }
    if rest == 0 {
        if v >= 16 {
            let mut w = SliceWalk(Cursor::new(&buf[4..], body));
            walk_to_top_tags(&mut w, v).await.map_err(|e| e.to_string())?;
            let start = 4 + w.0.pos;
            let section = buf[start..].to_vec();
            if let Some(new) = rewrite_section(&section, false, &mut resolve).map_err(|e| e.to_string())? {
                buf.truncate(start);
                buf.extend_from_slice(&new);
                fit_size(&mut buf);
            }
        }
        conn.settle(fwd.slot, Some(buf), throttle);
        return Ok(());
    }
    shared
        .counters
        .streamed_responses
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    conn.wait_at_head(fwd.slot).await?;
    if v < 16 {
        conn.to_client.send(buf);
        relay.relay(rd, &conn.to_client, rest).await?;
    } else {
        let mut w = PumpWalk {
            buf,
            pos: 4 + body,
            rd,
            relay,
            left: rest,
            out: &conn.to_client,
        };
        walk_to_top_tags(&mut w, v).await.map_err(|e| e.to_string())?;
        finish(w, &mut resolve).await.map_err(|e| e.to_string())?;
    }
    conn.settle(fwd.slot, None, throttle);
    Ok(())
}

/// Reads a streamed flexible Fetch response's top-level tagged fields (the rest of the frame),
/// rewrites NodeEndpoints to the same length, and relays the remainder.
async fn finish(mut w: PumpWalk<'_>, resolve: &mut crate::endpoints::Resolve<'_>) -> Proto<()> {
    let tail = w.buf.len() - w.pos + w.left;
    if tail > MAX_TAIL {
        return malformed("tagged fields longer than 1 MiB at the end of a Fetch response");
    }
    w.fill(tail).await?;
    if let Some(new) = rewrite_section(&w.buf[w.pos..], true, resolve)? {
        let at = w.pos;
        w.buf[at..].copy_from_slice(&new);
    }
    w.pos = w.buf.len();
    w.flush();
    Ok(())
}

/// The bytes of held pieces.
fn held_len(held: &[Held]) -> usize {
    held.iter()
        .map(|p| match p {
            Held::Read(b) => b.len(),
            Held::Piped(n) => *n,
        })
        .sum()
}

