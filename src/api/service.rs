//! Start-up and shutdown of the service: the port check (retried while a crashed predecessor's
//! sockets close), the engine with one HTTP server per shard, the signal wait, and the drain.
//!
//! Shutdown on SIGTERM or SIGINT: stop accepting, let in-flight requests finish (up to
//! `shutdown_timeout_ms`), then stop the shards (which flush their stores), then, on a node
//! that shares a Redis Cluster (`--advertise`), stop the node's loop, which releases its leases
//! (`node.rs`). With the in-memory store, pending timers do not survive; that is said at start.

use super::http;
use super::listen;
use super::node;
use super::state::Servers;
use super::tenants::Tenants;
use crate::config::{Config, FsyncMode, PinningMode, StoreChoice};
use crate::engine::{EngineBuilder, Fsync, JournalConfig, Pinning, RedisConfig};
use crate::nodes::node::Holdings;
use crate::nodes::status::Status;
use crate::sink::webhook::address::parse_networks;
use crate::sink::webhook::allow::AllowList;
use crate::sink::webhook::settings::{tls_config, TenantWebhooks, WebhookSettings};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs the service until SIGTERM or SIGINT. An error is a start-up failure, described.
pub fn serve(config: Config) -> Result<(), String> {
    crash_on_panic();
    // Registered first, so a signal during start-up is not lost to the default action.
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    // Every shard binds with SO_REUSEPORT; a bind without it first makes sure no other live
    // process (another punctual included) serves this address, and waits out the sockets of
    // one that just crashed on it. Held from now on, before the engine starts (a journal's
    // recovery can take minutes).
    let sockets = listen::bind_shards(
        config.listen,
        config.shards,
        Duration::from_millis(config.bind_retry_ms),
    )?;
    let sockets: Vec<std::sync::Mutex<Option<socket2::Socket>>> = sockets
        .into_iter()
        .map(|s| std::sync::Mutex::new(Some(s)))
        .collect();

    let tenants = Tenants::new(&config.tenants, config.serves_unlisted_tenants());
    let webhooks = Arc::new(webhook_settings(&config)?);
    let redis = config.redis.as_ref().map(|url| RedisConfig {
        wait_replicas: config.redis_wait_replicas,
        allow_eviction: config.redis_allow_eviction,
        ..RedisConfig::new(url.clone())
    });
    // A node among others on a Redis Cluster: it acts only on the partitions it holds.
    let node = match (&redis, &config.advertise) {
        (Some(r), Some(_)) if config.store == StoreChoice::Redis && r.is_cluster() => {
            Some(Arc::new(Holdings::default()))
        }
        _ => None,
    };
    // Its `GET /cluster` reads the cluster's state through the node's thread.
    let status = node
        .as_ref()
        .and(config.advertise.as_deref())
        .map(|me| Arc::new(Status::new(me)));
    let shared = Arc::new(Servers::new(
        config.clone(),
        tenants.clone(),
        webhooks.clone(),
        node.clone(),
        status.clone(),
    ));
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let hook_shared = shared.clone();
    let spin = Duration::from_micros(config.spin_us);
    let builder = EngineBuilder::new().shards(config.shards);
    let builder = if config.spin_adaptive {
        builder.adaptive_spin(spin)
    } else {
        builder.spin(spin)
    };
    let mut builder = builder
        .ring_capacity(config.ring_capacity)
        .shard_capacity(config.shard_capacity)
        .webhooks(webhooks)
        .on_shard_start(move |id, handle| {
            let socket = sockets
                .get(id)
                .and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).take());
            let r = match socket {
                Some(socket) => http::start_shard(id, handle, hook_shared.clone(), socket),
                None => Err(std::io::Error::other("no listening socket for this shard")),
            };
            let _ = bound_tx.send((id, r));
        });
    for (tenant, t) in &config.tenants {
        if let Some(limit) = t.max_pending {
            builder = builder.quota(tenant.clone(), limit);
        }
        // The Redis store keeps no queue: its fired timers go to the stream (docs/STORES.md).
        if t.queue == Some(true) && config.store != StoreChoice::Redis {
            let settings = crate::queue::QueueSettings {
                max_receives: t
                    .queue_max_receives
                    .map_or(crate::queue::DEFAULT_MAX_RECEIVES, |n| n as u32),
                retention: Duration::from_secs(
                    t.queue_retention_s.unwrap_or(config.queue_retention_s),
                ),
                max_waiting: t.queue_max_waiting.unwrap_or(config.queue_max_waiting) as u32,
            };
            builder = builder.queue_settings(tenant.clone(), settings);
        }
    }
    builder = match (config.store, &redis) {
        (StoreChoice::Redis, Some(redis)) => builder.redis_config(redis.clone()).streams_off(
            config
                .tenants
                .iter()
                .filter(|(_, t)| t.stream == Some(false))
                .map(|(name, _)| name.clone()),
        ),
        (StoreChoice::Journal, _) => {
            let mut j = JournalConfig::new(&config.data_dir);
            j.fsync = match config.fsync {
                FsyncMode::Always => Fsync::Always,
                FsyncMode::EverySec => Fsync::EverySec,
                FsyncMode::Never => Fsync::Never,
            };
            j.skip_corrupt = config.journal_skip_corrupt;
            j.page_horizon =
                (config.page_horizon_s > 0).then(|| Duration::from_secs(config.page_horizon_s));
            j.on_failure = crate::engine::OnFailure::Exit;
            builder.journal_config(j)
        }
        _ => builder,
    };
    if let Some(history) = open_history(&config)? {
        builder = builder.history(history);
    }
    if let Some(holdings) = &node {
        builder = builder.partition_holders(holdings.clone());
    }
    builder = match (&config.cores, &config.pinning) {
        (Some(cores), _) => builder.cores(cores.clone()),
        (None, PinningMode::Auto) => builder.pinning(Pinning::Auto),
        (None, PinningMode::None) => builder.pinning(Pinning::None),
    };
    let engine = builder.build().map_err(|e| e.to_string())?;
    for _ in 0..config.shards {
        match bound_rx.recv_timeout(Duration::from_secs(10)) {
            Ok((_, Ok(()))) => {}
            Ok((id, Err(e))) => {
                shared.drain();
                let _ = engine.shutdown();
                return Err(format!(
                    "shard {id}: cannot listen on {}: {e}",
                    config.listen
                ));
            }
            Err(_) => {
                shared.drain();
                let _ = engine.shutdown();
                return Err("a shard did not start its listener".into());
            }
        }
    }
    let node_loop = match (&node, &redis, &config.advertise, &status) {
        (Some(holdings), Some(redis), Some(advertise), Some(status)) => {
            let started = node::start(
                redis,
                advertise,
                config.cluster_secret.as_deref(),
                holdings.clone(),
                engine.handle().partitions(),
                status.clone(),
            );
            match started {
                Ok(l) => {
                    tracing::info!(
                        redis = crate::config::mask_url(&redis.url),
                        advertise,
                        "store: Redis Cluster shared with other nodes; this node acts on the partitions whose leases it holds"
                    );
                    Some(l)
                }
                Err(e) => {
                    shared.drain();
                    let _ = engine.shutdown();
                    return Err(e);
                }
            }
        }
        _ => {
            if let Some(r) = redis.as_ref().filter(|r| r.is_cluster()) {
                tracing::info!(
                    redis = crate::config::mask_url(&r.url),
                    "store: Redis Cluster; this node owns every partition (without --advertise it shares them with no other node: run one node per cluster)"
                );
            }
            None
        }
    };
    match (config.store, &config.redis) {
        (StoreChoice::Redis, url) => tracing::info!(
            listen = %config.listen,
            shards = config.shards,
            redis = url.as_deref().map(crate::config::mask_url).unwrap_or_default(),
            wait_replicas = config.redis_wait_replicas,
            "punctual serving HTTP; store: Redis (2xx means Redis acknowledged the write, and with wait_replicas > 0 that many replicas hold it)"
        ),
        (StoreChoice::Journal, _) => tracing::info!(
            listen = %config.listen,
            shards = config.shards,
            data_dir = %config.data_dir.display(),
            fsync = ?config.fsync,
            "punctual serving HTTP; store: journal (2xx means the write is on disk{})",
            match config.fsync {
                FsyncMode::Always => ", fdatasync'd",
                FsyncMode::EverySec => "; fsync everysec: a power cut can lose about the last second",
                FsyncMode::Never => "; fsync never: a power cut can lose what the kernel had not written back",
            }
        ),
        (StoreChoice::Memory, _) => tracing::warn!(
            listen = %config.listen,
            shards = config.shards,
            "punctual serving HTTP; store: in-memory (not durable: pending timers are lost on exit)"
        ),
    }

    let signal = signals.forever().next();
    tracing::info!(
        ?signal,
        "shutting down: no new connections, finishing requests in flight"
    );
    shared.drain();
    let deadline =
        Instant::now() + crate::units::capped(Duration::from_millis(config.shutdown_timeout_ms));
    while (shared.connections() > 0 || shared.listeners() > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if shared.connections() > 0 {
        tracing::warn!(
            open = shared.connections(),
            "shutdown timeout: closing the rest"
        );
    }
    // The shards flush their stores while the leases are still renewed; then they are released.
    let stopped = engine.shutdown();
    if let Some(l) = node_loop {
        l.stop();
    }
    stopped?;
    tracing::info!("stopped");
    Ok(())
}

