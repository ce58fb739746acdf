use super::*;

#[test]
fn one_failure_makes_the_exit_status_one() {
    let checks = vec![
        Check::pass("a.b", Group::Clock, "ok".into(), "why"),
        Check::fail("c.d", Group::Memory, "bad".into(), "why", "fix it".into()),
    ];
    let report = Report::new("/".into(), "0".into(), true, 1, checks);
    assert_eq!(report.exit_code(), 1, "{report:?}");
    assert_eq!(report.summary.fail, 1);
}

#[test]
fn warnings_alone_exit_zero() {
    let checks = vec![Check::warn(
        "a.b",
        Group::Clock,
        "meh".into(),
        "why",
        "fix".into(),
    )];
    let report = Report::new("/".into(), "0".into(), true, 1, checks);
    assert_eq!(report.exit_code(), 0);
    assert!(report.to_text().contains("fix: fix"));
}

#[test]
fn long_text_wraps_under_a_hanging_indent() {
    let mut out = String::new();
    wrap_into(&mut out, "> ", "  ", &"word ".repeat(60));
    assert!(out.lines().count() > 1, "{out}");
    assert!(out.lines().all(|l| l.chars().count() <= WIDTH), "{out}");
    assert!(
        out.lines().skip(1).all(|l| l.starts_with("  word")),
        "{out}"
    );
}
