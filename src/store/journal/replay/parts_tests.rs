use super::*;

/// No insert grows the index by more than a part's doubling: one table, as it was, grew by
/// the whole index at each power of two (at a million entries a step of 24 MB).
#[test]
fn an_insert_grows_at_most_one_part() {
    let mut index = Parts::new();
    let mut hash = 0x2545_f491u32;
    let mut largest = 0;
    let n = 1u32 << 20;
    for off in 0..n {
        // xorshift: every kept-hash bit moves, as foldhash's do.
        hash ^= hash << 13;
        hash ^= hash >> 17;
        hash ^= hash << 5;
        // Only the part an insert goes to can grow: its size before and after.
        let before = index.part_size(hash);
        index.insert_unique(Loc::new(hash, 0, off as usize, false, true));
        largest = largest.max(index.part_size(hash) - before);
    }
    assert_eq!(index.iter().count(), n as usize);
    // A part holds about n / PARTS = 256 entries; its largest doubling to 1,024 buckets
    // adds about 14 KiB. The whole index is over 16 MB.
    assert!(
        largest < 64 << 10,
        "one insert grew the index {largest} bytes"
    );
    let total = index.allocation_size();
    assert!(total > 16 << 20, "{total}");
    let mut hash = 0x2545_f491u32;
    for off in 0..n {
        hash ^= hash << 13;
        hash ^= hash >> 17;
        hash ^= hash << 5;
        let found = index.find(hash, |l| l.off as usize == off as usize);
        assert!(found.is_some(), "entry {off} found in its part");
    }
}

/// Entries whose hashes are equal, or start their probes at the same line, chain on over
/// full lines and around the end of the part; each is found by its own identity (here its
/// offset), updated in place, and never lost to a growth step.
#[test]
fn equal_hashes_chain_over_full_lines_and_around_the_end() {
    let mut index = Parts::new();
    // Part 0 throughout; a few hashes, so that many entries share each.
    let hashes = [0x0000_0001u32, 0x0000_0002, 0x000f_ffff];
    let n = 500usize;
    for off in 0..n {
        let hash = hashes[off % hashes.len()];
        assert!(index.find(hash, |l| l.off as usize == off).is_none());
        index.insert_unique(Loc::new(hash, 0, off, false, true));
    }
    assert_eq!(index.len(), n);
    let part = &index.0[0];
    assert!(
        part.len * MAX_LOAD.1 <= part.lines.len() * PER_LINE * MAX_LOAD.0,
        "{} entries in {} lines",
        part.len,
        part.lines.len()
    );
    // Probes from the last line wrap to the first: some hash's home is near the end.
    for off in 0..n {
        let hash = hashes[off % hashes.len()];
        let l = index
            .find_mut(hash, |l| l.off as usize == off)
            .unwrap_or_else(|| panic!("entry {off} lost"));
        *l = Loc::new(hash, 1, off, true, false);
    }
    for off in 0..n {
        let hash = hashes[off % hashes.len()];
        let l = index.find(hash, |l| l.off as usize == off).expect("found");
        assert_eq!(
            (l.src(), l.dead(), l.live()),
            (1, true, false),
            "entry {off}"
        );
    }
    let mut offs: Vec<u32> = index.iter().map(|l| l.off).collect();
    offs.sort_unstable();
    assert_eq!(offs, (0..n as u32).collect::<Vec<_>>());
    // An identity never added is not found, whatever its hash shares.
    for hash in hashes {
        assert!(index.find(hash, |l| l.off as usize == n).is_none());
    }
}

/// A probe's walk wraps from the last line to the first: an entry whose home is the last
/// line, which is full, is placed in line 0 and found there.
#[test]
fn a_probe_wraps_from_the_last_line_to_the_first() {
    let mut part = Part::default();
    // Grow to 4 lines (room 20, 17 entries at most), then fill the last line's home.
    let lines = 4;
    while part.lines.len() < lines {
        part.grow();
    }
    let last = (0u32..)
        .find(|&h| part.home(h) == lines - 1)
        .expect("some hash's home is the last line");
    for off in 0..PER_LINE + 1 {
        part.insert_unique(Loc::new(last, 0, off, false, true));
    }
    assert_eq!(part.lines.len(), lines, "no growth at {} entries", part.len);
    assert!(part.lines[lines - 1].is_full());
    assert_eq!(part.lines[0].entries()[0].off as usize, PER_LINE);
    let found = part.find_slot(last, |l| l.off as usize == PER_LINE);
    assert_eq!(found, Some((0, 0)));
}
