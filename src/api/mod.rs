//! The HTTP API (`punctual serve`): HTTP/1.1 + JSON on every shard's core, as specified by the
//! HTTP API of `docs/API.md` (and `docs/openapi.yaml`).
//!
//! - `service` runs the service: [`serve`] builds the engine from the
//!   [`Config`](crate::config::Config), starts an HTTP server on each shard, waits for
//!   SIGTERM/SIGINT and drains.
//! - `http` is the HTTP server on each shard: it owns connections and connection-level
//!   limits (`clients` counts connections per client address); `state` what the servers
//!   share; `listen` owns the listening sockets' options and the start-up check that the
//!   address is free; `accept` takes a shard's connections without io_uring, so that a killed
//!   process stops accepting as it dies; `crate::runtime::hyperio` adapts glommio's
//!   sockets and timers to hyper.
//! - `unread` keeps a connection alive after an answer given before the request's body was
//!   read (or says `Connection: close` when it cannot).
//! - `routes` and `batch` own request handling (`segment` percent-decodes tenant and key;
//!   `query` reads the parameters of the routes that take some, each at most once);
//!   `body` owns parsing and validation of request JSON, and `scan` a batch body's grammar
//!   and its refusals (the one batch parser, read a slice at a time); `error` owns the error
//!   codes and their mapping to HTTP statuses (one function); `respond` builds responses.
//! - `forward` sends a keyed request for a partition another node owns to that node (on a
//!   Redis Cluster shared with others) and relays its answer; `split` splits a batch by owner
//!   and merges the answers in the items' order.
//! - `tenants` owns bearer tokens and quotas; `metrics` owns `/metrics`; `webhooks` owns the
//!   callbacks of registrations and the dead-letter routes; `cluster` owns `/cluster`, and
//!   `cli` the `punctual cluster status` command that asks a node for it.
//! - `schedules` owns the recurring schedules' routes (`/v1/schedules`).
//! - `console` serves the operator console (`/console`), a page compiled into the binary
//!   that acts only through the public API with the token it is given.
//! - `list` lists a tenant's pending timers by key prefix; `bulk` runs a bulk cancel in the
//!   background, and `actions` keeps the bulk actions' progress, a bounded number a tenant.
//!
//! Cost model: a request is parsed on the shard that accepted it, then one ring push and one
//! reply travel to and from the shard that owns the key (possibly the same one).

mod accept;
mod action_records;
mod actions;
mod array;
mod batch;
pub mod body;
mod bulk;
mod bulk_run;
pub mod cli;
mod clients;
mod cluster;
mod console;
mod drain;
pub mod error;
mod forward;
pub mod forward_answer;
pub mod forward_replay;
pub mod forward_sign;
mod gather;
mod history;
mod http;
mod list;
mod listen;
pub mod metrics;
mod node;
mod query;
mod queues;
mod respond;
mod routes;
pub mod scan;
mod schedule_gather;
mod schedule_quota;
mod schedules;
mod segment;
mod service;
mod split;
mod state;
pub mod tenants;
mod unread;
mod webhooks;

pub use service::serve;
