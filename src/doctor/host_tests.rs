use super::*;

#[test]
fn numeric_names_sort_by_value() {
    let mut names = vec![
        "cpu10".to_owned(),
        "cpu2".to_owned(),
        "cpufreq".to_owned(),
        "cpu1".to_owned(),
    ];
    names.sort_by_key(|name| natural_key(name));
    assert_eq!(names, ["cpu1", "cpu2", "cpu10", "cpufreq"]);
}

#[test]
fn ntp_fixture_needs_unsync_and_maxerror() {
    assert_eq!(
        parse_ntp_fixture("unsync=0\nmaxerror_us=1500\nesterror_us=20\n"),
        Some(NtpState {
            unsync: false,
            maxerror_us: 1500,
            esterror_us: 20
        })
    );
    assert_eq!(parse_ntp_fixture("garbage"), None);
    assert_eq!(parse_ntp_fixture("unsync=1\nmaxerror_us=x"), None);
}

#[test]
fn paths_land_under_the_root() {
    let host = Host::new("/tmp/fixture");
    assert_eq!(
        host.path("/proc/cpuinfo"),
        PathBuf::from("/tmp/fixture/proc/cpuinfo")
    );
    assert!(!host.is_live());
    assert!(Host::new("/").is_live());
}
