use super::Creating;

#[test]
fn a_creation_counts_the_others_of_its_tenant_until_it_is_dropped() {
    let c = Creating::default();
    let (a, others) = c.enter("t");
    assert_eq!(others, 0);
    let (b, others) = c.enter("t");
    assert_eq!(others, 1);
    let (_u, others) = c.enter("u");
    assert_eq!(others, 0, "another tenant's creations are not counted");
    drop(a);
    let (third, others) = c.enter("t");
    assert_eq!(others, 1);
    drop(b);
    drop(third);
    let (_d, others) = c.enter("t");
    assert_eq!(others, 0);
    assert_eq!(c.0.lock().map(|m| m.len()).unwrap_or(0), 2);
}
