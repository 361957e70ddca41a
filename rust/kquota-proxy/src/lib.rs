//! The kquota proxy's native data plane: Kafka connections relayed on tokio with the quota
//! kernel (`quota-core`) applied in place; the APIs that need the proxy's configuration
//! (addresses, SASL, KIP-599 mutations, client-quota admin) are handed to Python through a
//! [`Bridge`].
//!
//! Its rooms:
//! - Kafka's wire: [`wire`] (the encodings), [`tables`] (per-API facts Python passes in),
//!   [`header`], [`produce_layout`] and [`fetch_layout`] (where the fields the quota needs are),
//!   [`endpoints`] (NodeEndpoints rewritten to the proxy's addresses);
//! - what every connection shares ([`shared`]): [`config`], [`bridge`] (the contracts with
//!   Python), [`brokers`] (the broker map), [`counters`], [`request_log`];
//! - one connection: [`listen`] (the listeners and the descriptor guard), [`admission`] (its
//!   connection quotas, `max.connections` included, and PROXY header, from [`trusted_sources`]
//!   only), [`session`] (its life), [`idle`] (its `connections.max.idle.ms`), [`tls`] (its TLS
//!   handshakes, `tls::Security`), [`principal`], [`preauth`] (what a SASL client may send
//!   before authenticating), [`conn`] (its state, one file per concern: slots and order, the
//!   producer gate's membership, Python's calls, the request quota of relayed APIs, unanswered
//!   Produce requests), [`mute`] (a throttle's mute and serial window, for a connection and a
//!   producer), [`handle_cache`] (its quota handle), [`requests`] and [`responses`] (the two
//!   readers, each a dispatch by API), [`frame`] (a request as handed to its path),
//!   [`forwarded`] (what the response reader knows of each request);
//! - the quota paths, each API's request and response halves: [`produce_path`], [`fetch_path`];
//!   a producer's throttle over all its connections ([`producer_gate`]); the proxy's own topics
//!   closed on them ([`own_topics`]); a Produce's topics ([`produce_topics`]) and a Fetch's
//!   ([`fetch_topics`], by id through [`topic_names`]) for the topic quotas, each a
//!   [`topic_bytes`] list;
//! - bytes in and out: [`stream`] (plain or TLS sockets), [`io`] (reading frames), [`outbox`]
//!   (ordered writes with back-pressure), [`relay`] (uninspected bytes spliced socket to
//!   socket), [`walk`] (a frame's fields read in order, held whole or while it passes).

pub mod admission;
pub mod bridge;
pub mod brokers;
pub mod config;
pub mod conn;
pub mod counters;
pub mod endpoints;
pub mod fetch_layout;
pub mod fetch_path;
pub mod fetch_topics;
pub mod forwarded;
pub mod frame;
pub mod handle_cache;
pub mod header;
pub mod idle;
pub mod io;
pub mod listen;
pub mod mute;
pub mod outbox;
pub mod own_topics;
pub mod preauth;
pub mod principal;
pub mod produce_layout;
pub mod produce_path;
pub mod produce_topics;
pub mod producer_gate;
pub mod proxy_protocol;
pub mod relay;
pub mod request_log;
pub mod requests;
pub mod responses;
pub mod session;
pub mod shared;
pub mod stream;
pub mod tables;
pub mod topic_bytes;
pub mod topic_names;
pub mod tls;
pub mod trusted_sources;
pub mod walk;
pub mod wire;

pub use bridge::{Bridge, Registered};
pub use config::ProxyConfig;
pub use shared::Shared;
pub use tables::ApiTables;
