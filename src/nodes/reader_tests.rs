use super::*;
use std::sync::Mutex;

#[derive(Default)]
struct Dropped(Mutex<Vec<u32>>);

impl Shards for Dropped {
    fn load(&self, _: u32, _: Read) {}
    fn drop_partition(&self, partition: u32) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(partition);
    }
}

#[test]
fn a_read_queued_before_a_loss_is_not_handed_over_and_a_regain_is_read_again() {
    let shards = Dropped::default();
    let (reader, mut queue) = Reader::new(&shards);
    reader.gained(7);
    reader.lost(7);
    reader.gained(7);
    reader.gained(PARTITIONS);
    let first = queue.try_recv().expect("queued");
    let second = queue.try_recv().expect("queued again");
    assert_eq!((first.0, second.0), (7, 7));
    assert!(!reader.still(7, first.1), "the first gain was lost");
    assert!(reader.still(7, second.1), "the second is read");
    assert_eq!(*shards.0.lock().unwrap_or_else(|e| e.into_inner()), [7]);
    let out_of_range = queue.try_recv().expect("queued");
    assert!(!reader.still(out_of_range.0, out_of_range.1), "never read");
}
