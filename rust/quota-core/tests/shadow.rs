//! Shadow quotas: a second kernel stepped beside the enforced one, never enforced; its would-be
//! throttle time and delayed bytes per entity.

use std::sync::Arc;

use quota_core::shadow::{self, ShadowHandle, ShadowKernel, MAX_SHADOW_ENTITIES};
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

/// The shadow's logged values of type `t` once every queued response is stepped (the shadow is
/// stepped off the response path).
fn logged_as(step: &ShadowHandle, t: ClientQuotaType) -> (i32, f64) {
    shadow::flush();
    step.take_logged(t)
}

/// [`logged_as`] Produce.
fn logged(step: &ShadowHandle) -> (i32, f64) {
    logged_as(step, Produce)
}

/// An enforced handle on an unlimited kernel with a shadow limiting `A` to 1000 B/s produce.
fn handles(user: &str) -> (Arc<ShadowKernel>, ClientHandle, Arc<ShadowHandle>) {
    shadowed(user, Produce)
}

/// [`handles`] for `A`, its would-be client muted by 50,000 bytes at 5,000 ms: with the
/// would-be throttle that response got.
fn muted_at_5000() -> (Arc<ShadowKernel>, ClientHandle, Arc<ShadowHandle>, i32) {
    let (shadow, a, step) = handles("A");
    a.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    let (t, _) = logged(&step);
    (shadow, a, step, t)
}

/// An enforced handle on an unlimited kernel with a shadow limiting `A`'s `t` to 1000 B/s.
fn shadowed(user: &str, t: ClientQuotaType) -> (Arc<ShadowKernel>, ClientHandle, Arc<ShadowHandle>) {
    let shadow_kernel = kernel();
    limit(&shadow_kernel, "A", t, 1000.0);
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
    // Taken once, by a row of its type: the response's Request row carries none of it (nor
    // does another request's row of the connection), its Produce row all of it.
    assert_eq!(logged_as(&step, ClientQuotaType::Request), (0, 0.0));
    assert_eq!(logged(&step), (enforced_r.throttle_time_ms, 0.0));
    assert_eq!(logged(&step), (0, 0.0));
}

