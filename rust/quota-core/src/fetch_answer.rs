//! How a proxy answers a consumer's Fetch response once its size is recorded: Kafka's
//! throttled empty answer where that keeps the consumer at its quota, delivery and a mute where
//! it does not.
//!
//! Kafka answers an over-quota fetch empty and takes its size back (`KafkaApis.handleFetchRequest`),
//! so a consumer is paid in whole responses that fit the quota window's free bytes. When a
//! response is a large share of the window, the window's remainder goes unused until the
//! response's sample expires: with responses of 0.6 of the window a consumer gets about half its
//! quota (0.5x measured through tansu, which answers a 1 MB partition limit with 6 MB). A
//! response larger than the whole window never fits, and Kafka would answer it empty forever.
//! Such responses are delivered, kept recorded and muted instead, as Kafka treats Produce.

/// What to do with a recorded Fetch response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FetchAnswer {
    /// Under the quota: delivered as the broker wrote it.
    Deliver,
    /// Kafka's answer: empty, with the throttle, its size taken back.
    Empty,
    /// Delivered with the throttle, kept recorded, and the connection muted for at least
    /// `size / quota` (the time the quota takes to allow it; see `time_at_bound_ms`).
    DeliverMuted,
}

/// Which rule answers an over-quota Fetch response (`kquota.fetch.answer`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum FetchAnswerRule {
    /// kquota's rule (the default): Kafka's empty answer for responses up to
    /// [`EMPTY_ANSWER_MAX_SHARE`] of the quota window, delivery and a mute for larger ones.
    #[default]
    DeliverLarge,
    /// Kafka's rule exactly (`KafkaApis.handleFetchRequest`): every throttled response is
    /// answered empty and its size taken back, however large, so a consumer whose responses are a
    /// large share of the window gets about half its quota, as from Kafka's broker.
    Kafka,
}

impl FetchAnswerRule {
    /// The rule's setting value: `deliver-large` or `kafka`.
    pub fn name(self) -> &'static str {
        match self {
            FetchAnswerRule::DeliverLarge => "deliver-large",
            FetchAnswerRule::Kafka => "kafka",
        }
    }

    /// The rule a setting value names, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "deliver-large" => Some(FetchAnswerRule::DeliverLarge),
            "kafka" => Some(FetchAnswerRule::Kafka),
            _ => None,
        }
    }
}

/// Over-quota responses up to this share of the quota window get Kafka's empty answer: at
/// least ten then fit the window, so whole responses use nine tenths of it or more.
pub const EMPTY_ANSWER_MAX_SHARE: f64 = 0.1;

/// The answer to a response of `size` bytes, given the quota window's bytes (`window_bytes`,
/// Kafka's `getMaxValueInQuotaWindow`; infinite without a quota) and the throttle recording it
/// gave, under `rule`.
pub fn fetch_answer(size: f64, window_bytes: f64, throttle_ms: i32, rule: FetchAnswerRule) -> FetchAnswer {
    if rule == FetchAnswerRule::Kafka {
        return if throttle_ms > 0 {
            FetchAnswer::Empty
        } else {
            FetchAnswer::Deliver
        };
    }
    if size > window_bytes || (throttle_ms > 0 && size > window_bytes * EMPTY_ANSWER_MAX_SHARE) {
        FetchAnswer::DeliverMuted
    } else if throttle_ms > 0 {
        FetchAnswer::Empty
    } else {
        FetchAnswer::Deliver
    }
}

#[cfg(test)]
mod tests {
    use super::{fetch_answer as answer, FetchAnswer::*, FetchAnswerRule};

    fn fetch_answer(size: f64, window_bytes: f64, throttle_ms: i32) -> super::FetchAnswer {
        answer(size, window_bytes, throttle_ms, FetchAnswerRule::DeliverLarge)
    }

    #[test]
    fn kafka_empty_answer_only_for_responses_a_tenth_of_the_window_or_less() {
        assert_eq!(fetch_answer(100.0, 1000.0, 0), Deliver);
        assert_eq!(fetch_answer(100.0, 1000.0, 50), Empty);
        assert_eq!(fetch_answer(101.0, 1000.0, 50), DeliverMuted);
        assert_eq!(fetch_answer(600.0, 1000.0, 0), Deliver);
        assert_eq!(fetch_answer(1000.0, 1000.0, 0), Deliver);
        // Larger than the whole window: muted even when the window was empty.
        assert_eq!(fetch_answer(1001.0, 1000.0, 0), DeliverMuted);
        // No quota: the window is infinite.
        assert_eq!(fetch_answer(1e12, f64::INFINITY, 0), Deliver);
    }

    #[test]
    fn kafkas_rule_answers_every_throttled_response_empty_whatever_its_size() {
        let kafka = FetchAnswerRule::Kafka;
        assert_eq!(answer(100.0, 1000.0, 0, kafka), Deliver);
        assert_eq!(answer(100.0, 1000.0, 50, kafka), Empty);
        assert_eq!(answer(900.0, 1000.0, 50, kafka), Empty);
        assert_eq!(answer(1001.0, 1000.0, 0, kafka), Deliver);
        assert_eq!(answer(5000.0, 1000.0, 4000, kafka), Empty);
        assert_eq!(FetchAnswerRule::from_name(kafka.name()), Some(kafka));
        assert_eq!(
            FetchAnswerRule::from_name(FetchAnswerRule::DeliverLarge.name()),
            Some(FetchAnswerRule::DeliverLarge)
        );
        assert_eq!(FetchAnswerRule::from_name("Kafka"), None);
    }
}
