//! The kernel through its public API: semantics.md examples, resolution, caching, concurrency
//! (byte-rate quotas). Request time and mutations: kernel_request_mutation.rs; callbacks:
//! kernel_callbacks.rs.

mod common;

use std::sync::Arc;

use quota_core::{ClientHandle, ClientQuotaType, QuotaChange, QuotaEntity, QuotaError};

use common::{kernel, name, set, DEF, F, P};

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
