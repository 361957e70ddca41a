//! The response step's cost with a shadow configuration: `produce_response` per call without a
//! shadow, with a shadow recording every response (under its quota), and with a shadow whose
//! would-be client is muted (over its quota). The shadow is stepped off the response path (its
//! queue's thread), so calls come in bursts of `BURST` with a pause after each, as responses do at
//! the proxy, and only the bursts are timed: the step the response path pays. Run with
//! `cargo run --release --example shadow_cost`; benches/results/shadow_record.md cites it.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quota_core::shadow;
use quota_core::{ClientHandle, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel, ShadowKernel};

const CALLS: i64 = 2_000_000;
/// Calls per timed burst, then a pause: 1,000 responses per 2 ms is 500,000 a second, more than
/// one proxy thread answers, and far less than the shadow's thread steps.
const BURST: i64 = 1_000;
const PAUSE: Duration = Duration::from_millis(2);

fn kernel(rate: f64) -> Arc<QuotaKernel> {
    let k = QuotaKernel::new(KernelConfig::default()).unwrap();
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user: Some(EntityName::Default),
                client_id: None,
            },
            quota_type: ClientQuotaType::Produce,
            value: Some(rate),
        }],
        false,
    )
    .unwrap();
    Arc::new(k)
}

/// ns per `produce_response` of 1 KB, one response per µs of simulated time, bursts timed.
/// `flush_between`: the queued shadow steps are run by this thread after each burst, untimed
/// (the response path's own cost, apart from the shadow thread running beside it).
fn per_call(h: &ClientHandle, flush_between: bool) -> f64 {
    let mut timed = Duration::ZERO;
    for burst in 0..CALLS / BURST {
        let t0 = Instant::now();
        for i in burst * BURST..(burst + 1) * BURST {
            black_box(h.produce_response(1000.0, 50_000.0, true, Some(1_000 + i / 1000)).unwrap());
        }
        timed += t0.elapsed();
        if flush_between {
            shadow::flush();
        }
        std::thread::sleep(PAUSE);
    }
    timed.as_nanos() as f64 / CALLS as f64
}

fn main() {
    for round in 0..3 {
        let plain = ClientHandle::new(kernel(1e12), "u", "c");
        let recording = ShadowKernel::new(kernel(1e12));
        let shadowed = ClientHandle::new(kernel(1e12), "u", "c").with_shadow(recording.step("u", "c"));
        let muting = ShadowKernel::new(kernel(1e3));
        let muted = ClientHandle::new(kernel(1e12), "u", "c").with_shadow(muting.step("u", "c"));
        for flush_between in [false, true] {
            let (a, b, c) = (
                per_call(&plain, flush_between),
                per_call(&shadowed, flush_between),
                per_call(&muted, flush_between),
            );
            let how = if flush_between { "steps run between bursts" } else { "shadow thread beside" };
            println!(
                "round {round}, {how}: no shadow {a:.1} ns, shadow recording {b:.1} ns ({:+.0}%), shadow muted {c:.1} ns ({:+.0}%)",
                (b / a - 1.0) * 100.0,
                (c / a - 1.0) * 100.0
            );
        }
    }
}
