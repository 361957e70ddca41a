//! Kafka's response step, once for every caller: `KafkaApis` records a response's byte-rate and
//! request-time quotas, writes the larger throttle into the response and enforces the quota
//! that produced it; `ClientQuotaManager.throttle` then records that entity's `throttle-time`
//! and mutes the channel. The Produce and Fetch decisions around it (acks=0, Kafka's empty Fetch
//! answer or delivery and a mute) are here too, so the proxy's data plane, `kquota.aio` and
//! `kquota.response_throttle` all run the same rules.

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::fetch_answer::{fetch_answer, FetchAnswer};
use crate::handle::ClientHandle;
use crate::types::ClientQuotaType;
use crate::validate::check_record_value;

/// What a response carries and which quota it enforces.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ResponseThrottle {
    /// The response's `throttle_time_ms`; the connection is muted this long once the response
    /// has gone out (KIP-219).
    pub throttle_time_ms: i32,
    /// The quota whose throttle is enforced (`None` without a throttle).
    pub enforce: Option<ClientQuotaType>,
}

impl ResponseThrottle {
    pub const NONE: ResponseThrottle = ResponseThrottle {
        throttle_time_ms: 0,
        enforce: None,
    };

    /// How long the connection is muted after this response (ms): its throttle.
    #[inline]
    pub fn mute_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

/// `KafkaApis.handleProduceRequest` / `handleFetchRequest` (and, for KIP-599's APIs,
/// `RequestHandlerHelper.sendResponseMaybeThrottleWithControllerQuota`): the larger of the
/// throttle of `byte_type` (PRODUCE, FETCH or CONTROLLER_MUTATION) and the request-time
/// throttle goes in the response; the former is enforced only when its throttle is strictly
/// larger, a tie is the request quota's.
#[inline]
pub fn combine_throttles(byte_type: ClientQuotaType, byte_ms: i32, request_ms: i32) -> ResponseThrottle {
    let throttle = byte_ms.max(request_ms);
    if throttle <= 0 {
        return ResponseThrottle::NONE;
    }
    let enforce = if byte_ms > request_ms {
        byte_type
    } else {
        ClientQuotaType::Request
    };
    ResponseThrottle {
        throttle_time_ms: throttle,
        enforce: Some(enforce),
    }
}

/// [`combine_throttles`] with the largest throttle of the topics a response touched (topic
/// quotas): the largest of the three goes in the response. The topic quota is enforced (as a
/// byte quota of `byte_type`) only when its throttle is strictly the largest; a tie is the
/// client's quotas', so without a topic throttle this is exactly [`combine_throttles`]. Returns
/// the throttle and whether the topic quota is the one enforced.
#[inline]
pub fn combine_with_topics(
    byte_type: ClientQuotaType,
    byte_ms: i32,
    topic_ms: i32,
    request_ms: i32,
) -> (ResponseThrottle, bool) {
    let client = combine_throttles(byte_type, byte_ms, request_ms);
    if topic_ms > client.throttle_time_ms {
        let r = ResponseThrottle {
            throttle_time_ms: topic_ms,
            enforce: Some(byte_type),
        };
        return (r, true);
    }
    (client, false)
}

/// A Fetch response's step: how it is answered, and its throttle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FetchStep {
    pub answer: FetchAnswer,
    pub throttle: ResponseThrottle,
}

impl ClientHandle {
    /// `ClientQuotaManager.throttle`: records `r`'s throttle into the `throttle-time` of the
    /// quota it enforces, for this entity and for the type; returns the mute (ms).
    pub fn throttle(&self, r: ResponseThrottle, now: Option<i64>) -> Result<i32, QuotaError> {
        let Some(t) = r.enforce else {
            return Ok(0);
        };
        if r.throttle_time_ms <= 0 {
            return Ok(0);
        }
        let now = resolve_now(now)?;
        let k = self.kernel();
        k.record_throttle_time(t, f64::from(r.throttle_time_ms), Some(now))?;
        // Under the enforced sensor's metric tags, as Kafka's `throttleTimeSensor` is one of the
        // entity's quota sensors.
        let (user, client) = k.quota_metric_tags(t, self.user(), self.client_id());
        k.record_entity_throttle_time(t, &user, &client, f64::from(r.throttle_time_ms), now);
        Ok(r.mute_ms())
    }

