//! The kernel through its public API: request-time quotas (KIP-124) and controller mutations
//! (KIP-599).

mod common;

use std::sync::Arc;

use quota_core::{ClientHandle, KernelConfig, QuotaError, QuotaKernel};

use common::{kernel, name, set, DEF, M, P, R};

// ---------------------------------------------------------------- request time (KIP-124)

#[test]
fn public_example_request_quota() {
    // semantics.md: user quota 1 %, 4 ms of thread time each second for 10 s, then 67.1 ms at
    // 10.5 s -> 210 ms.
    let k = kernel();
    set(&k, name("u"), None, R, Some(1.0));
    for i in 0..10 {
        assert_eq!(k.record_request_time("u", "c", 4e6, Some(i * 1000)).unwrap(), 0);
    }
    assert_eq!(
        k.record_request_time("u", "c", 67.1e6, Some(10_500)).unwrap(),
        210
    );
    assert_eq!(k.quota_metric_tags(R, "u", "c"), ("u".into(), "".into()));
}

#[test]
fn request_throttle_is_capped_at_one_window_byte_throttle_is_not() {
    let k = kernel();
    set(&k, name("u"), None, R, Some(1.0));
    set(&k, name("u"), None, P, Some(1.0));
    // A long spike: 5 s of thread time in one request is 500 % of a thread.
    assert_eq!(k.record_request_time("u", "c", 5e9, Some(0)).unwrap(), 1000);
    assert_eq!(k.record_request_time("u", "c", 5e9, Some(500)).unwrap(), 1000);
    assert!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 5000.0, Some(0))
            .unwrap()
            > 1000
    );
    let k = Arc::new(
        QuotaKernel::new(KernelConfig {
            window: quota_core::WindowSpec::new(11, 3).unwrap(),
            ..KernelConfig::default()
        })
        .unwrap(),
    );
    set(&k, name("u"), None, R, Some(1.0));
    assert_eq!(k.record_request_time("u", "c", 5e9, Some(0)).unwrap(), 3000);
}

#[test]
fn network_thread_time_is_unchecked_but_weighs_on_later_requests() {
    let k = kernel();
    set(&k, name("u"), None, R, Some(1.0));
    let h = ClientHandle::new(Arc::clone(&k), "u", "c");
    // 2 s of network-thread time = 200 % over a fresh 10 s window: no throttle is returned, but
    // it is in the rate.
    k.record_network_thread_time("u", "c", 1e9, Some(0)).unwrap();
    h.record_network_thread_time(1e9, Some(0)).unwrap();
    let rate = k.measured_rate(R, "u", "c", Some(0)).unwrap();
    assert!((rate - 20.0).abs() < 1e-9, "{rate}");
    // The next checked request pays for it: (20 - 1) / 1 * 10000 ms, capped to one window.
    assert_eq!(h.record_request_time(0.0, Some(0)).unwrap(), 1000);
}

#[test]
fn exempt_time_goes_to_one_shared_sensor_only_while_request_quotas_exist() {
    let k = kernel();
    k.record_exempt_request_time(1e9, Some(0)).unwrap();
    assert_eq!(k.exempt_request_rate(Some(0)).unwrap(), 0.0);
    set(&k, DEF, None, R, Some(50.0));
    k.record_exempt_request_time(1e9, Some(0)).unwrap();
    k.record_exempt_request_time(1e9, Some(100)).unwrap();
    // Kafka measures exempt-request-time over the broker's metrics window (2 samples of 30 s):
    // 200 % over W = 100 ms elapsed + 1 whole window.
    let rate = k.exempt_request_rate(Some(100)).unwrap();
    assert!((rate - 200.0 / 30.1).abs() < 1e-9, "{rate}");
    // Exempt time is nobody's quota.
    assert_eq!(k.sensor_count(R), 0);
}

#[test]
fn bad_nanos_and_mutation_counts_are_rejected() {
    let k = kernel();
    set(&k, DEF, None, R, Some(50.0));
    set(&k, DEF, None, M, Some(5.0));
    for v in [f64::NAN, -1.0, f64::INFINITY] {
        assert!(matches!(
            k.record_request_time("u", "c", v, Some(0)),
            Err(QuotaError::InvalidValue(_))
        ));
        assert!(matches!(
            k.record_network_thread_time("u", "c", v, Some(0)),
            Err(QuotaError::InvalidValue(_))
        ));
        assert!(matches!(
            k.record_exempt_request_time(v, Some(0)),
            Err(QuotaError::InvalidValue(_))
        ));
        assert!(matches!(
            k.record_controller_mutations("u", "c", v, Some(0), false),
            Err(QuotaError::InvalidValue(_))
        ));
    }
    assert_eq!(k.sensor_count(R), 0);
    assert_eq!(k.sensor_count(M), 0);
}

