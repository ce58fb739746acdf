use super::*;

#[test]
fn releases_parse_to_major_minor() {
    assert_eq!(parse_release("6.1.0-18-amd64"), Some((6, 1)));
    assert_eq!(parse_release("5.8.0"), Some((5, 8)));
    assert_eq!(parse_release("6.18.44-fc-v657\n"), Some((6, 18)));
    assert_eq!(parse_release("garbage"), None);
    assert_eq!(parse_release("6"), None);
}
