//! Criterion benches of the native record path: one thread, two threads on distinct sensors,
//! two threads on one sensor. `examples/native_report.rs` turns the same workloads into the
//! ratio report under benches/results/.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel,
    RateSensor, StripedRate, WindowSpec,
};

const P: ClientQuotaType = ClientQuotaType::Produce;

fn kernel() -> Arc<QuotaKernel> {
    let k = QuotaKernel::new(KernelConfig::default()).unwrap();
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user: Some(EntityName::Default),
                client_id: None,
            },
            quota_type: P,
            value: Some(10_000_000.0),
        }],
        false,
    )
    .unwrap();
    Arc::new(k)
}

/// Start times of successive batches: time only moves forward, so no batch replays times a
/// sensor has seen (those would be read as its latest time and throttle).
static CLOCK: AtomicI64 = AtomicI64::new(0);

fn fresh_offset() -> i64 {
    CLOCK.fetch_add(1_000_000_000, Ordering::Relaxed)
}

/// Records `iters` times on `h`, time advancing one ms every 64 calls so windows roll.
fn run(h: &ClientHandle, iters: u64) {
    let offset = fresh_offset();
    for i in 0..iters {
        black_box(
            h.record_and_get_throttle_time_ms(P, black_box(100.0), Some(offset + (i >> 6) as i64))
                .unwrap(),
        );
    }
}

/// Two long-lived worker threads, one per handle, released together for each measurement.
/// Spawning threads per sample would put thread creation (milliseconds on a loaded machine)
/// into the small-`iters` samples of criterion's warm-up and skew its iteration estimate.
struct Pair {
    barrier: Barrier,
    iters: AtomicU64,
    stop: AtomicBool,
}

/// Runs `f` with a function timing `iters` records on each of `a` and `b` concurrently (wall
/// time of both); the workers live for the duration of `f`.
fn with_pair<R>(a: &ClientHandle, b: &ClientHandle, f: impl FnOnce(&dyn Fn(u64) -> Duration) -> R) -> R {
    let ctl = Pair {
        barrier: Barrier::new(3),
        iters: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    std::thread::scope(|s| {
        for h in [a, b] {
            let ctl = &ctl;
            s.spawn(move || loop {
                ctl.barrier.wait();
                if ctl.stop.load(Ordering::SeqCst) {
                    break;
                }
                run(h, ctl.iters.load(Ordering::SeqCst));
                ctl.barrier.wait();
            });
        }
        let measure = |iters: u64| {
            ctl.iters.store(iters, Ordering::SeqCst);
            let start = Instant::now();
            ctl.barrier.wait();
            ctl.barrier.wait();
            start.elapsed()
        };
        let r = f(&measure);
        ctl.stop.store(true, Ordering::SeqCst);
        ctl.barrier.wait();
        r
    })
}

fn benches(c: &mut Criterion) {
    let spec = WindowSpec::default();
    let sensor = RateSensor::new(&spec, 0);
    let mut i = 0i64;
    c.bench_function("sensor_record_and_measure", |b| {
        b.iter(|| {
            i += 1;
            black_box(sensor.record_and_measure(&spec, black_box(100.0), i >> 6))
        })
    });

    let k = kernel();
    let h1 = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    let h2 = ClientHandle::new(Arc::clone(&k), "bob", "c2");
    c.bench_function("handle_record_one_thread", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            run(&h1, iters);
            start.elapsed()
        })
    });
    // Per-iteration time of two threads each doing `iters` records: equal to the one-thread
    // time when scaling is perfect (twice the work in the same wall time).
    with_pair(&h1, &h2, |measure| {
        c.bench_function("handle_record_two_threads_distinct_sensors", |b| {
            b.iter_custom(measure)
        });
    });
    let h1b = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    with_pair(&h1, &h1b, |measure| {
        c.bench_function("handle_record_two_threads_same_sensor", |b| {
            b.iter_custom(measure)
        });
    });
    c.bench_function("named_record_one_thread", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            let offset = fresh_offset();
            for i in 0..iters {
                black_box(
                    k.record_and_get_throttle_time_ms(
                        P,
                        "alice",
                        "c1",
                        black_box(100.0),
                        Some(offset + (i >> 6) as i64),
                    )
                    .unwrap(),
                );
            }
            start.elapsed()
        })
    });
}

/// The kernel of `kernel()` with a topic quota on "orders" (10 MB/s, never reached here).
fn kernel_with_topic_quota() -> Arc<QuotaKernel> {
    let k = kernel();
    k.topics.set(Some("orders"), P, Some(10_000_000.0)).unwrap();
    k
}

