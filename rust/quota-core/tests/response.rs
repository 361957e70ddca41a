//! Kafka's response step (`KafkaApis` + `ClientQuotaManager.throttle`) through a handle: the
//! records, the combined throttle, the enforced quota and its `throttle-time`.

use std::sync::Arc;

use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, FetchAnswer, KernelConfig, QuotaChange, QuotaEntity,
    QuotaKernel, ResponseThrottle,
};

use ClientQuotaType::*;

fn kernel(quotas: &[(ClientQuotaType, f64)]) -> Arc<QuotaKernel> {
    let k = QuotaKernel::new(KernelConfig::default()).unwrap();
    let changes: Vec<QuotaChange> = quotas
        .iter()
        .map(|&(t, v)| QuotaChange {
            entity: QuotaEntity {
                user: None,
                client_id: Some(EntityName::Name("app".into())),
            },
            quota_type: t,
            value: Some(v),
        })
        .collect();
    k.alter(&changes, false).unwrap();
    Arc::new(k)
}

fn entity_throttle_time(k: &QuotaKernel, t: ClientQuotaType, now: i64) -> Option<f64> {
    let snap = k.metrics_snapshot(Some(now)).unwrap();
    let row = snap
        .sensors
        .iter()
        .find(|r| r.quota_type == t && &*r.client_id == "app")?;
    row.values
        .iter()
        .find(|(n, _)| *n == "throttle-time")
        .map(|(_, v)| *v)
}

fn type_throttle_time(k: &QuotaKernel, t: ClientQuotaType, now: i64) -> f64 {
    let snap = k.metrics_snapshot(Some(now)).unwrap();
    let row = snap.types.iter().find(|r| r.quota_type == t).unwrap();
    row.values.iter().find(|(n, _)| *n == "throttle-time").unwrap().1
}

