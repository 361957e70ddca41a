//! The request quota of the APIs relayed unparsed (Kafka's response step for them, on the
//! proxy's time), and the request log's row for a recorded value (with the shadow's, if any).

use std::sync::Arc;

use quota_core::is_legal_topic_name;
use quota_core::{ClientHandle, ClientQuotaType, ResponseThrottle};

use super::Conn;

impl Conn {
    /// Kafka's response step for a relayed API other than Produce and Fetch: its proxy time
    /// recorded (KIP-124 on proxy time) and the request quota's throttle enforced; returns it.
    pub fn request_step(&self, key: i16, handle: Option<&Arc<ClientHandle>>, ns: u64) -> i32 {
        let shared = &self.shared;
        match handle {
            Some(h) if !shared.cfg.tables.is_exempt(key) => {
                let r = h
                    .request_response(ns as f64, None)
                    .unwrap_or(ResponseThrottle::NONE);
                self.log(h, ClientQuotaType::Request, ns as f64, r.throttle_time_ms);
                r.mute_ms()
            }
            _ => {
                let _ = shared.kernel.record_exempt_request_time(ns as f64, None);
                0
            }
        }
    }

    /// A request-log row of `h`'s response: `value` recorded as `t`, `throttle_ms` the throttle
    /// the response carried (on one row of each response, 0 on its others), and the shadow's
    /// would-be throttle and delayed bytes of type `t` not yet logged (each taken once, by the
    /// connection's next row of that type: the shadow is stepped off the response path).
    /// Returns the row's time, for the response's topic rows ([`Self::log_topics`]).
    pub fn log(&self, h: &ClientHandle, t: ClientQuotaType, value: f64, throttle_ms: i32) -> i64 {
        if !self.shared.cfg.request_log {
            return 0;
        }
        let ts = crate::request_log::now_ms();
        let user: Arc<str> = Arc::from(h.user());
        let shadow = h.shadow().map(|s| s.take_logged(t));
        self.shared
            .log_request(ts, &user, h.client_id(), (t as u8, value, throttle_ms, shadow));
        ts
    }

    /// The request log's topic rows of `h`'s request: one per topic it named, `value` that
    /// topic's bytes, recorded as `t` (the throttle and the shadow stay on the request's own
    /// row). Their number is bounded by the request's size: each topic costs its name's bytes.
    /// A name Kafka refuses as a topic name (`Topic.validate`) gets no row: the broker refuses
    /// its partitions, so no bytes land in a topic by that name. Stamped `ts`, the request's own
    /// row's time (what [`Self::log`] returned): one request, one time, even across a millisecond.
    pub fn log_topics<S: AsRef<str>>(&self, h: &ClientHandle, t: ClientQuotaType, topics: &[(S, f64)], ts: i64) {
        if self.shared.cfg.request_log && !topics.is_empty() {
            let user: Arc<str> = Arc::from(h.user());
            for (topic, bytes) in topics.iter().filter(|(t, _)| is_legal_topic_name(t.as_ref())) {
                self.shared
                    .log_row(ts, &user, h.client_id(), (t as u8, *bytes, 0, None), Some(topic.as_ref()));
            }
        }
    }
}
