//! The request reader (client -> broker): frames read in order, each dispatched — to Python
//! for the APIs it handles, natively for Produce, Fetch and everything relayed unparsed — with
//! the mute, the in-flight bound and back-pressure applied before reading the next. What is
//! read is bounded before it is buffered: by `preauth` until a SASL client has authenticated,
//! by the Python cap for the APIs Python decodes, and by the bytes that have arrived (`io`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncReadExt;

use crate::conn::Conn;
use crate::frame::{Frame, RequestSource};
use crate::handle_cache::HandleCache;
use crate::forwarded::{Fwd, Kind};
use crate::header::parse_request_header;
use crate::io::{io_err, read_prefix, read_rest, Reader, BACKLOG, HEAD, STREAM_MIN};
use crate::preauth::{Authentication, PreAuth};
use crate::producer_gate::GateCache;
use crate::relay::Relay;
use crate::tables::{FETCH, PRODUCE};

/// `auth`: the connection's authentication on a SASL listener (`None`: not SASL); until it
/// completes, `preauth` bounds what is read.
pub async fn read_requests(
    conn: &Arc<Conn>,
    rd: Reader,
    relay: Relay,
    mut auth: Option<Arc<Authentication>>,
) -> Result<(), String> {
    let shared = Arc::clone(&conn.shared);
    let cfg = &shared.cfg;
    let mut src = RequestSource {
        rd,
        relay,
        handles: HandleCache::default(),
        user: Arc::clone(&conn.state().user),
    };
    let mut gates = GateCache::default();
    loop {
        conn.to_broker.wait_below(BACKLOG).await;
        // Nor while the client leaves its answers unread (one small request can earn a large
        // answer: AlterClientQuotas answers each entry with its error message).
        conn.to_client.wait_below(BACKLOG).await;
        if let Some(d) = conn.mute_delay() {
            tokio::time::sleep(d).await;
            continue;
        }
        let inflight = cfg.max_inflight;
        conn.wait_until(|st| st.slots.len() < inflight).await;
        let stop = shared.stop.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if conn.is_closed() || shared.stopping.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut prefix = [0u8; 4];
        tokio::select! {
            r = read_prefix(&mut src.rd, &mut prefix) => if !r? { return Ok(()) },
            _ = &mut stop => return Ok(()),
        }
        // Looked at once the frame has begun: Python may have completed the authentication
        // while the reader waited for it.
        if auth.as_ref().is_some_and(|a| a.is_complete()) {
            auth = None;
        }
        let preauth = auth.is_some().then_some(PreAuth {
            max_receive: cfg.sasl_max_receive_bytes,
        });
        let size = i32::from_be_bytes(prefix);
        let size = match preauth {
            Some(p) => p.check_size(size).map_err(|e| preauth_refused(conn, e))?,
            None if size < 0 || size as usize > cfg.max_frame_bytes => {
                return Err(format!("frame of {size} bytes (limit {})", cfg.max_frame_bytes));
            }
            None => size as usize,
        };
        let head = if size >= STREAM_MIN { HEAD } else { size };
        let mut buf = vec![0u8; 4 + head];
        buf[..4].copy_from_slice(&prefix);
        // The api key first: what it decides is decided before the rest of the frame is read.
        let first = head.min(2);
        src.rd.read_exact(&mut buf[4..4 + first])
            .await
            .map_err(io_err("connection closed inside a frame"))?;
        let mut rest = size - head;
        if first == 2 {
            let key = i16::from_be_bytes([buf[4], buf[5]]);
            if let Some(p) = preauth {
                p.check_api(key).map_err(|e| preauth_refused(conn, e))?;
            }
            if cfg.tables.is_python(key) && size > cfg.python_max_frame_bytes {
                return Err(format!(
                    "api key {key} request of {size} bytes: the proxy inspects at most {} \
                     (kquota.proxy.inspected.request.max.bytes)",
                    cfg.python_max_frame_bytes
                ));
            }
        }
        src.rd.read_exact(&mut buf[4 + first..])
            .await
            .map_err(io_err("connection closed inside a frame"))?;
        // A throttled answer may have gone out while this frame was read: the mute covers it.
        if let Some(d) = conn.mute_delay() {
            tokio::time::sleep(d).await;
        }
        let t0 = Instant::now();
        let header = match parse_request_header(&buf[4..], &cfg.tables) {
            Ok(h) => h,
            Err(_) if rest > 0 => {
                read_rest(&mut src.rd, &mut buf, &mut rest).await?;
                parse_request_header(&buf[4..], &cfg.tables).map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        };
        if rest > 0 && header.api_key != PRODUCE {
            read_rest(&mut src.rd, &mut buf, &mut rest).await?;
        }
        let user = Arc::clone(&conn.state().user);
        if header.api_key == PRODUCE {
            // The producer's throttle holds all its connections (`producer_gate`).
            let (gate, new) = gates.get(&shared.producers, &user, header.client_id(&buf[4..]));
            if new {
                conn.set_gate(gate);
            }
            conn.enter_gate(gate).await;
        }
        src.user = user;
        let frame = Frame {
            header,
            buf,
            rest,
            size,
            t0,
        };
        let over_quota = dispatch(conn, frame, &mut src).await?;
            // Kafka reads a connection's next request only once the previous answer has gone out.
        // The proxy pipelines instead, except where that could let a request past a throttle:
        // while the unanswered requests would throttle the client once recorded, and for a
        // quota window after a throttle.
        // Before authentication too, as Kafka's authenticator answers one request at a time.
        let serial = over_quota
            || preauth.is_some()
            || conn.mute.is_serial(Instant::now());
        if serial {
            conn.wait_until(|st| st.slots.is_empty()).await;
        }
    }
}

/// Counts a connection closed before authentication; the line to close it with.
fn preauth_refused(conn: &Conn, line: String) -> String {
    conn.shared
        .counters
        .preauth_refused
        .fetch_add(1, Ordering::Relaxed);
    line
}

/// Hands one request to its API's request half: Python's (through the bridge), Produce's
/// (`produce_path::on_request`), Fetch's (`fetch_path::on_request`), or relayed unparsed with
/// the request quota. Returns whether the connection's unanswered requests would throttle its
/// client once recorded (only Produce answers that).
async fn dispatch(conn: &Arc<Conn>, frame: Frame, src: &mut RequestSource) -> Result<bool, String> {
    let shared = &conn.shared;
    let (h, t0) = (&frame.header, frame.t0);
    shared.cfg.tables.check_version(h.api_key, h.api_version)?;
    if shared.cfg.tables.is_python(h.api_key) {
        let slot = {
            let mut st = conn.state();
            let slot = Conn::push_slot(&mut st);
            st.python_waiting = Some(slot);
            slot
        };
        let ns = t0.elapsed().as_nanos() as u64;
        shared
            .bridge
            .on_request(conn.id, slot, conn.node, h, &frame.buf[4..], ns)?;
        conn.wait_until(|st| st.python_waiting != Some(slot)).await;
        return Ok(false);
    }
    match h.api_key {
        PRODUCE => crate::produce_path::on_request(conn, frame, src).await,
        FETCH => {
            let mut buf = frame.buf;
            let handle = src.handles.get(shared, &src.user, h.client_id(&buf[4..]))?;
            if let Some(kind) = crate::fetch_path::on_request(conn, h, &mut buf, handle, t0)? {
                let fwd = Fwd::new(h, t0, t0.elapsed().as_nanos() as u64, kind);
                conn.forward_new(fwd, buf);
            }
            Ok(false)
        }
        key => {
            let handle = if shared.cfg.tables.is_exempt(key) {
                None
            } else {
                Some(src.handles.get(shared, &src.user, h.client_id(&frame.buf[4..]))?)
            };
            let fwd = Fwd::new(h, t0, t0.elapsed().as_nanos() as u64, Kind::Plain(handle));
            conn.forward_new(fwd, frame.buf);
            Ok(false)
        }
    }
}
