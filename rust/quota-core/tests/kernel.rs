//! The kernel through its public API: semantics.md examples, resolution, caching, concurrency.

use std::sync::Arc;

use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaError,
    QuotaKernel,
};

const P: ClientQuotaType = ClientQuotaType::Produce;
const F: ClientQuotaType = ClientQuotaType::Fetch;

fn name(s: &str) -> Option<EntityName> {
    Some(EntityName::Name(s.into()))
}
const DEF: Option<EntityName> = Some(EntityName::Default);

fn set(
    k: &QuotaKernel,
    user: Option<EntityName>,
    client: Option<EntityName>,
    t: ClientQuotaType,
    v: Option<f64>,
) {
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user,
                client_id: client,
            },
            quota_type: t,
            value: v,
        }],
        false,
    )
    .unwrap();
}

fn kernel() -> Arc<QuotaKernel> {
    Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap())
}

#[test]
fn public_example_default_client_quota() {
    let k = kernel();
    set(&k, None, DEF, P, Some(500.0));
    for i in 0..10 {
        assert_eq!(
            k.record_and_get_throttle_time_ms(P, "u", "c", 400.0, Some(i * 1000))
                .unwrap(),
            0
        );
    }
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 2300.0, Some(10_500))
            .unwrap(),
        2100
    );
}

#[test]
fn public_example_fresh_sensor() {
    let k = kernel();
    set(&k, name("u"), None, F, Some(1000.0));
    let got: Vec<i32> = [(5000.0, 0), (5000.0, 200), (1000.0, 1000), (0.0, 6000)]
        .iter()
        .map(|&(v, t)| {
            k.record_and_get_throttle_time_ms(F, "u", "c", v, Some(t))
                .unwrap()
        })
        .collect();
    assert_eq!(got, vec![0, 0, 1000, 1000]);
}

#[test]
fn nothing_is_recorded_while_no_quota_is_configured() {
    let k = kernel();
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 1e9, Some(0))
            .unwrap(),
        0
    );
    assert_eq!(k.sensor_count(P), 0);
    assert_eq!(k.measured_rate(P, "u", "c", Some(0)).unwrap(), 0.0);
    set(&k, None, DEF, P, Some(100.0));
    // A fresh sensor: the earlier 1e9 bytes do not count.
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 100.0, Some(1))
            .unwrap(),
        0
    );
    assert_eq!(k.sensor_count(P), 1);
}

#[test]
fn limit_change_keeps_samples_level_change_starts_fresh() {
    let k = kernel();
    set(&k, name("u"), None, P, Some(1000.0));
    k.record_no_throttle(P, "u", "c", 20_000.0, Some(0)).unwrap();
    // Same level, lower limit: history is kept and now violates.
    set(&k, name("u"), None, P, Some(500.0));
    assert!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 0.0, Some(1))
            .unwrap()
            > 0
    );
    // A <user, client-id> quota takes precedence: other tags, a fresh sensor.
    set(&k, name("u"), name("c"), P, Some(500.0));
    assert_eq!(k.quota_metric_tags(P, "u", "c"), ("u".into(), "c".into()));
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 0.0, Some(2))
            .unwrap(),
        0
    );
    // The user-level sensor still holds its samples for other clients of u.
    assert!(
        k.record_and_get_throttle_time_ms(P, "u", "other", 0.0, Some(3))
            .unwrap()
            > 0
    );
}

#[test]
fn handles_follow_configuration_changes() {
    let k = kernel();
    set(&k, None, DEF, P, Some(1000.0));
    let h = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    h.record_no_throttle(P, 9000.0, Some(0)).unwrap();
    assert_eq!(h.record_and_get_throttle_time_ms(P, 0.0, Some(0)).unwrap(), 0);
    set(&k, None, DEF, P, Some(100.0));
    assert_eq!(
        h.record_and_get_throttle_time_ms(P, 0.0, Some(0)).unwrap(),
        80_000
    );
    set(&k, name("alice"), None, P, Some(10.0));
    // User level now applies: fresh sensor for (alice, "").
    assert_eq!(h.record_and_get_throttle_time_ms(P, 50.0, Some(0)).unwrap(), 0);
    // 150 B over W = 10 s against 10 B/s: (15 - 10) / 10 * 10000 ms.
    assert_eq!(
        h.record_and_get_throttle_time_ms(P, 100.0, Some(0)).unwrap(),
        5000
    );
}

