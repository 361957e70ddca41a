//! Each principal's distinct client ids are bounded: a flood of client ids from one principal
//! fills its own overflow sensor, never another principal's sensors or the kernel's budgets.
//! And a peek (a proxy's, before the broker answers) creates no sensor.

use std::sync::Arc;

use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel,
};
use quota_core::expiry::OVERFLOW_TAG;

const P: ClientQuotaType = ClientQuotaType::Produce;
const HOUR: i64 = 3_600_000;

fn kernel(max_ids: usize) -> QuotaKernel {
    QuotaKernel::new(KernelConfig {
        max_client_ids_per_principal: max_ids,
        ..KernelConfig::default()
    })
    .unwrap()
}

fn set(k: &QuotaKernel, user: Option<EntityName>, client: Option<EntityName>, v: f64) {
    let entity = QuotaEntity {
        user,
        client_id: client,
    };
    k.alter(
        &[QuotaChange {
            entity,
            quota_type: P,
            value: Some(v),
        }],
        false,
    )
    .unwrap();
}

/// The sensor's tags (user, client-id) a record of (user, client) went to.
fn tags_of_record(k: &QuotaKernel, user: &str, client: &str, now: i64) -> (String, String) {
    let r = k.resolution(P, user, client, Some(now)).unwrap().unwrap().1;
    (r.tags.user().to_owned(), r.tags.client_id().to_owned())
}

#[test]
fn a_flood_of_client_ids_fills_only_its_principals_overflow() {
    for (user_level, a_tag) in [(true, "A"), (false, "")] {
        let k = kernel(1000);
        // Per (user, client-id) or per client-id: either way the tags hold the client id.
        let user = user_level.then_some(EntityName::Default);
        set(&k, user, Some(EntityName::Default), 1000.0);
        for i in 0..2000 {
            k.record_and_get_throttle_time_ms(P, "A", &format!("flood-{i}"), 100.0, Some(0))
                .unwrap();
        }
        // A keeps 1000 client ids; its later ones share its own overflow sensor.
        assert_eq!(k.sensor_count(P), 1001);
        assert_eq!(k.client_ids(P), (1, 1000, 1000));
        assert_eq!(tags_of_record(&k, "A", "flood-1999", 0), (a_tag.into(), OVERFLOW_TAG.into()));
        assert_eq!(tags_of_record(&k, "A", "flood-5", 0), (a_tag.into(), "flood-5".into()));
        // 1000 records of 100 B in the overflow sensor: far over 1000 B/s.
        assert!(k.record_and_get_throttle_time_ms(P, "A", "flood-2000", 1.0, Some(1)).unwrap() > 0);
        // B's new client id gets its own sensor, and A's traffic does not throttle it.
        assert_eq!(k.record_and_get_throttle_time_ms(P, "B", "b-1", 100.0, Some(1)).unwrap(), 0);
        let b_tag = if user_level { "B" } else { "" };
        assert_eq!(tags_of_record(&k, "B", "b-1", 1), (b_tag.into(), "b-1".into()));
        assert_eq!(k.sensor_count(P), 1002);
        // The names held stay those of ~1000 sensors and cache entries, not 2000.
        assert!(k.name_bytes_held() < 1002 * 2 * 24, "{}", k.name_bytes_held());
        assert_eq!(k.name_bytes_refused(), 0);
    }
}

#[test]
fn under_the_bound_nothing_changes() {
    let k = kernel(3);
    set(&k, None, Some(EntityName::Default), 1000.0);
    for c in ["a", "b", "c", "a", "b", "c"] {
        k.record_and_get_throttle_time_ms(P, "A", c, 10.0, Some(0)).unwrap();
        assert_eq!(tags_of_record(&k, "A", c, 0), (String::new(), c.into()));
    }
    assert_eq!(k.client_ids(P), (1, 3, 0));
}

#[test]
fn expiry_frees_a_principals_places() {
    let k = kernel(2);
    set(&k, None, Some(EntityName::Default), 1000.0);
    for c in ["a", "b", "c"] {
        k.record_and_get_throttle_time_ms(P, "A", c, 10.0, Some(0)).unwrap();
    }
    assert_eq!(tags_of_record(&k, "A", "c", 0).1, OVERFLOW_TAG);
    assert_eq!(k.expire_sensors(Some(HOUR + 1)).unwrap().removed, 3);
    assert_eq!(k.client_ids(P), (0, 0, 2)); // the record of "c" and the look-up above
    k.record_and_get_throttle_time_ms(P, "A", "c", 10.0, Some(HOUR + 2)).unwrap();
    assert_eq!(tags_of_record(&k, "A", "c", HOUR + 2).1, "c");
}

#[test]
fn the_bound_is_a_setting_checked_at_construction() {
    let e = QuotaKernel::new(KernelConfig {
        max_client_ids_per_principal: 0,
        ..KernelConfig::default()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("max_client_ids_per_principal"), "{e}");
    assert_eq!(KernelConfig::default().max_client_ids_per_principal, 1000);
}

#[test]
fn a_peek_creates_no_sensor_and_the_windows_start_at_the_first_record() {
    // A proxy peeks when the request arrives; the broker's answer is recorded 900 ms later.
    let peeked = Arc::new(kernel(1000));
    let plain = Arc::new(kernel(1000));
    let records = [(0, 160_000.0), (1, 160_000.0), (15, 160_000.0), (1977, 160_000.0), (6963, 160_000.0)];
    let mut throttles = [Vec::new(), Vec::new()];
    for (i, k) in [&peeked, &plain].into_iter().enumerate() {
        set(k, None, Some(EntityName::Default), 40_000.0);
        let h = ClientHandle::new(Arc::clone(k), "", "c");
        if i == 0 {
            assert_eq!(h.peek_throttle_time_ms(P, 160_000.0, Some(100_000 - 900)).unwrap(), 0);
            assert_eq!(k.sensor_count(P), 0);
        }
        for (t, v) in records {
            throttles[i].push(h.record_and_get_throttle_time_ms(P, v, Some(100_000 + t)).unwrap());
        }
    }
    assert_eq!(throttles[0], throttles[1]);
    // A peek into an existing sensor sees its records.
    let h = ClientHandle::new(Arc::clone(&plain), "", "c");
    assert!(h.peek_throttle_time_ms(P, 1.0, Some(100_000 + 6963)).unwrap() > 0);
}
