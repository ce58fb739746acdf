//! The flags of `punctual serve`. Each has an environment variable (`PUNCTUAL_` + the name in
//! capitals) that clap reads when the flag is absent, so flags win over the environment; the
//! file comes below both (see `config::Config::resolve`).

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// TOML configuration file; its keys are these flags' names in snake_case.
    #[arg(long, env = "PUNCTUAL_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to serve HTTP on [default: 127.0.0.1:7480].
    #[arg(long, env = "PUNCTUAL_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Number of shards (threads, one per core) [default: one per available core].
    #[arg(long, env = "PUNCTUAL_SHARDS", value_name = "N")]
    pub shards: Option<String>,
    /// CPU ids to pin the shards to, e.g. "0,1" or "2-5"; sets the shard count.
    #[arg(long, env = "PUNCTUAL_CORES", value_name = "LIST")]
    pub cores: Option<String>,
    /// "auto" pins shard i to the i-th available core; "none" leaves placement to the kernel
    /// [default: auto].
    #[arg(long, env = "PUNCTUAL_PINNING", value_name = "auto|none")]
    pub pinning: Option<String>,
    /// Where timers are made durable: "journal" (a log per shard under --data-dir; a 2xx
    /// means fdatasync'd), "redis" (at --redis; a 2xx means Redis acknowledged), or "memory"
    /// (not durable: pending timers are lost on exit) [default: journal, or redis when --redis
    /// is given].
    #[arg(long, env = "PUNCTUAL_STORE", value_name = "journal|redis|memory")]
    pub store: Option<String>,
    /// The journal's directory; one process at a time [default: ./punctual-data].
    #[arg(long, env = "PUNCTUAL_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<String>,
    /// "always": acknowledge a write once its group commit is fdatasync'd (commits start as
    /// soon as the previous one is durable, up to 4,096 records each). "everysec": once it is
    /// written, with an fdatasync at least once a second: a power cut loses at most about the
    /// last second. "never": once it is written, synced only when a segment is sealed: a power
    /// cut loses what the kernel had not yet written back. Both survive a crash of punctual
    /// [default: always].
    #[arg(long, env = "PUNCTUAL_FSYNC", value_name = "always|everysec|never")]
    pub fsync: Option<String>,
    /// At start, skip (and count) corrupt journal records instead of refusing to start with
    /// an error that names the file and offset; the timers they held are lost [default: false].
    #[arg(long, env = "PUNCTUAL_JOURNAL_SKIP_CORRUPT", value_name = "true|false", num_args = 0..=1, default_missing_value = "true")]
    pub journal_skip_corrupt: Option<String>,
    /// Page timers due more than this many seconds ahead: they are kept on disk beside the
    /// journal, about 40 bytes each in memory instead of their whole record, and loaded into
    /// the wheel this far ahead of their time. The journal store only; 0 keeps every timer
    /// in memory [default: 0].
    #[arg(long, env = "PUNCTUAL_PAGE_HORIZON_S", value_name = "SECONDS")]
    pub page_horizon_s: Option<String>,
    /// Let the kernel back this process with transparent huge pages. Off by default: where the
    /// kernel allows them, the first touch of each 2 MiB page is a stall of 0.2–4 ms on the
    /// thread that touches it, a shard among them [default: false].
    #[arg(long, env = "PUNCTUAL_TRANSPARENT_HUGE_PAGES", value_name = "true|false", num_args = 0..=1, default_missing_value = "true")]
    pub transparent_huge_pages: Option<String>,
    /// Redis URL for the Redis store; implies --store redis. `redis://[user:pass@]host:port[/db]`,
    /// `redis+sentinel://[user:pass@]host:port[,host:port…]/<master-name>[/db]` to follow the
    /// master that Redis Sentinel names through failovers, or
    /// `redis+cluster://[user:pass@]host:port[,host:port…]/` for a Redis Cluster (the hosts are
    /// seeds; each command goes to its slot's master).
    #[arg(long, env = "PUNCTUAL_REDIS", value_name = "URL")]
    pub redis: Option<String>,
    /// With a `redis+cluster://` store, the `host:port` other nodes reach this one's HTTP at,
    /// and its id in the cluster. With it, the node joins the others on that cluster: it holds
    /// leases for its share of the partitions and forwards requests for the rest to their
    /// owners. Without it, a node owns every partition: run one such node per cluster.
    #[arg(long, env = "PUNCTUAL_ADVERTISE", value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Redis replicas that must hold a write before it is acknowledged (WAIT N after each
    /// pipeline), so that an acknowledged timer survives the loss of the master; 0 trusts the
    /// master alone [default: 0].
    #[arg(long, env = "PUNCTUAL_REDIS_WAIT_REPLICAS", value_name = "N")]
    pub redis_wait_replicas: Option<String>,
    /// Start a node among others (`--advertise` on a Redis Cluster) even though a master's
    /// maxmemory-policy is allkeys-*, which may evict epoch counters and timer records
    /// [default: false: such a start is refused].
    #[arg(long, env = "PUNCTUAL_REDIS_ALLOW_EVICTION", value_name = "true|false", num_args = 0..=1, default_missing_value = "true")]
    pub redis_allow_eviction: Option<String>,
    /// The secret every node of a cluster shares (`--advertise` on a Redis Cluster), at least
    /// 32 bytes: each node's record in Redis carries a proof of it, and a node counts only the
    /// records that prove it (no partitions, no forwards for the others).
    #[arg(
        long,
        env = "PUNCTUAL_CLUSTER_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,
    /// With `[tenants.*]` tables in the config file, serve tenants that have none too
    /// [default: false: they are answered 401 unknown_tenant].
    #[arg(long, env = "PUNCTUAL_OPEN_TENANTS", value_name = "true|false", num_args = 0..=1, default_missing_value = "true")]
    pub open_tenants: Option<String>,
    /// `GET /metrics` then needs `Authorization: Bearer <TOKEN>` (at least 32 bytes).
    #[arg(
        long,
        env = "PUNCTUAL_METRICS_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub metrics_token: Option<String>,
    /// Microseconds before a deadline at which a shard stops parking and spins; 0 turns
    /// spinning off for shared hosts [default: 100].
    #[arg(long, env = "PUNCTUAL_SPIN_US", value_name = "N")]
    pub spin_us: Option<String>,
    /// Let each shard's spin window follow its measured wake-up latency (the recent p99.9 of
    /// how late its parks resumed, plus a margin), with --spin-us as the ceiling: a host that
    /// wakes fast spins less [default: false].
    #[arg(long, env = "PUNCTUAL_SPIN_ADAPTIVE", value_name = "true|false", num_args = 0..=1, default_missing_value = "true")]
    pub spin_adaptive: Option<String>,
    /// Requests each shard's ring holds before callers get 503 overloaded [default: 65536].
    #[arg(long, env = "PUNCTUAL_RING_CAPACITY", value_name = "N")]
    pub ring_capacity: Option<String>,
    /// Pending timers one shard may hold; past it new keys get 503 capacity_exceeded. Nothing
    /// is reserved for them: a shard's table grows with its timers [default: 10000000].
    #[arg(long, env = "PUNCTUAL_SHARD_CAPACITY", value_name = "N")]
    pub shard_capacity: Option<String>,
    /// Recurring schedules one tenant may hold, unless its table says; past it a new one gets
    /// 429 quota_exceeded [default: 10000].
    #[arg(long, env = "PUNCTUAL_MAX_SCHEDULES", value_name = "N")]
    pub max_schedules: Option<String>,
    /// Open HTTP connections, all shards together; more are answered 503 and closed
    /// [default: 10000].
    #[arg(long, env = "PUNCTUAL_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<String>,
    /// Open HTTP connections from one client address (an IPv6 client by its /64); more are
    /// answered 503 and closed. `max_connections_per_address_exempt` in the file lists
    /// networks not counted [default: 1000].
    #[arg(long, env = "PUNCTUAL_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N")]
    pub max_connections_per_address: Option<String>,
    /// Largest request head (request line and headers), in bytes; larger is 431
    /// [default: 16384, at least 8192].
    #[arg(long, env = "PUNCTUAL_MAX_HEADER_BYTES", value_name = "N")]
    pub max_header_bytes: Option<String>,
    /// Largest single-timer request body, in bytes; larger is 413 [default: 131072].
    #[arg(long, env = "PUNCTUAL_MAX_BODY_BYTES", value_name = "N")]
    pub max_body_bytes: Option<String>,
    /// Largest batch request body, in bytes; larger is 413 [default: 16777216].
    #[arg(long, env = "PUNCTUAL_MAX_BATCH_BODY_BYTES", value_name = "N")]
    pub max_batch_body_bytes: Option<String>,
    /// A connection must deliver its next complete request head within this many ms of
    /// opening or of its previous response, else it is closed: the idle keep-alive limit and
    /// the bound on slow header senders (slowloris) [default: 30000].
    #[arg(long, env = "PUNCTUAL_IDLE_TIMEOUT_MS", value_name = "MS")]
    pub idle_timeout_ms: Option<String>,
    /// A request body must arrive within this many ms of its head, else 408; a peer that
    /// stops reading our response for this long is disconnected [default: 10000].
    #[arg(long, env = "PUNCTUAL_BODY_TIMEOUT_MS", value_name = "MS")]
    pub body_timeout_ms: Option<String>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish [default: 10000].
    #[arg(long, env = "PUNCTUAL_SHUTDOWN_TIMEOUT_MS", value_name = "MS")]
    pub shutdown_timeout_ms: Option<String>,
    /// On SIGTERM/SIGINT, once requests are drained, how long webhook deliveries in flight
    /// may take to finish and have their outcomes recorded (0 to 50000) [default: 5000].
    #[arg(long, env = "PUNCTUAL_SHUTDOWN_GRACE_MS", value_name = "MS")]
    pub shutdown_grace_ms: Option<String>,
    /// At start, how long to keep retrying while the address is in use: after a crash the old
    /// process's sockets take a moment to close. Past it, start-up fails; 0 tries once
    /// [default: 5000].
    #[arg(long, env = "PUNCTUAL_BIND_RETRY_MS", value_name = "MS")]
    pub bind_retry_ms: Option<String>,
    /// Print the resolved configuration as TOML and exit (tokens are masked).
    #[arg(long)]
    pub print_config: bool,
}