    /// A response of a request that is neither Produce nor Fetch: its request time (KIP-124,
    /// `nanos` of the thread spent on it) recorded, the request quota's throttle enforced.
    pub fn request_response(&self, nanos: f64, now: Option<i64>) -> Result<ResponseThrottle, QuotaError> {
        let now = Some(resolve_now(now)?);
        let r = combine_throttles(ClientQuotaType::Request, 0, self.record_request_time(nanos, now)?);
        self.throttle(r, now)?;
        if let (Some(s), Some(now)) = (&self.shadow, now) {
            s.request(nanos, now);
        }
        Ok(r)
    }

    /// The response step of CreateTopics, DeleteTopics and CreatePartitions (KIP-599,
    /// `sendResponseMaybeThrottleWithControllerQuota`): the request time recorded, combined with
    /// the controller-mutation throttle the request's mutations gave (`mutation_throttle_ms`),
    /// and the enforced one recorded.
    pub fn mutation_response(
        &self,
        mutation_throttle_ms: i32,
        request_nanos: f64,
        now: Option<i64>,
    ) -> Result<ResponseThrottle, QuotaError> {
        let now = Some(resolve_now(now)?);
        let request = self.record_request_time(request_nanos, now)?;
        let r = combine_throttles(
            ClientQuotaType::ControllerMutation,
            mutation_throttle_ms.max(0),
            request,
        );
        self.throttle(r, now)?;
        Ok(r)
    }

    /// `handleProduceRequest`'s response step for a request of `size` bytes (header + body):
    /// the bytes recorded, then the request time (`request_nanos` of the thread spent on it),
    /// the throttles combined and the enforced one recorded. A request that gets no answer
    /// (acks=0, `answered` false) is exempt from the request quota, as in Kafka: its time counts
    /// as exempt time. It is muted like any other.
    pub fn produce_response(
        &self,
        size: f64,
        request_nanos: f64,
        answered: bool,
        now: Option<i64>,
    ) -> Result<ResponseThrottle, QuotaError> {
        self.produce_response_with_topics(size, request_nanos, answered, &[], now)
    }

    /// [`produce_response`](Self::produce_response) of a request that wrote `topics` (each
    /// topic's bytes, the sum of its record batches): each quoted topic's bytes recorded into
    /// its sensor in the same step, and the response's throttle the largest of the client's,
    /// the topics' and the request quota's (see [`combine_with_topics`]).
    pub fn produce_response_with_topics(
        &self,
        size: f64,
        request_nanos: f64,
        answered: bool,
        topics: &[(&str, f64)],
        now: Option<i64>,
    ) -> Result<ResponseThrottle, QuotaError> {
        check_record_value(size)?;
        check_topic_bytes(topics)?;
        let now = resolve_now(now)?;
        let bytes = self.record_and_get_throttle_time_ms(ClientQuotaType::Produce, size, Some(now))?;
        let topic = self.record_topics(ClientQuotaType::Produce, topics, now);
        let request = if answered {
            self.record_request_time(request_nanos, Some(now))?
        } else {
            self.kernel()
                .record_exempt_request_time(request_nanos, Some(now))?;
            0
        };
        let (r, by_topic) = combine_with_topics(
            ClientQuotaType::Produce,
            bytes,
            topic.map_or(0, |(_, ms)| ms),
            request,
        );
        self.enforce(r, topic.filter(|_| by_topic).map(|(i, _)| topics[i].0), now)?;
        if let Some(s) = &self.shadow {
            s.produce(size, request_nanos, answered, now);
        }
        Ok(r)
    }

    /// Records each topic's bytes into its sensor (topics without a quota record nothing) and
    /// returns the index in `topics` and the throttle of the one with the largest throttle (the
    /// first of equals).
    fn record_topics(&self, t: ClientQuotaType, topics: &[(&str, f64)], now: i64) -> Option<(usize, i32)> {
        let k = self.kernel();
        if topics.is_empty() || !k.topics.enabled(t) {
            return None;
        }
        let mut worst: Option<(usize, i32)> = None;
        for (i, &(name, bytes)) in topics.iter().enumerate() {
            if let Some(ms) = k.topics.record(t, name, bytes, &k.settings.window, now) {
                if worst.is_none_or(|(_, w)| ms > w) {
                    worst = Some((i, ms));
                }
            }
        }
        worst
    }

