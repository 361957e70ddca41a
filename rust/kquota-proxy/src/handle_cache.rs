//! A connection's quota handle (`quota_core::ClientHandle`) for its latest (user, client id):
//! a request of the same client, the common case, reuses it without a lookup, an allocation or
//! a lock; only a new client id or principal makes a handle (and checks its names), with its
//! shadow step when the proxy has a shadow configuration.

use std::sync::Arc;

use quota_core::ClientHandle;

use crate::shared::Shared;

/// The quota handle of the connection's latest (user, client id).
#[derive(Default)]
pub struct HandleCache {
    user: Option<Arc<str>>,
    client: String,
    handle: Option<Arc<ClientHandle>>,
}

impl HandleCache {
    /// Whether this connection's latest handle is `(user, client)`'s.
    fn holds(&self, user: &Arc<str>, client: &str) -> bool {
        self.user.as_ref().is_some_and(|u| Arc::ptr_eq(u, user))
            && self.handle.is_some()
            && self.client == client
    }

    pub fn get(
        &mut self,
        shared: &Shared,
        user: &Arc<str>,
        client: &str,
    ) -> Result<Arc<ClientHandle>, String> {
        if self.holds(user, client) {
            return Ok(Arc::clone(self.handle.as_ref().unwrap()));
        }
        quota_core::check_names(user, client).map_err(|e| e.to_string())?;
        let mut h = ClientHandle::new(Arc::clone(&shared.kernel), user, client);
        if let Some(shadow) = &shared.cfg.shadow {
            h = h.with_shadow(shadow.step(user, client));
        }
        let h = Arc::new(h);
        self.user = Some(Arc::clone(user));
        self.client.clear();
        self.client.push_str(client);
        self.handle = Some(Arc::clone(&h));
        Ok(h)
    }
}
