use super::*;

#[test]
fn level_for_picks_the_highest_differing_digit() {
    assert_eq!(level_for(0, 0), 0);
    assert_eq!(level_for(0, 63), 0);
    assert_eq!(level_for(0, 64), 1);
    assert_eq!(level_for(0, 4095), 1);
    assert_eq!(level_for(0, 4096), 2);
    // 130 and 191 share the digits above level 0: both are in level-1 slot 2.
    assert_eq!(level_for(130, 191), 0);
    assert_eq!(level_for(130, 192), 1);
}

#[test]
fn slot_ranges_grow_by_64() {
    assert_eq!(slot_range(0), 1);
    assert_eq!(slot_range(1), 64);
    assert_eq!(level_range(0), 64);
    assert_eq!(level_range(1), 4096);
    assert_eq!(slot_for(4096 + 64 * 3 + 5, 1), 3);
    assert_eq!(slot_for(4096 + 64 * 3 + 5, 0), 5);
}

#[test]
fn next_occupied_skips_slots_before_elapsed() {
    let mut level = Level::new(1);
    level.mark_occupied(2);
    level.mark_occupied(9);
    // elapsed in slot 3 of level 1 (192..256): slot 2 is behind and must not be chosen.
    assert_eq!(level.next_occupied(200), Some((9 * 64, 9)));
    assert_eq!(level.next_occupied(100), Some((2 * 64, 2)));
    level.mark_empty(9);
    assert_eq!(level.next_occupied(200), None);
}
