//! Time-synchronisation checks: is UTC right, who keeps it right, and may it jump?
//!
//! Owns `time.sync` (the kernel's NTP state from `adjtimex(2)`: `STA_UNSYNC` clear means
//! a daemon has declared the clock synchronised; under a fixture root the state is read
//! from `/.punctual-doctor/adjtimex`), `time.daemon` (chronyd, ntpd, systemd-timesyncd,
//! ptp4l or phc2sys among `/proc/*/comm`) and `time.step` (the step policy: chrony's
//! `makestep`, following `include` and `confdir`, or ntpd's `tinker step`).
//!
//! Signals chosen: adjtimex is what every daemon updates and needs no command to run;
//! `/proc/*/comm` names the daemon without asking systemd; the config file gives the
//! step policy (chrony has no file that records it at run time).

use super::host::Host;
use super::report::{Check, Group};

const WHY_SYNC: &str =
    "deadlines are UTC instants (\"close at 10:15:00.000 UTC\"); punctual fires \
    them by this host's CLOCK_REALTIME, so a clock that is off by 200 ms fires every timer \
    200 ms off, however small the measured lateness.";

const WHY_DAEMON: &str = "something must keep CLOCK_REALTIME on UTC; chrony (or ntpd, or PTP) \
    disciplines the clock by slewing its rate, which punctual's 100 ms re-anchoring follows \
    smoothly, while SNTP clients such as systemd-timesyncd correct larger errors by stepping.";

const WHY_STEP: &str = "a step of the clock is a jump in UTC: a forward step fires at once every \
    timer it skips over, a backward step holds timers back by the step (punctual never \
    fires early or twice). Stepping only at boot, before punctual starts (chrony \
    `makestep 1 3`), and slewing afterwards keeps fires smooth.";

/// Time daemons by their `/proc/N/comm` name (15 characters at most).
const DAEMONS: [(&str, &str); 5] = [
    ("chronyd", "chrony"),
    ("ntpd", "ntpd"),
    ("systemd-timesyn", "systemd-timesyncd"),
    ("ptp4l", "ptp4l"),
    ("phc2sys", "phc2sys"),
];

const CHRONY_CONFS: [&str; 2] = ["/etc/chrony/chrony.conf", "/etc/chrony.conf"];
const NTP_CONFS: [&str; 2] = ["/etc/ntpsec/ntp.conf", "/etc/ntp.conf"];

pub fn checks(host: &Host) -> Vec<Check> {
    let running = running_daemons(host);
    vec![sync(host, &running), daemon(&running), step(host)]
}

/// Daemon names found running, or why `/proc` could not be listed.
fn running_daemons(host: &Host) -> Result<Vec<&'static str>, String> {
    let pids = host.list_dir("/proc").map_err(|e| e.to_string())?;
    let mut found = Vec::new();
    for pid in pids
        .iter()
        .filter(|p| p.chars().all(|c| c.is_ascii_digit()))
    {
        let Ok(comm) = host.read_value(&format!("/proc/{pid}/comm")) else {
            continue;
        };
        for (comm_name, name) in DAEMONS {
            if comm == comm_name && !found.contains(&name) {
                found.push(name);
            }
        }
    }
    Ok(found)
}

fn sync(host: &Host, running: &Result<Vec<&'static str>, String>) -> Check {
    const ID: &str = "time.sync";
    let fix = match running {
        Ok(names) if !names.is_empty() => format!(
            "{} runs but has not synchronised: see `chronyc tracking` and `chronyc sources` (or `ntpq -p`), \
             and let UDP port 123 reach its servers",
            names.join(", ")
        ),
        _ => "install and start chrony: `apt install chrony` (or `dnf install chrony`), `systemctl enable --now chrony`; \
              then `chronyc tracking` shows `Leap status : Normal`"
            .to_owned(),
    };
    match host.ntp_state() {
        Err(e) => Check::warn(ID, Group::TimeSync, format!("unknown: {e}"), WHY_SYNC, fix),
        Ok(state) if state.unsync => Check::fail(
            ID,
            Group::TimeSync,
            format!("the kernel says the clock is not synchronised (adjtimex STA_UNSYNC set, maxerror {} us)", state.maxerror_us),
            WHY_SYNC,
            fix,
        ),
        Ok(state) => Check::pass(
            ID,
            Group::TimeSync,
            format!(
                "the kernel says the clock is synchronised (adjtimex: maxerror {} us, esterror {} us)",
                state.maxerror_us, state.esterror_us
            ),
            WHY_SYNC,
        ),
    }
}

fn daemon(running: &Result<Vec<&'static str>, String>) -> Check {
    const ID: &str = "time.daemon";
    let fix = "run chrony: `apt install chrony` (or `dnf install chrony`), `systemctl enable --now chrony`, \
               and disable other clients (`systemctl disable --now systemd-timesyncd`)"
        .to_owned();
    let names = match running {
        Err(e) => {
            return Check::warn(
                ID,
                Group::TimeSync,
                format!("unknown: {e}"),
                WHY_DAEMON,
                fix,
            )
        }
        Ok(names) => names,
    };
    let disciplined: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| *n != "systemd-timesyncd")
        .collect();
    if !disciplined.is_empty() {
        return Check::pass(
            ID,
            Group::TimeSync,
            format!("running: {}", disciplined.join(", ")),
            WHY_DAEMON,
        );
    }
    let found = if names.is_empty() {
        "no time daemon among /proc/*/comm (looked for chronyd, ntpd, systemd-timesyncd, ptp4l, phc2sys; \
         in a container the host's daemon is invisible)"
            .to_owned()
    } else {
        "only systemd-timesyncd runs: an SNTP client that steps the clock and has no step policy"
            .to_owned()
    };
    Check::warn(ID, Group::TimeSync, found, WHY_DAEMON, fix)
}

