//! The TLS steps of one connection, between the accept and the session's relaying:
//! the client's handshake with its deadline and principal, and the proxy's own handshake with
//! the broker. Failures close only that connection, are counted by cause (`FailureLog`, read
//! by the plane's stats) and reported to Python's log once per cause per interval. Handshakes
//! run before the connection is registered, so they take no `max_client_sockets` place (the
//! kernel counts them against `max.connections`, as Kafka counts a connection from its accept);
//! their own bound (`max_handshakes`) keeps a flood of unfinished handshakes from holding
//! unbounded sockets.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::stream::Stream;
use super::{FailureLog, HandshakeFailure, ListenerTls, UpstreamTls, HANDSHAKE_TIMEOUT};

/// How often each failure cause is logged at most.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Both sides' TLS (either may be absent: PLAINTEXT) and their failure counts.
pub struct Security {
    /// The listeners' TLS (SSL / SASL_SSL clients), shared by every port of the proxy.
    pub listener: Option<ListenerTls>,
    /// The proxy's TLS to the brokers.
    pub upstream: Option<UpstreamTls>,
    /// Client handshake failures by cause.
    pub client_failures: FailureLog,
    /// Broker handshake failures by cause.
    pub broker_failures: FailureLog,
    /// Client handshakes under way, and the bound on them.
    handshaking: AtomicUsize,
    max_handshakes: usize,
    /// Client connections closed at once because `max_handshakes` were under way.
    pub refused_handshakes: AtomicU64,
    /// The client handshake's deadline.
    pub deadline: Duration,
}

impl Security {
    /// TLS on the given sides; at most `max_handshakes` client handshakes at once.
    pub fn new(listener: Option<ListenerTls>, upstream: Option<UpstreamTls>, max_handshakes: usize) -> Self {
        Security {
            listener,
            upstream,
            client_failures: FailureLog::new(FAILURE_LOG_INTERVAL),
            broker_failures: FailureLog::new(FAILURE_LOG_INTERVAL),
            handshaking: AtomicUsize::new(0),
            max_handshakes,
            refused_handshakes: AtomicU64::new(0),
            deadline: HANDSHAKE_TIMEOUT,
        }
    }

    /// PLAINTEXT on both sides.
    pub fn plaintext() -> Self {
        Security::new(None, None, 1)
    }

    /// The client's stream and principal (`None`: PLAINTEXT, the principal is SASL's or
    /// ANONYMOUS). `Err(Some(line))`: closed, and this line is to be logged; `Err(None)`:
    /// closed, the cause already logged within the interval.
    /// The handshake's deadline is the shorter of its own and `max_idle`
    /// (`connections.max.idle.ms`: a client silent inside its handshake is idle too).
    pub async fn accept(
        &self,
        sock: TcpStream,
        max_idle: Duration,
    ) -> Result<(Stream, Option<String>), Option<String>> {
        let Some(tls) = &self.listener else {
            return Ok((Stream::Tcp(sock), None));
        };
        if self.handshaking.fetch_add(1, Ordering::AcqRel) >= self.max_handshakes {
            self.handshaking.fetch_sub(1, Ordering::AcqRel);
            let n = self.refused_handshakes.fetch_add(1, Ordering::Relaxed);
            return Err((n == 0).then(|| {
                format!(
                    "{} TLS handshakes under way: refusing more (logged once)",
                    self.max_handshakes
                )
            }));
        }
        let result = tls.accept(sock, self.deadline.min(max_idle)).await;
        self.handshaking.fetch_sub(1, Ordering::AcqRel);
        match result {
            Ok((stream, principal)) => Ok((
                Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(stream))),
                Some(principal),
            )),
            Err(f) => Err(report(&self.client_failures, "client", &f)),
        }
    }

    /// The broker connection, wrapped in TLS when the upstream is SSL / SASL_SSL; `host` is the
    /// broker's advertised (or bootstrap) host, checked against its certificate and sent as SNI.
    pub async fn connect(&self, host: &str, sock: TcpStream) -> Result<Stream, Option<String>> {
        let Some(tls) = &self.upstream else {
            return Ok(Stream::Tcp(sock));
        };
        match tls.connect(host, sock, self.deadline).await {
            Ok(stream) => Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Client(stream)))),
            Err(f) => Err(report(&self.broker_failures, &format!("broker {host}"), &f)),
        }
    }
}

impl Security {
    /// A broker connection's read failed before its first response: when the cause is TLS (in
    /// TLS 1.3 a broker refusing the proxy's certificate says so with an alert after the
    /// client's side of the handshake has completed), it is counted as a broker handshake
    /// failure, as TLS 1.2's refusal is. The reason to close the connection with.
    pub fn broker_refusal(&self, host: &str, err: &std::io::Error) -> String {
        let tls = err.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
        match (&self.upstream, tls) {
            (Some(_), Some(_)) => {
                let f = HandshakeFailure::from_io(err);
                report(&self.broker_failures, &format!("broker {host}"), &f)
                    .unwrap_or_else(|| format!("broker {host}: {f}"))
            }
            _ => format!("read failed: {err}"),
        }
    }
}

/// Counts `f`; the line to log when it is the first of its cause in the interval.
fn report(log: &FailureLog, side: &str, f: &HandshakeFailure) -> Option<String> {
    log.record(f).then(|| {
        format!(
            "{side}: {f} ({} {} so far; logged once per {}s)",
            log.count(f.cause()),
            f.cause(),
            FAILURE_LOG_INTERVAL.as_secs()
        )
    })
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("listener_tls", &self.listener.is_some())
            .field("upstream_tls", &self.upstream.is_some())
            .field("max_handshakes", &self.max_handshakes)
            .finish()
    }
}
