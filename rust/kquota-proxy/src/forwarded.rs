//! What the response reader needs to know of each request sent to the broker, in send order.

use std::sync::Arc;

use quota_core::ClientHandle;

use crate::fetch::FetchRequest;

pub enum Kind {
    /// Relayed unparsed: only the request quota's throttle is added (`None`: exempt).
    Plain(Option<Arc<ClientHandle>>),
    /// Python answers it.
    Python,
    Produce {
        handle: Arc<ClientHandle>,
        size: usize,
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
