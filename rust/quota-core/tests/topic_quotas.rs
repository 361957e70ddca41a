//! Topic quotas (KIP-1010) in the kernel: sensors only for quoted topics with legal names,
//! Kafka's throttle formula, bounds following configuration changes, one-line refusals.

use quota_core::{ClientQuotaType, TopicQuotas, WindowSpec};

const P: ClientQuotaType = ClientQuotaType::Produce;
const F: ClientQuotaType = ClientQuotaType::Fetch;

#[test]
fn unquoted_topics_get_no_sensor() {
    let q = TopicQuotas::default();
    let sp = WindowSpec::default();
    assert!(q.record(P, "t", 100.0, &sp, 0).is_none());
    q.set(Some("quoted"), P, Some(1000.0)).unwrap();
    for i in 0..10_000 {
        assert!(q.record(P, &format!("other-{i}"), 100.0, &sp, 0).is_none());
    }
    assert_eq!(q.sensor_count(P), 0);
    assert!(q.record(P, "quoted", 100.0, &sp, 0).is_some());
    assert_eq!(q.sensor_count(P), 1);
    assert!(q.record(F, "quoted", 100.0, &sp, 0).is_none());
    // Names the broker refuses get none even under a default quota.
    q.set(None, P, Some(1000.0)).unwrap();
    assert!(q.record(P, &"x".repeat(250), 1.0, &sp, 0).is_none());
    assert!(q.record(P, "a/b", 1.0, &sp, 0).is_none());
    assert_eq!(q.sensor_count(P), 1);
}

#[test]
fn throttle_is_kafkas_formula_and_bounds_follow_changes() {
    let q = TopicQuotas::default();
    let sp = WindowSpec::default();
    q.set(None, P, Some(1000.0)).unwrap();
    // The fresh-sensor example: 5000, 5000 at 200 ms, 1000 at 1 s -> 0, 0, 1000.
    let got: Vec<i32> = [(5000.0, 0), (5000.0, 200), (1000.0, 1000)]
        .iter()
        .map(|&(v, t)| q.record(P, "t", v, &sp, t).unwrap())
        .collect();
    assert_eq!(got, vec![0, 0, 1000]);
    // A named quota overrides the default for live sensors too.
    q.set(Some("t"), P, Some(2000.0)).unwrap();
    // rate 11000 / 10 s = 1100 < 2000
    assert_eq!(q.record(P, "t", 0.0, &sp, 1000).unwrap(), 0);
    q.set(Some("t"), P, None).unwrap();
    assert_eq!(q.record(P, "t", 0.0, &sp, 1000).unwrap(), 1000);
    assert_eq!(q.describe(), vec![(None, P, 1000.0)]);
    assert_eq!(q.max_value_in_quota_window(P, "t", &sp), 10_000.0);
    assert_eq!(q.max_value_in_quota_window(F, "t", &sp), f64::INFINITY);
}

#[test]
fn bad_quotas_are_refused_with_one_line() {
    let q = TopicQuotas::default();
    for (topic, t, v) in [
        (Some("t"), P, Some(1.5)),
        (Some("t"), P, Some(-1.0)),
        (Some("a b"), P, Some(1.0)),
        (Some(".."), F, Some(1.0)),
        (None, ClientQuotaType::Request, Some(1.0)),
    ] {
        let e = q.set(topic, t, v).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.contains("topic="), "{e}");
    }
    assert!(q.describe().is_empty());
}

#[test]
fn a_peek_is_the_throttle_a_record_would_give_and_changes_nothing() {
    let q = TopicQuotas::default();
    let sp = WindowSpec::default();
    q.set(None, P, Some(1000.0)).unwrap();
    assert_eq!(q.peek_throttle(P, "t", 1e9, &sp, 0), 0); // no sensor yet: none made
    assert_eq!(q.sensor_count(P), 0);
    q.record(P, "t", 5000.0, &sp, 0).unwrap();
    q.record(P, "t", 5000.0, &sp, 200).unwrap();
    // The fresh-sensor example's third record (1000 B at 1 s) would be throttled 1000 ms.
    assert_eq!(q.peek_throttle(P, "t", 1000.0, &sp, 1000), 1000);
    assert_eq!(q.peek_throttle(P, "t", 1000.0, &sp, 1000), 1000);
    assert_eq!(q.peek_throttle(F, "t", 1e9, &sp, 1000), 0);
    assert_eq!(q.record_sensor(P, "t").unwrap().rate.measure(&sp, 1000).sum, 10_000.0);
    assert_eq!(q.record(P, "t", 1000.0, &sp, 1000), Some(1000));
}

#[test]
fn fleet_shares_scale_every_bound_and_whole_restores_them() {
    use std::collections::HashMap;

    use quota_core::{TopicShareMap, TOPIC_OVERFLOW};

    let q = TopicQuotas::with_cap(2);
    let sp = WindowSpec::new(1, 1).unwrap();
    q.set(Some("a"), P, Some(1000.0)).unwrap();
    q.set(None, P, Some(400.0)).unwrap();
    for t in ["a", "b", "c", "d"] {
        q.record(P, t, 1.0, &sp, 0).unwrap(); // a, b: own sensors; c, d: the overflow sensor
    }
    let bound = |t: &str| q.record_sensor(P, t).unwrap().bound();
    let shares = |default: f64, named: &[(&str, f64)]| TopicShareMap {
        default,
        by_topic: named
            .iter()
            .map(|&(t, f)| (t.to_owned(), f))
            .collect::<HashMap<_, _>>(),
    };
    // Live sensors take their share at once: named, default, the overflow sensor's own.
    q.set_shares(P, shares(0.5, &[("a", 0.25), (TOPIC_OVERFLOW, 0.1)]))
        .unwrap();
    assert_eq!(
        (bound("a"), bound("b"), bound(TOPIC_OVERFLOW)),
        (250.0, 200.0, 40.0)
    );
    assert_eq!(
        q.max_value_in_quota_window(P, "a", &sp),
        250.0 * sp.max_value_factor()
    );
    // A new sensor starts at its share; a quota change keeps the shares.
    q.set(Some("e"), P, Some(800.0)).unwrap();
    q.record(P, "e", 1.0, &sp, 0).unwrap();
    assert_eq!(bound("e"), 400.0);
    q.set(Some("a"), P, Some(2000.0)).unwrap();
    assert_eq!(bound("a"), 500.0);
    // Refused whole: a fraction out of [0, 1], a type topic quotas do not have.
    for bad in [
        shares(1.5, &[]),
        shares(0.5, &[("a", f64::NAN)]),
        shares(0.5, &[("a", -0.1)]),
    ] {
        assert!(q.set_shares(P, bad).is_err());
    }
    assert!(q
        .set_shares(ClientQuotaType::Request, TopicShareMap::whole())
        .is_err());
    assert_eq!(q.shares(P).by_topic.get("a"), Some(&0.25));
    // Fetch's shares are its own.
    assert_eq!(q.shares(F), TopicShareMap::whole());
    q.set_shares(P, TopicShareMap::whole()).unwrap();
    assert_eq!(
        (bound("a"), bound("b"), bound(TOPIC_OVERFLOW), bound("e")),
        (2000.0, 400.0, 400.0, 800.0)
    );
}