/// The server is crash-only (`shard::failure`): a panic on any thread is logged by the default
/// hook, then aborts the process, for the supervisor to restart it and the durable store to
/// recover its timers. A server that went on without one shard would refuse a share of its
/// keys until someone noticed.
fn crash_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!("a thread panicked; aborting (crash-only: restart, and the store recovers every acknowledged timer)");
        std::process::abort();
    }));
}

/// The webhook settings the configuration describes (validated already, except the CA file,
/// which is read here).
fn webhook_settings(config: &Config) -> Result<WebhookSettings, String> {
    let w = &config.webhooks;
    let ca = match &w.webhook_ca_file {
        Some(path) => {
            Some(std::fs::read(path).map_err(|e| format!("webhook_ca_file {path:?}: {e}"))?)
        }
        None => None,
    };
    let tls = tls_config(ca.as_deref()).map_err(|e| format!("webhook_ca_file: {e}"))?;
    let mut s = WebhookSettings::new(tls);
    s.timeout = Duration::from_millis(w.webhook_timeout_ms);
    s.shutdown_grace = Duration::from_millis(config.shutdown_grace_ms);
    s.max_in_flight_per_host = u32::try_from(w.webhook_max_in_flight_per_host).unwrap_or(u32::MAX);
    s.max_in_flight_per_tenant =
        u32::try_from(w.webhook_max_in_flight_per_tenant).unwrap_or(u32::MAX);
    let allow_list = |prefixes: &[String], networks: &[String]| {
        let nets = parse_networks(networks)?;
        AllowList::new(prefixes, &nets)
    };
    s.allow = allow_list(&w.callback_allow, &w.callback_allow_networks)?;
    s.retry = w.retry();
    for (name, t) in &config.tenants {
        // A tenant's own prefixes or networks replace the top-level ones, each on its own.
        let tenant_allow = match (&t.callback_allow, &t.callback_allow_networks) {
            (None, None) => None,
            (p, n) => Some(allow_list(
                p.as_deref().unwrap_or(&w.callback_allow),
                n.as_deref().unwrap_or(&w.callback_allow_networks),
            )?),
        };
        s.tenants.insert(
            name.clone(),
            TenantWebhooks {
                allow: tenant_allow,
                default_url: t.callback_url.clone(),
                retry: w.tenant_retry(t),
                signing: t
                    .signing()
                    .map_err(|(key, e)| format!("tenants.{name}.{key}: {e}"))?,
                webhooks: t.webhooks.unwrap_or(true),
            },
        );
    }
    Ok(s)
}

/// The history of fires and deliveries (`crate::history`): on disk beside the journal, in
/// memory with the memory store; none on Redis or with `history_retention_s = 0`.
fn open_history(config: &Config) -> Result<Option<Arc<crate::history::History>>, String> {
    if config.history_retention_s == 0 || config.store == StoreChoice::Redis {
        return Ok(None);
    }
    let dir = (config.store == StoreChoice::Journal).then(|| config.data_dir.join("history"));
    let retention = Duration::from_secs(config.history_retention_s);
    let cap = usize::try_from(config.history_max_per_tenant).unwrap_or(usize::MAX);
    crate::history::History::open(dir.as_deref(), retention, cap)
        .map(Some)
        .map_err(|e| format!("history: cannot open {:?}: {e}", dir.unwrap_or_default()))
}
