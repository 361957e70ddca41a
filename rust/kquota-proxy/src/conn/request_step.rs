//! The request quota of the APIs relayed unparsed (Kafka's response step for them, on the
//! proxy's time), and the request log's row for a recorded value.

use std::sync::Arc;

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
                self.log(h, ClientQuotaType::Request, ns as f64);
                r.mute_ms()
            }
            _ => {
                let _ = shared.kernel.record_exempt_request_time(ns as f64, None);
                0
            }
        }
    }

    pub fn log(&self, h: &ClientHandle, t: ClientQuotaType, value: f64) {
        if self.shared.cfg.request_log {
            let user: Arc<str> = Arc::from(h.user());
            self.shared.log_request(&user, h.client_id(), t as u8, value);
        }
    }
}
