//! `validate_changes`: an alter's validation without a kernel (what configuration stores use).

use quota_core::{
    validate_changes, ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaError,
    QuotaKernel,
};

fn user(name: &str, quota_type: ClientQuotaType, value: Option<f64>) -> QuotaChange {
    QuotaChange {
        entity: QuotaEntity {
            user: Some(EntityName::Name(name.into())),
            client_id: None,
        },
        quota_type,
        value,
    }
}

#[test]
fn same_answer_as_the_kernel_without_one() {
    let capacity = KernelConfig::default().capacity_percent();
    let kernel = QuotaKernel::new(KernelConfig::default()).unwrap();
    let cases: Vec<Vec<QuotaChange>> = vec![
        vec![user("u", ClientQuotaType::Produce, Some(1024.0))],
        vec![user("u", ClientQuotaType::Produce, Some(1.5))],
        vec![user("u", ClientQuotaType::Request, Some(capacity + 1.0))],
        vec![user("", ClientQuotaType::Fetch, Some(1.0))],
        vec![
            user("u", ClientQuotaType::Fetch, Some(1.0)),
            user("u", ClientQuotaType::Fetch, None),
        ],
        vec![user("u", ClientQuotaType::ControllerMutation, None)],
    ];
    for changes in cases {
        let alone = validate_changes(&changes, capacity).map_err(|e| e.to_string());
        let kernel_answer = kernel.alter(&changes, true).map_err(|e| e.to_string());
        assert_eq!(alone, kernel_answer, "{changes:?}");
    }
    let twice = [
        user("u", ClientQuotaType::Fetch, Some(1.0)),
        user("u", ClientQuotaType::Fetch, None),
    ];
    assert!(matches!(
        validate_changes(&twice, capacity),
        Err(QuotaError::InvalidConfig { .. })
    ));
}
