//! Produce through the proxy (KafkaApis.handleProduceRequest): the request size (header + body)
//! is recorded when the broker answers, by the kernel's response step
//! (`ClientHandle::produce_response`), whose throttle is written into `ThrottleTimeMs`;
//! NodeEndpoints (v10+) rewritten to the proxy's addresses. acks=0 requests are recorded on
//! arrival (see `requests::dispatch`).

use std::sync::Arc;
use std::time::Instant;

use quota_core::{ClientHandle, ClientQuotaType};

use crate::conn::Conn;
use crate::endpoints::rewrite_section;
use crate::forwarded::Fwd;
use crate::header::response_body_offset;
use crate::produce::produce_layout;
use crate::tables::PRODUCE;
use crate::wire::{patch_throttle, ProtoError};

/// The answer (prefixed frame) and its throttle.
pub fn on_response(
    conn: &Arc<Conn>,
    fwd: &Fwd,
    handle: &Arc<ClientHandle>,
    req_size: usize,
    mut buf: Vec<u8>,
    t0: Instant,
) -> Result<(Vec<u8>, i32), String> {
    let ns = fwd.ns + t0.elapsed().as_nanos() as u64;
    let throttle = handle
        .produce_response(req_size as f64, ns as f64, true, None)
        .map_or(0, |r| r.mute_ms());
    conn.log(handle, ClientQuotaType::Produce, req_size as f64);
    conn.log(handle, ClientQuotaType::Request, ns as f64);
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
