//! Listeners: the bootstrap port and one port per broker, each accepting client connections
//! into a session: paced, held at `max.connections` and admitted by the connection quotas
//! (`admission`), after the proxy's own descriptor guard (`max_client_sockets`), which closes a
//! socket over it at once: a proxy out of descriptors could not even reach its broker.

use std::net::TcpListener as StdListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quota_core::QuotaKernel;
use tokio::net::TcpListener;
use tokio::runtime::Handle;

use crate::bridge::Bridge;
use crate::brokers::bind;
use crate::config::ProxyConfig;
use crate::shared::Shared;

/// The data plane's shared state with its bootstrap listener open; returns its port.
pub fn start(
    cfg: ProxyConfig,
    kernel: Arc<QuotaKernel>,
    bridge: Arc<dyn Bridge>,
    rt: Handle,
) -> std::io::Result<(Arc<Shared>, u16)> {
    let shared = Shared::new(cfg, kernel, bridge, rt, spawn_accept);
    let l = bind(&shared.cfg.listen_host, shared.cfg.listen_port)?;
    let port = l.local_addr()?.port();
    spawn_accept(&shared, l, -1)?;
    Ok((shared, port))
}

/// How often the accept loop looks again while admissions in flight may still free the room.
const ADMISSION_POLL: Duration = Duration::from_millis(2);

/// Whether the proxy holds `max_client_sockets` client sockets. Connections accepted but not yet handed
/// to their session count against the bound (a socket waiting for its PROXY header does), yet
/// most leave that state at their task's first poll, so the loop waits for the tasks it has
/// spawned to run before it refuses: a burst of accepts must not be refused only because those
/// tasks have not run yet (seen on a loaded 2-core machine: 3 of 10 refused with 6 allowed and
/// none served).
async fn at_max_client_sockets(shared: &Shared) -> bool {
    loop {
        let pending = shared.counters.pending_admission.load(Ordering::Acquire) as usize;
        let serving = shared.conns.lock().unwrap().len();
        if serving + pending < shared.cfg.max_client_sockets {
            return false;
        }
        let unstarted = shared.counters.admission_unstarted.load(Ordering::Acquire);
        if unstarted == 0 || shared.stopping.load(Ordering::Acquire) {
            return true;
        }
        tokio::time::sleep(ADMISSION_POLL).await;
    }
}

fn spawn_accept(shared: &Arc<Shared>, l: StdListener, node: i32) -> std::io::Result<()> {
    let _guard = shared.rt.enter();
    let listener = TcpListener::from_std(l)?;
    let task = shared.rt.spawn(accept_loop(Arc::clone(shared), listener, node));
    shared.listeners.lock().unwrap().push(task);
    Ok(())
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, node: i32) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors, say: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        if at_max_client_sockets(&shared).await {
            shared.counters.sockets_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let Some(upstream) = shared.brokers.upstream(&shared.cfg, node) else {
            continue;
        };
        // Kafka's acceptor: the broker-wide and listener rate and `max.connections` hold this
        // loop, not the connection.
        let Some(slot) = crate::admission::hold_accept(&shared).await else {
            continue;
        };
        *shared.accepted.lock().unwrap().entry(node).or_insert(0) += 1;
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        // The PROXY header and the per-IP quotas run on the connection's task, so that a slow
        // or silent client never holds the listener.
        let admitting = crate::admission::Admitting::new(&shared);
        tokio::spawn(crate::admission::admit_and_serve(
            admitting, slot, id, node, sock, peer, upstream,
        ));
    }
}
