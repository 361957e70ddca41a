//! The response reader (broker -> client): responses matched to requests in send order; each
//! answered by its API's path (Python's, Produce, Fetch, or relayed with the request quota).

use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncReadExt;

use crate::conn::Conn;
use crate::forwarded::Kind;
use crate::io::{io_err, read_prefix, read_prefix_io, skip, Reader, BACKLOG, HEAD, STREAM_MIN};
use crate::relay::Relay;
use crate::wire::read_i32;

pub async fn read_responses(
    conn: &Arc<Conn>,
    mut rd: Reader,
    mut relay: Relay,
    up: &(String, u16),
) -> Result<(), String> {
    let shared = Arc::clone(&conn.shared);
    let mut answered = false;
    loop {
        conn.to_client.wait_below(BACKLOG).await;
        let mut prefix = [0u8; 4];
        let more = if answered {
            read_prefix(&mut rd, &mut prefix).await?
        } else {
            // The first answer: a TLS refusal of the proxy's certificate shows here (TLS 1.3).
            let first = read_prefix_io(&mut rd, &mut prefix).await;
            first.map_err(|e| shared.cfg.security.broker_refusal(&up.0, &e))?
        };
        if !more {
            deliver_received(conn).await;
            return Err(format!("broker {}:{} closed the connection", up.0, up.1));
        }
        answered = true;
        let size = i32::from_be_bytes(prefix);
        if size < 4 {
            return Err(format!("a response of {size} bytes"));
        }
        let size = size as usize;
        let fetch_version = {
            let st = conn.state();
            st.forwarded.front().and_then(|f| match f.kind {
                Kind::Fetch(_) => Some(f.version),
                _ => None,
            })
        };
        let streamable = fetch_version.is_some_and(|v| size >= STREAM_MIN || v >= 16);
        let head = if streamable { size.min(HEAD) } else { size };
        let mut buf = vec![0u8; 4 + head];
        buf[..4].copy_from_slice(&prefix);
        rd.read_exact(&mut buf[4..])
            .await
            .map_err(io_err("broker connection closed inside a frame"))?;
        let t0 = Instant::now();
        let corr = read_i32(&buf, 4).unwrap_or(0);
        let fwd = {
            let mut st = conn.state();
            let expected = st.forwarded.front().map(|f| f.corr);
            if expected != Some(corr) && st.unanswered.remove(&corr) {
                // Some brokers (tansu) answer acks=0 produce requests, which Kafka never
                // does: the client expects nothing, so the answer is dropped.
                None
            } else {
                Some(
                    st.forwarded
                        .pop_front()
                        .ok_or("the broker sent a response nobody asked for")?,
                )
            }
        };
        let Some(fwd) = fwd else {
            skip(&mut rd, size - head).await?;
            continue;
        };
        if fwd.corr != corr {
            return Err(format!(
                "broker answered correlation id {corr}, expected {}",
                fwd.corr
            ));
        }
        match &fwd.kind {
            Kind::Python => shared.bridge.on_response(conn.id, fwd.slot, &buf[4..])?,
            Kind::Plain(handle) => {
                let ns = fwd.ns + t0.elapsed().as_nanos() as u64;
                if let Some(h) = handle {
                    fwd.tell_shadow(h);
                }
                let throttle = conn.request_step(fwd.key, handle.as_ref(), ns);
                crate::header::raise_response_throttle(
                    &mut buf,
                    &shared.cfg.tables,
                    fwd.key,
                    fwd.version,
                    throttle,
                )
                .map_err(|e| e.to_string())?;
                conn.settle(fwd.slot, Some(buf), throttle);
            }
            Kind::Produce {
                handle,
                size: req_size,
                topics,
            } => {
                let (handle, req_size) = (Arc::clone(handle), *req_size);
                let buf = crate::produce_path::on_response(conn, &fwd, &handle, req_size, topics, buf, t0)?;
                let (buf, throttle) = buf;
                conn.settle(fwd.slot, Some(buf), throttle);
            }
            Kind::Fetch(_) => {
                crate::fetch_path::on_response(conn, fwd, buf, size, &mut rd, &mut relay, t0).await?
            }
        }
    }
}

/// After the broker's close, the answers it gave before closing (a failed SaslAuthenticate's,
/// which Python settles through the bridge) reach the client before the client's connection is
/// closed, as they would directly; bounded by the drain deadline.
async fn deliver_received(conn: &Conn) {
    let delivered = async {
        conn.wait_until(|st| {
            !owed_before_close(st.slots.front().map(|s| s.id), st.forwarded.iter().map(|f| f.slot))
        })
        .await;
        conn.to_client.wait_below(0).await;
    };
    let _ = tokio::time::timeout(conn.shared.cfg.drain, delivered).await;
}

/// Whether the slot at the head (`head`: answers leave in slot order) can still be answered once
/// the broker has closed: it can unless it is one the broker never answered (still `forwarded`).
fn owed_before_close(head: Option<u64>, mut forwarded: impl Iterator<Item = u64>) -> bool {
    head.is_some_and(|h| !forwarded.any(|f| f == h))
}

#[cfg(test)]
mod tests {
    use super::owed_before_close;

    #[test]
    fn an_answer_received_but_not_yet_settled_is_owed_before_the_close() {
        // slot 3's answer came from the broker (Python is settling it); 4 was never answered
        assert!(owed_before_close(Some(3), [4].into_iter()));
    }

    #[test]
    fn a_request_the_broker_never_answered_is_not_waited_for() {
        assert!(!owed_before_close(Some(4), [4, 5].into_iter()));
        assert!(!owed_before_close(None, std::iter::empty()));
    }
}