/// The directives of a chrony configuration, with `include` and `confdir` followed one
/// level deep: `(directive, arguments, file)`.
fn chrony_directives(host: &Host, conf: &str) -> Vec<(String, Vec<String>, String)> {
    let mut files = vec![conf.to_owned()];
    let mut out = Vec::new();
    let mut i = 0;
    while i < files.len() && i < 64 {
        let file = files[i].clone();
        i += 1;
        let Ok(text) = host.read(&file) else { continue };
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with(['#', '%', '!', ';']) {
                continue;
            }
            let mut words = line.split_whitespace().map(str::to_owned);
            let Some(directive) = words.next() else {
                continue;
            };
            let args: Vec<String> = words.collect();
            if i == 1 {
                match directive.as_str() {
                    "include" => files.extend(args.iter().flat_map(|p| expand(host, p))),
                    "confdir" => files.extend(
                        args.iter()
                            .flat_map(|d| expand(host, &format!("{d}/*.conf"))),
                    ),
                    _ => {}
                }
            }
            out.push((directive, args, file.clone()));
        }
    }
    out
}

/// Expands a path whose last component may be `*.suffix` into the matching files.
fn expand(host: &Host, pattern: &str) -> Vec<String> {
    let Some((dir, name)) = pattern.rsplit_once('/') else {
        return Vec::new();
    };
    let Some(suffix) = name.strip_prefix('*') else {
        return vec![pattern.to_owned()];
    };
    host.list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|entry| entry.ends_with(suffix))
        .map(|entry| format!("{dir}/{entry}"))
        .collect()
}

fn step(host: &Host) -> Check {
    const ID: &str = "time.step";
    let chrony_fix = "in chrony.conf: `makestep 1 3` (step only in the first three updates, at boot), and start \
                      punctual after time-sync.target (`systemctl enable chrony-wait`); for leap seconds add \
                      `leapsecmode slew` (or `smoothtime 400 0.001 leaponly` on a server that feeds clients)";
    if let Some(conf) = CHRONY_CONFS.iter().find(|c| host.exists(c)) {
        return chrony_step(host, conf, chrony_fix);
    }
    if let Some(conf) = NTP_CONFS.iter().find(|c| host.exists(c)) {
        let text = host.read(conf).unwrap_or_default();
        let tinker_step = text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "tinker" && words.next()? == "step")
                .then(|| words.next().map(str::to_owned))?
        });
        return match tinker_step.as_deref() {
            Some("0") => Check::pass(ID, Group::TimeSync, format!("{conf}: `tinker step 0`: ntpd never steps"), WHY_STEP),
            other => Check::warn(
                ID,
                Group::TimeSync,
                format!(
                    "{conf}: ntpd steps whenever the offset exceeds {} s, at any time",
                    other.unwrap_or("0.128")
                ),
                WHY_STEP,
                format!("switch to chrony with `makestep 1 3`, or set `tinker step 0` in {conf} and start ntpd with `-g`"),
            ),
        };
    }
    Check::warn(
        ID,
        Group::TimeSync,
        format!(
            "no chrony or ntpd configuration ({} / {})",
            CHRONY_CONFS.join(", "),
            NTP_CONFS.join(", ")
        ),
        WHY_STEP,
        format!("install chrony and, {chrony_fix}"),
    )
}

fn chrony_step(host: &Host, conf: &str, fix: &str) -> Check {
    const ID: &str = "time.step";
    let directives = chrony_directives(host, conf);
    let last = |name: &str| directives.iter().rev().find(|(d, _, _)| d == name);
    let leap = match last("leapsecmode") {
        Some((_, args, _)) => format!("leapsecmode {}", args.join(" ")),
        None if last("smoothtime").is_some() => "leap seconds smoothed (smoothtime)".to_owned(),
        None => "leapsecmode system (the kernel steps back 1 s at a leap second)".to_owned(),
    };
    let Some((_, args, file)) = last("makestep") else {
        let found = format!(
            "{conf}: no makestep: chrony never steps, so a large error at boot is slewed out over minutes to hours; {leap}"
        );
        return Check::warn(ID, Group::TimeSync, found, WHY_STEP, fix.to_owned());
    };
    let threshold = args.first().and_then(|t| t.parse::<f64>().ok());
    let limit = args.get(1).and_then(|l| l.parse::<i64>().ok());
    match (threshold, limit) {
        (Some(t), Some(l)) if l > 0 => Check::pass(
            ID,
            Group::TimeSync,
            format!("{file}: makestep {t} {l}: steps only during the first {l} updates (at boot), slews after; {leap}"),
            WHY_STEP,
        ),
        (Some(t), Some(_)) => Check::warn(
            ID,
            Group::TimeSync,
            format!("{file}: makestep {t} -1: chrony steps whenever the offset exceeds {t} s, at any time; {leap}"),
            WHY_STEP,
            fix.to_owned(),
        ),
        _ => Check::warn(
            ID,
            Group::TimeSync,
            format!("{file}: unreadable makestep {:?}; {leap}", args.join(" ")),
            WHY_STEP,
            fix.to_owned(),
        ),
    }
}
