use super::*;

#[test]
fn current_round_trips_and_anything_else_is_refused() {
    let c = Current {
        generation: 3,
        shards: 2,
    };
    assert_eq!(Current::parse(&c.text()), Ok(c));
    assert_eq!(
        Current::parse("punctual journal format 1\ngeneration 3\nshards 2\n"),
        Err(Invalid::OtherFormat(1))
    );
    for bad in [
        "",
        "generation 3\nshards 2\n",
        "punctual journal format 2\ngeneration 3\nshards 2",
        "punctual journal format 3\ngeneration 3\nshards 2\n",
        "punctual journal format 2\ngeneration 3\nshards 0\n",
        "punctual journal format 2\ngeneration x\nshards 2\n",
        "punctual journal format 2\ngeneration +3\nshards 2\n",
        "punctual journal format 2\ngeneration 3\nshards 2\nshards 4\n",
        "punctual journal format 2\r\ngeneration 3\r\nshards 2\r\n",
    ] {
        assert!(Current::parse(bad).is_err(), "{bad:?} accepted");
    }
}
