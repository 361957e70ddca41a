//! Native performance and memory report for the kernel; writes benches/results/native.{json,md}.
//!
//! Run: `cargo run --release --example native_report` (from rust/). Ratios are measured in one
//! run; absolute times are context only.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use quota_core::{
    ClientHandle, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel,
    RateSensor, WindowSpec,
};

const P: ClientQuotaType = ClientQuotaType::Produce;

fn change(user: Option<EntityName>, client: Option<EntityName>, v: f64) -> QuotaChange {
    QuotaChange {
        entity: QuotaEntity {
            user,
            client_id: client,
        },
        quota_type: P,
        value: Some(v),
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Start times handed to successive runs: every run moves forward in time, so no run replays
/// times a sensor has already seen (those would be read as its latest time and throttle).
static CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn fresh_offset() -> i64 {
    CLOCK.fetch_add(1_000_000_000, std::sync::atomic::Ordering::Relaxed)
}

/// ns per record on `h`, time advancing one ms every 64 calls from a fresh offset.
fn run(h: &ClientHandle, n: u64) -> f64 {
    let offset = fresh_offset();
    let start = Instant::now();
    for i in 0..n {
        black_box(
            h.record_and_get_throttle_time_ms(P, black_box(100.0), Some(offset + (i >> 6) as i64))
                .unwrap(),
        );
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    // KQ_BENCH_QUICK=1: a smoke run (fewer ops and runs; same rows).
    let quick = std::env::var("KQ_BENCH_QUICK")
        .map(|v| !v.is_empty() && v != "0")
        .unwrap_or(false);
    let n: u64 = std::env::var("KQ_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 200_000 } else { 5_000_000 });
    let sensors: usize = std::env::var("KQ_SENSORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let reps = if quick { 3 } else { 7 };

    // --- record path
    let spec = WindowSpec::default();
    let sensor = RateSensor::new(&spec, 0);
    let sensor_ns = median(
        (0..reps)
            .map(|r| {
                let start = Instant::now();
                let _ = r;
                let offset = fresh_offset();
                for i in 0..n {
                    black_box(sensor.record_and_measure(&spec, black_box(100.0), offset + (i >> 6) as i64));
                }
                start.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    );
    let k = Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap());
    k.alter(&[change(Some(EntityName::Default), None, 1e7)], false)
        .unwrap();
    let h1 = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    let h2 = ClientHandle::new(Arc::clone(&k), "bob", "c2");
    let h1b = ClientHandle::new(Arc::clone(&k), "alice", "c1");
    let mut one = vec![];
    let mut two = vec![];
    let mut same = vec![];
    for _ in 0..reps {
        one.push(run(&h1, n));
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| run(&h1, n));
            s.spawn(|| run(&h2, n));
        });
        two.push(t.elapsed().as_nanos() as f64 / n as f64);
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| run(&h1, n));
            s.spawn(|| run(&h1b, n));
        });
        same.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    let (one, two, same) = (median(one), median(two), median(same));
    // Throughput of two threads (2n records in the measured wall time) over one thread's.
    let scaling_distinct = 2.0 * one / two;
    let scaling_same = 2.0 * one / same;

    // --- latency of single handle calls: each call timed alone with `Instant`, minus the
    // timer's own cost (the median of back-to-back `Instant::now()` pairs).
    let lat_n: usize = if quick { 200_000 } else { 2_000_000 };
    let mut floor: Vec<u64> = (0..100_000)
        .map(|_| {
            let t = Instant::now();
            black_box(&t);
            t.elapsed().as_nanos() as u64
        })
        .collect();
    floor.sort_unstable();
    let timer_floor = floor[floor.len() / 2];
    let mut lat: Vec<u64> = Vec::with_capacity(lat_n);
    let offset = fresh_offset();
    for i in 0..lat_n {
        let t = Instant::now();
        black_box(
            h1.record_and_get_throttle_time_ms(P, black_box(100.0), Some(offset + (i >> 6) as i64))
                .unwrap(),
        );
        lat.push(t.elapsed().as_nanos() as u64);
    }
    lat.sort_unstable();
    let pct = |q: f64| -> f64 {
        let i = ((q * lat.len() as f64) as usize).min(lat.len() - 1);
        lat[i].saturating_sub(timer_floor) as f64
    };
    let (p50, p99, p999) = (pct(0.5), pct(0.99), pct(0.999));
    let lat_max = lat[lat.len() - 1].saturating_sub(timer_floor) as f64;

    // --- memory per live sensor at several sizes; every kernel stays alive until the end so
    // a later size cannot reuse memory an earlier one freed (that would hide its cost).
    let sizes: [usize; 3] = [1_000, 100_000, sensors];
    let mut kept = Vec::new();
    let mut per_sensor = Vec::new();
    let mut create_s = 0.0;
    let mut last = None;
    for &size in &sizes {
        // One principal's `size` client ids, each its own sensor: the per-principal bound
        // (`client_ids`) is lifted, the report measures sensors.
        let settings = KernelConfig {
            max_client_ids_per_principal: usize::MAX,
            ..KernelConfig::default()
        };
        let k = Arc::new(QuotaKernel::new(settings).unwrap());
        k.alter(&[change(None, Some(EntityName::Default), 1e6)], false)
            .unwrap();
        let names: Vec<String> = (0..size).map(|i| format!("client-{i:07}")).collect();
        let before = rss_bytes();
        let t = Instant::now();
        for (i, c) in names.iter().enumerate() {
            k.record_and_get_throttle_time_ms(P, "user", c, 100.0, Some(i as i64 / 1000))
                .unwrap();
        }
        create_s = t.elapsed().as_secs_f64();
        let after = rss_bytes();
        assert_eq!(k.sensor_count(P), size);
        per_sensor.push((size, after.saturating_sub(before) as f64 / size as f64));
        kept.push(Arc::clone(&k));
        last = Some((k, names));
    }
    let (mk, names) = last.unwrap();

    // --- configuration changes with the largest number of live sensors
    let now = sensors as i64 / 1000;
    let pass = |label: &str| -> f64 {
        let t = Instant::now();
        for c in &names {
            black_box(
                mk.record_and_get_throttle_time_ms(P, "user", c, 1.0, Some(now))
                    .unwrap(),
            );
        }
        let s = t.elapsed().as_secs_f64();
        eprintln!("{label}: {:.1} ms", s * 1e3);
        s
    };
    let steady_pass_s = pass("steady pass");
    let t = Instant::now();
    mk.alter(&[change(None, Some(EntityName::Default), 2e6)], false)
        .unwrap();
    let default_change_ms = t.elapsed().as_secs_f64() * 1e3;
    let after_limit_change_pass_s = pass("pass after default change");
    assert_eq!(mk.quota_limit(P, "user", "client-0000001"), Some(2e6));
    // A change of the kind of level (user default added: every tag moves) for comparison.
    let t = Instant::now();
    mk.alter(&[change(Some(EntityName::Default), None, 3e6)], false)
        .unwrap();
    let level_change_ms = t.elapsed().as_secs_f64() * 1e3;
    let after_level_change_pass_s = pass("pass after level change");
    drop(kept);

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let big = human(sensors);
    // (key, measure, value, unit, target: (op, bound) or none)
    let mut rows: Vec<Row> = vec![
        row(
            "sensor_record_ns",
            "sensor record+measure",
            sensor_ns,
            "ns/op",
            None,
        ),
        row(
            "handle_one_thread_ns",
            "handle record, 1 thread",
            one,
            "ns/op",
            Some(("<=", 25.0)),
        ),
        row(
            "handle_two_threads_distinct_ns",
            "2 threads on distinct sensors, wall time per record pair",
            two,
            "ns/op",
            None,
        ),
        row(
            "handle_two_threads_same_ns",
            "2 threads on one sensor (contention), wall time per record pair",
            same,
            "ns/op",
            None,
        ),
        row(
            "scaling_distinct",
            "2 threads, distinct sensors: throughput vs 1 thread",
            scaling_distinct,
            "x",
            Some((">=", 1.7)),
        ),
        row(
            "scaling_same",
            "2 threads, one sensor: throughput vs 1 thread",
            scaling_same,
            "x",
            None,
        ),
        row(
            "latency_p50_ns",
            "handle call latency p50 (single calls, timer floor subtracted)",
            p50,
            "ns",
            None,
        ),
        row("latency_p99_ns", "handle call latency p99", p99, "ns", None),
        row("latency_p999_ns", "handle call latency p99.9", p999, "ns", None),
        row("latency_max_ns", "handle call latency max", lat_max, "ns", None),
        row(
            "timer_floor_ns",
            "timer floor (median of back-to-back Instant::now pairs), subtracted above",
            timer_floor as f64,
            "ns",
            None,
        ),
    ];
    for (size, b) in &per_sensor {
        let target = if *size == sensors {
            Some(("<=", 512.0))
        } else {
            None
        };
        let key = format!("bytes_per_sensor_{size}");
        let measure = format!("resident memory per live sensor, {} sensors", human(*size));
        rows.push(Row {
            key,
            measure,
            value: *b,
            unit: "B",
            target,
        });
    }
    rows.extend([
        row(
            "create_sensors_s",
            &format!("create {big} sensors"),
            create_s,
            "s",
            None,
        ),
        row(
            "default_change_ms",
            &format!("apply default-quota change, {big} live sensors"),
            default_change_ms,
            "ms",
            Some(("<=", 200.0)),
        ),
        row(
            "steady_pass_ms",
            &format!("record pass over {big} sensors, steady"),
            steady_pass_s * 1e3,
            "ms",
            None,
        ),
        row(
            "pass_after_default_change_ms",
            "same pass right after the default change",
            after_limit_change_pass_s * 1e3,
            "ms",
            None,
        ),
        row(
            "level_change_ms",
            &format!("apply level change (new kind), {big} live sensors"),
            level_change_ms,
            "ms",
            None,
        ),
        row(
            "pass_after_level_change_ms",
            "pass right after the level change",
            after_level_change_pass_s * 1e3,
            "ms",
            None,
        ),
    ]);
    let mut md = format!(
        "# Native kernel report\n\nMachine: {cpu}, {cores} cores. Build: {}. Ops per run: {n}, runs: {reps} (medians){}.\n\n| measure | value | unit | target | met |\n|---|---:|---|---|---|\n",
        if cfg!(debug_assertions) {
            "dev profile (debug assertions on: not a benchmark build)"
        } else {
            "cargo --release"
        },
        if quick {
            ". QUICK mode: smoke test, do not read the numbers"
        } else {
            ""
        }
    );
    for r in &rows {
        let (target, met) = match r.target {
            None => (String::new(), ""),
            Some((op, b)) => (format!("{op} {b}"), if r.met() { "yes" } else { "no" }),
        };
        md.push_str(&format!(
            "| {} | {} | {} | {target} | {met} |\n",
            r.measure,
            fmt_value(r.value),
            r.unit
        ));
    }
    let json_rows: Vec<String> = rows
        .iter()
        .map(|r| {
            let (op, bound) = match r.target {
                None => ("null".to_owned(), "null".to_owned()),
                Some((op, b)) => (format!("{op:?}"), format!("{b}")),
            };
            format!(
                "{{\"key\":{:?},\"measure\":{:?},\"value\":{},\"unit\":{:?},\"target_op\":{op},\"target\":{bound},\"met\":{}}}",
                r.key,
                r.measure,
                if r.value.is_finite() { format!("{}", r.value) } else { "null".to_owned() },
                r.unit,
                if r.target.is_some() { r.met().to_string() } else { "null".to_owned() }
            )
        })
        .collect();
    let json = format!(
        "{{\"cpu\":{cpu:?},\"cores\":{cores},\"release\":{},\"ops\":{n},\"runs\":{reps},\"quick\":{quick},\"latency_calls\":{lat_n},\"rows\":[{}]}}\n",
        !cfg!(debug_assertions),
        json_rows.join(",")
    );
    let dir = match std::env::var("KQ_BENCH_RESULTS_DIR") {
        Ok(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/results"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("native.md"), &md).unwrap();
    std::fs::write(dir.join("native.json"), json).unwrap();
    print!("{md}");
}

struct Row {
    key: String,
    measure: String,
    value: f64,
    unit: &'static str,
    target: Option<(&'static str, f64)>,
}

impl Row {
    fn met(&self) -> bool {
        match self.target {
            Some(("<=", b)) => self.value <= b,
            Some((_, b)) => self.value >= b,
            None => true,
        }
    }
}

fn row(key: &str, measure: &str, value: f64, unit: &'static str, target: Option<(&'static str, f64)>) -> Row {
    Row {
        key: key.to_owned(),
        measure: measure.to_owned(),
        value,
        unit,
        target,
    }
}

fn fmt_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn human(n: usize) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n % 1_000 == 0 {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}
