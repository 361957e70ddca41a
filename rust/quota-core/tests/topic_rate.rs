//! A topic sensor's striped rate: one thread equals a client sensor (Kafka's `Rate`) exactly;
//! two threads lose no value at the window's end.

use quota_core::{throttle_time_ms, Measurement, RateSensor, StripedRate, WindowSpec};

/// One thread: every check and every measurement equals a client sensor's (Kafka's `Rate`).
#[test]
fn one_thread_equals_the_client_sensor() {
    for spec in [
        WindowSpec::default(),
        WindowSpec::new(2, 1).unwrap(),
        WindowSpec::new(30, 1).unwrap(),
    ] {
        let a = RateSensor::new(&spec, 100);
        let b = StripedRate::new(&spec, 100);
        let mut t = 100;
        for i in 0..5000i64 {
            // Irregular gaps, some longer than the whole window (purges), some fractional values.
            t += (i * 7919) % 997 + if i % 613 == 0 { 40_000 } else { 0 };
            let v = if i % 11 == 0 {
                0.25 * i as f64
            } else {
                (i % 5000) as f64
            };
            let ma = a.record_and_measure(&spec, v, t);
            let mb = b.record_and_measure(&spec, v, t);
            assert_eq!(ma, mb, "i={i} t={t}");
            assert_eq!(throttle_time_ms(&ma, 1000.0), throttle_time_ms(&mb, 1000.0));
            if i % 97 == 0 {
                assert_eq!(a.peek(&spec, t + 500), b.peek(&spec, t + 500));
                assert_eq!(a.measure(&spec, t), b.measure(&spec, t));
            }
        }
    }
}

/// The fresh sensor's public example, by a client sensor and a topic sensor alike: quota
/// 1000 B/s, 5000 B at 0, 5000 B at 200 ms, 1000 B at 1 s, 0 B at 6 s -> 0, 0, 1000, 1000.
#[test]
fn the_fresh_sensor_example() {
    let sp = WindowSpec::default();
    let throttles = |record_and_measure: &dyn Fn(f64, i64) -> Measurement| -> Vec<i32> {
        [(5000.0, 0), (5000.0, 200), (1000.0, 1000), (0.0, 6000)]
            .iter()
            .map(|&(v, t)| throttle_time_ms(&record_and_measure(v, t), 1000.0))
            .collect()
    };
    let client = RateSensor::new(&sp, 0);
    assert_eq!(
        throttles(&|v, t| client.record_and_measure(&sp, v, t)),
        vec![0, 0, 1000, 1000]
    );
    let topic = StripedRate::new(&sp, 0);
    assert_eq!(
        throttles(&|v, t| topic.record_and_measure(&sp, v, t)),
        vec![0, 0, 1000, 1000]
    );
}

/// Two threads (two stripes) record into one rate through several windows: at the window's
/// end the sum holds every value recorded, none lost and none counted twice.
#[test]
fn two_threads_lose_nothing_at_the_window_end() {
    use std::sync::Arc;
    let sp = WindowSpec::default();
    let s = Arc::new(StripedRate::new(&sp, 0));
    let threads: Vec<_> = (0..2)
        .map(|k| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 0..200_000i64 {
                    // 10 s of time: windows advance while both threads add.
                    let t = i / 20_000 * 1000 + k;
                    if i % 3 == 0 {
                        s.record(&sp, 3.0, t);
                    } else {
                        s.record_and_measure(&sp, 3.0, t);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.measure(&sp, 9001).sum, 2.0 * 200_000.0 * 3.0);
    assert_eq!(s.peek(&sp, 9001).sum, 2.0 * 200_000.0 * 3.0);
}
