use super::*;

#[test]
fn parses_ranges_singles_and_strides() {
    let set = CpuSet::parse("0-3, 8,10-11").unwrap();
    assert_eq!(set.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 8, 10, 11]);
    assert_eq!(set.to_string(), "0-3,8,10-11");
    let strided = CpuSet::parse("0-7:2/4").unwrap();
    assert_eq!(strided.iter().collect::<Vec<_>>(), [0, 1, 4, 5]);
    assert!(CpuSet::parse("").unwrap().is_empty());
}

#[test]
fn refuses_garbage_without_panicking() {
    for bad in [
        "x",
        "3-1",
        "0-4294967295",
        "1-",
        "-",
        "0-7:0/4",
        "0-7:5/4",
        "0-7:2",
    ] {
        assert!(CpuSet::parse(bad).is_err(), "{bad:?} should not parse");
    }
}
