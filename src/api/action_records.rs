//! Bulk actions on disk, beside the journal: each action's record, a small JSON file
//! `<data_dir>/actions/<id>.json`, written whole when the action starts (before its `202`),
//! after each page's cancels are answered, and when it ends; each write goes to a temporary
//! file, fsynced, renamed over the record and the directory fsynced, so a record read back is
//! always one of those writes, whole.
//!
//! At the next start every record is read back: an action that was running is recorded as
//! `interrupted`, with the `matched` and `cancelled` of its last page and the last key it
//! reached, and `GET /v1/actions/{tenant}/{id}` answers it as such. It is not resumed: on a
//! node among others its cancels carry the caller's `Authorization`, which is never written to
//! disk, and a caller who learns it was cut short can start it again (a new action lists the
//! prefix from the start, and cancels only what is still pending).
//!
//! Each tenant keeps its last [`super::actions::KEEP`] records, as it keeps its actions: a
//! record is removed when its action is forgotten.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What is kept of one action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ActionRecord {
    pub(super) tenant: String,
    pub(super) id: String,
    pub(super) prefix: String,
    /// The last key of the last page whose cancels were all answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) after: Option<String>,
    pub(super) matched: u64,
    pub(super) cancelled: u64,
    /// `running`, `done` or `interrupted`.
    pub(super) state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
}

/// The directory of the records.
#[derive(Clone, Debug)]
pub(super) struct Records {
    dir: PathBuf,
}

impl Records {
    /// The records under `data_dir`, the directory made if missing.
    pub(super) fn open(data_dir: &Path) -> std::io::Result<Records> {
        let dir = data_dir.join("actions");
        std::fs::create_dir_all(&dir)?;
        Ok(Records { dir })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes `record` whole, durably: a temporary file, fsynced, renamed over the record,
    /// and the directory fsynced.
    pub(super) fn write(&self, record: &ActionRecord) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(record)?;
        let tmp = self.dir.join(format!("{}.json.tmp", record.id));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, self.path(&record.id))?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Removes the record of `id`, if there is one.
    pub(super) fn remove(&self, id: &str) {
        match std::fs::remove_file(self.path(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(id, error = %e, "a bulk action's record could not be removed");
            }
            _ => {}
        }
    }

    /// Every record, oldest first; a running one is recorded `interrupted` first. A file that
    /// is not a record (a temporary one a crash left, a damaged one) is removed, and said.
    pub(super) fn recover(&self) -> Vec<ActionRecord> {
        let mut records = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return records;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let read = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<ActionRecord>(&b).ok())
                .filter(|r| path.file_name() == self.path(&r.id).file_name());
            let Some(mut record) = read else {
                tracing::warn!(path = %path.display(), "not a bulk action's record; removed");
                let _ = std::fs::remove_file(&path);
                continue;
            };
            if record.state == "running" {
                record.state = "interrupted".to_string();
                if let Err(e) = self.write(&record) {
                    tracing::warn!(id = record.id, error = %e, "an interrupted bulk action's record could not be written");
                }
            }
            records.push(record);
        }
        records.sort_by_key(|r| order(&r.id));
        records
    }
}

/// An id's place in time: the process's start (hex), then the action's number in it.
pub(super) fn order(id: &str) -> (u64, u64) {
    let (start, seq) = id.split_once('-').unwrap_or((id, ""));
    (
        u64::from_str_radix(start, 16).unwrap_or(0),
        seq.parse().unwrap_or(0),
    )
}

#[cfg(test)]
#[path = "action_records_tests.rs"]
mod tests;
