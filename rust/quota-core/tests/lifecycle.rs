//! Sensor expiry, the live-sensor cap with its overflow sensors, and metrics snapshots.

use std::sync::Arc;
use std::time::Duration;

use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, ExpiryTask, KernelConfig, QuotaChange, QuotaEntity,
    QuotaKernel,
};

const P: ClientQuotaType = ClientQuotaType::Produce;
const HOUR: i64 = 3_600_000;

fn kernel_with(max_sensors: usize) -> Arc<QuotaKernel> {
    Arc::new(
        QuotaKernel::new(KernelConfig {
            max_sensors,
            ..KernelConfig::default()
        })
        .unwrap(),
    )
}

fn set(k: &QuotaKernel, user: Option<EntityName>, client: Option<EntityName>, v: f64) {
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user,
                client_id: client,
            },
            quota_type: P,
            value: Some(v),
        }],
        false,
    )
    .unwrap();
}

fn client_default(k: &QuotaKernel, v: f64) {
    set(k, None, Some(EntityName::Default), v);
}

#[test]
fn expiry_is_strictly_more_than_the_expiry_time() {
    // Kafka's Sensor.hasExpired: now - lastRecordTime > inactiveSensorExpirationTimeMs.
    let k = kernel_with(100);
    client_default(&k, 1000.0);
    k.record_and_get_throttle_time_ms(P, "u", "c", 10.0, Some(5))
        .unwrap();
    assert_eq!(k.expire_sensors(Some(5 + HOUR)).unwrap().removed, 0);
    assert_eq!(k.sensor_count(P), 1);
    assert_eq!(k.expire_sensors(Some(5 + HOUR + 1)).unwrap().removed, 1);
    assert_eq!(k.sensor_count(P), 0);
    assert_eq!(k.expired_sensors(P), 1);
}

#[test]
fn expired_sensor_is_freed_and_recreated_empty() {
    let k = kernel_with(100);
    client_default(&k, 1000.0);
    let h = ClientHandle::new(Arc::clone(&k), "u", "c");
    // 9000 B at t=0: rate 900 B/s over the 10 s floor.
    assert_eq!(h.record_and_get_throttle_time_ms(P, 9000.0, Some(0)).unwrap(), 0);
    let before = k.metrics_snapshot(Some(0)).unwrap();
    assert_eq!(before.sensors.len(), 1);
    k.expire_sensors(Some(HOUR + 1)).unwrap();
    // The handle resolves again and records into a fresh sensor: the old samples are gone and
    // the new sensor starts at the record's time.
    assert_eq!(
        h.record_and_get_throttle_time_ms(P, 9500.0, Some(HOUR + 2))
            .unwrap(),
        0
    );
    assert_eq!(k.sensor_count(P), 1);
    let rate = k.measured_rate(P, "u", "c", Some(HOUR + 2)).unwrap();
    assert_eq!(rate, 950.0);
    // The named path too.
    k.expire_sensors(Some(2 * HOUR + 3)).unwrap();
    assert_eq!(k.sensor_count(P), 0);
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "u", "c", 100.0, Some(2 * HOUR + 4))
            .unwrap(),
        0
    );
    assert_eq!(k.measured_rate(P, "u", "c", Some(2 * HOUR + 4)).unwrap(), 10.0);
}

#[test]
fn expiry_in_the_eight_level_walk_drops_stale_cache_entries() {
    let k = kernel_with(100);
    // Mixed kinds: the metric-tag cache is in use.
    set(&k, Some(EntityName::Name("alice".into())), None, 5000.0);
    client_default(&k, 1000.0);
    k.record_and_get_throttle_time_ms(P, "alice", "c", 10.0, Some(0))
        .unwrap();
    k.record_and_get_throttle_time_ms(P, "bob", "c", 10.0, Some(0))
        .unwrap();
    assert_eq!(k.sensor_count(P), 2);
    k.record_and_get_throttle_time_ms(P, "bob", "c", 10.0, Some(HOUR))
        .unwrap();
    assert_eq!(k.expire_sensors(Some(HOUR + 1)).unwrap().removed, 1);
    assert_eq!(k.sensor_count(P), 1);
    // alice's sensor was removed; her next request starts from empty.
    k.record_and_get_throttle_time_ms(P, "alice", "c", 20.0, Some(HOUR + 2))
        .unwrap();
    assert_eq!(k.measured_rate(P, "alice", "c", Some(HOUR + 2)).unwrap(), 2.0);
    assert_eq!(k.sensor_count(P), 2);
}

