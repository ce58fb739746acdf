//! The `punctual` binary: `serve` runs the service, `doctor` checks the host, `journal`
//! checks and dumps a journal's data directory offline, `cluster status` asks a node sharing a
//! Redis Cluster what it sees of the others, `schedules next` prints when a schedule fires.

#![deny(clippy::undocumented_unsafe_blocks)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "punctual",
    version,
    about = "Thread-per-core timer service with sub-millisecond lateness"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the timer service: the HTTP API on every shard (see --help for every option).
    Serve(Box<punctual::config::ServeArgs>),
    /// Check this host for what punctual needs: invariant TSC, isolated cores, io_uring, time sync.
    Doctor(punctual::doctor::DoctorArgs),
    /// Check or dump a journal's data directory offline (stop the server on it first).
    Journal(punctual::config::JournalArgs),
    /// Ask a node sharing a Redis Cluster which nodes are live and which partitions each holds.
    Cluster(punctual::config::ClusterArgs),
    /// Check a recurring schedule without a server: its next occurrences, in UTC and local time.
    Schedules(punctual::schedule::cli::SchedulesArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Doctor(args) => ExitCode::from(punctual::doctor::run(&args).clamp(0, 255) as u8),
        Command::Journal(args) => journal(&args),
        Command::Cluster(args) => punctual::api::cli::run(&args),
        Command::Schedules(args) => punctual::schedule::cli::run(&args),
    }
}

/// `punctual journal check|dump`: check exits 0 when a start would recover everything
/// acknowledged, 1 when it would refuse or lose data; either exits 2 when it cannot read.
fn journal(args: &punctual::config::JournalArgs) -> ExitCode {
    use punctual::config::JournalCommand;
    use punctual::store::journal::check;
    let mut out = std::io::stdout().lock();
    let done = match &args.command {
        JournalCommand::Check { dir } => check::check(dir, &mut out).map(|lossless| {
            if lossless {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        JournalCommand::Dump { dir, shard } => {
            check::dump(dir, *shard, &mut out).map(|()| ExitCode::SUCCESS)
        }
    };
    done.unwrap_or_else(|e| {
        eprintln!("punctual journal: {e}");
        ExitCode::from(2)
    })
}

/// `punctual serve`: exit 0 after a clean shutdown, 2 for a configuration error, 1 otherwise.
fn serve(args: &punctual::config::ServeArgs) -> ExitCode {
    let config = match punctual::config::Config::load(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("punctual: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print_config {
        print!("{}", config.to_toml_masked());
        return ExitCode::SUCCESS;
    }
    if !config.transparent_huge_pages {
        if let Err(e) = punctual::engine::transparent_huge_pages_off() {
            eprintln!(
                "punctual: could not turn transparent huge pages off for this process ({e}); page faults may stall a shard for milliseconds"
            );
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    match punctual::api::serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("punctual: {e}");
            ExitCode::FAILURE
        }
    }
}
