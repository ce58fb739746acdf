//! Read-only access to the host's `/proc` and `/sys`, under an injectable root.
//!
//! Owns: turning an absolute host path (`/proc/cpuinfo`) into a path under the root
//! (`/` on a live host, a fixture tree in tests), reading it defensively, and the one
//! piece of host state that is not a file: the kernel's NTP status from `adjtimex(2)`.
//!
//! Invariants: nothing here panics on what the host serves. A file that is missing,
//! unreadable, not UTF-8 or absurdly large comes back as a [`ReadError`] or as lossy
//! text; the checks turn that into a `WARN` that names the file.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Files larger than this are cut off: `/proc` files are small, and a fixture or a
/// broken mount must not make the doctor read gigabytes.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// Why a file could not be read; rendered as `/proc/swaps: not found`.
#[derive(Debug, Clone)]
pub struct ReadError {
    /// The host path as the user knows it (without the fixture root).
    pub path: String,
    pub reason: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// The kernel's NTP discipline state, as `adjtimex(2)` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NtpState {
    /// `true` when `STA_UNSYNC` is set: no daemon has declared the clock synchronised.
    pub unsync: bool,
    /// Maximum error the daemon declared, in microseconds.
    pub maxerror_us: i64,
    /// Estimated error the daemon declared, in microseconds.
    pub esterror_us: i64,
}

/// The host the checks read: a root directory.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

/// Where a fixture tree keeps the stand-in for `adjtimex(2)` (see [`Host::ntp_state`]).
pub const NTP_FIXTURE: &str = "/.punctual-doctor/adjtimex";

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Host {
        Host { root: root.into() }
    }

    /// The root as given (for the report).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `true` when the root is the real `/`, so that system calls describe this host.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The path of host file `abs` under the root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// Reads host file `abs` as text (lossy UTF-8, at most 16 MiB).
    pub fn read(&self, abs: &str) -> Result<String, ReadError> {
        let err = |reason: String| ReadError {
            path: abs.to_owned(),
            reason,
        };
        let file = std::fs::File::open(self.path(abs)).map_err(|e| err(describe(&e)))?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| err(describe(&e)))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads host file `abs` and trims it: the shape of one-value sysfs files.
    pub fn read_value(&self, abs: &str) -> Result<String, ReadError> {
        self.read(abs).map(|s| s.trim().to_owned())
    }

    /// `true` when host path `abs` exists (file or directory).
    pub fn exists(&self, abs: &str) -> bool {
        self.path(abs).exists()
    }

    /// The names of the entries of host directory `abs`, sorted; numeric names sort by
    /// value so that `cpu10` comes after `cpu9` and IRQ 100 after IRQ 99.
    pub fn list_dir(&self, abs: &str) -> Result<Vec<String>, ReadError> {
        let entries = std::fs::read_dir(self.path(abs)).map_err(|e| ReadError {
            path: abs.to_owned(),
            reason: describe(&e),
        })?;
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort_by_key(|name| natural_key(name));
        Ok(names)
    }

    /// The kernel's NTP state. On a live host this is `adjtimex(2)`, which chronyd,
    /// ntpd, systemd-timesyncd and phc2sys all update; under a fixture root it is read
    /// from [`NTP_FIXTURE`] (`unsync=0`, `maxerror_us=…`, `esterror_us=…` lines).
    pub fn ntp_state(&self) -> Result<NtpState, ReadError> {
        if self.is_live() {
            live_ntp_state()
        } else {
            let text = self.read(NTP_FIXTURE)?;
            parse_ntp_fixture(&text).ok_or_else(|| ReadError {
                path: NTP_FIXTURE.to_owned(),
                reason: "not in the form unsync=0|1, maxerror_us=N, esterror_us=N".to_owned(),
            })
        }
    }
}

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "not found".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

/// Sort key that orders `cpu2` before `cpu10`: the text without digits, then the number.
fn natural_key(name: &str) -> (String, u64, String) {
    let prefix: String = name.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let digits: String = name[prefix.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let number = digits.parse().unwrap_or(u64::MAX);
    (prefix, number, name.to_owned())
}

fn parse_ntp_fixture(text: &str) -> Option<NtpState> {
    let mut unsync = None;
    let mut maxerror_us = None;
    let mut esterror_us = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "unsync" => unsync = Some(value == "1"),
            "maxerror_us" => maxerror_us = value.parse().ok(),
            "esterror_us" => esterror_us = value.parse().ok(),
            _ => {}
        }
    }
    Some(NtpState {
        unsync: unsync?,
        maxerror_us: maxerror_us?,
        esterror_us: esterror_us.unwrap_or(0),
    })
}

fn live_ntp_state() -> Result<NtpState, ReadError> {
    // SAFETY: `timex` is a plain C struct for which all-zero bytes are a valid value;
    // `modes = 0` makes adjtimex read-only, and the kernel writes only into `tx`.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, exclusively borrowed `timex` for the duration of the call.
    let rc = unsafe { libc::adjtimex(&mut tx) };
    if rc < 0 {
        return Err(ReadError {
            path: "adjtimex(2)".to_owned(),
            reason: std::io::Error::last_os_error().to_string(),
        });
    }
    Ok(NtpState {
        unsync: tx.status & libc::STA_UNSYNC != 0,
        maxerror_us: tx.maxerror,
        esterror_us: tx.esterror,
    })
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
