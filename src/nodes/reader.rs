//! Between the node's loop and the shards: a partition gained is read (`load::read`) and its
//! records handed to the shards to load; a partition lost is handed over to be dropped at once.
//!
//! # Order
//!
//! [`Reader`] is the loop's [`Partitions`]. `lost(p)` calls [`Shards::drop_partition`] at once,
//! on the loop's thread. `gained(p)` only queues p, under a generation; the reader's task
//! ([`Reader::serve`]) reads p and hands the records to [`Shards::load`] only if p is still
//! gained under that generation when the read ends. Both run on the loop's executor, so that
//! check and the hand-over happen with no `lost` in between: a load never follows the drop of
//! a later loss, and a partition lost and gained again while its first read was under way is
//! read again. A shard receives, per partition, loads and drops in the order they were handed
//! over (one thread pushes both onto its ring).
//!
//! # Where the time goes
//!
//! The reads run in a task of their own with a cluster client of their own, beside the loop's
//! rounds: reading a large partition (or 500 of them after a takeover) never makes a renewal
//! late. They take up to [`BATCH`] queued partitions at a time, read in one pipeline per
//! master and page (`load::read_many`), so a handoff's few hundred partitions load in a few
//! round trips and the queue of gained partitions grows by at most the 1,024 partitions; a
//! read that fails is tried again a second later for those of its partitions still gained
//! (their shards refuse their ops meanwhile: they are not loaded).

use super::holdings::Loading;
use super::load::{self, Read};
use crate::partition::PARTITIONS;
use crate::store::redis::cluster::{ClusterClient, ClusterConfig};
use futures_channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures_lite::StreamExt;
use std::cell::{Cell, RefCell};
use std::time::Duration;

/// Records read a page at a time (of each of a partition's two hashes).
const PAGE: usize = 512;

/// Pause before a failed read is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The most gained partitions read in one go (`load::read_many`): a handoff's few hundred
/// are read a batch per round trip, and one call's replies stay bounded (about 2 × [`PAGE`]
/// records: 128 hashes asked for 8 each).
const BATCH: usize = 64;

/// Who is told when this node may start or must stop acting on a partition: called on the
/// loop's thread, in order, `gained` and `lost` alternating for each partition (starting with
/// `gained`). Both must return at once (hand the work on, do not wait for it). The service's
/// is [`Reader`], which reads a gained partition for the shards.
pub trait Partitions {
    /// The node holds `partition`'s lease (acquired; after a local lapse, acquired again under
    /// a new epoch): load its records.
    fn gained(&self, partition: u32);
    /// The node no longer holds it (released, lost, or past its local deadline): drop its
    /// timers without firing them or deleting them.
    fn lost(&self, partition: u32);
}

/// Where the node's partitions are loaded and dropped: the shards. Both calls must return at
/// once (push onto the shard's ring; do not wait for the shard).
pub trait Shards: Send + Sync {
    /// `partition`'s records, read after its lease was gained: load them, replacing whatever
    /// of the partition is loaded.
    fn load(&self, partition: u32, read: Read);
    /// `partition` is no longer held: drop its timers without firing or deleting them.
    fn drop_partition(&self, partition: u32);
}

/// The loop's [`Partitions`] that reads what is gained for the shards (see the module doc).
pub struct Reader<'a> {
    shards: &'a dyn Shards,
    /// Per partition, the generation it was last gained under; `None` while not gained.
    gained: RefCell<Vec<Option<u64>>>,
    next: Cell<u64>,
    queue: UnboundedSender<(u32, u64)>,
    /// Where the partitions gained and not yet handed over are kept for `/healthz`,
    /// `/metrics` and `GET /cluster`, if anywhere.
    loading: Option<&'a Loading>,
}

impl<'a> Reader<'a> {
    /// A reader for `shards`, and the queue its [`Reader::serve`] task takes.
    pub fn new(shards: &'a dyn Shards) -> (Reader<'a>, UnboundedReceiver<(u32, u64)>) {
        let (queue, rx) = unbounded();
        let reader = Reader {
            shards,
            gained: RefCell::new(vec![None; PARTITIONS as usize]),
            next: Cell::new(0),
            queue,
            loading: None,
        };
        (reader, rx)
    }

    /// [`Reader::new`] that keeps in `loading` each partition gained until its records are
    /// handed to the shards (or it is lost).
    pub fn reporting(
        shards: &'a dyn Shards,
        loading: &'a Loading,
    ) -> (Reader<'a>, UnboundedReceiver<(u32, u64)>) {
        let (mut reader, rx) = Reader::new(shards);
        reader.loading = Some(loading);
        (reader, rx)
    }

    fn still(&self, partition: u32, generation: u64) -> bool {
        self.gained
            .borrow()
            .get(partition as usize)
            .copied()
            .flatten()
            == Some(generation)
    }

    /// Reads each gained partition and hands it to the shards, until the queue's sender (this
    /// reader) is dropped. Run it on the loop's executor, beside [`super::node::run`].
    pub async fn serve(&self, cluster: ClusterConfig, mut queue: UnboundedReceiver<(u32, u64)>) {
        let mut client = loop {
            match ClusterClient::connect(cluster.clone()).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %e, "node: the partition reader cannot reach the cluster yet");
                    glommio::timer::sleep(RETRY).await;
                }
            }
        };
        while let Some(first) = queue.next().await {
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match queue.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            loop {
                batch.retain(|&(p, g)| self.still(p, g));
                if batch.is_empty() {
                    break;
                }
                let partitions: Vec<u32> = batch.iter().map(|&(p, _)| p).collect();
                match load::read_many(&mut client, &partitions, PAGE).await {
                    Ok(reads) => {
                        for (&(p, g), read) in batch.iter().zip(reads) {
                            if self.still(p, g) {
                                self.shards.load(p, read);
                                if let Some(l) = self.loading {
                                    l.settled(p);
                                }
                            }
                        }
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(?partitions, error = %e, "node: gained partitions could not be read; trying again");
                        glommio::timer::sleep(RETRY).await;
                    }
                }
            }
        }
    }
}

impl Partitions for Reader<'_> {
    fn gained(&self, partition: u32) {
        let generation = self.next.get() + 1;
        self.next.set(generation);
        if let Some(g) = self.gained.borrow_mut().get_mut(partition as usize) {
            *g = Some(generation);
        }
        if let Some(l) = self.loading {
            l.gained(partition, std::time::Instant::now());
        }
        // The receiver lives as long as the serve task; once it is gone nothing is read.
        let _ = self.queue.unbounded_send((partition, generation));
    }

    fn lost(&self, partition: u32) {
        if let Some(g) = self.gained.borrow_mut().get_mut(partition as usize) {
            *g = None;
        }
        if let Some(l) = self.loading {
            l.settled(partition);
        }
        self.shards.drop_partition(partition);
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