    /// `ClientQuotaManager.throttle` for a response whose throttle is `r`: a topic quota's
    /// (`topic`, when it is the one enforced) is recorded into the type's and that topic's
    /// `throttle-time`, a client quota's as [`throttle`](Self::throttle) does. Returns the mute
    /// (ms).
    fn enforce(&self, r: ResponseThrottle, topic: Option<&str>, now: i64) -> Result<i32, QuotaError> {
        let (Some(t), Some(topic)) = (r.enforce, topic) else {
            return self.throttle(r, Some(now));
        };
        let k = self.kernel();
        k.record_throttle_time(t, f64::from(r.throttle_time_ms), Some(now))?;
        k.topics.record_throttle_time(
            t,
            topic,
            f64::from(r.throttle_time_ms),
            &k.settings.metrics_window,
            now,
        );
        Ok(r.mute_ms())
    }

    /// The most a Fetch may ask for: Kafka caps a consumer's `MaxBytes` (and `MinBytes`) to the
    /// bytes its quota window allows (`getMaxValueInQuotaWindow`); infinite without a quota.
    pub fn fetch_request_cap(&self) -> f64 {
        self.kernel()
            .max_value_in_quota_window(ClientQuotaType::Fetch, self.user(), self.client_id())
    }

    /// [`fetch_request_cap`](Self::fetch_request_cap) of a Fetch asking for `topics`: also at
    /// most the bytes each topic's quota window allows (the smallest of them).
    pub fn fetch_request_cap_for_topics(&self, topics: &[&str]) -> f64 {
        let k = self.kernel();
        let mut cap = self.fetch_request_cap();
        if k.topics.enabled(ClientQuotaType::Fetch) {
            for name in topics {
                cap = cap.min(k.topics.max_value_in_quota_window(
                    ClientQuotaType::Fetch,
                    name,
                    &k.settings.window,
                ));
            }
        }
        cap
    }

    /// `handleFetchRequest`'s response step for a response of `size` bytes to a request capped
    /// at `cap` ([`fetch_request_cap`](Self::fetch_request_cap) when the request was read): the
    /// bytes and the request time recorded and combined; over quota, Kafka's empty answer with
    /// the size taken back, or, for a response too large a share of the window for that
    /// ([`fetch_answer`]), delivery kept recorded and a mute of at least the time the quota
    /// takes to allow it (enforced as the byte quota's). The enforced throttle is recorded.
    pub fn fetch_response(
        &self,
        size: f64,
        cap: f64,
        request_nanos: f64,
        now: Option<i64>,
    ) -> Result<FetchStep, QuotaError> {
        self.fetch_response_with_topics(size, cap, request_nanos, &[], now)
    }

