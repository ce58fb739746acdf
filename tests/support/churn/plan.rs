//! The shape of a run and every request it sends, drawn up front from a seed.

use std::collections::HashMap;

/// The size and shape of one run: `rounds` times, one after the other on the same service,
/// register `tenants × timers_per_tenant` timers, then cancel and reschedule random ones of
/// that round, then (with `settle_ms`) let the round's timers fire with no requests in flight.
#[derive(Clone, Debug)]
pub struct Spec {
    pub rounds: usize,
    /// After each round, wait until its last deadline plus this long before going on; `None`
    /// goes on at once.
    pub settle_ms: Option<u64>,
    /// Tenants per round; each round has its own.
    pub tenants: usize,
    pub timers_per_tenant: usize,
    /// Timers per `POST /v1/timers/{tenant}`.
    pub batch: usize,
    pub register_conns: usize,
    /// Inclusive range of the registrations' `delay_ms`.
    pub delay_ms: (u64, u64),
    pub churn_conns: usize,
    /// Cancels per round.
    pub deletes: usize,
    /// Reschedules per round.
    pub puts: usize,
    /// Inclusive range of the reschedules' `delay_ms`.
    pub put_delay_ms: (u64, u64),
    pub seed: u64,
}

impl Spec {
    /// Tenant number `t` of all rounds (round `r` has `r * tenants ..`).
    pub fn tenant(&self, t: usize) -> String {
        format!("churn{t}")
    }

    pub fn tenants(&self) -> Vec<String> {
        (0..self.rounds * self.tenants)
            .map(|t| self.tenant(t))
            .collect()
    }

    /// The same registrations, no cancels or reschedules.
    pub fn without_churn(&self) -> Spec {
        Spec {
            deletes: 0,
            puts: 0,
            ..self.clone()
        }
    }
}

/// One timer as sent: `delay_ms` from the moment it is sent, `payload` as JSON text.
#[derive(Clone, Debug)]
pub struct Item {
    pub key: String,
    pub delay_ms: u64,
    pub payload: String,
}

/// A cancel or reschedule; `tenant` indexes [`Spec::tenants`].
#[derive(Clone, Debug)]
pub enum ChurnOp {
    Delete { tenant: usize, key: String },
    Put { tenant: usize, item: Item },
}

/// Every request of one round, decided up front from the seed.
pub struct Round {
    /// Registrations: (tenant, batch), in sending order.
    pub batches: Vec<(usize, Vec<Item>)>,
    /// Cancels and reschedules, one list per connection; one key's ops share a list.
    pub churn: Vec<Vec<ChurnOp>>,
}

/// Every request of a run.
pub struct Plan {
    pub rounds: Vec<Round>,
}

impl Plan {
    pub fn new(spec: &Spec) -> Plan {
        let mut rng = fastrand::Rng::with_seed(spec.seed);
        let rounds = (0..spec.rounds)
            .map(|r| Round::new(spec, &mut rng, r * spec.tenants))
            .collect();
        Plan { rounds }
    }
}

impl Round {
    /// A round for the tenants `first_tenant ..` of `spec.tenants()`.
    fn new(spec: &Spec, rng: &mut fastrand::Rng, first_tenant: usize) -> Round {
        let range = |rng: &mut fastrand::Rng, (lo, hi): (u64, u64)| rng.u64(lo..=hi);
        let tenants = first_tenant..first_tenant + spec.tenants;
        let mut per_tenant: Vec<Vec<Vec<Item>>> = Vec::new();
        for t in tenants.clone() {
            let tenant = spec.tenant(t);
            let items: Vec<Item> = (0..spec.timers_per_tenant)
                .map(|k| {
                    let key = format!("k{k}");
                    Item {
                        payload: payload(rng, &tenant, &key, 0),
                        delay_ms: range(rng, spec.delay_ms),
                        key,
                    }
                })
                .collect();
            per_tenant.push(items.chunks(spec.batch.max(1)).map(<[_]>::to_vec).collect());
        }
        // Interleave the tenants: each connection carries several tenants' batches.
        let mut batches = Vec::new();
        let most = per_tenant.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..most {
            for (t, list) in tenants.clone().zip(&per_tenant) {
                if let Some(b) = list.get(i) {
                    batches.push((t, b.clone()));
                }
            }
        }
        let mut ops: Vec<bool> = (0..spec.deletes + spec.puts)
            .map(|i| i < spec.deletes)
            .collect();
        rng.shuffle(&mut ops);
        let mut churn = vec![Vec::new(); spec.churn_conns.max(1)];
        let mut generation: HashMap<(usize, usize), u64> = HashMap::new();
        for is_delete in ops {
            let t = rng.usize(tenants.clone());
            let k = rng.usize(0..spec.timers_per_tenant);
            let key = format!("k{k}");
            let op = if is_delete {
                ChurnOp::Delete { tenant: t, key }
            } else {
                let gen = generation.entry((t, k)).or_insert(0);
                *gen += 1;
                let payload = payload(rng, &spec.tenant(t), &key, *gen);
                ChurnOp::Put {
                    tenant: t,
                    item: Item {
                        key,
                        delay_ms: range(rng, spec.put_delay_ms),
                        payload,
                    },
                }
            };
            let conn = (t * spec.timers_per_tenant + k) % churn.len();
            churn[conn].push(op);
        }
        Round { batches, churn }
    }
}

/// A ~60-byte JSON object that names its timer and generation, so a swapped payload shows.
fn payload(rng: &mut fastrand::Rng, tenant: &str, key: &str, gen: u64) -> String {
    format!(
        r#"{{"order":"{tenant}/{key}","gen":{gen},"cents":{},"note":"unpaid"}}"#,
        rng.u32(100..1_000_000)
    )
}
