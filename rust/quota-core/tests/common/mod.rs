//! What the kernel's integration tests share: the quota types, entity names, one alter and a
//! default kernel. Each test crate uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;

use quota_core::{ClientQuotaType, EntityName, KernelConfig, QuotaChange, QuotaEntity, QuotaKernel};

pub const P: ClientQuotaType = ClientQuotaType::Produce;
pub const F: ClientQuotaType = ClientQuotaType::Fetch;
pub const R: ClientQuotaType = ClientQuotaType::Request;
pub const M: ClientQuotaType = ClientQuotaType::ControllerMutation;

pub fn name(s: &str) -> Option<EntityName> {
    Some(EntityName::Name(s.into()))
}
pub const DEF: Option<EntityName> = Some(EntityName::Default);

pub fn set(
    k: &QuotaKernel,
    user: Option<EntityName>,
    client: Option<EntityName>,
    t: ClientQuotaType,
    v: Option<f64>,
) {
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user,
                client_id: client,
            },
            quota_type: t,
            value: v,
        }],
        false,
    )
    .unwrap();
}

pub fn kernel() -> Arc<QuotaKernel> {
    Arc::new(QuotaKernel::new(KernelConfig::default()).unwrap())
}
