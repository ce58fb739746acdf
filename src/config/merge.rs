//! Merging flags/env over the file over the defaults, and validating the result.

use super::*;

impl Config {
    /// Loads the file named by `--config` (if any) and resolves it with the flags.
    pub fn load(args: &ServeArgs) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        Config::resolve(file, args)
    }

    /// Flags (which clap has already overlaid on the environment) over the file over defaults.
    pub fn resolve(file: FileConfig, args: &ServeArgs) -> Result<Config, ConfigError> {
        let d = Config::default();
        let webhooks = WebhookConfig::resolve(&file)?;
        let u = |key: &str,
                 flag: &Option<String>,
                 file: Option<u64>,
                 default: u64,
                 lo: u64,
                 hi: u64| {
            let v = pick(key, flag, file)?.unwrap_or(default);
            in_range(key, v, lo, hi)
        };
        let listen_text = match (&args.listen, &file.listen) {
            (Some(s), _) | (None, Some(s)) => Some(s.clone()),
            (None, None) => None,
        };
        let listen = match listen_text {
            Some(s) => s.trim().parse::<SocketAddr>().map_err(|e| {
                invalid(
                    "listen",
                    &s,
                    format!("{e}; expected IP:PORT such as 127.0.0.1:7480"),
                )
            })?,
            None => d.listen,
        };
        let cores = match (&args.cores, file.cores) {
            (Some(s), _) => Some(parse_cores(s).map_err(|e| invalid("cores", s, e))?),
            (None, Some(c)) => Some(c.into_iter().map(|c| c as usize).collect()),
            (None, None) => None,
        };
        if let Some(c) = &cores {
            if c.is_empty() {
                return Err(invalid("cores", "", "must name at least one CPU id"));
            }
            let available = crate::cpus::available_cores();
            if let Some(bad) = c.iter().find(|c| !available.contains(c)) {
                return Err(invalid(
                    "cores",
                    format!("{c:?}"),
                    format!(
                        "CPU {bad} is not available to this process (available: {available:?})"
                    ),
                ));
            }
        }
        let pinning = match pick::<String>("pinning", &args.pinning, file.pinning)?.as_deref() {
            None | Some("auto") => PinningMode::Auto,
            Some("none") => PinningMode::None,
            Some(other) => return Err(invalid("pinning", other, "must be \"auto\" or \"none\"")),
        };
        let shards_default = cores.as_ref().map_or(d.shards as u64, |c| c.len() as u64);
        let shards = u("shards", &args.shards, file.shards, shards_default, 1, 1024)? as usize;
        if let Some(c) = &cores {
            if c.len() != shards {
                return Err(invalid(
                    "shards",
                    shards,
                    format!(
                        "{} cores are listed in `cores`; give as many shards or leave `shards` out",
                        c.len()
                    ),
                ));
            }
        } else if pinning == PinningMode::Auto
            && shards > crate::cpus::available_cores().len().max(1)
        {
            return Err(invalid(
                "shards",
                shards,
                format!(
                    "only {} cores are available to pin to; lower it or set pinning = \"none\"",
                    crate::cpus::available_cores().len()
                ),
            ));
        }
        let redis = pick::<String>("redis", &args.redis, file.redis)?;
        if let Some(url) = &redis {
            crate::store::redis::RedisConfig::new(url.clone())
                .endpoint()
                .map_err(|e| invalid("redis", crate::store::redis::endpoint::shown(url), e))?;
        }
        let store = match (
            pick::<String>("store", &args.store, file.store)?.as_deref(),
            &redis,
        ) {
            (None, Some(_)) | (Some("redis"), Some(_)) => StoreChoice::Redis,
            (None, None) | (Some("journal"), None) => StoreChoice::Journal,
            (Some("memory"), None) => StoreChoice::Memory,
            (Some("redis"), None) => {
                return Err(invalid(
                    "store",
                    "redis",
                    "needs `redis` = redis://host:port[/db]",
                ))
            }
            (Some(s @ ("journal" | "memory")), Some(url)) => {
                return Err(invalid(
                    "store",
                    s,
                    format!(
                        "`redis` = {:?} is also set; choose one store",
                        crate::store::redis::endpoint::shown(url)
                    ),
                ))
            }
            (Some(other), _) => {
                return Err(invalid(
                    "store",
                    other,
                    "must be \"journal\", \"redis\" or \"memory\"",
                ))
            }
        };
        let redis_wait_replicas = u(
            "redis_wait_replicas",
            &args.redis_wait_replicas,
            file.redis_wait_replicas,
            d.redis_wait_replicas.into(),
            0,
            64,
        )? as u32;
        let redis_allow_eviction = pick::<bool>(
            "redis_allow_eviction",
            &args.redis_allow_eviction,
            file.redis_allow_eviction,
        )?
        .unwrap_or(false);
        let advertise = pick::<String>("advertise", &args.advertise, file.advertise)?;
        let cluster_secret =
            pick::<String>("cluster_secret", &args.cluster_secret, file.cluster_secret)?;
        if let Some(secret) = &cluster_secret {
            check_secret("cluster_secret", secret)?;
        }
        if let Some(a) = &advertise {
            check_advertise(a, redis.as_deref())?;
            if cluster_secret.is_none() {
                return Err(invalid(
                    "cluster_secret",
                    "(none)",
                    "is required with `advertise`: the nodes of a cluster prove it to each other, \
                     and count no node record in Redis that does not (`openssl rand -hex 32`, \
                     the same on every node)",
                ));
            }
        }
        if redis_wait_replicas > 0 && store != StoreChoice::Redis {
            return Err(invalid(
                "redis_wait_replicas",
                redis_wait_replicas,
                "applies to the Redis store only; set `redis` too",
            ));
        }
        let page_horizon_s = u(
            "page_horizon_s",
            &args.page_horizon_s,
            file.page_horizon_s,
            d.page_horizon_s,
            0,
            366 * 86_400,
        )?;
        if page_horizon_s > 0 && store != StoreChoice::Journal {
            return Err(invalid(
                "page_horizon_s",
                page_horizon_s,
                "applies to the journal store only",
            ));
        }
        let data_dir = match pick::<String>("data_dir", &args.data_dir, file.data_dir)? {
            Some(d) if d.trim().is_empty() => {
                return Err(invalid("data_dir", d, "must name a directory"))
            }
            Some(d) => std::path::PathBuf::from(d),
            None => d.data_dir.clone(),
        };
        let fsync = match pick::<String>("fsync", &args.fsync, file.fsync)?.as_deref() {
            None | Some("always") => FsyncMode::Always,
            Some("everysec") => FsyncMode::EverySec,
            Some("never") => FsyncMode::Never,
            Some(other) => {
                return Err(invalid(
                    "fsync",
                    other,
                    "must be \"always\", \"everysec\" or \"never\"",
                ))
            }
        };
        let journal_skip_corrupt = pick::<bool>(
            "journal_skip_corrupt",
            &args.journal_skip_corrupt,
            file.journal_skip_corrupt,
        )?
        .unwrap_or(false);
        let transparent_huge_pages = pick::<bool>(
            "transparent_huge_pages",
            &args.transparent_huge_pages,
            file.transparent_huge_pages,
        )?
        .unwrap_or(false);
        let spin_adaptive = pick::<bool>("spin_adaptive", &args.spin_adaptive, file.spin_adaptive)?
            .unwrap_or(false);
        let max_header_bytes = u(
            "max_header_bytes",
            &args.max_header_bytes,
            file.max_header_bytes,
            d.max_header_bytes as u64,
            8192,
            1 << 20,
        )? as usize;
        let max_body_bytes = u(
            "max_body_bytes",
            &args.max_body_bytes,
            file.max_body_bytes,
            d.max_body_bytes as u64,
            1024,
            1 << 30,
        )? as usize;
        let max_batch_body_bytes = u(
            "max_batch_body_bytes",
            &args.max_batch_body_bytes,
            file.max_batch_body_bytes,
            d.max_batch_body_bytes as u64,
            1024,
            1 << 32,
        )? as usize;
        let max_connections_per_address_exempt =
            file.max_connections_per_address_exempt.unwrap_or_default();
        crate::sink::webhook::address::parse_networks(&max_connections_per_address_exempt)
            .map_err(|e| invalid("max_connections_per_address_exempt", "…", e))?;
        let tenants = file.tenants;
        for (name, t) in &tenants {
            let key = format!("tenants.{name}");
            crate::error::validate_name(crate::error::NameKind::Tenant, name)
                .map_err(|e| invalid(&key, name, e))?;
            if let Some(tok) = &t.token {
                check_secret(&format!("{key}.token"), tok)?;
            }
            if let Some(secret) = &t.webhook_secret {
                check_secret(&format!("{key}.webhook_secret"), secret)?;
            }
            for secret in t.webhook_secrets.iter().flatten() {
                check_secret(&format!("{key}.webhook_secrets"), secret)?;
            }
            if t.max_pending == Some(0) {
                return Err(invalid(
                    &format!("{key}.max_pending"),
                    0,
                    "must be at least 1 (leave it out for no quota)",
                ));
            }
            if t.max_schedules == Some(0) {
                return Err(invalid(
                    &format!("{key}.max_schedules"),
                    0,
                    "must be at least 1",
                ));
            }
            if let Some(n) = t.queue_max_receives.filter(|n| !(1..=1000).contains(n)) {
                return Err(invalid(
                    &format!("{key}.queue_max_receives"),
                    n,
                    "must be from 1 to 1000",
                ));
            }
            check_queue(&key, t)?;
            check_rate(&key, t)?;
        }
        let (queue_retention_s, queue_max_waiting) =
            queue_defaults(file.queue_retention_s, file.queue_max_waiting)?;
        let open_tenants =
            pick::<bool>("open_tenants", &args.open_tenants, file.open_tenants)?.unwrap_or(false);
        let metrics_token = match (&args.metrics_token, file.metrics_token) {
            (Some(s), _) => Some(s.clone()),
            (None, f) => f,
        };
        if let Some(tok) = &metrics_token {
            check_secret("metrics_token", tok)?;
        }
        Ok(Config {
            webhooks,
            listen,
            shards,
            cores,
            pinning,
            store,
            data_dir,
            fsync,
            journal_skip_corrupt,
            page_horizon_s,
            transparent_huge_pages,
            redis,
            redis_wait_replicas,
            redis_allow_eviction,
            advertise,
            cluster_secret,
            spin_us: u(
                "spin_us",
                &args.spin_us,
                file.spin_us,
                d.spin_us,
                0,
                1_000_000,
            )?,
            spin_adaptive,
            ring_capacity: u(
                "ring_capacity",
                &args.ring_capacity,
                file.ring_capacity,
                d.ring_capacity as u64,
                16,
                1 << 24,
            )? as usize,
            shard_capacity: u(
                "shard_capacity",
                &args.shard_capacity,
                file.shard_capacity,
                d.shard_capacity as u64,
                1,
                1 << 32,
            )? as usize,
            max_schedules: u(
                "max_schedules",
                &args.max_schedules,
                file.max_schedules,
                d.max_schedules,
                1,
                1 << 32,
            )?,
            max_connections: u(
                "max_connections",
                &args.max_connections,
                file.max_connections,
                d.max_connections as u64,
                1,
                1 << 24,
            )? as usize,
            max_connections_per_address: u(
                "max_connections_per_address",
                &args.max_connections_per_address,
                file.max_connections_per_address,
                d.max_connections_per_address as u64,
                1,
                1 << 24,
            )? as usize,
            max_connections_per_address_exempt,
            max_header_bytes,
            max_body_bytes,
            max_batch_body_bytes,
            idle_timeout_ms: u(
                "idle_timeout_ms",
                &args.idle_timeout_ms,
                file.idle_timeout_ms,
                d.idle_timeout_ms,
                1,
                86_400_000,
            )?,
            body_timeout_ms: u(
                "body_timeout_ms",
                &args.body_timeout_ms,
                file.body_timeout_ms,
                d.body_timeout_ms,
                1,
                86_400_000,
            )?,
            shutdown_timeout_ms: u(
                "shutdown_timeout_ms",
                &args.shutdown_timeout_ms,
                file.shutdown_timeout_ms,
                d.shutdown_timeout_ms,
                0,
                86_400_000,
            )?,
            // Under the engine's 60 s bound on joining a stopping shard.
            shutdown_grace_ms: u(
                "shutdown_grace_ms",
                &args.shutdown_grace_ms,
                file.shutdown_grace_ms,
                d.shutdown_grace_ms,
                0,
                50_000,
            )?,
            bind_retry_ms: u(
                "bind_retry_ms",
                &args.bind_retry_ms,
                file.bind_retry_ms,
                d.bind_retry_ms,
                0,
                600_000,
            )?,
            open_tenants,
            metrics_token,
            queue_retention_s,
            queue_max_waiting,
            history_retention_s: in_range(
                "history_retention_s",
                file.history_retention_s.unwrap_or(d.history_retention_s),
                0,
                30 * 86_400,
            )?,
            history_max_per_tenant: in_range(
                "history_max_per_tenant",
                file.history_max_per_tenant
                    .unwrap_or(d.history_max_per_tenant),
                1,
                1_000_000,
            )?,
            tenants,
        })
    }

    /// The configuration as TOML, with tokens masked (for `--print-config`).
    pub fn to_toml_masked(&self) -> String {
        let mut shown = self.clone();
        shown.redis = shown.redis.as_deref().map(super::mask_url);
        if shown.metrics_token.is_some() {
            shown.metrics_token = Some("***".into());
        }
        if shown.cluster_secret.is_some() {
            shown.cluster_secret = Some("***".into());
        }
        for t in shown.tenants.values_mut() {
            if t.token.is_some() {
                t.token = Some("***".into());
            }
            if t.webhook_secret.is_some() {
                t.webhook_secret = Some("***".into());
            }
            if let Some(list) = &mut t.webhook_secrets {
                list.iter_mut().for_each(|s| *s = "***".into());
            }
        }
        toml::to_string(&shown).unwrap_or_else(|e| format!("# could not render: {e}\n"))
    }
}

