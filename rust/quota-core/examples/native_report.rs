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
    let n: u64 = std::env::var("KQ_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000_000);
    let sensors: usize = std::env::var("KQ_SENSORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let reps = 7;

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

    // --- memory and configuration changes with many live sensors
    let mk = Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap());
    mk.alter(&[change(None, Some(EntityName::Default), 1e6)], false)
        .unwrap();
    let names: Vec<String> = (0..sensors).map(|i| format!("client-{i:07}")).collect();
    let before = rss_bytes();
    let t = Instant::now();
    for (i, c) in names.iter().enumerate() {
        mk.record_and_get_throttle_time_ms(P, "user", c, 100.0, Some(i as i64 / 1000))
            .unwrap();
    }
    let create_s = t.elapsed().as_secs_f64();
    let after = rss_bytes();
    assert_eq!(mk.sensor_count(P), sensors);
    let bytes_per_sensor = (after.saturating_sub(before)) as f64 / sensors as f64;
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

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let rows: Vec<(&str, String, &str, bool)> = vec![
        (
            "sensor record+measure (ns/op)",
            format!("{sensor_ns:.1}"),
            "-",
            true,
        ),
        (
            "handle record, 1 thread (ns/op)",
            format!("{one:.1}"),
            "<= 25",
            one <= 25.0,
        ),
        (
            "2 threads, distinct sensors: throughput vs 1 thread",
            format!("{scaling_distinct:.2}x"),
            ">= 1.7x",
            scaling_distinct >= 1.7,
        ),
        (
            "2 threads, same sensor: throughput vs 1 thread",
            format!("{scaling_same:.2}x"),
            "-",
            true,
        ),
        (
            "resident memory per live sensor, 1M sensors (B)",
            format!("{bytes_per_sensor:.0}"),
            "<= 512",
            bytes_per_sensor <= 512.0,
        ),
        ("create 1M sensors (s)", format!("{create_s:.2}"), "-", true),
        (
            "apply default-quota change, 1M live sensors (ms)",
            format!("{default_change_ms:.3}"),
            "<= 200",
            default_change_ms <= 200.0,
        ),
        (
            "record pass over 1M sensors, steady (ms)",
            format!("{:.1}", steady_pass_s * 1e3),
            "-",
            true,
        ),
        (
            "same pass right after the default change (ms)",
            format!("{:.1}", after_limit_change_pass_s * 1e3),
            "-",
            true,
        ),
        (
            "apply level change (new kind), 1M live sensors (ms)",
            format!("{level_change_ms:.3}"),
            "-",
            true,
        ),
        (
            "pass right after the level change (ms)",
            format!("{:.1}", after_level_change_pass_s * 1e3),
            "-",
            true,
        ),
    ];
    let mut md = format!(
        "# Native kernel report\n\nMachine: {cpu}, {cores} cores. Build: cargo --release. Ops per run: {n}, runs: {reps} (medians).\n\n| measure | value | target | met |\n|---|---|---|---|\n"
    );
    for (m, v, target, ok) in &rows {
        md.push_str(&format!(
            "| {m} | {v} | {target} | {} |\n",
            if *target == "-" {
                ""
            } else if *ok {
                "yes"
            } else {
                "no"
            }
        ));
    }
    let json_rows: Vec<String> = rows
        .iter()
        .map(|(m, v, target, ok)| {
            format!("{{\"measure\":{m:?},\"value\":{v:?},\"target\":{target:?},\"met\":{ok}}}")
        })
        .collect();
    let json = format!(
        "{{\"cpu\":{cpu:?},\"cores\":{cores},\"ops\":{n},\"rows\":[{}]}}\n",
        json_rows.join(",")
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("native.md"), &md).unwrap();
    std::fs::write(dir.join("native.json"), json).unwrap();
    print!("{md}");
}
