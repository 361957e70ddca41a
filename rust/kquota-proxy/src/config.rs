//! The data plane's configuration, fixed when it starts (Python builds it from the proxy's
//! options).

use std::sync::Arc;
use std::time::Duration;

use crate::secure::Security;

use crate::tables::ApiTables;

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub tables: ApiTables,
    pub bootstrap: (String, u16),
    pub listen_host: String,
    pub listen_port: u16,
    pub advertised_host: String,
    pub max_frame_bytes: usize,
    pub max_connections: usize,
    pub max_inflight: usize,
    pub quota_window_ms: u64,
    pub request_log: bool,
    /// How long a closing connection may take to send the answers it owes.
    pub drain: Duration,
    /// TLS on either side (issue 28); `Security::plaintext()` for none.
    pub security: Arc<Security>,
}
