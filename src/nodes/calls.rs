//! The node loop's calls to Redis, as one trait: the heartbeat and the live-set counter
//! (`membership`), and acquiring, renewing and releasing leases (`lease`). The service's loop
//! makes them through the cluster client ([`ClusterClient`]); the loop's own tests through a
//! scripted stand-in that answers late or fails on cue, so that an order of events a real
//! cluster produces only by chance (a renewal that fails, then a heartbeat that succeeds past
//! the leases' deadline) is replayed exactly.
//!
//! # Invariants
//!
//! Each call is the one its module documents, with the same answers; nothing here retries or
//! keeps state. The loop makes one call at a time.

use super::lease::{self, Acquired, Lease, LeaseConfig, LeaseError};
use super::membership::{self, Beat, MembershipError, NodeRecord};
use crate::store::redis::cluster::ClusterClient;
use std::time::Duration;

/// What the node's loop asks of Redis (see the module doc).
#[allow(async_fn_in_trait)] // the loop runs on one glommio thread: no future needs `Send`
pub trait Calls {
    /// `membership::beat_seen`.
    async fn beat(&mut self, me: &NodeRecord, ttl: Duration) -> Result<Beat, MembershipError>;
    /// `membership::version`.
    async fn version(&mut self) -> Result<u64, MembershipError>;
    /// `membership::leave`.
    async fn leave(&mut self, me: &NodeRecord) -> Result<(), MembershipError>;
    /// `lease::acquire`.
    async fn acquire(
        &mut self,
        holder: &str,
        partitions: &[u32],
        cfg: LeaseConfig,
    ) -> Result<Vec<Acquired>, LeaseError>;
    /// `lease::renew`.
    async fn renew(
        &mut self,
        leases: &mut [Lease],
        cfg: LeaseConfig,
    ) -> Result<Vec<bool>, LeaseError>;
    /// `lease::release`.
    async fn release(&mut self, leases: &[Lease]) -> Result<(), LeaseError>;
}

impl Calls for ClusterClient {
    async fn beat(&mut self, me: &NodeRecord, ttl: Duration) -> Result<Beat, MembershipError> {
        membership::beat_seen(self, me, ttl).await
    }

    async fn version(&mut self) -> Result<u64, MembershipError> {
        membership::version(self).await
    }

    async fn leave(&mut self, me: &NodeRecord) -> Result<(), MembershipError> {
        membership::leave(self, me).await
    }

    async fn acquire(
        &mut self,
        holder: &str,
        partitions: &[u32],
        cfg: LeaseConfig,
    ) -> Result<Vec<Acquired>, LeaseError> {
        lease::acquire(self, holder, partitions, cfg).await
    }

    async fn renew(
        &mut self,
        leases: &mut [Lease],
        cfg: LeaseConfig,
    ) -> Result<Vec<bool>, LeaseError> {
        lease::renew(self, leases, cfg).await
    }

    async fn release(&mut self, leases: &[Lease]) -> Result<(), LeaseError> {
        lease::release(self, leases).await
    }
}
