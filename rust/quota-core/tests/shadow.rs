//! Shadow quotas: a second kernel stepped beside the enforced one, never enforced; its would-be
//! throttle time and delayed bytes per entity.

use std::sync::Arc;

use quota_core::shadow::{ShadowHandle, ShadowKernel, MAX_SHADOW_ENTITIES};
use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, FetchAnswer, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel,
    ResponseThrottle, ShadowStep,
};
use ClientQuotaType::*;

fn kernel() -> Arc<QuotaKernel> {
    Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap())
}

fn limit(k: &QuotaKernel, user: &str, t: ClientQuotaType, v: f64) {
    let entity = QuotaEntity {
        user: Some(EntityName::Name(user.into())),
        client_id: None,
    };
    k.alter(
        &[QuotaChange {
            entity,
            quota_type: t,
            value: Some(v),
        }],
        false,
    )
    .unwrap();
}

/// An enforced handle on an unlimited kernel with a shadow limiting `A` to 1000 B/s produce.
fn handles(user: &str) -> (Arc<ShadowKernel>, ClientHandle, Arc<ShadowHandle>) {
    let shadow_kernel = kernel();
    limit(&shadow_kernel, "A", Produce, 1000.0);
    let shadow = ShadowKernel::new(shadow_kernel);
    let step = shadow.step(user, "c");
    let h = ClientHandle::new(kernel(), user, "c").with_shadow(step.clone());
    (shadow, h, step)
}

#[test]
fn the_shadow_throttles_nothing_and_totals_its_would_be_throttle() {
    let (shadow, a, _) = handles("A");
    let (_, b, _) = handles("B");
    for i in 0..20 {
        let now = 1_000 + i * 100;
        assert_eq!(a.produce_response(5000.0, 0.0, true, Some(now)).unwrap(), ResponseThrottle::NONE);
        assert_eq!(b.produce_response(5000.0, 0.0, true, Some(now)).unwrap(), ResponseThrottle::NONE);
    }
    let rows = shadow.totals();
    let a_rows: Vec<_> = rows.iter().filter(|r| r.user.as_deref() == Some("A")).collect();
    assert_eq!(a_rows.len(), 1);
    assert_eq!(a_rows[0].quota_type, Produce);
    assert!(a_rows[0].throttle_time_ms > 0);
    // A's second response onward came while A would have been muted: delayed.
    assert!(a_rows[0].delayed_bytes >= 5000);
    assert!(rows.iter().all(|r| r.user.as_deref() != Some("B")));
}

#[test]
fn the_first_would_be_throttle_is_what_enforcing_the_shadow_gives() {
    let (_, a, step) = handles("A");
    let enforced = kernel();
    limit(&enforced, "A", Produce, 1000.0);
    let e = ClientHandle::new(enforced, "A", "c");
    let shadow_r = a.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    let enforced_r = e.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    assert_eq!(shadow_r, ResponseThrottle::NONE);
    assert!(enforced_r.throttle_time_ms > 0);
    assert_eq!(step.take_logged(), (enforced_r.throttle_time_ms, 0.0));
    // Taken once: the response's later rows carry nothing.
    assert_eq!(step.take_logged(), (0, 0.0));
}

#[test]
fn a_response_within_the_would_be_mute_is_delayed_not_recorded() {
    let (shadow, a, step) = handles("A");
    a.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    let (t, _) = step.take_logged();
    assert!(t > 1);
    let rate_before = step.handle().kernel().measured_rate(Produce, "A", "c", Some(5_001)).unwrap();
    a.produce_response(700.0, 0.0, true, Some(5_000 + i64::from(t) - 1)).unwrap();
    assert_eq!(step.take_logged(), (0, 700.0));
    let rate_after = step.handle().kernel().measured_rate(Produce, "A", "c", Some(5_001)).unwrap();
    assert_eq!(rate_before, rate_after);
    // At the mute's end the would-be client sends again: recorded (and, far over, throttled anew).
    a.produce_response(50_000.0, 0.0, true, Some(5_000 + i64::from(t))).unwrap();
    assert!(step.take_logged().0 > 0);
    let row = shadow.totals().into_iter().find(|r| r.user.as_deref() == Some("A")).unwrap();
    assert_eq!(row.delayed_bytes, 700);
}

#[test]
fn an_empty_enforced_fetch_answer_is_no_bytes_for_the_shadow() {
    let shadow_kernel = kernel();
    limit(&shadow_kernel, "A", Fetch, 1.0);
    let shadow = ShadowKernel::new(shadow_kernel);
    let enforced = kernel();
    limit(&enforced, "A", Fetch, 1.0);
    let step = shadow.step("A", "c");
    let h = ClientHandle::new(enforced, "A", "c").with_shadow(step.clone());
    // Over the enforced quota at once: the enforced answer is empty; the shadow saw nothing.
    h.fetch_response(1000.0, 1e12, 0.0, Some(1_000)).unwrap();
    let second = h.fetch_response(1000.0, 1e12, 0.0, Some(1_001)).unwrap();
    assert_eq!(second.answer, FetchAnswer::Empty);
    let rows = shadow.totals();
    let delivered = rows.iter().filter(|r| r.quota_type == Fetch).map(|r| r.delayed_bytes).sum::<u64>();
    assert_eq!(delivered, 0);
}

#[test]
fn without_a_shadow_the_step_is_unchanged() {
    let k = kernel();
    limit(&k, "A", Produce, 1000.0);
    let h = ClientHandle::new(k, "A", "c");
    assert!(h.shadow().is_none());
    assert!(h.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap().throttle_time_ms > 0);
}

#[test]
fn entities_beyond_the_bound_are_summed_in_one_row() {
    let shadow_kernel = kernel();
    limit(&shadow_kernel, "A", Request, 0.001);
    let shadow = ShadowKernel::new(shadow_kernel);
    for i in 0..MAX_SHADOW_ENTITIES {
        shadow.step(&format!("u{i}"), "c");
    }
    let extra = shadow.step("A", "c");
    let h = ClientHandle::new(kernel(), "A", "c").with_shadow(extra);
    h.request_response(1e9, Some(1_000)).unwrap();
    let rows = shadow.totals();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].user, None);
    assert!(rows[0].throttle_time_ms > 0);
}
