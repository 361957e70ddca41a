//! The kquota proxy's native data plane: Kafka connections relayed on tokio with the quota
//! kernel (`quota-core`) applied in place; the APIs that need the proxy's configuration
//! (addresses, SASL, KIP-599 mutations, client-quota admin) are handed to Python through a
//! [`Bridge`].

pub mod conn;
pub mod endpoints;
pub mod fetch;
pub mod fetch_path;
pub mod forwarded;
pub mod header;
pub mod io;
pub mod listen;
pub mod outbox;
pub mod principal;
pub mod produce;
pub mod produce_path;
pub mod relay;
pub mod requests;
pub mod responses;
pub mod session;
pub mod shared;
pub mod tables;
pub mod tls;
pub mod wire;

pub use shared::{Bridge, ProxyConfig, Registered, Shared};
pub use tables::ApiTables;
