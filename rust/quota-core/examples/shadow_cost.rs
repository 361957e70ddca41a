//! The response step's cost with a shadow configuration: `produce_response` per call without a
//! shadow, with a shadow recording every response (under its quota), and with a shadow whose
//! would-be client is muted (over its quota). Run with `cargo run --release --example shadow_cost`;
//! benches/bench_shadow.py's results cite it.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use quota_core::{ClientHandle, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel, ShadowKernel};

const CALLS: i64 = 2_000_000;

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

/// ns per `produce_response` of 1 KB, one response per µs of simulated time.
fn per_call(h: &ClientHandle) -> f64 {
    let t0 = Instant::now();
    for i in 0..CALLS {
        black_box(h.produce_response(1000.0, 50_000.0, true, Some(1_000 + i / 1000)).unwrap());
    }
    t0.elapsed().as_nanos() as f64 / CALLS as f64
}

fn main() {
    for round in 0..3 {
        let plain = ClientHandle::new(kernel(1e12), "u", "c");
        let recording = ShadowKernel::new(kernel(1e12));
        let shadowed = ClientHandle::new(kernel(1e12), "u", "c").with_shadow(recording.step("u", "c"));
        let muting = ShadowKernel::new(kernel(1e3));
        let muted = ClientHandle::new(kernel(1e12), "u", "c").with_shadow(muting.step("u", "c"));
        let (a, b, c) = (per_call(&plain), per_call(&shadowed), per_call(&muted));
        println!(
            "round {round}: no shadow {a:.1} ns, shadow recording {b:.1} ns ({:+.0}%), shadow muted {c:.1} ns ({:+.0}%)",
            (b / a - 1.0) * 100.0,
            (c / a - 1.0) * 100.0
        );
    }
}
