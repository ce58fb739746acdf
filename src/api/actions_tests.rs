use super::*;

#[test]
fn a_tenant_keeps_its_last_actions_and_refuses_past_that_many_running() {
    let actions = Actions::default();
    let first = actions.begin("t", "p").expect("first");
    let mut rest = Vec::new();
    for _ in 1..KEEP {
        rest.push(actions.begin("t", "p").expect("room"));
    }
    assert!(matches!(
        actions.begin("t", "p"),
        Err(ApiError::Overloaded(_))
    ));
    assert!(
        actions.begin("u", "p").is_ok(),
        "another tenant has its own room"
    );
    first.done.store(true, Ordering::Release);
    let next = actions
        .begin("t", "p")
        .expect("the oldest finished one makes room");
    assert!(actions.find("t", &first.id).is_none());
    assert!(actions.find("t", &next.id).is_some());
    assert!(
        actions.find("u", &next.id).is_none(),
        "ids are the tenant's"
    );
    assert_ne!(first.id, next.id);
}
