use super::*;

fn letter(tenant: &str, key: &str, version: u64) -> Letter {
    let timer = PackedTimer::with_meta(tenant, key, b"m", b"{}").expect("short");
    Letter::new(timer, version, UtcMicros(version))
}

#[test]
fn one_letter_per_key_listed_by_key_after_a_cursor() {
    let mut d = DeadLetters::default();
    for k in ["b", "a", "c"] {
        assert!(d.insert(letter("t", k, 1)).is_none());
    }
    d.insert(letter("u", "a", 1));
    assert_eq!(d.insert(letter("t", "a", 2)).map(|l| l.version), Some(1));
    let keys = |v: Vec<DeadInfo>| v.into_iter().map(|i| i.key).collect::<Vec<_>>();
    let all = (None, None);
    assert_eq!(keys(d.list("t", all, 10, true)), ["a", "b", "c"]);
    assert_eq!(keys(d.list("t", (Some("a"), None), 1, true)), ["b"]);
    assert_eq!(d.list("t", all, 10, true)[0].version, 2);
    assert_eq!(d.len(), 4);
    assert!(d.remove("t", "b").is_some() && d.remove("t", "b").is_none());
    assert!(d.remove("u", "a").is_some());
    assert_eq!(d.len(), 2);
    assert_eq!(d.list("t", all, 10, true).len(), 2);
    assert!(d.list("u", all, 10, true).is_empty());
}

#[test]
fn a_purge_removes_the_picked_letters_and_keeps_the_count() {
    let mut d = DeadLetters::default();
    for k in ["a", "b", "c"] {
        d.insert(letter("t", k, 1));
    }
    d.insert(letter("u", "b", 1));
    let mut gone = Vec::new();
    let all = d.purge_from(
        &mut PurgeCursor::default(),
        |_, k| k == "b",
        |l| gone.push(l.timer.tenant().to_string()),
        || false,
    );
    assert!(all);
    gone.sort();
    assert_eq!(gone, ["t", "u"]);
    assert_eq!(d.len(), 2);
    assert!(d.get("t", "b").is_none() && d.get("t", "a").is_some());
    assert!(d.list("u", (None, None), 10, false).is_empty());
}

/// A purge stopped at every ask goes on from its cursor: it looks at [`PURGE_CHECK`]
/// letters a call, and in the end every picked letter, across tenants, is removed once
/// and the others kept, including letters filed and removed between the calls (a picked
/// one removed meanwhile is not handed over again).
#[test]
fn a_purge_in_slices_goes_on_from_its_cursor_and_removes_each_picked_letter_once() {
    let mut d = DeadLetters::default();
    let tenants = ["a", "b", "c"];
    for t in tenants {
        for i in 0..PURGE_CHECK {
            d.insert(letter(t, &format!("k{i:04}"), 1));
        }
    }
    let picked = |k: &str| k.ends_with('0') || k.ends_with('5');
    let (mut cursor, mut gone) = (PurgeCursor::default(), Vec::new());
    let mut calls = 0;
    loop {
        let before = d.len();
        let done = d.purge_from(
            &mut cursor,
            |_, k| picked(k),
            |l| gone.push(format!("{}/{}", l.timer.tenant(), l.timer.key())),
            || true,
        );
        calls += 1;
        if done {
            break;
        }
        assert!(d.len() < before, "each call removes some");
        if calls == 1 {
            // Between two slices: a letter filed behind the cursor and one ahead of it
            // (neither picked), a picked one ahead removed by an op, and an unpicked one.
            d.insert(letter("a", "k0000x", 1));
            d.insert(letter("c", "k9999x", 1));
            assert!(d.remove("b", "k0010").is_some());
            assert!(d.remove("b", "k0011").is_some());
        }
        assert!(calls < 10, "the purge ends");
    }
    assert_eq!(
        calls, 3,
        "{PURGE_CHECK} letters looked at a call, and one call ends it"
    );
    let mut expected: Vec<String> = tenants
        .iter()
        .flat_map(|t| (0..PURGE_CHECK).map(move |i| format!("{t}/k{i:04}")))
        .filter(|tk| picked(tk) && tk != "b/k0010")
        .collect();
    expected.sort();
    let mut sorted = gone.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), gone.len(), "each handed over once");
    assert_eq!(sorted, expected);
    assert!(d.get("a", "k0000x").is_some() && d.get("c", "k9999x").is_some());
    assert!(d.get("a", "k0001").is_some() && d.get("b", "k0010").is_none());
    assert_eq!(d.len(), 3 * PURGE_CHECK + 2 - 2 - expected.len());
}