    /// [`fetch_response`](Self::fetch_response) of a response carrying `topics` (each topic's
    /// bytes): each quoted topic's bytes recorded into its sensor, the throttle the largest of
    /// the client's, the topics' and the request quota's. An empty answer takes the topics'
    /// bytes back too; a muted delivery is muted at least as long as each topic's quota takes to
    /// allow that topic's bytes.
    pub fn fetch_response_with_topics(
        &self,
        size: f64,
        cap: f64,
        request_nanos: f64,
        topics: &[(&str, f64)],
        now: Option<i64>,
    ) -> Result<FetchStep, QuotaError> {
        check_record_value(size)?;
        check_topic_bytes(topics)?;
        let now = resolve_now(now)?;
        let bytes = self.record_and_get_throttle_time_ms(ClientQuotaType::Fetch, size, Some(now))?;
        let mut topic = self.record_topics(ClientQuotaType::Fetch, topics, now);
        let request = self.record_request_time(request_nanos, Some(now))?;
        let (mut r, mut by_topic) = combine_with_topics(
            ClientQuotaType::Fetch,
            bytes,
            topic.map_or(0, |(_, ms)| ms),
            request,
        );
        let answer = fetch_answer(size, cap, r.throttle_time_ms, self.kernel().settings().fetch_answer);
        match answer {
            FetchAnswer::DeliverMuted => {
                let k = self.kernel();
                let paid = k.time_at_quota_ms(ClientQuotaType::Fetch, self.user(), self.client_id(), size);
                if paid > r.throttle_time_ms {
                    r = ResponseThrottle {
                        throttle_time_ms: paid,
                        enforce: Some(ClientQuotaType::Fetch),
                    };
                    by_topic = false;
                }
                if topic.is_some() {
                    for (i, &(name, b)) in topics.iter().enumerate() {
                        let Some(s) = k.topics.record_sensor(ClientQuotaType::Fetch, name) else {
                            continue;
                        };
                        let paid = crate::throttle::time_at_bound_ms(b, s.bound());
                        if s.bound() != f64::INFINITY && paid > r.throttle_time_ms {
                            r = ResponseThrottle {
                                throttle_time_ms: paid,
                                enforce: Some(ClientQuotaType::Fetch),
                            };
                            by_topic = true;
                            topic = Some((i, paid));
                        }
                    }
                }
            }
            FetchAnswer::Empty => {
                self.unrecord(ClientQuotaType::Fetch, size, Some(now))?;
                let k = self.kernel();
                for &(name, b) in topics {
                    k.topics
                        .unrecord(ClientQuotaType::Fetch, name, b, &k.settings.window, now);
                }
            }
            FetchAnswer::Deliver => {}
        }
        self.enforce(r, topic.filter(|_| by_topic).map(|(i, _)| topics[i].0), now)?;
        if let Some(s) = &self.shadow {
            // The bytes the client got: none when the enforced answer is empty.
            s.fetch(if answer == FetchAnswer::Empty { 0.0 } else { size }, request_nanos, now);
        }
        Ok(FetchStep { answer, throttle: r })
    }
}

/// Each topic's bytes must be a valid recorded value, like a response's size.
fn check_topic_bytes(topics: &[(&str, f64)]) -> Result<(), QuotaError> {
    for &(_, b) in topics {
        check_record_value(b)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClientQuotaType::*;

    #[test]
    fn a_topic_throttle_is_enforced_only_when_strictly_the_largest() {
        // No topic throttle: exactly Kafka's rule.
        for (b, r) in [(300, 120), (50, 50), (10, 70), (0, 0)] {
            assert_eq!(combine_with_topics(Produce, b, 0, r), (combine_throttles(Produce, b, r), false));
        }
        assert_eq!(
            combine_with_topics(Produce, 300, 400, 120),
            (
                ResponseThrottle {
                    throttle_time_ms: 400,
                    enforce: Some(Produce)
                },
                true
            )
        );
        // Ties go to the client's quotas (the byte quota, or the request quota on its own tie).
        assert_eq!(combine_with_topics(Fetch, 400, 400, 120), (combine_throttles(Fetch, 400, 120), false));
        assert_eq!(combine_with_topics(Fetch, 10, 70, 70), (combine_throttles(Fetch, 10, 70), false));
    }

    #[test]
    fn the_larger_throttle_goes_out_and_a_tie_is_the_request_quotas() {
        assert_eq!(
            combine_throttles(Produce, 300, 120),
            ResponseThrottle {
                throttle_time_ms: 300,
                enforce: Some(Produce)
            }
        );
        assert_eq!(
            combine_throttles(Fetch, 50, 50),
            ResponseThrottle {
                throttle_time_ms: 50,
                enforce: Some(Request)
            }
        );
        assert_eq!(
            combine_throttles(Fetch, 10, 70),
            ResponseThrottle {
                throttle_time_ms: 70,
                enforce: Some(Request)
            }
        );
        assert_eq!(combine_throttles(Fetch, 0, 0), ResponseThrottle::NONE);
        assert_eq!(
            combine_throttles(ControllerMutation, 20, 10),
            ResponseThrottle {
                throttle_time_ms: 20,
                enforce: Some(ControllerMutation)
            }
        );
    }
}
