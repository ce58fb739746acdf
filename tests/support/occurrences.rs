//! A recurring schedule's occurrences as the Redis store writes them to the tenant's stream
//! (key `@schedule@occurrence_us`, the occurrence's body as payload), and the checks every
//! Redis schedule test makes of them.
#![allow(dead_code)]

use super::redis_server::StreamEntry;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// One stream entry of an occurrence.
#[derive(Debug, Clone)]
pub struct Occurrence {
    pub occurrence_us: u64,
    pub sequence: u64,
    pub caught_up: bool,
    pub version: u64,
    pub fired_at_us: u64,
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The stream's entries of schedule `name`'s occurrences, in stream order.
pub fn occurrences(entries: &[StreamEntry], name: &str) -> Vec<Occurrence> {
    let prefix = format!("@{name}@");
    entries
        .iter()
        .filter(|e| e.key.starts_with(&prefix))
        .map(|e| {
            let p: serde_json::Value = serde_json::from_str(&e.payload).expect("payload is JSON");
            assert_eq!(p["schedule"], name, "{e:?}");
            let o = Occurrence {
                occurrence_us: p["occurrence_us"].as_u64().expect("occurrence_us"),
                sequence: p["sequence"].as_u64().expect("sequence"),
                caught_up: p["caught_up"].as_bool().expect("caught_up"),
                version: e.version,
                fired_at_us: e.fired_at_us,
            };
            assert_eq!(e.key, format!("{prefix}{}", o.occurrence_us), "{e:?}");
            assert_eq!(e.fire_at_us, o.occurrence_us, "{e:?}");
            o
        })
        .collect()
}

/// Never early; each occurrence under one version and one sequence (a stream entry may repeat
/// after a crash, with the same version), the sequences 1, 2, … without a gap. The
/// occurrences by sequence.
pub fn once_each(occs: &[Occurrence]) -> Vec<Occurrence> {
    let mut by: BTreeMap<u64, Occurrence> = BTreeMap::new();
    for o in occs {
        assert!(o.fired_at_us >= o.occurrence_us, "fired early: {o:?}");
        if let Some(first) = by.get(&o.occurrence_us) {
            assert_eq!(
                (first.version, first.sequence),
                (o.version, o.sequence),
                "one occurrence fired twice, as two: {first:?} and {o:?}"
            );
        } else {
            by.insert(o.occurrence_us, o.clone());
        }
    }
    let seq: Vec<Occurrence> = by.into_values().collect();
    for (i, o) in seq.iter().enumerate() {
        assert_eq!(
            o.sequence,
            i as u64 + 1,
            "sequences skip or repeat: {seq:#?}"
        );
    }
    seq
}
