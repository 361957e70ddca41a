//! The kernel through its public API: custom quota callbacks (KIP-257).

mod common;

use std::sync::Arc;

use quota_core::{ClientHandle, ClientQuotaType, KernelConfig, QuotaError, QuotaKernel};

use common::{kernel, name, set, M, P};

// ---------------------------------------------------------------- custom callbacks (KIP-257)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AO};

/// Users "a" and "b" share group "g" (limit from `limit`); "bad" makes the callback fail.
#[derive(Default)]
struct GroupHook {
    tag_calls: AtomicUsize,
    limit_calls: AtomicUsize,
    limit: std::sync::Mutex<Option<f64>>,
    fail_limits: AtomicBool,
    fail_closed: bool,
    polls: bool,
    reset: AtomicBool,
}

/// The kernel owns its hook; tests keep a second reference to look inside.
struct Shared(Arc<GroupHook>);

impl quota_core::QuotaCallbackHook for Shared {
    fn metric_tags(&self, _t: ClientQuotaType, user: &str, _c: &str) -> Option<(String, String)> {
        self.0.tag_calls.fetch_add(1, AO::SeqCst);
        match user {
            "a" | "b" => Some(("g".into(), "".into())),
            "bad" => None,
            u => Some((u.into(), "".into())),
        }
    }
    fn limit(&self, _t: ClientQuotaType, u: &str, _c: &str) -> Option<Option<f64>> {
        self.0.limit_calls.fetch_add(1, AO::SeqCst);
        if self.0.fail_limits.load(AO::SeqCst) {
            return None;
        }
        Some(if u == "g" {
            *self.0.limit.lock().unwrap()
        } else {
            None
        })
    }
    fn fallback_limit(&self) -> Option<f64> {
        self.0.fail_closed.then_some(0.0)
    }
    fn polls_reset(&self) -> bool {
        self.0.polls
    }
    fn reset_required(&self, _t: ClientQuotaType) -> bool {
        self.0.reset.swap(false, AO::SeqCst)
    }
}

fn hooked(h: &Arc<GroupHook>) -> Arc<QuotaKernel> {
    let k = kernel();
    k.set_callback_hook(Some(Box::new(Shared(Arc::clone(h)))));
    k
}

#[test]
fn callback_tags_share_a_sensor_and_answers_are_cached() {
    let h = Arc::new(GroupHook::default());
    *h.limit.lock().unwrap() = Some(1000.0);
    let k = hooked(&h);
    // No configured quota is needed: a callback enables quotas (Kafka's CustomQuotas).
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "a", "x", 5000.0, Some(0))
            .unwrap(),
        0
    );
    let ha = ClientHandle::new(Arc::clone(&k), "b", "y");
    // b shares a's group sensor: 10000 B over 10 s = 1000 B/s, then 1 B more throttles.
    assert_eq!(ha.record_and_get_throttle_time_ms(P, 5000.0, Some(0)).unwrap(), 0);
    assert_eq!(ha.record_and_get_throttle_time_ms(P, 10.0, Some(0)).unwrap(), 10);
    assert_eq!(k.sensor_count(P), 1);
    let (tags, limits) = (h.tag_calls.load(AO::SeqCst), h.limit_calls.load(AO::SeqCst));
    for i in 0..100 {
        k.record_and_get_throttle_time_ms(P, "a", "x", 0.0, Some(i))
            .unwrap();
        ha.record_and_get_throttle_time_ms(P, 0.0, Some(i)).unwrap();
    }
    assert_eq!(
        h.tag_calls.load(AO::SeqCst),
        tags,
        "tags are cached per (type, user, client)"
    );
    assert_eq!(
        h.limit_calls.load(AO::SeqCst),
        limits,
        "limits are cached per tags"
    );
    // An invalidation (quota update) re-asks the limit once, and the tags with `tags`.
    *h.limit.lock().unwrap() = Some(2000.0);
    k.invalidate(&[P], false);
    assert_eq!(ha.record_and_get_throttle_time_ms(P, 0.0, Some(200)).unwrap(), 0);
    assert_eq!(h.limit_calls.load(AO::SeqCst), limits + 1);
    assert_eq!(h.tag_calls.load(AO::SeqCst), tags);
    k.invalidate(&[P], true);
    ha.record_and_get_throttle_time_ms(P, 0.0, Some(200)).unwrap();
    assert_eq!(h.tag_calls.load(AO::SeqCst), tags + 1);
    assert_eq!(k.quota_metric_tags(P, "a", "zz"), ("g".into(), "".into()));
    assert_eq!(k.quota_limit(P, "b", "zz"), Some(2000.0));
}

