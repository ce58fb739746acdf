use super::*;
use crate::store::journal::record::{put_batch, put_cancel};

/// Two commits of one cancel each, each on its own 512-byte block.
fn two_commits() -> Vec<u8> {
    let mut b = Vec::new();
    put_batch(&mut b, 1, 1);
    put_cancel(&mut b, "t", "a");
    b.resize(512, 0);
    put_batch(&mut b, 2, 1);
    put_cancel(&mut b, "t", "b");
    b.resize(1024, 0);
    b
}

fn run(buf: &[u8], role: Role, skip: bool) -> (usize, Option<Damage>, bool, u64) {
    let mut s = Scan::new(buf, 0, 512, role, skip);
    let mut n = 0;
    let mut damage = None;
    for item in s.by_ref() {
        match item {
            Ok(_) => n += 1,
            Err(d) => damage = Some(d),
        }
    }
    (n, damage, s.torn, s.corrupt)
}

#[test]
fn a_cut_last_commit_is_a_torn_tail() {
    let b = two_commits();
    // The second commit's batch record (21 bytes) survives, its cancel is cut: the commit
    // counts not at all, and the valid data ends where it began.
    let cut = &b[..540];
    let mut s = Scan::new(cut, 0, 512, Role::Last, false);
    assert_eq!(s.by_ref().count(), 2);
    assert_eq!((s.torn, s.end), (true, 34));
    let (n, damage, torn, _) = run(cut, Role::Last, false);
    assert_eq!((n, damage, torn), (2, None, true));
    let (_, damage, _, _) = run(cut, Role::Sealed, false);
    assert_eq!(damage.map(|d| d.offset), Some(512 + 21));
}

#[test]
fn damage_before_a_later_commit_is_corruption_unless_skipped() {
    let mut b = two_commits();
    b[25] ^= 0x10; // inside the first cancel
    let (_, damage, torn, _) = run(&b, Role::Last, false);
    assert_eq!((damage.map(|d| d.offset), torn), (Some(21), false));
    // Skipped, the damaged commit counts not at all: the second one's two records remain.
    let (n, damage, _, corrupt) = run(&b, Role::Last, true);
    assert_eq!((n, damage, corrupt), (2, None, 1));
}

#[test]
fn padding_shorter_than_a_length_field_ends_the_commit() {
    // A commit whose records end 3 bytes before the block boundary: the length of the
    // next commit's batch record must not be read across it.
    let mut b = Vec::new();
    put_batch(&mut b, 1, 3);
    put_cancel(&mut b, "t", "a"); // 21 + 13 = 34
    put_cancel(&mut b, "t", &"k".repeat(255)); // + 267 = 301
    put_cancel(&mut b, "t", &"k".repeat(196)); // + 208 = 509
    assert_eq!(b.len(), 509);
    b.resize(512, 0);
    put_batch(&mut b, 2, 1);
    put_cancel(&mut b, "t", "b");
    let (n, damage, torn, _) = run(&b, Role::Sealed, false);
    assert_eq!((n, damage, torn), (6, None, false));
}

#[test]
fn a_hole_in_an_unsynced_last_segment_ends_its_log_without_skipping() {
    let mut b = two_commits();
    b[..512].fill(0);
    let (n, damage, torn, corrupt) = run(&b, Role::LastUnsynced, false);
    assert_eq!((n, damage, torn, corrupt), (0, None, true, 0));
    let mut b = two_commits();
    b[25] ^= 0x10;
    let (n, damage, torn, corrupt) = run(&b, Role::LastUnsynced, false);
    assert_eq!(
        (n, damage, torn, corrupt),
        (0, None, true, 0),
        "a commit counts whole or not at all"
    );
}

/// Records after a hole in the unsynced tail are dropped, but their timers may have fired
/// (acknowledged unsynced): their versions still count, so none is handed out again.
#[test]
fn the_versions_after_a_hole_in_an_unsynced_tail_still_count() {
    use crate::store::journal::record::put_fired;
    let mut b = Vec::new();
    put_batch(&mut b, 1, 1);
    put_fired(&mut b, 40, "t", "a");
    b.resize(512, 0);
    put_batch(&mut b, 2, 2);
    put_fired(&mut b, 70, "t", "b");
    put_fired(&mut b, 90, "t", "c");
    b.resize(1024, 0);
    b[..512].fill(0);
    let mut s = Scan::new(&b, 0, 512, Role::LastUnsynced, false);
    assert_eq!(s.by_ref().count(), 0);
    assert!(s.dropped_after_tear);
    assert_eq!(s.dropped_versions, 90);
}

#[test]
fn a_zeroed_block_inside_the_log_is_corruption() {
    let mut b = two_commits();
    b[..512].fill(0);
    let (_, damage, _, _) = run(&b, Role::Last, false);
    assert_eq!(damage.map(|d| d.offset), Some(0));
}
