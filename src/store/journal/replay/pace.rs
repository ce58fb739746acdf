//! How a replay shares its shard's thread: [`Pace`] yields every `YIELD_STEPS` steps.

/// Steps (records, counted with the commits' padding) between two yields.
const YIELD_STEPS: usize = 4096;

/// How a replay shares its shard's thread: it yields to the executor every `YIELD_STEPS`
/// steps. A compaction must keep up with the writes that make its work (the journal's disk
/// bound rests on it), so it is paced by count. Paced by time instead (a 200 µs slice), it
/// fell behind a churning shard and the disk grew past its bound
/// (`tests/journal.rs::compaction_keeps_the_disk_bounded…`), while its stretches between
/// yields were what made a shard's timers late during a compaction (up to 65 ms in a soak).
/// Both at once want the writers held back while a compaction is behind: not built yet.
pub struct Pace {
    steps: usize,
}

impl Pace {
    pub fn new() -> Pace {
        Pace { steps: 0 }
    }

    /// One step done: yields every `YIELD_STEPS` steps.
    pub async fn step(&mut self) {
        self.steps = self.steps.wrapping_add(1);
        if self.steps % YIELD_STEPS == 0 {
            super::breathe().await;
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