#[test]
fn a_response_within_the_would_be_mute_is_delayed_not_recorded() {
    let (shadow, a, step, t) = muted_at_5000();
    assert!(t > 1);
    shadow::flush();
    let rate_before = step.handle().kernel().measured_rate(Produce, "A", "c", Some(5_001)).unwrap();
    a.produce_response(700.0, 0.0, true, Some(5_000 + i64::from(t) - 1)).unwrap();
    assert_eq!(logged(&step), (0, 700.0));
    shadow::flush();
    let rate_after = step.handle().kernel().measured_rate(Produce, "A", "c", Some(5_001)).unwrap();
    assert_eq!(rate_before, rate_after);
    // At the mute's end the would-be client sends again: recorded (and, far over, throttled anew).
    a.produce_response(50_000.0, 0.0, true, Some(5_000 + i64::from(t))).unwrap();
    assert!(logged(&step).0 > 0);
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

#[test]
fn a_request_read_before_the_would_be_mute_is_recorded_when_answered_during_it() {
    // As the enforcing proxy records it: it pipelines, and its mute stops only its reads.
    let (shadow, a, step, t) = muted_at_5000();
    assert!(t > 10);
    let before = step.handle().kernel().measured_rate(Produce, "A", "c", Some(5_005)).unwrap();
    // Read 2 ms before the throttled response, answered 5 ms after it: recorded, and throttled
    // again (the mute keeps its later end).
    shadow::request_age(7);
    a.produce_response(700.0, 0.0, true, Some(5_005)).unwrap();
    let (again, delayed) = logged(&step);
    assert_eq!(delayed, 0.0);
    assert!(again > 0);
    let after = step.handle().kernel().measured_rate(Produce, "A", "c", Some(5_005)).unwrap();
    assert!(after > before, "{after} vs {before}");
    // The age was this response's only: the next, read when answered inside the mute, is held.
    a.produce_response(700.0, 0.0, true, Some(5_006)).unwrap();
    assert_eq!(logged(&step), (0, 700.0));
    // Read inside the mute (after its start) though answered later in it: held too.
    shadow::request_age(3);
    a.produce_response(300.0, 0.0, true, Some(5_009)).unwrap();
    assert_eq!(logged(&step), (0, 300.0));
    // An unthrottled response read before the mute does not send the backlog while muted.
    assert_eq!(step.backlog_bytes(Produce), 1_000);
    let row = shadow.totals().into_iter().find(|r| r.user.as_deref() == Some("A")).unwrap();
    assert_eq!(row.throttle_time_ms, (t + again) as u64);
    assert_eq!(row.delayed_bytes, 1_000);
}

#[test]
fn a_fetch_read_before_the_mute_takes_none_of_the_backlog_while_muted() {
    let (_shadow, h, step) = shadowed("A", Fetch);
    h.fetch_response(50_000.0, 1e12, 0.0, Some(5_000)).unwrap();
    assert!(logged_as(&step, Fetch).0 > 0);
    h.fetch_response(10_000.0, 1e12, 0.0, Some(5_001)).unwrap();
    assert_eq!(step.backlog_bytes(Fetch), 10_000);
    logged_as(&step, Fetch);
    // Read before the mute, answered in it: stepped (over the quota: throttled again, its answer
    // empty) and not held, and the backlog still held whole (the would-be consumer fetches what
    // it missed only once unmuted).
    shadow::request_age(10);
    h.fetch_response(100.0, 1e12, 0.0, Some(5_002)).unwrap();
    assert_eq!(step.backlog_bytes(Fetch), 10_000);
    let (again, delayed) = logged_as(&step, Fetch);
    assert!(again > 0);
    assert_eq!(delayed, 0.0);
}

#[test]
fn the_would_be_backlog_is_sent_request_by_request_until_throttled_and_delayed_once() {
    let (shadow, a, step, t) = muted_at_5000();
    assert!(t > 10);
    // Sent while the would-be client is muted: held, never more than what it sent.
    for i in 0..10 {
        a.produce_response(5_000.0, 0.0, true, Some(5_001 + i)).unwrap();
    }
    assert_eq!(step.backlog_bytes(Produce), 50_000);
    assert_eq!(logged(&step), (0, 50_000.0));
    // Long after the mute (its samples expired) the quota lets part of the backlog through
    // with the next response, then throttles: the rest stays held.
    let later = 200_000;
    a.produce_response(1_000.0, 0.0, true, Some(later)).unwrap();
    let (throttle, delayed) = logged(&step);
    assert!(throttle > 0);
    assert_eq!(delayed, 0.0);
    let held = step.backlog_bytes(Produce);
    assert!(held > 0 && held < 45_000, "{held}");
    shadow::flush();
    let rate = step.handle().kernel().measured_rate(Produce, "A", "c", Some(later)).unwrap();
    let alone = {
        let (_, b, s) = handles("A");
        b.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
        b.produce_response(1_000.0, 0.0, true, Some(later)).unwrap();
        shadow::flush();
        s.handle().kernel().measured_rate(Produce, "A", "c", Some(later)).unwrap()
    };
    assert!(rate > 5.0 * alone, "{rate} vs {alone}");
    // Held in place of the drained bytes: the backlog is not past its peak, nothing delayed anew.
    a.produce_response(5_000.0, 0.0, true, Some(later + 1)).unwrap();
    assert_eq!(step.backlog_bytes(Produce), held + 5_000);
    assert_eq!(logged(&step), (0, 0.0));
    let row = shadow.totals().into_iter().find(|r| r.user.as_deref() == Some("A")).unwrap();
    assert_eq!(row.delayed_bytes, 50_000);
}

#[test]
fn a_drained_backlog_is_delayed_anew_when_the_client_is_muted_again() {
    let (shadow, a, step) = handles("A");
    a.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    for i in 0..3 {
        a.produce_response(700.0, 0.0, true, Some(5_001 + i)).unwrap();
    }
    // Within what the quota allows long after: all sent with the next response, unthrottled.
    a.produce_response(100.0, 0.0, true, Some(200_000)).unwrap();
    assert_eq!(step.backlog_bytes(Produce), 0);
    logged(&step);
    a.produce_response(50_000.0, 0.0, true, Some(200_001)).unwrap();
    assert!(logged(&step).0 > 0);
    a.produce_response(700.0, 0.0, true, Some(200_002)).unwrap();
    assert_eq!(logged(&step), (0, 700.0));
    let row = shadow.totals().into_iter().find(|r| r.user.as_deref() == Some("A")).unwrap();
    assert_eq!(row.delayed_bytes, 2_800);
}

#[test]
fn a_would_be_fetch_backlog_is_sent_at_most_what_a_fetch_may_ask_for() {
    let (shadow, h, step) = shadowed("A", Fetch);
    h.fetch_response(50_000.0, 1e12, 0.0, Some(5_000)).unwrap();
    let (t, _) = logged_as(&step, Fetch);
    assert!(t > 0);
    let cap = step.handle().fetch_request_cap();
    assert!(cap.is_finite() && cap < 30_000.0, "{cap}");
    for i in 0..3 {
        h.fetch_response(10_000.0, 1e12, 0.0, Some(5_001 + i)).unwrap();
    }
    assert_eq!(step.backlog_bytes(Fetch), 30_000);
    // At the mute's end the fetch returns at most its cap; the rest stays held.
    h.fetch_response(1_000.0, 1e12, 0.0, Some(5_000 + i64::from(t)))
        .unwrap();
    assert_eq!(step.backlog_bytes(Fetch), (31_000.0 - cap) as u64);
    let row = shadow
        .totals()
        .into_iter()
        .find(|r| r.quota_type == Fetch)
        .unwrap();
    assert_eq!(row.delayed_bytes, 30_000);
}

#[test]
fn the_would_be_backlog_goes_with_its_connection() {
    let (shadow, a, step) = handles("A");
    a.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    a.produce_response(700.0, 0.0, true, Some(5_001)).unwrap();
    assert_eq!(step.backlog_bytes(Produce), 700);
    // The entity's next connection starts without it.
    assert_eq!(shadow.step("A", "c").backlog_bytes(Produce), 0);
}

/// Shadow steps are queued, not run on the response path: every response reaches the shadow
/// kernel, from any number of threads and at any pace, in the order of its clock.
#[test]
fn every_response_reaches_the_shadow_whatever_the_threads_and_pace() {
    // A quota never reached, so both kernels record (a kernel without one records nothing).
    let shadow_kernel = kernel();
    limit(&shadow_kernel, "A", Produce, 1e12);
    let shadow = ShadowKernel::new(Arc::clone(&shadow_kernel));
    let step = shadow.step("A", "c");
    let h = Arc::new(ClientHandle::new(kernel(), "A", "c").with_shadow(step.clone()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let h = Arc::clone(&h);
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    h.produce_response(100.0, 0.0, true, Some(1_000)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // The same 40,000 responses recorded on the response path of a plain handle.
    let direct_kernel = kernel();
    limit(&direct_kernel, "A", Produce, 1e12);
    let direct = ClientHandle::new(direct_kernel, "A", "c");
    for _ in 0..40_000 {
        direct.produce_response(100.0, 0.0, true, Some(1_000)).unwrap();
    }
    shadow::flush();
    let queued = shadow_kernel.measured_rate(Produce, "A", "c", Some(1_000)).unwrap();
    let inline = direct.kernel().measured_rate(Produce, "A", "c", Some(1_000)).unwrap();
    assert_eq!(queued, inline);
    assert!(queued > 0.0);
}

/// The queue keeps a shadow step alive only while its enforced handle lives.
#[test]
fn a_dropped_handle_releases_its_shadow_step() {
    let (_shadow, a, step) = handles("A");
    a.produce_response(50_000.0, 0.0, true, Some(5_000)).unwrap();
    drop(a);
    shadow::flush();
    shadow::flush();
    assert_eq!(Arc::strong_count(&step), 1);
    // Its last response was stepped before it went.
    assert!(step.take_logged(Produce).0 > 0);
}