#[test]
fn a_listing_of_keys_copies_no_bodies_and_a_range_stops_at_through() {
    let mut d = DeadLetters::default();
    for k in ["a", "b", "c", "d"] {
        d.insert(letter("t", k, 1));
    }
    let keys_only = d.list("t", (None, None), 10, false);
    assert_eq!(keys_only.len(), 4);
    assert!(keys_only
        .iter()
        .all(|i| i.meta.is_empty() && i.payload.is_empty()));
    let page = d.list("t", (Some("a"), Some("c")), 10, true);
    let keys: Vec<_> = page.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["b", "c"]);
    assert!(page.iter().all(|i| i.payload == b"{}"));
    assert!(d.list("t", (Some("c"), Some("b")), 10, true).is_empty());
}

/// A listing without bodies still says what each body would copy, as a listing with them
/// copies it.
#[test]
fn a_listing_of_keys_gives_the_bytes_its_bodies_would_copy() {
    let mut d = DeadLetters::default();
    let timer = PackedTimer::with_meta("t", "a", &[7; 300], &[1; 5_000]).expect("short");
    d.insert(Letter::new(timer, 1, UtcMicros(1)));
    let keys = d.list("t", (None, None), 10, false);
    let full = d.list("t", (None, None), 10, true);
    let copied = |i: &DeadInfo| {
        i.meta.len()
            + i.payload.len()
            + i.last_error.as_ref().map_or(0, String::len)
            + i.callback.as_ref().map_or(0, String::len)
    };
    assert_eq!(keys[0].body_bytes, 5_300);
    assert_eq!(keys[0].body_bytes, copied(&full[0]));
    assert_eq!(full[0].body_bytes, copied(&full[0]));
}

/// The longest single op on a shard's thread while a page of a thousand 128 KiB dead
/// letters is listed: the whole page in one op, against the page asked in parts of at most
/// `BODIES_PER_ASK` bytes, as the engine asks now. Five rounds, alternated.
///
/// `cargo test --release --lib listing_bodies_figure -- --ignored --nocapture`
#[test]
#[ignore = "a figure, not a check: run it with --ignored --nocapture"]
fn listing_bodies_figure() {
    use crate::engine::BODIES_PER_ASK;
    use std::time::{Duration, Instant};
    let mut d = DeadLetters::default();
    for i in 0..1_000 {
        let key = format!("order-{i:06}");
        let timer =
            PackedTimer::with_meta("t", &key, &[b'm'; 65_535], &[b'p'; 65_536]).expect("fits");
        d.insert(Letter::new(timer, 1, UtcMicros(1)));
    }
    for round in 0..5 {
        let t = Instant::now();
        let whole = d.list("t", (None, None), 1_000, true);
        let one_op = t.elapsed();
        assert_eq!(whole.len(), 1_000);
        drop(whole);
        let keys = d.list("t", (None, None), 1_000, false);
        let (mut longest, mut total, mut ops) = (Duration::ZERO, Duration::ZERO, 0);
        let mut from: Option<String> = None;
        for part in DeadInfo::parts(&keys, BODIES_PER_ASK) {
            let through = part.last().map(|l| l.key.clone()).expect("not empty");
            let t = Instant::now();
            let got = d.list("t", (from.as_deref(), Some(&through)), 1_000, true);
            let took = t.elapsed();
            assert_eq!(got.len(), part.len());
            drop(got);
            (longest, total, ops) = (longest.max(took), total + took, ops + 1);
            from = Some(through);
        }
        println!(
            "round {round}: one op {:.2} ms; in {ops} parts: longest {:.0} µs, all {:.2} ms",
            one_op.as_secs_f64() * 1e3,
            longest.as_secs_f64() * 1e6,
            total.as_secs_f64() * 1e3
        );
    }
}
