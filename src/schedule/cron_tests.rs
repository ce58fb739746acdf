use super::*;
use jiff::civil::date;

fn next(expr: &str, from: DateTime) -> Option<DateTime> {
    let f = CronFields::parse(expr).expect("parses");
    f.first_match(from, date(2100, 1, 1).at(0, 0, 0, 0))
}

#[test]
fn fields_jump_to_the_next_matching_second() {
    let jan31 = date(2027, 1, 31).at(23, 59, 59, 0);
    let mon = date(2027, 2, 1).at(0, 0, 0, 0); // a Monday
    let table = [
        ("30 2 * * *", jan31, date(2027, 2, 1).at(2, 30, 0, 0)),
        ("0 0 L * *", jan31, date(2027, 2, 28).at(0, 0, 0, 0)),
        ("0 0 29 2 *", jan31, date(2028, 2, 29).at(0, 0, 0, 0)),
        ("*/20 * * * * *", jan31, date(2027, 2, 1).at(0, 0, 0, 0)),
        ("@hourly", jan31, date(2027, 2, 1).at(0, 0, 0, 0)),
        // A day matches on its day of month or its weekday (Vixie cron), both when `+`.
        ("0 0 13 * FRI", mon, date(2027, 2, 5).at(0, 0, 0, 0)),
        ("0 0 13 * +FRI", mon, date(2027, 8, 13).at(0, 0, 0, 0)),
    ];
    for (expr, from, want) in table {
        assert_eq!(next(expr, from), Some(want), "{expr} from {from}");
    }
}

#[test]
fn bad_expressions_are_refused_with_a_reason() {
    for bad in [
        "",
        "   ",
        "* * *",
        "61 * * * *",
        "* * * * * * *",
        "0 0 0 * *",
        "x y z a b",
    ] {
        assert!(CronFields::parse(bad).is_err(), "{bad:?} was accepted");
    }
    assert!(CronFields::parse(&"* ".repeat(200)).is_err());
}
