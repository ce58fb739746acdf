//! The `punctual` binary: `serve` runs the service, `doctor` checks the host.

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
    /// Check this host for what punctual needs: invariant TSC, isolated cores, io_uring, time sync.
    Doctor(punctual::doctor::DoctorArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Doctor(args) => ExitCode::from(punctual::doctor::run(&args).clamp(0, 255) as u8),
    }
}
