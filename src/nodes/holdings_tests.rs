use super::*;

#[test]
fn a_partition_gained_and_not_loaded_is_overdue_only_past_the_bound_and_until_settled() {
    let loading = Loading::default();
    let at = Instant::now();
    loading.gained(3, at);
    loading.gained(9, at + Duration::from_secs(4));
    loading.gained(PARTITIONS, at);
    let later = at + Duration::from_secs(6);
    assert!(loading.overdue(at, LOAD_OVERDUE).is_empty(), "not yet");
    assert_eq!(
        loading.overdue(later, LOAD_OVERDUE),
        [3],
        "9 was gained later"
    );
    loading.settled(3);
    assert!(loading.overdue(later, LOAD_OVERDUE).is_empty());
    assert_eq!(
        loading.overdue(later + Duration::from_secs(5), LOAD_OVERDUE),
        [9]
    );
}
