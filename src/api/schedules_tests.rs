use super::*;

#[test]
fn next_is_five_unless_asked_and_at_most_a_hundred() {
    assert_eq!(next_of(None).ok(), Some(DEFAULT_NEXT));
    assert_eq!(next_of(Some("next=100")).ok(), Some(100));
    for bad in ["next=0", "next=101", "next=x", "next=1&next=2", "after=k"] {
        let e = next_of(Some(bad)).expect_err(bad);
        assert_eq!(e.code(), "invalid_field", "{bad}");
    }
}

#[test]
fn a_definition_error_is_a_400_that_names_its_field() {
    let e = invalid(SpecError::UnknownZone("Mars/Olympus".into()));
    assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    assert!(e.to_string().starts_with("time_zone:"), "{e}");
}
