//! The data plane's configuration, fixed when it starts (Python builds it from the proxy's
//! options).

use std::sync::Arc;
use std::time::Duration;

use crate::own_topics::OwnTopics;
use crate::topic_names::TopicNames;
use crate::tls::Security;
use crate::trusted_sources::TrustedSources;

use crate::tables::ApiTables;

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub tables: ApiTables,
    pub bootstrap: (String, u16),
    pub listen_host: String,
    pub listen_port: u16,
    pub advertised_host: String,
    pub max_frame_bytes: usize,
    /// The proxy's guard against running out of file descriptors
    /// (`kquota.proxy.max.client.sockets`): client sockets held at once, sessions and sockets
    /// still being admitted; one more is closed at once. Kafka's `max.connections` is the
    /// kernel's (`admission`), and waits.
    pub max_client_sockets: usize,
    pub max_inflight: usize,
    pub quota_window_ms: u64,
    pub request_log: bool,
    /// Whether every listener takes the PROXY protocol header (v1 or v2) first and refuses
    /// connections without a valid one (`kquota.proxy.protocol.enable`).
    pub proxy_protocol: bool,
    /// How long a connection may take to send its PROXY header.
    pub proxy_protocol_timeout: Duration,
    /// The balancers whose PROXY header is believed (`kquota.proxy.protocol.trusted.sources`):
    /// any other peer of a listener taking the PROXY protocol is closed unread.
    pub proxy_protocol_trusted: TrustedSources,
    /// Whether the client listeners take SASL (their clients authenticate through the proxy
    /// with the broker): until then `preauth` bounds them.
    pub sasl_listener: bool,
    /// `sasl.server.max.receive.size`: the longest frame before authentication.
    pub sasl_max_receive_bytes: usize,
    /// The longest request of an API handed to Python
    /// (`kquota.proxy.inspected.request.max.bytes`): a longer one closes the connection unread.
    pub python_max_frame_bytes: usize,
    /// `connections.max.idle.ms` (`idle`).
    pub max_idle: Duration,
    /// How long a closing connection may take to send the answers it owes.
    pub drain: Duration,
    /// TLS on either side; `Security::plaintext()` for none.
    pub security: Arc<Security>,
    /// The proxy's own topics, closed to clients (named and given ids by Python, also while
    /// running: shared with the Python object).
    pub own_topics: Arc<OwnTopics>,
    /// Topic ids to names for the Fetch topic quotas (taught by Python from the Metadata
    /// responses it relays, also while running: shared with the Python object).
    pub topic_names: Arc<TopicNames>,
    /// A shadow configuration stepped beside the enforced one and never enforced
    /// (`--shadow-store`); `None`: none.
    pub shadow: Option<Arc<quota_core::ShadowKernel>>,
}

impl ProxyConfig {
    /// The Kafka listener name of the proxy's listeners (the bootstrap port and every broker's
    /// are one listener): the security protocol of `--listen`, as a broker names the listener
    /// `SSL://host:port`. The connection quotas' `listener.name.<l>.*` limits, rates and metrics
    /// are this listener's.
    pub fn listener_name(&self) -> &'static str {
        match (self.security.listener.is_some(), self.sasl_listener) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}