// ---------------------------------------------------------------- controller mutations (KIP-599)

#[test]
fn permissive_mutations_record_then_report_the_debt() {
    let k = kernel();
    set(&k, name("u"), None, M, Some(10.0)); // burst 11 * 1 * 10 = 110
    assert_eq!(k.controller_mutation_tokens("u", "c", Some(0)).unwrap(), None);
    assert_eq!(
        k.record_controller_mutations("u", "c", 100.0, Some(0), false)
            .unwrap(),
        0
    );
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(0)).unwrap(),
        Some(10.0)
    );
    // 30 more: tokens -20 -> round(20 / 10 * 1000) = 2000 ms, and it was recorded.
    assert_eq!(
        k.record_controller_mutations("u", "c", 30.0, Some(0), false)
            .unwrap(),
        2000
    );
    // Still in debt: recorded again, debt grows.
    assert_eq!(
        k.record_controller_mutations("u", "c", 5.0, Some(0), false)
            .unwrap(),
        2500
    );
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(0)).unwrap(),
        Some(-25.0)
    );
    // mutation-rate saw all 135, over the broker's metrics window (2 x 30 s: W = 30 s).
    assert!((k.measured_rate(M, "u", "c", Some(0)).unwrap() - 4.5).abs() < 1e-9);
}

#[test]
fn strict_mutations_reject_when_in_debt_and_record_nothing() {
    let k = kernel();
    set(&k, name("u"), None, M, Some(10.0));
    let h = ClientHandle::new(Arc::clone(&k), "u", "c");
    assert_eq!(h.record_controller_mutations(100.0, Some(0), true).unwrap(), 0);
    // Not in debt yet (10 tokens): accepted even though it takes the bucket to -20.
    assert_eq!(h.record_controller_mutations(30.0, Some(0), true).unwrap(), 0);
    assert_eq!(
        h.record_controller_mutations(1.0, Some(0), true),
        Err(QuotaError::ThrottlingQuotaExceeded {
            throttle_time_ms: 2000
        })
    );
    assert_eq!(
        k.record_controller_mutations("u", "c", 1.0, Some(1000), true),
        Err(QuotaError::ThrottlingQuotaExceeded {
            throttle_time_ms: 1000
        })
    );
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(1000)).unwrap(),
        Some(-10.0)
    );
    assert!((k.measured_rate(M, "u", "c", Some(1000)).unwrap() - 130.0 / 31.0).abs() < 1e-9);
    // The generic call is Kafka's manager override: check first, return the throttle.
    assert_eq!(
        k.record_and_get_throttle_time_ms(M, "u", "c", 1.0, Some(1500))
            .unwrap(),
        500
    );
    // Refilled out of debt 2 s after the rejection: accepted again.
    assert_eq!(h.record_controller_mutations(1.0, Some(2000), true).unwrap(), 0);
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(2000)).unwrap(),
        Some(-1.0)
    );
}

#[test]
fn bucket_refills_to_the_burst_and_follows_limit_changes() {
    let k = kernel();
    set(&k, DEF, None, M, Some(2.0)); // burst 22
    k.record_controller_mutations("a", "c", 22.0, Some(0), false)
        .unwrap();
    assert_eq!(
        k.controller_mutation_tokens("a", "c", Some(0)).unwrap(),
        Some(0.0)
    );
    assert_eq!(
        k.controller_mutation_tokens("a", "c", Some(5000)).unwrap(),
        Some(10.0)
    );
    assert_eq!(
        k.controller_mutation_tokens("a", "c", Some(60_000)).unwrap(),
        Some(22.0)
    );
    // A new limit keeps the bucket and refills at the new rate up to the new burst.
    set(&k, DEF, None, M, Some(1.0)); // burst 11
    assert_eq!(
        k.controller_mutation_tokens("a", "c", Some(60_001)).unwrap(),
        Some(11.0)
    );
    k.unrecord(M, "a", "c", 5.0, Some(60_002)).unwrap();
    assert_eq!(
        k.controller_mutation_tokens("a", "c", Some(60_002)).unwrap(),
        Some(11.0)
    );
}

#[test]
fn concurrent_strict_mutations_never_overdraw_a_bucket_that_was_in_debt() {
    // Many threads race strict takes of 1 against a bucket of 110 with no refill (one instant):
    // takes succeed while tokens >= 0, so exactly 111 succeed (the last one takes it to -1).
    let k = kernel();
    set(&k, name("u"), None, M, Some(10.0));
    let ok = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (k, ok) = (Arc::clone(&k), &ok);
            s.spawn(move || {
                for _ in 0..100 {
                    if k.record_controller_mutations("u", "c", 1.0, Some(0), true)
                        .is_ok()
                    {
                        ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(ok.into_inner(), 111);
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(0)).unwrap(),
        Some(-1.0)
    );
}
