//! Many punctual nodes over one Redis Cluster: who is alive (`membership`), who should own
//! each partition (`rendezvous`), who may write for it (`lease`), the loop that keeps this
//! node's heartbeat and leases (`node`), the read of a partition it gains (`load`) for the
//! shards (`reader`), the routing view the API forwards requests by (`routing`), and the
//! read of the whole cluster's state that `GET /cluster` answers with (`status`, `report`).
//!
//! # What this part owns
//!
//! The node's view of the other nodes and its partition leases. It talks to Redis through the
//! store's cluster client (`store::redis::cluster`) and names keys through the store's
//! layout; it never imports the shard, the engine, the API or a sink, and the store never
//! imports it: a store is handed the lease holder to fence its writes with.
//!
//! # Invariants
//!
//! - A node writes for a partition only under a lease whose local deadline has not passed,
//!   and every such write is fenced in Redis by the same lease (see `lease`): a node that lost
//!   its lease, even without knowing, writes nothing.
//! - An epoch is never handed out twice for a partition (`INCR`, never reset).
//! - Assignment is a pure function of the live set (`rendezvous`): it tells a node which
//!   leases to seek and which to give up; it never grants a write.
//!
//! # Cost model
//!
//! Per node and second: one heartbeat script, and one renewal per held lease (pipelined by
//! master: a few round trips). Per live-set change: P × N rendezvous weights. Per fenced
//! write: the lease check inside the script (one `GET`).
//!
//! What is built and what is not is in `docs/SCALING.md`.

pub mod calls;
pub mod holdings;
pub mod lease;
pub mod load;
pub mod membership;
pub mod node;
pub mod preflight;
pub mod reader;
pub mod rendezvous;
pub mod report;
pub mod routing;
pub mod start;
pub mod status;
pub mod sweep;