#[test]
fn alter_is_atomic() {
    let k = kernel();
    let good = QuotaChange {
        entity: QuotaEntity {
            user: name("a"),
            client_id: None,
        },
        quota_type: P,
        value: Some(10.0),
    };
    let bad = QuotaChange {
        entity: QuotaEntity {
            user: name("b"),
            client_id: None,
        },
        quota_type: P,
        value: Some(f64::NAN),
    };
    let err = k.alter(&[good.clone(), bad], false).unwrap_err();
    assert!(matches!(err, QuotaError::InvalidConfig { .. }));
    assert!(err.to_string().contains("user=\"b\"") && err.to_string().contains("producer_byte_rate"));
    assert!(k.describe().is_empty());
    k.alter(std::slice::from_ref(&good), true).unwrap();
    assert!(k.describe().is_empty());
    k.alter(&[good], false).unwrap();
    assert_eq!(k.describe().len(), 1);
}

#[test]
fn throttle_saturates_instead_of_wrapping() {
    let k = kernel();
    set(&k, name("u"), None, P, Some(1.0));
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 1e15, Some(0))
            .unwrap(),
        i32::MAX
    );
}

#[test]
fn bad_record_values_are_rejected() {
    let k = kernel();
    for v in [f64::NAN, f64::INFINITY, -1.0] {
        assert!(matches!(
            k.record_and_get_throttle_time_ms(P, "u", "c", v, Some(0)),
            Err(QuotaError::InvalidValue(_))
        ));
        assert!(matches!(
            k.unrecord(P, "u", "c", v, Some(0)),
            Err(QuotaError::InvalidValue(_))
        ));
    }
}

/// Several threads record into one shared sensor and into their own, through handles and named
/// calls at once; every byte must be in the measured sums.
#[test]
fn concurrent_records_lose_no_update() {
    let k = kernel();
    set(&k, DEF, None, P, Some(1e15));
    const THREADS: usize = 4;
    const PER_THREAD: i64 = 40_000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let k = Arc::clone(&k);
            s.spawn(move || {
                let shared = ClientHandle::new(Arc::clone(&k), "shared", "c");
                let own_user = format!("user-{t}");
                for i in 0..PER_THREAD {
                    // Time crosses several windows (2 s) so advances race with adds.
                    let now = i / 20_000 * 1000 + (i % 7);
                    shared.record_no_throttle(P, 1.0, Some(now)).unwrap();
                    k.record_no_throttle(P, "shared", "other-client", 2.0, Some(now))
                        .unwrap();
                    k.record_no_throttle(P, &own_user, "c", 1.0, Some(now)).unwrap();
                }
            });
        }
    });
    // At t = 1006 a sensor started at 0 has W = 1006 + 9 * 1000 ms.
    let w = 10.006;
    let shared_sum = (k.measured_rate(P, "shared", "c", Some(1006)).unwrap() * w).round();
    assert_eq!(shared_sum, (THREADS as i64 * PER_THREAD * 3) as f64);
    for t in 0..THREADS {
        assert_eq!(
            (k.measured_rate(P, &format!("user-{t}"), "x", Some(1006)).unwrap() * w).round(),
            PER_THREAD as f64
        );
    }
}

/// Threads that meet a sensor that does not exist yet at the same instant must all end up
/// recording into the one that gets registered (a racing creator once replaced the registered
/// sensor, orphaning everything already recorded into it, and a handle kept recording there).
#[test]
fn racing_sensor_creation_loses_no_record() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    for mode in ["fixed", "mixed"] {
        let k = kernel();
        set(&k, DEF, None, P, Some(1e15));
        if mode == "mixed" {
            // Two kinds configured: resolution walks the levels and goes through the cache.
            set(&k, None, DEF, P, Some(1e15));
        }
        let barrier = std::sync::Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (k, barrier) = (Arc::clone(&k), &barrier);
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        let user = format!("u{round}");
                        barrier.wait();
                        if t % 2 == 0 {
                            let h = ClientHandle::new(Arc::clone(&k), &user, "c");
                            for _ in 0..10 {
                                h.record_no_throttle(P, 1.0, Some(0)).unwrap();
                            }
                        } else {
                            for _ in 0..10 {
                                k.record_no_throttle(P, &user, "c", 1.0, Some(0)).unwrap();
                            }
                        }
                    }
                });
            }
        });
        for round in 0..ROUNDS {
            let rate = k.measured_rate(P, &format!("u{round}"), "c", Some(0)).unwrap();
            // W = 10 s for a fresh sensor.
            assert_eq!(rate * 10.0, (THREADS * 10) as f64, "{mode} round {round}");
        }
    }
}