#[test]
fn metrics_snapshot_is_not_a_use() {
    let k = kernel_with(100);
    client_default(&k, 1000.0);
    k.record_and_get_throttle_time_ms(P, "u", "c", 5000.0, Some(0))
        .unwrap();
    for t in [1000, HOUR, HOUR + 1] {
        let snap = k.metrics_snapshot(Some(t)).unwrap();
        assert_eq!(snap.sensors.len(), 1);
    }
    assert_eq!(k.expire_sensors(Some(HOUR + 1)).unwrap().removed, 1);
}

#[test]
fn metrics_snapshot_values() {
    let k = kernel_with(100);
    client_default(&k, 1000.0);
    k.record_and_get_throttle_time_ms(P, "u", "c1", 5000.0, Some(0))
        .unwrap();
    k.record_throttle_time(P, 100.0, Some(0)).unwrap();
    k.record_throttle_time(P, 300.0, Some(500)).unwrap();
    let snap = k.metrics_snapshot(Some(0)).unwrap();
    let row = &snap.sensors[0];
    assert_eq!((&*row.user, &*row.client_id), ("", "c1"));
    assert_eq!(row.values, vec![("byte-rate", 500.0), ("quota-limit", 1000.0)]);
    let produce = snap.types.iter().find(|r| r.quota_type == P).unwrap();
    let get = |n: &str| produce.values.iter().find(|(m, _)| *m == n).unwrap().1;
    assert_eq!(get("throttle-time"), 200.0);
    assert_eq!(get("sensor-count"), 1.0);
    // The throttle average is Kafka's throttle-time `Avg`, which has no quota config: it follows
    // the broker's metrics window (2 x 30 s), so after 60 s without throttles it is empty.
    let still = k.metrics_snapshot(Some(59_000)).unwrap();
    let produce = still.types.iter().find(|r| r.quota_type == P).unwrap();
    assert_eq!(
        produce
            .values
            .iter()
            .find(|(m, _)| *m == "throttle-time")
            .unwrap()
            .1,
        200.0
    );
    let later = k.metrics_snapshot(Some(61_000)).unwrap();
    let produce = later.types.iter().find(|r| r.quota_type == P).unwrap();
    assert!(produce
        .values
        .iter()
        .find(|(m, _)| *m == "throttle-time")
        .unwrap()
        .1
        .is_nan());
}

#[test]
fn cap_sends_new_tags_to_a_shared_overflow_sensor() {
    let k = kernel_with(10);
    client_default(&k, 1000.0);
    for i in 0..100 {
        k.record_and_get_throttle_time_ms(P, "", &format!("c{i}"), 100.0, Some(0))
            .unwrap();
    }
    assert_eq!(k.sensor_count(P), 10);
    assert_eq!(k.overflowed_resolutions(P), 90);
    // The 90 overflowed clients share one sensor tagged ("", "<overflow>") with the
    // clients/<default> limit: 9000 B over the 10 s floor is 900 B/s, so one more 2000 B
    // request is throttled while a capped client's own sensor is not.
    let snap = k.metrics_snapshot(Some(0)).unwrap();
    let overflow = snap
        .sensors
        .iter()
        .find(|r| &*r.client_id == "<overflow>")
        .unwrap();
    assert_eq!(
        overflow.values,
        vec![("byte-rate", 900.0), ("quota-limit", 1000.0)]
    );
    assert!(
        k.record_and_get_throttle_time_ms(P, "", "c99", 2000.0, Some(0))
            .unwrap()
            > 0
    );
    assert_eq!(
        k.record_and_get_throttle_time_ms(P, "", "c0", 2000.0, Some(0))
            .unwrap(),
        0
    );
    // Once expiry frees room, new tags get their own sensors again.
    k.record_and_get_throttle_time_ms(P, "", "c1", 1.0, Some(HOUR))
        .unwrap();
    assert_eq!(k.expire_sensors(Some(HOUR + 1)).unwrap().removed, 9);
    k.record_and_get_throttle_time_ms(P, "", "c99", 1.0, Some(HOUR + 1))
        .unwrap();
    assert_eq!(k.sensor_count(P), 2);
    assert_eq!(k.measured_rate(P, "", "c99", Some(HOUR + 1)).unwrap(), 0.1);
}

