//! What the HTTP servers share: [`Servers`] across all shards (configuration, tenants,
//! metrics, the connection count and the drain signal), and [`App`], what one shard's
//! connections share (its shard id, its handle on the engine, the only way the API reaches a
//! shard, and its connections to the other nodes).

use super::action_records::Records;
use super::actions::Actions;
use super::clients::Clients;
use super::forward::{ForwardStats, Peers};
use super::metrics::Metrics;
use super::tenants::Tenants;
use crate::config::{Config, StoreChoice};
use crate::engine::Handle;
use crate::nodes::node::Holdings;
use crate::nodes::status::Status;
use crate::sink::webhook::address::parse_networks;
use crate::sink::webhook::settings::WebhookSettings;
use event_listener::Event;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// What all shards' servers share: configuration, tenants, metrics, the connection count and
/// the drain signal.
pub struct Servers {
    pub config: Config,
    pub tenants: Tenants,
    /// Callbacks: allow-lists, defaults, secrets (shared with the shards' sinks).
    pub webhooks: Arc<WebhookSettings>,
    pub metrics: OnceLock<Metrics>,
    /// On a node that shares a Redis Cluster with others: the leases it holds.
    pub node: Option<Arc<Holdings>>,
    /// On such a node: the read of the cluster's state that `GET /cluster` answers with.
    pub status: Option<Arc<Status>>,
    /// Forwards to the other nodes, all shards together.
    pub forwards: Arc<ForwardStats>,
    /// The forwards this node served within the window, all shards together
    /// (`forward_replay.rs`).
    pub seen: super::forward_replay::Seen,
    /// Bulk cancels, every tenant's (`actions.rs`, `bulk.rs`).
    pub(super) actions: Actions,
    pub(super) connections: AtomicUsize,
    /// Open connections per client address (`clients.rs`).
    pub(super) clients: Clients,
    pub(super) listeners: AtomicUsize,
    /// New schedules being written, per tenant (`schedule_quota.rs`).
    pub(super) creating: super::schedule_quota::Creating,
    draining: AtomicBool,
    drain_event: Event,
}

impl Servers {
    pub fn new(
        config: Config,
        tenants: Tenants,
        webhooks: Arc<WebhookSettings>,
        node: Option<Arc<Holdings>>,
        status: Option<Arc<Status>>,
    ) -> Self {
        // Checked when the configuration was resolved.
        let exempt = parse_networks(&config.max_connections_per_address_exempt).unwrap_or_default();
        let clients = Clients::new(config.max_connections_per_address, exempt);
        let actions = match config.store {
            StoreChoice::Journal => match Records::open(&config.data_dir) {
                Ok(records) => Actions::recorded(records),
                Err(e) => {
                    tracing::warn!(error = %e, "bulk actions cannot be recorded under the data directory; they live in memory");
                    Actions::default()
                }
            },
            _ => Actions::default(),
        };
        Servers {
            clients,
            config,
            tenants,
            webhooks,
            metrics: OnceLock::new(),
            node,
            status,
            forwards: Arc::default(),
            seen: Default::default(),
            actions,
            connections: AtomicUsize::new(0),
            listeners: AtomicUsize::new(0),
            creating: Default::default(),
            draining: AtomicBool::new(false),
            drain_event: Event::new(),
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Stops accepting and asks every connection to close after its request in flight.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.drain_event.notify(usize::MAX);
    }

    /// Open connections, all shards together.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    /// Listening sockets not yet closed, all shards together.
    pub fn listeners(&self) -> usize {
        self.listeners.load(Ordering::Acquire)
    }

    /// Completes once `drain` was called (from any thread). One waiter per shard.
    pub(super) async fn drained(&self) {
        loop {
            if self.is_draining() {
                return;
            }
            let listener = self.drain_event.listen();
            if self.is_draining() {
                return;
            }
            listener.await;
        }
    }
}

/// What one shard's connections share.
pub struct App {
    pub shard: usize,
    pub handle: Handle,
    pub shared: Arc<Servers>,
    /// This shard's connections to the other nodes, to forward requests for their
    /// partitions.
    pub peers: Rc<Peers>,
}
