use super::*;

#[test]
fn memlock_line_parses_numbers_and_unlimited() {
    let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                  Max locked memory         8388608              unlimited            bytes\n";
    assert_eq!(parse_memlock(limits), Some((Some(8 << 20), None)));
    assert_eq!(parse_memlock("Max locked memory  x y bytes"), None);
    assert_eq!(parse_memlock(""), None);
}

#[test]
fn sizes_read_naturally() {
    assert_eq!(human(512 * 1024), "512 KiB");
    assert_eq!(human(32 << 20), "32.0 MiB");
    assert_eq!(human(2 << 30), "2 GiB");
}