#[test]
fn concurrent_creation_never_overshoots_the_cap() {
    let k = kernel_with(1000);
    client_default(&k, 1e9);
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let k = Arc::clone(&k);
            std::thread::spawn(move || {
                for i in 0..5000 {
                    k.record_and_get_throttle_time_ms(P, "", &format!("{n}-{i}"), 1.0, Some(0))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(k.sensor_count(P), 1000);
    assert_eq!(k.overflowed_resolutions(P), 19_000);
}

#[test]
fn expiry_passes_never_disturb_busy_sensors() {
    // Handles on many threads keep recording while expiry passes run with a `now` that makes
    // only the idle sensors expire; every record into a busy sensor must be counted.
    let k = kernel_with(10_000);
    client_default(&k, 1e12);
    for i in 0..500 {
        k.record_no_throttle(P, "", &format!("idle{i}"), 1.0, Some(0))
            .unwrap();
    }
    let busy: Vec<_> = (0..2)
        .map(|n| {
            let k = Arc::clone(&k);
            std::thread::spawn(move || {
                let h = ClientHandle::new(Arc::clone(&k), "", &format!("busy{n}"));
                for _ in 0..20_000 {
                    h.record_and_get_throttle_time_ms(P, 1.0, Some(HOUR)).unwrap();
                }
            })
        })
        .collect();
    for _ in 0..50 {
        k.expire_sensors(Some(HOUR + 1)).unwrap();
    }
    for t in busy {
        t.join().unwrap();
    }
    for n in 0..2 {
        let rate = k.measured_rate(P, "", &format!("busy{n}"), Some(HOUR)).unwrap();
        assert_eq!(rate, 20_000.0 / 10.0, "busy{n}");
    }
    assert_eq!(k.sensor_count(P), 2);
}

#[test]
fn background_task_expires_and_stops() {
    let k = Arc::new(
        QuotaKernel::new(KernelConfig {
            sensor_expiry_ms: 1,
            ..KernelConfig::default()
        })
        .unwrap(),
    );
    client_default(&k, 1000.0);
    // Recorded far in the past on the callers' clock: the estimate of now is that time plus
    // elapsed real time, so the sensor expires once 1 ms of real time has passed.
    k.record_no_throttle(P, "", "c", 1.0, Some(-1_000_000)).unwrap();
    let mut task = ExpiryTask::start(&k, Duration::from_millis(5)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while k.sensor_count(P) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(k.sensor_count(P), 0);
    task.stop();
    assert!(!task.is_running());
}

#[test]
fn estimated_now_never_runs_ahead_of_the_callers_clock() {
    let k = kernel_with(100);
    client_default(&k, 1000.0);
    k.record_no_throttle(P, "", "c", 1.0, Some(50_000)).unwrap();
    let est = k.estimated_now_ms();
    assert!((50_000..50_000 + 1000).contains(&est), "{est}");
    // Nothing is expired against a clock that has not reached the expiry time.
    assert_eq!(k.expire_sensors(None).unwrap().removed, 0);
}

#[test]
fn bad_lifecycle_settings_are_refused() {
    assert!(QuotaKernel::new(KernelConfig {
        max_sensors: 0,
        ..KernelConfig::default()
    })
    .is_err());
    assert!(QuotaKernel::new(KernelConfig {
        sensor_expiry_ms: 0,
        ..KernelConfig::default()
    })
    .is_err());
}

#[test]
fn metrics_snapshot_reports_tokens_and_exempt_time() {
    let k = kernel_with(100);
    let m = ClientQuotaType::ControllerMutation;
    let r = ClientQuotaType::Request;
    for (t, v) in [(m, 10.0), (r, 50.0)] {
        k.alter(
            &[QuotaChange {
                entity: QuotaEntity {
                    user: Some(EntityName::Default),
                    client_id: None,
                },
                quota_type: t,
                value: Some(v),
            }],
            false,
        )
        .unwrap();
    }
    k.record_controller_mutations("u", "c", 30.0, Some(0), false)
        .unwrap();
    k.record_exempt_request_time(3e9, Some(0)).unwrap();
    let snap = k.metrics_snapshot(Some(1000)).unwrap();
    let row = snap.sensors.iter().find(|s| s.quota_type == m).unwrap();
    let get = |n: &str| row.values.iter().find(|(x, _)| *x == n).map(|v| v.1);
    // burst 110 - 30 + 10 refilled in 1 s; the scrape does not store the refill.
    assert_eq!(get("tokens"), Some(90.0));
    assert_eq!(get("mutation-rate"), Some(30.0 / 31.0));
    assert_eq!(
        k.controller_mutation_tokens("u", "c", Some(1000)).unwrap(),
        Some(90.0)
    );
    let req = snap.types.iter().find(|t| t.quota_type == r).unwrap();
    let exempt = req
        .values
        .iter()
        .find(|(x, _)| *x == "exempt-request-time")
        .unwrap()
        .1;
    assert!((exempt - 300.0 / 31.0).abs() < 1e-9, "{exempt}");
}
