//! Names past Kafka's wire limit (an int16 string) are refused on every path from names to a
//! sensor, the direct registry lookups included (they skip the metric-tag cache).

use quota_core::{
    ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaError, QuotaKernel,
    MAX_NAME_BYTES,
};

const P: ClientQuotaType = ClientQuotaType::Produce;

fn client_id_quota_kernel() -> QuotaKernel {
    let k = QuotaKernel::new(KernelConfig::default()).unwrap();
    // client-id quotas only: the sensor's tags are ("", client_id), found in the registry directly.
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user: None,
                client_id: Some(EntityName::Name("c".into())),
            },
            quota_type: P,
            value: Some(1000.0),
        }],
        false,
    )
    .unwrap();
    k
}

#[test]
fn long_user_is_refused_once_the_sensor_exists() {
    let k = client_id_quota_kernel();
    // the sensor of client "c" exists: later calls could take the direct registry path
    k.record_and_get_throttle_time_ms(P, "u", "c", 10.0, Some(1_000))
        .unwrap();
    let long = "x".repeat(MAX_NAME_BYTES + 1);
    for _ in 0..2 {
        let r = k.record_and_get_throttle_time_ms(P, &long, "c", 10.0, Some(1_000));
        assert!(matches!(r, Err(QuotaError::InvalidValue(_))), "{r:?}");
        let r = k.resolution(P, &long, "c", Some(1_000));
        assert!(matches!(r, Err(QuotaError::InvalidValue(_))));
    }
    let long_client = "y".repeat(MAX_NAME_BYTES + 1);
    let r = k.record_and_get_throttle_time_ms(P, "u", &long_client, 10.0, Some(1_000));
    assert!(matches!(r, Err(QuotaError::InvalidValue(_))), "{r:?}");
    // a name at the limit is fine
    let at_limit = "x".repeat(MAX_NAME_BYTES);
    k.record_and_get_throttle_time_ms(P, &at_limit, "c", 10.0, Some(1_000))
        .unwrap();
}