#[test]
fn produce_over_quota_throttles_records_the_entitys_throttle_time_and_mutes() {
    let k = kernel(&[(Produce, 1000.0)]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    // 11 windows of 1 s: 10 s of quota fit before a throttle.
    let r = h.produce_response(10_000.0, 1000.0, true, Some(0)).unwrap();
    assert_eq!(r, ResponseThrottle::NONE);
    assert!(entity_throttle_time(&k, Produce, 0).is_none());
    let r = h.produce_response(1000.0, 1000.0, true, Some(100)).unwrap();
    // Kafka's formula over a window of 10.1 s: (11000 / 10.1 - 1000) / 1000 * 10100 = 900 ms.
    assert_eq!(
        r,
        ResponseThrottle {
            throttle_time_ms: 900,
            enforce: Some(Produce)
        }
    );
    assert_eq!(r.mute_ms(), 900);
    assert_eq!(entity_throttle_time(&k, Produce, 100), Some(900.0));
    assert_eq!(type_throttle_time(&k, Produce, 100), 900.0);
    // Another entity without a quota: no throttle, nothing recorded for it.
    let other = ClientHandle::new(Arc::clone(&k), "", "other");
    assert_eq!(
        other.produce_response(1e9, 0.0, true, Some(200)).unwrap(),
        ResponseThrottle::NONE
    );
}

#[test]
fn a_request_quota_tie_is_enforced_as_the_request_quotas() {
    // 1% of a thread: 10 ms of time in a 1 s window (11 windows -> 100 ms before a throttle).
    let k = kernel(&[(Request, 1.0)]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    let r = h.request_response(200e6, Some(0)).unwrap();
    assert_eq!(r.enforce, Some(Request));
    assert!(r.throttle_time_ms > 0);
    assert_eq!(
        entity_throttle_time(&k, Request, 0),
        Some(f64::from(r.throttle_time_ms))
    );
    // A produce with no byte quota takes the request throttle, enforced as REQUEST.
    let p = h.produce_response(100.0, 1e6, true, Some(10)).unwrap();
    assert_eq!(p.enforce, Some(Request));
}

#[test]
fn unanswered_produce_is_exempt_from_the_request_quota() {
    let k = kernel(&[(Request, 1.0)]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    // acks=0: a huge request time, yet no request throttle (exempt), as Kafka.
    let r = h.produce_response(100.0, 10e9, false, Some(0)).unwrap();
    assert_eq!(r, ResponseThrottle::NONE);
    assert_eq!(k.measured_rate(Request, "", "app", Some(0)).unwrap(), 0.0);
}

#[test]
fn fetch_over_quota_small_response_is_answered_empty_and_taken_back() {
    let k = kernel(&[(Fetch, 1000.0)]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    let cap = h.fetch_request_cap();
    assert_eq!(cap, 10_000.0);
    let s = h.fetch_response(10_000.0, cap, 0.0, Some(0)).unwrap();
    assert_eq!(s.answer, FetchAnswer::Deliver);
    let before = k.measured_rate(Fetch, "", "app", Some(100)).unwrap();
    let s = h.fetch_response(900.0, cap, 0.0, Some(100)).unwrap();
    assert_eq!(s.answer, FetchAnswer::Empty);
    assert_eq!(s.throttle.enforce, Some(Fetch));
    assert!(s.throttle.throttle_time_ms > 0);
    // Unrecorded: the rate is what it was.
    assert_eq!(k.measured_rate(Fetch, "", "app", Some(100)).unwrap(), before);
    assert_eq!(
        entity_throttle_time(&k, Fetch, 100),
        Some(f64::from(s.throttle.throttle_time_ms))
    );
}

#[test]
fn fetch_over_quota_large_response_is_delivered_and_muted_until_the_quota_allows_it() {
    let k = kernel(&[(Fetch, 1000.0)]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    let cap = h.fetch_request_cap();
    // Larger than the whole window: delivered, muted at least size / quota = 20 s.
    let s = h.fetch_response(20_000.0, cap, 0.0, Some(0)).unwrap();
    assert_eq!(s.answer, FetchAnswer::DeliverMuted);
    assert_eq!(
        s.throttle,
        ResponseThrottle {
            throttle_time_ms: 20_000,
            enforce: Some(Fetch)
        }
    );
    assert!(k.measured_rate(Fetch, "", "app", Some(0)).unwrap() > 0.0);
}

#[test]
fn no_quota_no_throttle_and_no_cap() {
    let k = kernel(&[]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    assert_eq!(h.fetch_request_cap(), f64::INFINITY);
    let s = h.fetch_response(1e9, f64::INFINITY, 1e6, Some(0)).unwrap();
    assert_eq!(
        (s.answer, s.throttle),
        (FetchAnswer::Deliver, ResponseThrottle::NONE)
    );
    assert!(h.produce_response(-1.0, 0.0, true, Some(0)).is_err());
}

#[test]
fn a_mutation_throttle_larger_than_the_request_throttle_is_enforced_as_controller_mutation() {
    let k = kernel(&[(Request, 1.0)]);
    let h = ClientHandle::new(Arc::clone(&k), "", "app");
    let r = h.mutation_response(5000, 1000.0, Some(0)).unwrap();
    assert_eq!(
        r,
        ResponseThrottle {
            throttle_time_ms: 5000,
            enforce: Some(ControllerMutation)
        }
    );
    let snap = k.metrics_snapshot(Some(0)).unwrap();
    let row = snap
        .types
        .iter()
        .find(|r| r.quota_type == ControllerMutation)
        .unwrap();
    assert_eq!(
        row.values.iter().find(|(n, _)| *n == "throttle-time").unwrap().1,
        5000.0
    );
    // No mutation throttle: the request quota's (none here) applies.
    assert_eq!(
        h.mutation_response(0, 1000.0, Some(10)).unwrap(),
        ResponseThrottle::NONE
    );
}

/// The Produce step with a topic quota: the topic's throttle (Kafka's formula on the topic's
/// sensor, fed by two clients) goes out when it is the largest, and the old call form records no
/// topic.
#[test]
fn produce_step_takes_the_largest_of_client_and_topic_throttles() {
    let k = Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap());
    k.topics
        .set(Some("orders"), ClientQuotaType::Produce, Some(1000.0))
        .unwrap();
    let a = ClientHandle::new(Arc::clone(&k), "alice", "a");
    let b = ClientHandle::new(Arc::clone(&k), "bob", "b");
    let r = a
        .produce_response_with_topics(5000.0, 0.0, true, &[("orders", 5000.0)], Some(0))
        .unwrap();
    assert_eq!(r, ResponseThrottle::NONE);
    let r = b
        .produce_response_with_topics(5000.0, 0.0, true, &[("orders", 5000.0), ("free", 1.0)], Some(200))
        .unwrap();
    assert_eq!(r, ResponseThrottle::NONE);
    // (11000 B / 10 s - 1000) / 1000 * 10 s = 1000 ms, whoever sends the third request.
    let r = a
        .produce_response_with_topics(1000.0, 0.0, true, &[("orders", 1000.0)], Some(1000))
        .unwrap();
    assert_eq!(r.throttle_time_ms, 1000);
    assert_eq!(r.enforce, Some(ClientQuotaType::Produce));
    assert_eq!(
        a.produce_response(1000.0, 0.0, true, Some(1000)).unwrap(),
        ResponseThrottle::NONE
    );
    assert_eq!(k.topics.sensor_count(ClientQuotaType::Produce), 1);
    assert!(a
        .produce_response_with_topics(1.0, 0.0, true, &[("orders", f64::NAN)], Some(1000))
        .is_err());
}
