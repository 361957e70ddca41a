//! One client connection's life: its broker connection opened, the two readers run until
//! either side closes or a frame is malformed, then everything closed and Python told. TLS
//! (secure.rs) wraps either socket first: the client's handshake (its principal is the
//! connection's user) before the broker is reached. A session silent for
//! `connections.max.idle.ms` is closed (`idle`); so is a TLS handshake not finished within it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::bridge::Registered;
use crate::conn::Conn;
use crate::io::READ_BUFFER;
use crate::preauth::Authentication;
use crate::relay::Relay;
use crate::shared::Shared;
use crate::stream::ReadSide;

/// Serves one accepted client connection until either side closes or a frame is malformed.
pub async fn serve(shared: Arc<Shared>, id: u64, node: i32, sock: TcpStream, upstream: (String, u16)) {
    let _ = sock.set_nodelay(true);
    let security = &shared.cfg.security;
    let fd = crate::idle::socket_id(&sock);
    let (client, principal) = match security.accept(sock, shared.cfg.max_idle).await {
        Ok(accepted) => accepted,
        Err(line) => return shared.bridge.on_close(id, line),
    };
    let up = match TcpStream::connect((upstream.0.as_str(), upstream.1)).await {
        Ok(up) => up,
        Err(e) => {
            shared.bridge.on_close(
                id,
                Some(format!("cannot reach broker {}:{}: {e}", upstream.0, upstream.1)),
            );
            return;
        }
    };
    let _ = up.set_nodelay(true);
    let up = match security.connect(&upstream.0, up).await {
        Ok(up) => up,
        Err(line) => return shared.bridge.on_close(id, line),
    };
    let (cr, cw) = client.split();
    let (ur, uw) = up.split();
    // The relays splice into the sockets the outboxes' writers own (when both are plain).
    let relays = (Relay::new(&uw), Relay::new(&cw));
    let failed = Arc::new(Notify::new());
    let (conn, writers) = Conn::new(&shared, id, node, cw, uw, &failed);
    // On SASL_SSL the principal is the SASL exchange's, never the certificate's (Kafka's
    // SaslServerAuthenticator builds it from the SASL server alone).
    if let Some(principal) = principal.filter(|_| !shared.cfg.sasl_listener) {
        conn.set_user(&principal);
    }
    let auth = shared.cfg.sasl_listener.then(|| {
        let auth = Authentication::new();
        shared
            .authentications
            .lock()
            .unwrap()
            .insert(id, Arc::clone(&auth));
        auth
    });
    shared
        .conns
        .lock()
        .unwrap()
        .insert(id, Arc::clone(&conn) as Arc<dyn Registered>);
    let reason = tokio::select! {
        reason = run(&conn, cr, ur, relays, &failed, &upstream, auth) => reason,
        idle = crate::idle::expired(fd, shared.cfg.max_idle) => {
            shared.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            Some(format!(
                "idle for {} ms (connections.max.idle.ms = {})",
                idle.as_millis(),
                shared.cfg.max_idle.as_millis()
            ))
        }
    };
    shared.authentications.lock().unwrap().remove(&id);
    Registered::close(&*conn, reason);
    for w in writers {
        w.abort();
    }
}

async fn run(
    conn: &Arc<Conn>,
    cr: ReadSide,
    ur: ReadSide,
    (to_broker, to_client): (Relay, Relay),
    failed: &Notify,
    up: &(String, u16),
    auth: Option<Arc<Authentication>>,
) -> Option<String> {
    let requests =
        crate::requests::read_requests(conn, BufReader::with_capacity(READ_BUFFER, cr), to_broker, auth);
    let responses =
        crate::responses::read_responses(conn, BufReader::with_capacity(READ_BUFFER, ur), to_client, up);
    tokio::pin!(requests, responses);
    let closed = conn.until_closed();
    tokio::pin!(closed);
    let mut answered = false;
    let reason = tokio::select! {
        r = &mut requests => match r {
            // The client closed (or the proxy stops reading): answers owed still go out.
            Ok(()) => {
                let drained = async {
                    conn.wait_until(|st| st.slots.is_empty()).await;
                    conn.to_client.wait_below(0).await;
                };
                tokio::select! {
                    r = &mut responses => {
                        answered = true;
                        r.err()
                    }
                    _ = drained => None,
                    _ = tokio::time::sleep(conn.shared.cfg.drain) => None,
                    _ = &mut closed => conn.reason.lock().unwrap().take(),
                }
            }
            Err(e) => Some(e),
        },
        r = &mut responses => {
            answered = true;
            Some(r.err().unwrap_or_else(|| "the broker closed the connection".into()))
        }
        _ = failed.notified() => Some("a socket write failed".into()),
        _ = &mut closed => conn.reason.lock().unwrap().take(),
    };
    if !answered {
        crate::produce_path::record_unread(conn, responses).await;
    }
    reason
}
