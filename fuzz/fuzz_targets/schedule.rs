//! Schedules on arbitrary text: the text as a cron expression in a few zones and as a whole
//! JSON definition, compiled, then asked for occurrences and for a catch-up. Nothing may
//! panic; every occurrence is strictly after the instant asked about.
#![no_main]

use libfuzzer_sys::fuzz_target;
use punctual::schedule::{Cursor, Limits, ScheduleSpec};
use punctual::UtcMicros;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (head, rest) = data.split_at(8);
    let after = UtcMicros(
        u64::from_le_bytes(head.try_into().unwrap_or([0; 8])) % (9_000_000_000 * 1_000_000),
    );
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let mut specs = Vec::new();
    if let Ok(spec) = serde_json::from_str::<ScheduleSpec>(text) {
        specs.push(spec);
    }
    for zone in [
        "UTC",
        "America/New_York",
        "Australia/Lord_Howe",
        "Pacific/Apia",
    ] {
        specs.push(ScheduleSpec {
            cron: Some(text.to_string()),
            time_zone: Some(zone.to_string()),
            ..ScheduleSpec::default()
        });
    }
    for spec in specs {
        let Ok(s) = spec.compile(after, &Limits::default()) else {
            continue;
        };
        let mut last = after;
        for o in s.upcoming(after, 4) {
            assert!(o.at > last);
            last = o.at;
        }
        let due = s.due(Cursor::default(), last, Duration::from_secs(1));
        assert!(due
            .fires
            .windows(2)
            .all(|w| w[0].occurrence.at < w[1].occurrence.at));
    }
});