/// A bearer token or webhook secret: at least [`MIN_SECRET_BYTES`] bytes, no whitespace (a
/// token travels in a header, where whitespace would be cut). The value is never echoed.
fn check_secret(key: &str, secret: &str) -> Result<(), ConfigError> {
    if secret.contains(char::is_whitespace) {
        return Err(invalid(key, "***", "must not contain whitespace"));
    }
    if secret.len() < MIN_SECRET_BYTES {
        return Err(invalid(
            key,
            "***",
            format!(
                "is {} bytes; at least {MIN_SECRET_BYTES} are needed (for example `openssl rand -hex 32`)",
                secret.len()
            ),
        ));
    }
    Ok(())
}

/// A tenant's `max_requests_per_s` and `burst`: both at least 1, and a burst only with a rate.
fn check_rate(key: &str, t: &TenantConfig) -> Result<(), ConfigError> {
    match (t.max_requests_per_s, t.burst) {
        (None, None) => Ok(()),
        (None, Some(b)) => Err(invalid(
            &format!("{key}.burst"),
            b,
            "needs `max_requests_per_s` too",
        )),
        (Some(rate), burst) => {
            in_range(&format!("{key}.max_requests_per_s"), rate, 1, 1_000_000)?;
            if let Some(b) = burst {
                in_range(&format!("{key}.burst"), b, 1, 1_000_000)?;
            }
            Ok(())
        }
    }
}