#[test]
fn callback_limit_zero_blocks_with_the_maximum_throttle_of_the_type() {
    let h = Arc::new(GroupHook::default());
    *h.limit.lock().unwrap() = Some(0.0);
    let k = hooked(&h);
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "a", "x", 0.0, Some(0))
            .unwrap(),
        i32::MAX
    );
    assert_eq!(k.record_request_time("a", "x", 0.0, Some(0)).unwrap(), 1000);
    assert_eq!(
        k.record_controller_mutations("a", "x", 1.0, Some(0), true),
        Err(QuotaError::ThrottlingQuotaExceeded {
            throttle_time_ms: i32::MAX
        })
    );
}

#[test]
fn failing_callback_falls_back_to_last_good_answer_or_policy() {
    for fail_closed in [false, true] {
        let h = Arc::new(GroupHook {
            fail_closed,
            ..Default::default()
        });
        *h.limit.lock().unwrap() = Some(100.0);
        let k = hooked(&h);
        // A principal the callback cannot tag and no earlier answer: the policy decides.
        let expect = if fail_closed { i32::MAX } else { 0 };
        assert_eq!(
            k.record_and_get_throttle_time_ms(P, "bad", "x", 1.0, Some(0))
                .unwrap(),
            expect
        );
        // And it is asked again next time (a failure is not cached).
        let before = h.tag_calls.load(AO::SeqCst);
        k.record_and_get_throttle_time_ms(P, "bad", "x", 1.0, Some(0))
            .unwrap();
        assert_eq!(h.tag_calls.load(AO::SeqCst), before + 1);
        // A good limit, then the callback's limit fails after a reset: the last good one holds.
        // 2000 B over 10 s = 200 B/s against 100: (200 - 100) / 100 * 10 s.
        assert_eq!(
            k.record_and_get_throttle_time_ms(P, "a", "x", 2000.0, Some(0))
                .unwrap(),
            10_000
        );
        h.fail_limits.store(true, AO::SeqCst);
        k.invalidate(&[P], false);
        assert_eq!(
            k.record_and_get_throttle_time_ms(P, "a", "x", 0.0, Some(0))
                .unwrap(),
            10_000
        );
        // A fresh tag set with a failing limit and nothing to fall back on: the policy.
        let fresh = k
            .record_and_get_throttle_time_ms(P, "other", "x", 1e9, Some(0))
            .unwrap();
        assert_eq!(fresh, expect);
    }
}

#[test]
fn reset_polling_and_removal() {
    let h = Arc::new(GroupHook {
        polls: true,
        ..Default::default()
    });
    *h.limit.lock().unwrap() = Some(1000.0);
    let k = hooked(&h);
    let c = ClientHandle::new(Arc::clone(&k), "a", "x");
    c.record_and_get_throttle_time_ms(P, 0.0, Some(0)).unwrap();
    let tags = h.tag_calls.load(AO::SeqCst);
    c.record_and_get_throttle_time_ms(P, 0.0, Some(0)).unwrap();
    assert_eq!(h.tag_calls.load(AO::SeqCst), tags);
    h.reset.store(true, AO::SeqCst);
    c.record_and_get_throttle_time_ms(P, 0.0, Some(0)).unwrap(); // polled: reset
    c.record_and_get_throttle_time_ms(P, 0.0, Some(0)).unwrap(); // re-resolves
    assert_eq!(h.tag_calls.load(AO::SeqCst), tags + 1);
    // Removing the callback restores built-in behaviour: no quota configured, nothing recorded.
    k.set_callback_hook(None);
    assert!(!k.has_callback_hook());
    assert_eq!(c.record_and_get_throttle_time_ms(P, 1e12, Some(0)).unwrap(), 0);
    assert_eq!(k.quota_metric_tags(P, "a", "x"), ("".into(), "x".into()));
}

#[test]
fn controller_window_sizes_the_burst_apart_from_the_quota_window() {
    // controller.quota.window.num = 5, .size.seconds = 2: burst = 5 * 2 * 3 = 30.
    let k = Arc::new(
        QuotaKernel::new(KernelConfig {
            controller_window: quota_core::WindowSpec::new(5, 2).unwrap(),
            ..KernelConfig::default()
        })
        .unwrap(),
    );
    set(&k, name("u"), None, M, Some(3.0));
    assert_eq!(
        k.record_controller_mutations("u", "c", 30.0, Some(0), true)
            .unwrap(),
        0
    );
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(0)).unwrap(),
        Some(0.0)
    );
    assert_eq!(k.max_value_in_quota_window(M, "u", "c"), 3.0 * 4.0 * 2.0);
}
