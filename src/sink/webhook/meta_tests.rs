use super::*;

fn sample() -> Delivery {
    Delivery::new(
        "https://example.com/hook".into(),
        RetryPolicy {
            max_attempts: 3,
            base_delay_ms: 1000,
            max_delay_ms: 60_000,
        },
        1_700_000_000_000_000,
    )
}

#[test]
fn every_state_and_outcome_round_trips() {
    for (state, last) in [
        (State::New, Last::None),
        (State::InFlight, Last::Status(503)),
        (State::Waiting, Last::Error("connection refused".into())),
        (State::Dead, Last::Status(404)),
    ] {
        let mut d = sample();
        d.state = state;
        d.attempts = 2;
        d.last = last;
        assert_eq!(Delivery::decode(&d.encode()), Some(d));
    }
}

#[test]
fn any_truncation_or_garbage_decodes_to_none_without_panicking() {
    let mut d = sample();
    d.last = Last::Error("é".repeat(300));
    let bytes = d.encode();
    for n in 0..bytes.len() {
        assert_eq!(Delivery::decode(&bytes[..n]), None, "cut at {n}");
    }
    assert_eq!(Delivery::decode(b"{\"json\":1}"), None);
    let mut bad_state = bytes.clone();
    bad_state[2] = 9;
    assert_eq!(Delivery::decode(&bad_state), None);
    // The long error was cut at a character boundary, not mid-character.
    let back = Delivery::decode(&bytes).expect("valid");
    assert!(
        matches!(back.last, Last::Error(e) if e.len() <= MAX_ERROR && e.chars().all(|c| c == 'é'))
    );
}

#[test]
fn only_a_new_or_plain_timer_is_its_own_firing_and_redrive_resets_the_budget() {
    let mut d = sample();
    assert!(is_own_firing(&[]) && is_own_firing(&d.encode()));
    d.state = State::Waiting;
    assert!(!is_own_firing(&d.encode()));
    assert_eq!(
        redriven(&d.encode()),
        None,
        "only a dead letter is re-driven"
    );
    d.state = State::Dead;
    d.attempts = 3;
    assert!(is_dead(&d.encode()));
    let r = Delivery::decode(&redriven(&d.encode()).expect("dead")).expect("valid");
    assert_eq!((r.state, r.attempts), (State::Waiting, 0));
    assert!(r.has_budget());
}

#[test]
fn a_delivery_never_cut_is_written_as_version_1_and_version_1_still_reads() {
    let mut d = sample();
    d.attempts = 2;
    d.state = State::InFlight;
    let bytes = d.encode();
    assert_eq!(bytes[..2], MAGIC);
    assert_eq!(Delivery::decode(&bytes), Some(d));
}

#[test]
fn cuts_survive_the_store() {
    let mut d = sample();
    d.attempts = 1;
    d.cut_short();
    let bytes = d.encode();
    assert_eq!(bytes[..2], MAGIC_CUTS);
    let back = Delivery::decode(&bytes).expect("decodes");
    assert_eq!(back.cuts, 1);
    assert_eq!(back, d);
    // Cut short of the trailing byte, a version 2 section is malformed, not version 1.
    assert_eq!(Delivery::decode(&bytes[..bytes.len() - 1]), None);
    assert_eq!(
        redriven(&{
            let mut dead = back.clone();
            dead.state = State::Dead;
            dead.encode()
        })
        .and_then(|m| Delivery::decode(&m))
        .map(|r| r.cuts),
        Some(0)
    );
}