/// `advertise` names a reachable `host:port` (not a wildcard address such as 0.0.0.0), and
/// goes with a `redis+cluster://` store: it is a node's id among the nodes of one cluster.
fn check_advertise(a: &str, redis: Option<&str>) -> Result<(), ConfigError> {
    let (host, _) = crate::store::redis::authority::host_port(a.trim(), "advertise")
        .map_err(|e| invalid("advertise", a, e))?;
    if host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return Err(invalid(
            "advertise",
            a,
            "is a wildcard address; give the address other nodes reach this one at",
        ));
    }
    let cluster = crate::store::redis::cluster::CLUSTER_SCHEME;
    if !redis.is_some_and(|u| u.starts_with(cluster)) {
        return Err(invalid(
            "advertise",
            a,
            format!("applies to a Redis Cluster store only; set `redis` = {cluster}host:port,…/"),
        ));
    }
    Ok(())
}

/// The top-level `queue_retention_s` and `queue_max_waiting`, checked, or their defaults.
fn queue_defaults(
    retention_s: Option<u64>,
    max_waiting: Option<u64>,
) -> Result<(u64, u64), ConfigError> {
    let d = Config::default();
    let retention_s = retention_s.unwrap_or(d.queue_retention_s);
    let max_waiting = max_waiting.unwrap_or(d.queue_max_waiting);
    check_retention("queue_retention_s", retention_s)?;
    in_range(
        "queue_max_waiting",
        max_waiting,
        1,
        crate::queue::MAX_WAITING,
    )?;
    Ok((retention_s, max_waiting))
}

fn check_retention(key: &str, v: u64) -> Result<(), ConfigError> {
    use crate::queue::MAX_RETENTION_S;
    if (1..=MAX_RETENTION_S).contains(&v) {
        return Ok(());
    }
    Err(invalid(
        key,
        v,
        format!(
            "must be from 1 to {MAX_RETENTION_S} seconds (a year); the default is 604800 (7 days)"
        ),
    ))
}

/// A tenant's `queue_retention_s` and `queue_max_waiting`, when it sets them.
fn check_queue(key: &str, t: &TenantConfig) -> Result<(), ConfigError> {
    if let Some(v) = t.queue_retention_s {
        check_retention(&format!("{key}.queue_retention_s"), v)?;
    }
    if let Some(n) = t.queue_max_waiting {
        in_range(
            &format!("{key}.queue_max_waiting"),
            n,
            1,
            crate::queue::MAX_WAITING,
        )?;
    }
    Ok(())
}
