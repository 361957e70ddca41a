//! The connection quotas (KIP-612) through the kernel, as an embedder (the proxy's data plane)
//! uses them: Kafka's accept order, the IP throttle taken back from every rate, the counts, and
//! the quotas shared by every view of one kernel.

use std::net::IpAddr;

use quota_core::{Admission, ConnectionLimits, KernelConfig, QuotaKernel, WindowSpec};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn kernel() -> QuotaKernel {
    QuotaKernel::new(KernelConfig {
        window: WindowSpec::new(2, 1).unwrap(),
        ..KernelConfig::default()
    })
    .unwrap()
}

#[test]
fn ip_rate_throttles_and_takes_the_connection_back() {
    let k = kernel();
    let c = &k.connections;
    c.set_ip_rate(Some(ip("10.0.0.1")), Some(2.0));
    for _ in 0..2 {
        assert_eq!(c.record_accept("EXTERNAL", Some(0)).unwrap(), 0);
        assert_eq!(
            c.admit(ip("10.0.0.1"), "EXTERNAL", Some(0)).unwrap(),
            Admission::Accepted
        );
    }
    assert_eq!(c.record_accept("EXTERNAL", Some(0)).unwrap(), 0);
    // 3 in the 1 s window against 2/s: (3 - 2) / 2 * 1000 = 500 ms.
    assert_eq!(
        c.admit(ip("10.0.0.1"), "EXTERNAL", Some(0)).unwrap(),
        Admission::Throttled { throttle_ms: 500 }
    );
    assert_eq!(c.count(&ip("10.0.0.1")), 2);
    let s = c.snapshot(Some(0));
    assert_eq!(s.broker_rate, 2.0); // the throttled one is not in the broker rate
    assert_eq!(s.listeners[0].rate, 2.0); // nor in the listener's
    assert_eq!(s.ips[0].rate, Some(2.0));
    assert_eq!((s.accepted, s.throttled, s.refused), (2, 1, 0));
    assert_eq!(s.listeners[0].ip_throttle_time_avg, 500.0);
    // Another address has no quota: never throttled, and no sensor.
    for _ in 0..10 {
        assert_eq!(
            c.admit(ip("10.0.0.2"), "EXTERNAL", Some(0)).unwrap(),
            Admission::Accepted
        );
    }
    assert_eq!(c.snapshot(Some(0)).ip_sensors, 1);
}

#[test]
fn counts_and_the_accept_delay() {
    let k = kernel();
    let c = &k.connections;
    let props = [
        ("max.connections.per.ip", "1"),
        ("max.connection.creation.rate", "1"),
        ("max.connections", "3"),
    ];
    c.set_limits(ConnectionLimits::from_props(props).unwrap());
    assert_eq!(c.record_accept("", Some(0)).unwrap(), 0);
    assert_eq!(c.admit(ip("10.0.0.1"), "", Some(0)).unwrap(), Admission::Accepted);
    // A second connection in the window: 2 > 1/s, delayed by the capped throttle (one window).
    assert_eq!(c.record_accept("", Some(0)).unwrap(), 1000);
    assert_eq!(
        c.admit(ip("10.0.0.1"), "", Some(1000)).unwrap(),
        Admission::TooManyConnections { max: 1 }
    );
    assert_eq!(c.count(&ip("10.0.0.1")), 1);
    assert!(c.release(ip("10.0.0.1"), ""));
    assert!(!c.release(ip("10.0.0.1"), ""));
    assert_eq!(c.total(), 0);
    assert!(c.slot_available(""));
}

#[test]
fn idle_address_sensors_expire_with_the_kernel() {
    let k = QuotaKernel::new(KernelConfig {
        sensor_expiry_ms: 1000,
        ..KernelConfig::default()
    })
    .unwrap();
    k.connections.set_ip_rate(None, Some(100.0));
    k.connections.admit(ip("::1"), "", Some(0)).unwrap();
    assert_eq!(k.expire_sensors(Some(1000)).unwrap().removed, 0);
    assert_eq!(k.expire_sensors(Some(1001)).unwrap().removed, 1);
    assert_eq!(k.connections.snapshot(None).expired, 1);
}

#[test]
fn held_slots_count_against_max_connections_until_admitted_or_returned() {
    // The proxy learns a connection's address after the accept (its PROXY header): it holds the
    // slot at the accept, so that accepts in a burst cannot all pass the wait before one is
    // counted, as Kafka's `inc` counts under the lock of its wait.
    let k = kernel();
    let c = &k.connections;
    c.set_limits(ConnectionLimits {
        max_connections: 2,
        ..ConnectionLimits::default()
    });
    assert!(c.take_slot("SSL", Some(0)).unwrap());
    assert!(c.take_slot("SSL", Some(0)).unwrap());
    assert!(!c.take_slot("SSL", Some(0)).unwrap(), "both broker-wide slots are held");
    assert!(!c.slot_available("SASL_SSL"), "max.connections is broker-wide");
    assert_eq!(c.admit_held(ip("10.0.0.1"), "SSL", Some(0)).unwrap(), Admission::Accepted);
    c.return_slot("SSL");
    assert_eq!(c.total(), 1);
    assert!(c.take_slot("SASL_SSL", Some(0)).unwrap());
    assert!(!c.slot_available("SSL"));
    assert!(c.release(ip("10.0.0.1"), "SSL"));
    assert!(c.slot_available("SSL"));

    // A listener's own limit holds only its listener; an admission that is not accepted gives
    // its slot back.
    let k = kernel();
    let c = &k.connections;
    c.set_limits(ConnectionLimits::from_props([("listener.name.ssl.max.connections", "1")]).unwrap());
    c.set_ip_rate(Some(ip("10.0.0.2")), Some(1.0));
    assert!(c.take_slot("SSL", Some(0)).unwrap());
    assert!(!c.take_slot("SSL", Some(0)).unwrap());
    assert!(c.take_slot("PLAINTEXT", Some(0)).unwrap());
    c.return_slot("PLAINTEXT");
    assert_eq!(c.admit_held(ip("10.0.0.2"), "SSL", Some(0)).unwrap(), Admission::Accepted);
    assert!(c.take_slot("SSL", Some(0)).is_ok_and(|taken| !taken), "the admitted connection holds it");
    assert!(c.release(ip("10.0.0.2"), "SSL"));
    assert!(c.take_slot("SSL", Some(0)).unwrap());
    assert!(matches!(
        c.admit_held(ip("10.0.0.2"), "SSL", Some(0)).unwrap(),
        Admission::Throttled { .. }
    ));
    assert!(c.slot_available("SSL"), "a throttled connection is not counted and holds no slot");
    assert_eq!(c.total(), 0);
}
