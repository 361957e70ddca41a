//! What the response reader needs to know of each request sent to the broker, in send order.

use std::sync::Arc;

use quota_core::ClientHandle;

use crate::fetch_layout::FetchRequest;
use crate::header::RequestHeader;
use crate::produce_topics::TopicBytes;

pub enum Kind {
    /// Relayed unparsed: only the request quota's throttle is added (`None`: exempt).
    Plain(Option<Arc<ClientHandle>>),
    /// Python answers it.
    Python,
    Produce {
        handle: Arc<ClientHandle>,
        size: usize,
        /// Each topic's bytes, for the topic quotas (empty while none is configured).
        topics: TopicBytes,
    },
    Fetch(FetchState),
}

pub struct Fwd {
    pub slot: u64,
    pub corr: i32,
    pub key: i16,
    pub version: i16,
    /// Proxy time spent on the request so far.
    pub ns: u64,
    pub kind: Kind,
}

pub struct FetchState {
    pub handle: Arc<ClientHandle>,
    /// The quota window's bytes (`inf` without a quota).
    pub cap: f64,
    pub req: FetchRequest,
}

impl Fwd {
    /// A request about to be sent, `ns` of proxy time spent on it (its slot is given when it
    /// is queued).
    pub fn new(h: &RequestHeader, ns: u64, kind: Kind) -> Fwd {
        Fwd {
            slot: 0,
            corr: h.correlation_id,
            key: h.api_key,
            version: h.api_version,
            ns,
            kind,
        }
    }
}
