//! Fleet shares (`shares.rs`): a kernel's fraction of each limit.

use std::collections::HashMap;

use quota_core::entity::{EntityName, QuotaEntity};
use quota_core::{ClientQuotaType, KernelConfig, QuotaChange, QuotaKernel, ShareMap};

#[test]
fn limits_scale_by_share_and_refuse_bad_fractions() {
    let k = QuotaKernel::new(KernelConfig::default()).unwrap();
    let t = ClientQuotaType::Produce;
    k.alter(
        &[QuotaChange {
            entity: QuotaEntity {
                user: None,
                client_id: Some(EntityName::Name("c".into())),
            },
            quota_type: t,
            value: Some(1000.0),
        }],
        false,
    )
    .unwrap();
    assert_eq!(k.quota_limit(t, "", "c"), Some(1000.0));
    let mut by_tags = HashMap::new();
    by_tags.insert((String::new(), "c".to_owned()), 0.25);
    k.set_shares(
        t,
        ShareMap {
            default: 0.5,
            by_tags,
        },
    )
    .unwrap();
    assert_eq!(k.quota_limit(t, "", "c"), Some(250.0));
    assert_eq!(k.quota_limit(t, "", "other"), None);
    let bad = ShareMap {
        default: 1.5,
        by_tags: HashMap::new(),
    };
    assert!(k.set_shares(t, bad).is_err());
    assert_eq!(k.quota_limit(t, "", "c"), Some(250.0));
    k.set_shares(t, ShareMap::whole()).unwrap();
    assert_eq!(k.quota_limit(t, "", "c"), Some(1000.0));
}
