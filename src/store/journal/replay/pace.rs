//! How a replay shares its shard's thread: [`Pace`] yields by time, not by record count.

/// Steps (records, or a commit's padding) between two looks at the clock in [`Pace`]: each
/// step is at most a block of bytes to decode or skip, so this many stay well under a slice.
const CHECK_EVERY: usize = 32;

/// How a replay shares its shard's thread: it yields once the current slice
/// (`cooperate::SLICE`) is used up, looked at every `CHECK_EVERY` steps. A count
/// of records alone does not bound the time: a segment of small commits, each padded to its
/// block, is mostly zeros to skip, and 4,096 records of it held a compacting shard for tens of
/// milliseconds while its timers waited.
pub struct Pace {
    slice: crate::runtime::cooperate::Slice,
    steps: usize,
}

impl Pace {
    pub fn new() -> Pace {
        Pace {
            slice: crate::runtime::cooperate::Slice::begin(),
            steps: 0,
        }
    }

    /// One step done: yields if the slice is over.
    pub async fn step(&mut self) {
        self.steps = self.steps.wrapping_add(1);
        if self.steps % CHECK_EVERY == 0 && self.slice.is_over() {
            self.slice.next().await;
        }
    }

    /// How many steps were taken.
    pub fn steps(&self) -> usize {
        self.steps
    }
}

impl Default for Pace {
    fn default() -> Pace {
        Pace::new()
    }
}