#[test]
fn unrecord_takes_back_what_was_recorded() {
    let k = kernel();
    set(&k, None, DEF, P, Some(1000.0));
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "alice", "c1", 12_000.0, Some(0))
            .unwrap(),
        2000
    );
    k.unrecord(P, "alice", "c1", 12_000.0, Some(100)).unwrap();
    assert_eq!(k.measured_rate(P, "alice", "c1", Some(100)).unwrap(), 0.0);
    let h = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    h.record_no_throttle(P, 5.0, Some(100)).unwrap();
    h.unrecord(P, 5.0, Some(100)).unwrap();
    assert_eq!(h.record_and_get_throttle_time_ms(P, 0.0, Some(100)).unwrap(), 0);
    assert_eq!(k.measured_rate(P, "alice", "c1", Some(100)).unwrap(), 0.0);
}

/// A peek answers what the same record would, and records nothing.
#[test]
fn peek_throttle_is_the_record_throttle_without_recording() {
    let k = kernel();
    set(&k, None, name("c1"), P, Some(1000.0));
    let h = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    h.record_and_get_throttle_time_ms(P, 9_000.0, Some(0)).unwrap();
    for (value, t) in [(0.0, 100), (3_000.0, 100), (12_000.0, 5_000)] {
        let before = k.measured_rate(P, "alice", "c1", Some(t)).unwrap();
        let peeked = h.peek_throttle_time_ms(P, value, Some(t)).unwrap();
        assert_eq!(k.measured_rate(P, "alice", "c1", Some(t)).unwrap(), before);
        // The record it stands for, taken into a copy of the same history.
        let copy = kernel();
        set(&copy, None, name("c1"), P, Some(1000.0));
        copy.record_and_get_throttle_time_ms(P, "alice", "c1", 9_000.0, Some(0))
            .unwrap();
        let recorded = copy
            .record_and_get_throttle_time_ms(P, "alice", "c1", value, Some(t))
            .unwrap();
        assert_eq!(peeked, recorded, "value {value} at {t}");
    }
    // At 5 s (the window is topped up to 10 s): 9 kB is not over 1 kB/s; 3 kB more is
    // (1.2 kB/s: 2 s), and nothing peeked was recorded.
    assert_eq!(h.peek_throttle_time_ms(P, 0.0, Some(5_000)).unwrap(), 0);
    assert_eq!(h.peek_throttle_time_ms(P, 3_000.0, Some(5_000)).unwrap(), 2000);
    // Unquota'd clients and types without any quota never throttle.
    let free = ClientHandle::new(Arc::clone(&k), "alice", "free");
    assert_eq!(free.peek_throttle_time_ms(P, 1e12, Some(100)).unwrap(), 0);
    assert_eq!(
        h.peek_throttle_time_ms(ClientQuotaType::Fetch, 1e12, Some(100))
            .unwrap(),
        0
    );
    assert!(matches!(
        h.peek_throttle_time_ms(ClientQuotaType::ControllerMutation, 1.0, Some(100)),
        Err(QuotaError::InvalidArgument(_))
    ));
    assert!(matches!(
        h.peek_throttle_time_ms(P, -1.0, Some(100)),
        Err(QuotaError::InvalidValue(_))
    ));
}

#[test]
fn out_of_range_times_are_refused_not_clamped() {
    let k = kernel();
    set(&k, None, DEF, P, Some(100.0));
    let far = quota_core::kernel::MAX_ABS_NOW_MS;
    assert!(matches!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 1.0, Some(far)),
        Err(QuotaError::InvalidValue(_))
    ));
    assert!(matches!(
        k.measured_rate(P, "u", "c", Some(-far)),
        Err(QuotaError::InvalidValue(_))
    ));
    // Unix-epoch milliseconds are well inside the range.
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 1.0, Some(1_763_700_000_000))
            .unwrap(),
        0
    );
}

// ---------------------------------------------------------------- request time (KIP-124)

const R: ClientQuotaType = ClientQuotaType::Request;
const M: ClientQuotaType = ClientQuotaType::ControllerMutation;

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