/// What the sink does to a timer: start an attempt (or end it as a dead letter once the
/// budget is spent), and, the process crashing in every attempt, re-fire it `InFlight`.
#[test]
fn a_delivery_whose_every_attempt_is_cut_short_ends_as_a_dead_letter() {
    let mut meta = sample().encode();
    let mut fires = 0;
    let dead = loop {
        assert!(fires < 1000, "cut attempts never end the delivery");
        fires += 1;
        let mut d = Delivery::decode(&meta).expect("decodes");
        if d.state == State::InFlight {
            d.cut_short();
        }
        if !d.has_budget() {
            break d;
        }
        d.attempts += 1;
        d.state = State::InFlight;
        meta = d.encode();
    };
    // Each real attempt came after MAX_CUTS free cuts: (1 + MAX_CUTS) starts per attempt.
    assert_eq!(fires, 1 + 3 * (1 + usize::from(MAX_CUTS)));
    assert_eq!(dead.attempts, 3);
    assert!(
        matches!(&dead.last, Last::Error(e) if e.starts_with("interrupted")),
        "{:?}",
        dead.last
    );
}

#[test]
fn busy_refusals_survive_the_store_with_the_cuts_and_version_1_and_2_still_read() {
    let mut d = sample();
    d.attempts = 1;
    assert!(d.resolver_busy("resolve h: the resolver is saturated"));
    let bytes = d.encode();
    assert_eq!(bytes[..2], MAGIC_BUSY);
    assert_eq!(Delivery::decode(&bytes), Some(d.clone()));
    d.cut_short();
    assert_eq!(
        Delivery::decode(&d.encode()).map(|b| (b.cuts, b.busy)),
        Some((1, 1))
    );
    assert_eq!(Delivery::decode(&bytes[..bytes.len() - 1]), None);
    d.busy = 0;
    assert_eq!(
        d.encode()[..2],
        MAGIC_CUTS,
        "no refusal: version 2 as before"
    );
}

/// What the deliveries do when every attempt is refused by the resolver: each refusal
/// within the allowance is free, the next counts, and the budget still ends it.
#[test]
fn a_delivery_our_resolver_keeps_refusing_ends_as_a_dead_letter() {
    let mut d = sample();
    let mut fires = 0;
    while d.has_budget() {
        assert!(fires < 1000, "refusals never end the delivery");
        fires += 1;
        d.attempts += 1;
        d = Delivery::decode(&d.encode()).expect("decodes");
        d.resolver_busy("busy");
    }
    assert_eq!(fires, 3 * (1 + usize::from(MAX_BUSY)));
    assert!(
        matches!(&d.last, Last::Error(e) if e.starts_with("resolver busy: ")),
        "{:?}",
        d.last
    );
}

/// Whatever the URL and the last error, the state fits a timer's metadata: a sink never
/// keeps a timer with metadata the shard cannot hold.
#[test]
fn the_largest_delivery_state_fits_a_timers_metadata() {
    let mut d = sample();
    d.url = "u".repeat(70_000);
    d.last = Last::Error("e".repeat(70_000));
    d.cuts = MAX_CUTS;
    d.busy = MAX_BUSY;
    let bytes = d.encode();
    assert!(
        bytes.len() <= 64 + MAX_ERROR + MAX_URL,
        "{} bytes",
        bytes.len()
    );
    assert!(crate::timer::PackedTimer::with_meta("t", "k", &bytes, b"").is_some());
}

#[test]
fn a_cut_within_the_allowance_does_not_spend_an_attempt() {
    let mut d = sample();
    d.attempts = 3;
    for _ in 0..MAX_CUTS {
        d.cut_short();
        assert_eq!(d.attempts, 2);
        d.attempts += 1;
    }
    d.cut_short();
    assert_eq!(d.attempts, 3);
    assert!(!d.has_budget());
}

#[test]
fn an_occurrence_gets_a_fresh_delivery_to_the_schedules_callback() {
    let mut used = sample();
    used.attempts = 3;
    let fresh = Delivery::decode(&for_occurrence(&used.encode(), 42).expect("a delivery"))
        .expect("decodes");
    assert_eq!(fresh, Delivery::new(used.url.clone(), used.retry, 42));
    assert_eq!(firing_of(&fresh.encode()), Firing::Own);
    assert_eq!(for_occurrence(b"", 42), None);
}