/// `punctual journal`: the offline tool for a journal's data directory (never beside a
/// running server on it).
#[derive(Args, Debug, Clone)]
pub struct JournalArgs {
    #[command(subcommand)]
    pub command: JournalCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum JournalCommand {
    /// Check every file of a data directory: record counts, the log's continuity, the first
    /// damage, and what --journal-skip-corrupt would skip. Exit 0 only when a start would
    /// recover everything acknowledged; 1 when it would refuse or lose data; 2 when the
    /// directory cannot be read.
    Check {
        /// The data directory (serve's --data-dir).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print every header and record of a data directory's journal as JSON lines.
    Dump {
        /// The data directory (serve's --data-dir).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Only this shard's directory.
        #[arg(long, value_name = "N")]
        shard: Option<usize>,
    },
}

/// `punctual cluster`: what the nodes sharing a Redis Cluster say of it.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ClusterCommand {
    /// Ask one node (any) which nodes are live, which partitions each holds the lease of and
    /// under which epochs, and what that node itself holds. Exit 0 when the node answered; 1
    /// when it could not be reached, is not in cluster mode, or Redis did not answer it.
    Status {
        /// The node's HTTP address (serve's --listen).
        #[arg(long, env = "PUNCTUAL_URL", default_value = "http://127.0.0.1:7480")]
        url: String,
        /// Print the node's JSON answer as it came, instead of the table.
        #[arg(long)]
        json: bool,
        /// The node's metrics_token, when it has one (GET /cluster then needs it).
        #[arg(
            long,
            env = "PUNCTUAL_METRICS_TOKEN",
            value_name = "TOKEN",
            hide_env_values = true
        )]
        token: Option<String>,
    },
}
