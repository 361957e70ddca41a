//! One direction's writes: frames queued from any thread (the connection's tasks, Python's
//! answers) and written by one task in queue order, several per send when they pile up. The
//! bytes queued are counted so that readers stop reading while their peer is not (bounded
//! memory both ways).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};

use crate::stream::WriteSide;

/// Small frames written together are copied into one buffer up to this size (one send).
const COALESCE: usize = 256 << 10;

/// Shared with the writer (which must not hold the sender: dropping the outbox ends it).
#[derive(Debug, Default)]
struct Counters {
    queued: AtomicUsize,
    drained: Notify,
    failed: AtomicBool,
}

#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    c: Arc<Counters>,
}

impl Outbox {
    /// The outbox and its writer (spawn the writer on the runtime).
    pub fn new(
        mut w: WriteSide,
        on_fail: Arc<Notify>,
    ) -> (Arc<Outbox>, impl std::future::Future<Output = ()> + Send) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let c = Arc::new(Counters::default());
        let me = Arc::clone(&c);
        let out = Arc::new(Outbox { tx, c });
        let writer = async move {
            let mut buf: Vec<u8> = Vec::new();
            while let Some(first) = rx.recv().await {
                let mut written = first.len();
                let result = if first.len() >= COALESCE {
                    w.write_all(&first).await
                } else {
                    buf.clear();
                    buf.extend_from_slice(&first);
                    let mut big: Option<Vec<u8>> = None;
                    while buf.len() < COALESCE {
                        match rx.try_recv() {
                            Ok(next) if next.len() + buf.len() <= COALESCE => {
                                written += next.len();
                                buf.extend_from_slice(&next);
                            }
                            Ok(next) => {
                                written += next.len();
                                big = Some(next);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    let mut r = w.write_all(&buf).await;
                    if let (Ok(()), Some(big)) = (&r, big) {
                        r = w.write_all(&big).await;
                    }
                    r
                };
                // TLS holds written bytes in its session until flushed (a no-op on TCP).
                let result = match result {
                    Ok(()) => w.flush().await,
                    e => e,
                };
                me.queued.fetch_sub(written, Ordering::AcqRel);
                me.drained.notify_waiters();
                if result.is_err() {
                    me.failed.store(true, Ordering::Release);
                    on_fail.notify_waiters();
                    on_fail.notify_one();
                    return;
                }
            }
            let _ = w.shutdown().await;
        };
        (out, writer)
    }

    /// Queues bytes (dropped if the peer is gone).
    pub fn send(&self, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let n = data.len();
        self.c.queued.fetch_add(n, Ordering::AcqRel);
        if self.tx.send(data).is_err() {
            self.c.queued.fetch_sub(n, Ordering::AcqRel);
        }
    }

    pub fn queued(&self) -> usize {
        self.c.queued.load(Ordering::Acquire)
    }

    pub fn failed(&self) -> bool {
        self.c.failed.load(Ordering::Acquire)
    }

    /// Returns once at most `limit` bytes are queued (or the writer failed).
    pub async fn wait_below(&self, limit: usize) {
        loop {
            let drained = self.c.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.queued() <= limit || self.failed() {
                return;
            }
            drained.await;
        }
    }
}