/// Records `iters` times into the topic "orders" from `offset`, time advancing one ms every 64
/// calls; returns the throttle sum so nothing is optimized away.
fn run_topic(k: &QuotaKernel, offset: i64, iters: u64) -> i64 {
    let spec = *k.window();
    let mut sum = 0i64;
    for i in 0..iters {
        let ms = k
            .topics
            .record(
                P,
                black_box("orders"),
                black_box(100.0),
                &spec,
                offset + (i >> 6) as i64,
            )
            .unwrap();
        sum += ms as i64;
    }
    sum
}

/// Runs `f(offset, iters)` on two long-lived threads released together with a shared clock
/// offset; the wall time of both.
fn two_threads_shared_clock(c: &mut Criterion, name: &str, f: &(dyn Fn(i64, u64) + Sync)) {
    let ctl = Pair {
        barrier: Barrier::new(3),
        iters: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let offset = AtomicI64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (ctl, offset) = (&ctl, &offset);
            s.spawn(move || loop {
                ctl.barrier.wait();
                if ctl.stop.load(Ordering::SeqCst) {
                    break;
                }
                f(offset.load(Ordering::SeqCst), ctl.iters.load(Ordering::SeqCst));
                ctl.barrier.wait();
            });
        }
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                ctl.iters.store(iters, Ordering::SeqCst);
                offset.store(fresh_offset(), Ordering::SeqCst);
                let start = Instant::now();
                ctl.barrier.wait();
                ctl.barrier.wait();
                start.elapsed()
            })
        });
        ctl.stop.store(true, Ordering::SeqCst);
        ctl.barrier.wait();
    });
}

/// A topic sensor is recorded by every producer from every proxy thread: two threads on one
/// topic sensor, sharing one clock (as the threads of one proxy do), against one thread; the
/// striped rate alone, then through the kernel's topic quotas (name lookup and bound).
fn topic_benches(c: &mut Criterion) {
    let spec = WindowSpec::default();
    let rate = StripedRate::new(&spec, 0);
    let run_rate = |offset: i64, iters: u64| {
        for i in 0..iters {
            black_box(rate.record_and_measure(&spec, black_box(100.0), offset + (i >> 6) as i64));
        }
    };
    c.bench_function("topic_rate_one_thread", |b| {
        b.iter_custom(|iters| {
            let offset = fresh_offset();
            let start = Instant::now();
            run_rate(offset, iters);
            start.elapsed()
        })
    });
    two_threads_shared_clock(c, "topic_rate_two_threads_same_sensor", &run_rate);
    // The control: each thread on a sensor of its own (what perfect striping would give).
    let rates = [StripedRate::new(&spec, 0), StripedRate::new(&spec, 0)];
    let next = AtomicU64::new(0);
    two_threads_shared_clock(c, "topic_rate_two_threads_distinct_sensors", &|offset, iters| {
        let r = &rates[(next.fetch_add(1, Ordering::Relaxed) % 2) as usize];
        for i in 0..iters {
            black_box(r.record_and_measure(&spec, black_box(100.0), offset + (i >> 6) as i64));
        }
    });
    let k = kernel_with_topic_quota();
    c.bench_function("topic_record_one_thread", |b| {
        b.iter_custom(|iters| {
            let offset = fresh_offset();
            let start = Instant::now();
            black_box(run_topic(&k, offset, iters));
            start.elapsed()
        })
    });
    two_threads_shared_clock(c, "topic_record_two_threads_same_topic", &|offset, iters| {
        black_box(run_topic(&k, offset, iters));
    });
    // The client record path on a kernel with topic quotas configured: it must cost what it
    // costs without them (compare with handle_record_one_thread).
    let h = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    c.bench_function("handle_record_one_thread_topic_quotas_configured", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            run(&h, iters);
            start.elapsed()
        })
    });
    // A Produce response step without and with one quoted topic.
    c.bench_function("produce_response_client_only", |b| {
        b.iter_custom(|iters| {
            let offset = fresh_offset();
            let start = Instant::now();
            for i in 0..iters {
                black_box(
                    h.produce_response(black_box(100.0), 0.0, true, Some(offset + (i >> 6) as i64))
                        .unwrap(),
                );
            }
            start.elapsed()
        })
    });
    c.bench_function("produce_response_with_topic", |b| {
        b.iter_custom(|iters| {
            let offset = fresh_offset();
            let start = Instant::now();
            for i in 0..iters {
                black_box(
                    h.produce_response_with_topics(
                        black_box(100.0),
                        0.0,
                        true,
                        &[("orders", 100.0)],
                        Some(offset + (i >> 6) as i64),
                    )
                    .unwrap(),
                );
            }
            start.elapsed()
        })
    });
}

criterion_group! {
    name = record;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = benches, topic_benches
}
criterion_main!(record);
