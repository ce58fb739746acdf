//! `punctual schedules next`: prints a schedule's next occurrences in UTC and local time,
//! without a server, for people checking an expression before they send it.
//!
//! ```text
//! $ punctual schedules next '30 2 * * *' --tz America/New_York -n 3 --after 2027-03-12T12:00:00Z
//! # 30 2 * * * in America/New_York (dst gap shift, overlap first)
//!   1  2027-03-13T07:30:00Z  2027-03-13T02:30:00-05:00
//!   2  2027-03-14T07:30:00Z  2027-03-14T03:30:00-04:00
//!   3  2027-03-15T06:30:00Z  2027-03-15T02:30:00-04:00
//! ```
//!
//! The definition is the positional argument (a cron expression, or the whole JSON
//! definition the API takes) and the flags, which override it. Exit 0 when it is valid
//! (even if it has no occurrence left), 2 when it is not, with the error on stderr.

use super::{Limits, ScheduleSpec};
use crate::units::UtcMicros;
use std::process::ExitCode;

/// The most occurrences one command prints.
pub const MAX_COUNT: usize = 10_000;

/// `punctual schedules …`
#[derive(clap::Args, Debug, Clone)]
pub struct SchedulesArgs {
    #[command(subcommand)]
    pub command: SchedulesCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum SchedulesCommand {
    /// Print the next occurrences of a cron expression or a period, in UTC and local time.
    Next(NextArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct NextArgs {
    /// A cron expression (`'30 2 * * *'`, `'@hourly'`), or a whole definition as JSON
    /// (`'{"every_ms": 60000, "start_at": "2027-01-01T00:00:00Z"}'`).
    pub spec: Option<String>,
    /// The cron expression (instead of the positional argument).
    #[arg(long)]
    pub cron: Option<String>,
    /// A fixed period in milliseconds, anchored at --start-at (or --after).
    #[arg(long)]
    pub every_ms: Option<u64>,
    /// The IANA time zone the cron is read in (default UTC).
    #[arg(long = "tz", visible_alias = "time-zone", value_name = "ZONE")]
    pub tz: Option<String>,
    /// How many occurrences to print.
    #[arg(short = 'n', long, default_value_t = 10)]
    pub count: usize,
    /// Print the occurrences strictly after this RFC 3339 time (default: now).
    #[arg(long, value_name = "TIME")]
    pub after: Option<String>,
    /// No occurrence before this RFC 3339 time; a period counts from it (default: --after).
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// No occurrence after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    pub end_at: Option<String>,
    /// A local time that does not occur (spring forward): `shift` (default) or `skip`.
    #[arg(long, value_name = "POLICY")]
    pub gap: Option<String>,
    /// A local time that occurs twice (fall back): `first` (default), `last` or `both`.
    #[arg(long, value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Print `{"next": [{"occurrence_us": …, "local": …}, …]}`, as the API answers.
    #[arg(long)]
    pub json: bool,
}

/// Runs `punctual schedules …`; errors go to stderr.
pub fn run(args: &SchedulesArgs) -> ExitCode {
    let SchedulesCommand::Next(next) = &args.command;
    match render(next) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("punctual schedules next: {e}");
            ExitCode::from(2)
        }
    }
}

/// The text `schedules next` prints, or the error it reports.
pub fn render(args: &NextArgs) -> Result<String, String> {
    if args.count > MAX_COUNT {
        return Err(format!("--count: at most {MAX_COUNT}"));
    }
    let spec = spec_of(args)?;
    let after = match &args.after {
        Some(t) => micros("--after", t)?,
        None => now(),
    };
    let schedule = spec
        .compile(after, &Limits::default())
        .map_err(|e| e.to_string())?;
    let next = schedule.upcoming(after, args.count);
    let mut out = String::new();
    if args.json {
        let items: Vec<serde_json::Value> = next
            .iter()
            .map(|o| serde_json::json!({"occurrence_us": o.at.0, "local": o.local()}))
            .collect();
        out.push_str(&serde_json::json!({ "next": items }).to_string());
        out.push('\n');
        return Ok(out);
    }
    let dst = spec.dst.unwrap_or_default();
    let what = match (&spec.cron, spec.every_ms) {
        (Some(c), _) => format!(
            "{c} in {} (dst gap {}, overlap {})",
            schedule.time_zone(),
            name(dst.gap),
            name(dst.overlap)
        ),
        (None, Some(ms)) => format!("every {ms} ms from {}", utc(schedule.start())),
        (None, None) => String::new(),
    };
    out.push_str(&format!("# {what}\n"));
    if next.is_empty() && args.count > 0 {
        out.push_str("# no occurrence after that time\n");
    }
    for (i, o) in next.iter().enumerate() {
        out.push_str(&format!("{:>4}  {}  {}\n", i + 1, o.utc(), o.local()));
    }
    Ok(out)
}

/// The definition: the positional argument, then the flags over it.
fn spec_of(args: &NextArgs) -> Result<ScheduleSpec, String> {
    let mut spec = match args.spec.as_deref().map(str::trim) {
        Some(s) if s.starts_with('{') => serde_json::from_str::<ScheduleSpec>(s)
            .map_err(|e| format!("the definition is not a schedule's JSON: {e}"))?,
        Some(s) => ScheduleSpec {
            cron: Some(s.to_string()),
            ..ScheduleSpec::default()
        },
        None => ScheduleSpec::default(),
    };
    if let Some(c) = &args.cron {
        if spec.cron.is_some() {
            return Err("--cron: the positional argument already gives a cron".into());
        }
        spec.cron = Some(c.clone());
    }
    spec.every_ms = args.every_ms.or(spec.every_ms);
    spec.time_zone = args.tz.clone().or(spec.time_zone);
    spec.start_at = args.start_at.clone().or(spec.start_at);
    spec.end_at = args.end_at.clone().or(spec.end_at);
    if args.gap.is_some() || args.overlap.is_some() {
        let mut dst = spec.dst.unwrap_or_default();
        if let Some(g) = &args.gap {
            dst.gap = policy("--gap", g, "shift or skip")?;
        }
        if let Some(o) = &args.overlap {
            dst.overlap = policy("--overlap", o, "first, last or both")?;
        }
        spec.dst = Some(dst);
    }
    Ok(spec)
}

fn policy<T: serde::de::DeserializeOwned>(flag: &str, v: &str, choices: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(v.to_string()))
        .map_err(|_| format!("{flag}: `{v}` is not one of {choices}"))
}

fn name<T: serde::Serialize>(v: T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn micros(flag: &str, t: &str) -> Result<UtcMicros, String> {
    let ts: jiff::Timestamp = t
        .parse()
        .map_err(|_| format!("{flag}: `{t}` is not an RFC 3339 time (say 2027-01-01T00:00:00Z)"))?;
    u64::try_from(ts.as_microsecond())
        .map(UtcMicros)
        .map_err(|_| format!("{flag}: `{t}` is before 1970"))
}

fn utc(t: UtcMicros) -> String {
    jiff::Timestamp::from_microsecond(t.0 as i64)
        .map(|ts| ts.to_string())
        .unwrap_or_default()
}

fn now() -> UtcMicros {
    let us = jiff::Timestamp::now().as_microsecond();
    UtcMicros(u64::try_from(us).unwrap_or(0))
}
