//! `punctual doctor`: host preflight checks. (Being built; see issue 5.)

use clap::Args;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    pub json: bool,
}

/// Runs the checks and returns the process exit status.
pub fn run(_args: &DoctorArgs) -> i32 {
    0
}
