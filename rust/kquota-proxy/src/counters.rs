//! The data plane's counters, read by Python's `stats` (relaxed: they are reported, never
//! acted on).

use std::sync::atomic::AtomicU64;

#[derive(Default)]
pub struct Counters {
    /// Client sockets closed at once by the descriptor guard (`max_client_sockets`).
    pub sockets_refused: AtomicU64,
    /// Connections closed for a missing, malformed, truncated or late PROXY protocol header.
    pub proxy_header_refused: AtomicU64,
    /// Connections closed unread because their peer is not a trusted balancer
    /// (`kquota.proxy.protocol.trusted.sources`).
    pub proxy_protocol_untrusted: AtomicU64,
    /// Connections closed for `connections.max.idle.ms` (silent sessions, and PROXY headers or
    /// TLS handshakes not finished within it).
    pub idle_closed: AtomicU64,
    /// Connections closed before authentication on a SASL listener (a frame over
    /// `sasl.server.max.receive.size`, or an API other than ApiVersions and SASL).
    pub preauth_refused: AtomicU64,
    /// Connections accepted and not yet handed to a session (reading a PROXY header, or held for
    /// an IP throttle): counted against `max_client_sockets` with the sessions, so that silent or
    /// throttled sockets cannot pile up without bound. A gauge, not a total.
    pub pending_admission: AtomicU64,
    /// Of those, the ones whose task has not run yet (the accept loop waits for them before it
    /// refuses at `max_client_sockets`: they are about to become sessions or to be dropped).
    pub admission_unstarted: AtomicU64,
    /// Accepts held by the broker-wide or listener `max.connection.creation.rate`.
    pub accept_delayed: AtomicU64,
    /// Produce requests that waited for their producer's mute or token, held by another of its
    /// connections (`producer_gate`).
    pub producer_waits: AtomicU64,
    /// Produce requests whose rest was relayed cut-through.
    pub streamed_requests: AtomicU64,
    /// Fetch responses whose rest was relayed (or skipped) cut-through.
    pub streamed_responses: AtomicU64,
    /// Request-log rows dropped because the log was full.
    pub log_dropped: AtomicU64,
}
