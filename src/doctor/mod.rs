//! `punctual doctor`: the host preflight.
//!
//! Owns the command's arguments, the [`Context`] every check reads (the host root, the
//! shard cores, the shard count) and the order of the checks. Each group of checks
//! lives in its own module, which owns the files it reads and the thresholds it applies:
//!
//! | module      | checks                                                        |
//! |-------------|---------------------------------------------------------------|
//! | `clock`     | `clock.tsc`, `clock.clocksource`, `clock.hypervisor`          |
//! | `cores`     | `cores.available`, `cores.isolation`                          |
//! | `power`     | `cores.governor`, `cores.cstates`                             |
//! | `irq`       | `cores.irq`                                                   |
//! | `memory`    | `memory.thp`, `memory.swap`, `memory.memlock`                 |
//! | `io_uring`  | `io_uring.kernel`, `io_uring.enabled`                         |
//! | `timesync`  | `time.sync`, `time.daemon`, `time.step`                       |
//! | `process`   | `process.timerslack`                                          |
//! | `redis`     | `redis.maxmemory_policy`, `redis.wait_replicas` (with `--redis`) |
//!
//! The `redis` checks ask the Redis Cluster `--redis` names (`nodes::preflight`, what a node
//! checks at start); every other check reads files under [`Host`]'s root (`/` unless the hidden `--root` points
//! at a fixture tree), never panics on what it finds, and says PASS, WARN or FAIL with
//! what it found, why it matters and the fix (see [`report::Status`] for what each means).
//! The exit status is 0 when nothing failed and 1 otherwise.

mod clock;
mod context;
mod cores;
pub mod cpulist;
pub mod host;
mod io_uring;
mod irq;
mod memory;
mod power;
mod process;
mod redis;
pub mod report;
mod timesync;

use std::path::PathBuf;

use clap::Args;

pub use context::Context;
pub use cpulist::CpuSet;
pub use host::Host;
pub use report::{Check, Group, Report, Status};

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    pub json: bool,

    /// The CPU list the service will run its shards on (as `serve --cores`), e.g. `2-5,8`.
    /// Default: every core this process may run on, as serve does.
    #[arg(long, env = "PUNCTUAL_CORES", value_name = "LIST", value_parser = CpuSet::parse)]
    pub cores: Option<CpuSet>,

    /// The shard count the memory checks assume. Default: the number of shard cores.
    #[arg(long, env = "PUNCTUAL_SHARDS", value_name = "N")]
    pub shards: Option<usize>,

    /// Read /proc and /sys under this directory instead of `/` (for fixture trees).
    #[arg(long, hide = true, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// A Redis Cluster URL (as `serve --redis`): check each master's maxmemory-policy and its
    /// replicas against `--redis-wait-replicas`, as a node does at start.
    #[arg(long, env = "PUNCTUAL_REDIS", value_name = "URL")]
    pub redis: Option<String>,

    /// The `--redis-wait-replicas` the nodes will run with (with `--redis`).
    #[arg(
        long,
        env = "PUNCTUAL_REDIS_WAIT_REPLICAS",
        value_name = "N",
        default_value_t = 0
    )]
    pub redis_wait_replicas: u32,
}

/// Runs every check and gathers the report.
pub fn collect(ctx: &Context) -> Report {
    let mut checks = Vec::new();
    checks.extend(clock::checks(&ctx.host));
    checks.extend(cores::checks(ctx));
    checks.extend(power::checks(ctx));
    checks.extend(irq::checks(ctx));
    checks.extend(memory::checks(&ctx.host, ctx.shards));
    checks.extend(io_uring::checks(&ctx.host));
    checks.extend(timesync::checks(&ctx.host));
    checks.extend(process::checks(&ctx.host));
    Report::new(
        ctx.host.root().display().to_string(),
        ctx.cores.to_string(),
        ctx.cores_given,
        ctx.shards,
        checks,
    )
}

/// Runs the checks, prints the report and returns the process exit status.
pub fn run(args: &DoctorArgs) -> i32 {
    let ctx = Context::new(
        Host::new(args.root.clone()),
        args.cores.clone(),
        args.shards,
    );
    let mut report = collect(&ctx);
    if let Some(url) = &args.redis {
        let mut checks = report.checks;
        checks.extend(redis::checks(url, args.redis_wait_replicas));
        report = Report::new(
            report.root,
            report.cores,
            report.cores_given,
            report.shards,
            checks,
        );
    }
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    report.exit_code()
}
