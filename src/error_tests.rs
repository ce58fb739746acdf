use super::*;

#[test]
fn names_follow_the_design_rule() {
    assert!(validate_name(NameKind::Key, "order-8812:a_b.c").is_ok());
    assert!(validate_name(NameKind::Key, &"k".repeat(128)).is_ok());
    assert_eq!(
        validate_name(NameKind::Key, &"k".repeat(129)),
        Err(Error::NameTooLong {
            kind: NameKind::Key,
            len: 129
        })
    );
    assert_eq!(
        validate_name(NameKind::Tenant, ""),
        Err(Error::EmptyName(NameKind::Tenant))
    );
    assert!(validate_name(NameKind::Key, ".").is_err());
    assert!(validate_name(NameKind::Key, "..").is_err());
    assert!(validate_name(NameKind::Key, "...").is_ok());
    assert!(validate_name(NameKind::Key, "a/b").is_err());
    assert!(validate_name(NameKind::Key, "a%20").is_err());
    assert!(validate_name(NameKind::Key, "é").is_err());
}
