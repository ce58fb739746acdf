//! `punctual schedules next`, the real binary: the occurrences it prints in UTC and local
//! time, its JSON, and its refusals (exit 2, the field named on stderr).

use std::process::Command;

fn punctual(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn next_prints_each_occurrence_in_utc_and_local_time_across_the_spring_gap() {
    let (code, out, err) = punctual(&[
        "schedules",
        "next",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "-n",
        "3",
        "--after",
        "2027-03-12T12:00:00Z",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "# 30 2 * * * in America/New_York (dst gap shift, overlap first)",
            "   1  2027-03-13T07:30:00Z  2027-03-13T02:30:00-05:00",
            "   2  2027-03-14T07:30:00Z  2027-03-14T03:30:00-04:00",
            "   3  2027-03-15T06:30:00Z  2027-03-15T02:30:00-04:00",
        ]
    );
    let (code, out, _) = punctual(&[
        "schedules",
        "next",
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--gap",
        "skip",
        "-n",
        "2",
        "--after",
        "2027-03-12T12:00:00Z",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        v,
        serde_json::json!({"next": [
            {"occurrence_us": 1_804_923_000_000_000u64, "local": "2027-03-13T02:30:00-05:00"},
            {"occurrence_us": 1_805_092_200_000_000u64, "local": "2027-03-15T02:30:00-04:00"},
        ]})
    );
}

#[test]
fn a_whole_definition_as_json_gives_a_period_from_its_start() {
    let (code, out, err) = punctual(&[
        "schedules",
        "next",
        r#"{"every_ms": 90000, "start_at": "2027-01-01T00:00:00Z"}"#,
        "-n",
        "2",
        "--after",
        "2026-12-31T00:00:00Z",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("2027-01-01T00:00:00Z  2027-01-01T00:00:00+00:00"),
        "{out}"
    );
    assert!(out.contains("2027-01-01T00:01:30Z"), "{out}");
}

#[test]
fn bad_input_exits_2_naming_the_field() {
    for (args, field) in [
        (vec!["schedules", "next", "61 * * * *"], "cron:"),
        (vec!["schedules", "next", "0 0 30 2 *"], "cron:"),
        (
            vec!["schedules", "next", "@daily", "--tz", "Mars/Olympus"],
            "time_zone:",
        ),
        (vec!["schedules", "next", "--every-ms", "10"], "every_ms:"),
        (
            vec!["schedules", "next", "--every-ms", "60000", "--tz", "UTC"],
            "time_zone:",
        ),
        (vec!["schedules", "next"], "cron and every_ms:"),
        (
            vec!["schedules", "next", "@daily", "--overlap", "twice"],
            "--overlap:",
        ),
        (
            vec!["schedules", "next", "@daily", "--after", "yesterday"],
            "--after:",
        ),
    ] {
        let (code, _, err) = punctual(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(field), "{args:?}: {err}");
    }
}
