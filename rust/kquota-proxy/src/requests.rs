//! The request reader (client -> broker): frames read in order, each dispatched — to Python
//! for the APIs it handles, natively for Produce, Fetch and everything relayed unparsed — with
//! the mute, the in-flight bound and back-pressure applied before reading the next.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncReadExt;

use crate::conn::{Conn, HandleCache};
use crate::forwarded::{Fwd, Kind};
use crate::header::{parse_request_header, RequestHeader};
use crate::io::{io_err, read_prefix, read_rest, Reader, BACKLOG, HEAD, STREAM_MIN};
use crate::producer_gate::GateCache;
use crate::relay::Relay;
use crate::tables::{FETCH, PRODUCE};

pub async fn read_requests(conn: &Arc<Conn>, mut rd: Reader, mut relay: Relay) -> Result<(), String> {
    let shared = Arc::clone(&conn.shared);
    let cfg = &shared.cfg;
    let mut handles = HandleCache::default();
    let mut gates = GateCache::default();
    loop {
        conn.to_broker.wait_below(BACKLOG).await;
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
            r = read_prefix(&mut rd, &mut prefix) => if !r? { return Ok(()) },
            _ = &mut stop => return Ok(()),
        }
        let size = i32::from_be_bytes(prefix);
        if size < 0 || size as usize > cfg.max_frame_bytes {
            return Err(format!("frame of {size} bytes (limit {})", cfg.max_frame_bytes));
        }
        let size = size as usize;
        let head = if size >= STREAM_MIN { HEAD } else { size };
        let mut buf = vec![0u8; 4 + head];
        buf[..4].copy_from_slice(&prefix);
        rd.read_exact(&mut buf[4..])
            .await
            .map_err(io_err("connection closed inside a frame"))?;
        let mut rest = size - head;
        // A throttled answer may have gone out while this frame was read: the mute covers it.
        if let Some(d) = conn.mute_delay() {
            tokio::time::sleep(d).await;
        }
        let t0 = Instant::now();
        let header = match parse_request_header(&buf[4..], &cfg.tables) {
            Ok(h) => h,
            Err(_) if rest > 0 => {
                read_rest(&mut rd, &mut buf, &mut rest).await?;
                parse_request_header(&buf[4..], &cfg.tables).map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        };
        if rest > 0 && header.api_key != PRODUCE {
            read_rest(&mut rd, &mut buf, &mut rest).await?;
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
        let over_quota = dispatch(
            conn,
            &header,
            buf,
            rest,
            size,
            t0,
            &mut rd,
            &mut relay,
            &mut handles,
            &user,
        )
        .await?;
        // Kafka reads a connection's next request only once the previous answer has gone out.
        // The proxy pipelines instead, except where that could let a request past a throttle:
        // while the unanswered requests would throttle the client once recorded, and for a
        // quota window after a throttle.
        let serial = over_quota || conn.state().serial_until.is_some_and(|u| Instant::now() < u);
        if serial {
            conn.wait_until(|st| st.slots.is_empty()).await;
        }
    }
}

/// Hands one request to its API's request half: Python's (through the bridge), Produce's
/// (`produce_path::on_request`), Fetch's (`fetch_path::on_request`), or relayed unparsed with
/// the request quota. Returns whether the connection's unanswered requests would throttle its
/// client once recorded (only Produce answers that).
#[allow(clippy::too_many_arguments)]
async fn dispatch(
    conn: &Arc<Conn>,
    h: &RequestHeader,
    mut buf: Vec<u8>,
    rest: usize,
    size: usize,
    t0: Instant,
    rd: &mut Reader,
    relay: &mut Relay,
    handles: &mut HandleCache,
    user: &Arc<str>,
) -> Result<bool, String> {
    let shared = &conn.shared;
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
            .on_request(conn.id, slot, conn.node, h, &buf[4..], ns)?;
        conn.wait_until(|st| st.python_waiting != Some(slot)).await;
        return Ok(false);
    }
    shared.cfg.tables.check_version(h.api_key, h.api_version)?;
    match h.api_key {
        PRODUCE => {
            crate::produce_path::on_request(conn, h, buf, rest, size, t0, rd, relay, handles, user).await
        }
        FETCH => {
            let handle = handles.get(shared, user, h.client_id(&buf[4..]))?;
            if let Some(kind) = crate::fetch_path::on_request(conn, h, &mut buf, handle, t0)? {
                let fwd = Fwd::new(h, t0.elapsed().as_nanos() as u64, kind);
                conn.forward_new(fwd, buf);
            }
            Ok(false)
        }
        key => {
            let handle = if shared.cfg.tables.is_exempt(key) {
                None
            } else {
                Some(handles.get(shared, user, h.client_id(&buf[4..]))?)
            };
            let fwd = Fwd::new(h, t0.elapsed().as_nanos() as u64, Kind::Plain(handle));
            conn.forward_new(fwd, buf);
            Ok(false)
        }
    }
}
