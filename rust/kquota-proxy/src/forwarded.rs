//! What the response reader needs to know of each request sent to the broker, in send order.

use std::sync::Arc;
use std::time::Instant;

use quota_core::ClientHandle;

use crate::fetch_layout::FetchRequest;
use crate::header::RequestHeader;
use crate::topic_bytes::ProduceTopicBytes;

pub enum Kind {
    /// Relayed unparsed: only the request quota's throttle is added (`None`: exempt).
    Plain(Option<Arc<ClientHandle>>),
    /// Python answers it.
    Python,
    Produce {
        handle: Arc<ClientHandle>,
        size: usize,
        /// Each topic's bytes, for the topic quotas (empty while none is configured).
        topics: ProduceTopicBytes,
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
    /// When the request was read.
    pub read: Instant,
    pub kind: Kind,
}

pub struct FetchState {
    pub handle: Arc<ClientHandle>,
    /// The quota window's bytes (`inf` without a quota).
    pub cap: f64,
    pub req: FetchRequest,
}

impl Fwd {
    /// A request read at `read` about to be sent, `ns` of proxy time spent on it (its slot is
    /// given when it is queued).
    pub fn new(h: &RequestHeader, read: Instant, ns: u64, kind: Kind) -> Fwd {
        Fwd {
            slot: 0,
            corr: h.correlation_id,
            key: h.api_key,
            version: h.api_version,
            ns,
            read,
            kind,
        }
    }

    /// Before `handle`'s response step for this request: tells its shadow, if it has one, when
    /// the request was read. The proxy reads a connection's requests ahead of their responses
    /// and records one read before a mute when it is answered during it; the shadow, to predict
    /// that, must know the request was read before its would-be mute (`quota_core::shadow`).
    pub fn tell_shadow(&self, handle: &ClientHandle) {
        if handle.shadow().is_some() {
            let ms = self.read.elapsed().as_millis();
            quota_core::shadow::request_age(u32::try_from(ms).unwrap_or(u32::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use quota_core::{EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel, ShadowKernel};

    use super::*;

    fn produce_limited(bytes_per_s: f64) -> Arc<QuotaKernel> {
        let k = Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap());
        let entity = QuotaEntity {
            user: Some(EntityName::Name("A".into())),
            client_id: None,
        };
        let change = QuotaChange {
            entity,
            quota_type: quota_core::ClientQuotaType::Produce,
            value: Some(bytes_per_s),
        };
        k.alter(&[change], false).unwrap();
        k
    }

    fn fwd(read: Instant) -> Fwd {
        let h = RequestHeader {
            api_key: 0,
            api_version: 9,
            correlation_id: 1,
            client_id: 0..0,
            body_offset: 0,
        };
        Fwd::new(&h, read, 0, Kind::Python)
    }

    /// A request read before its shadow's would-be mute and answered during it is recorded by
    /// the shadow, as the proxy records it (`quota_core::shadow`); one read when answered is held.
    #[test]
    fn a_response_step_tells_the_shadow_when_its_request_was_read() {
        let shadow = ShadowKernel::new(produce_limited(1000.0));
        let step = shadow.step("A", "c");
        let unlimited = Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap());
        let h = ClientHandle::new(unlimited, "A", "c").with_shadow(step.clone());
        let now = 1_000_000;
        h.produce_response(50_000.0, 0.0, true, Some(now)).unwrap();
        let early = fwd(Instant::now() - Duration::from_millis(500));
        early.tell_shadow(&h);
        h.produce_response(700.0, 0.0, true, Some(now + 10)).unwrap();
        let late = fwd(Instant::now());
        late.tell_shadow(&h);
        h.produce_response(300.0, 0.0, true, Some(now + 11)).unwrap();
        assert_eq!(step.backlog_bytes(quota_core::ClientQuotaType::Produce), 300);
    }

    #[test]
    fn without_a_shadow_nothing_is_told() {
        let shadow = ShadowKernel::new(produce_limited(1000.0));
        let step = shadow.step("A", "c");
        let s = ClientHandle::new(produce_limited(1e12), "A", "c").with_shadow(step.clone());
        s.produce_response(50_000.0, 0.0, true, Some(2_000_000)).unwrap();
        // A handle without a shadow: the next shadow step on this thread is not given its age.
        let h = ClientHandle::new(produce_limited(1000.0), "A", "c");
        fwd(Instant::now() - Duration::from_millis(500)).tell_shadow(&h);
        s.produce_response(700.0, 0.0, true, Some(2_000_010)).unwrap();
        assert_eq!(step.backlog_bytes(quota_core::ClientQuotaType::Produce), 700);
    }
}
