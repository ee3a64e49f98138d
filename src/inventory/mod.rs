//! Inventory mode: dapi keeps the datacenter in PostgreSQL and in memory, and allocates
//! without being sent it (`inventory.url` switches it on).
//!
//! * [`store`]: the schema (migrations/), writes, the catch-up read and the claims;
//! * [`cache`]: the replica's copy in the engine's model, changed server by server;
//! * [`records`]: servers and VMs as fed (checked as `/allocate` checks servers);
//! * this module: the replica ([`Inventory`]): start-up load, `LISTEN` for changes and
//!   catch-up after a reconnect, allocation with an atomic claim, the staleness bound.
//!
//! A replica decides one allocation at a time (the engine spreads each over the cores) and
//! counts its decision at once as a pending claim, so the next decision sees it without
//! waiting for the database (kube-scheduler's "assume"). Claims go to the store in
//! batches (one statement and one commit for all those decided meanwhile: group commit);
//! each is taken only if its server is still at the generation the decision saw, counting
//! the replica's own claims since; otherwise another replica (or a feed) changed the server
//! first, and the allocation is run again on fresh state.

pub mod cache;
pub mod claims;
pub mod records;
pub mod store;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::InventoryConfig;
use crate::engine::{Allocation, Changed, Engine, HeldTickets, Recurring, RecurringKey, ServerId};
use crate::js::Js;
use crate::model::{AllocateBody, FieldError, Server, Ticket};
use cache::Model;
use claims::{Claim, Claims};
use store::{ClaimRequest, Store, StoreError};

/// Times an allocation is decided at most, losing its claim to another replica each time
/// but the last.
pub const CLAIM_RETRIES: usize = 8;
/// Wait between reconnection attempts.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);
/// Claims sent in one statement at most.
const MAX_BATCH: usize = 256;
/// Own generations remembered per server (a decision that saw an older one conflicts).
const OWN_CHAIN: usize = 64;

/// The replica's connection to its inventory.
#[derive(Debug, Clone)]
struct Status {
    /// The change feed (`LISTEN`) is up: the view is at most a notification behind.
    listening: bool,
    /// When the view was last known current: the last catch-up that succeeded, or the
    /// moment the change feed was lost (it was followed until then).
    refreshed: Instant,
    last_error: Option<String>,
}

/// A decided claim on its way to the store.
struct ClaimJob {
    server_uuid: String,
    /// The server's generation when the decision was taken.
    seen: i64,
    vm_uuid: String,
    resources: String,
    /// Committed (`Some`: when the claim expires, as stored), lost to a change (`None`),
    /// or not stored.
    reply: tokio::sync::oneshot::Sender<Result<Option<f64>, String>>,
}

pub struct Inventory {
    store: Store,
    config: InventoryConfig,
    model: RwLock<Model>,
    /// Held while deciding (one decision at a time) and while claims change.
    claims: Mutex<Claims>,
    /// What the last allocation of each recent kind of request kept for the next of its
    /// kind (the most recently used last, at most `config.recurring_kinds`); taken while
    /// `claims` is held, kept until the answer is written.
    recurrences: Mutex<Vec<Recurrence>>,
    /// One catch-up at a time.
    refreshing: tokio::sync::Mutex<()>,
    status: Mutex<Status>,
    wake: tokio::sync::Notify,
    claimer: tokio::sync::mpsc::UnboundedSender<ClaimJob>,
    /// This replica's own claims, as the notifications they cause are told apart.
    own_claims: Arc<OwnClaims>,
}

/// This replica's claims as seen by its notification follower: the batches sent and not
/// yet answered (a notification may arrive before its claim's answer), and the generations
/// they committed that have not been notified back yet. A burst of notifications of
/// nothing else needs no catch-up now: the replica counts those claims already.
#[derive(Default)]
struct OwnClaims {
    batches_in_flight: std::sync::atomic::AtomicUsize,
    answered: tokio::sync::Notify,
    committed: Mutex<HashSet<i64>>,
}

impl OwnClaims {
    fn batch_sent(&self) {
        self.batches_in_flight.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A batch answered; `generations` are those its claims committed.
    fn batch_answered(&self, generations: impl Iterator<Item = i64>) {
        {
            let mut committed = lock(&self.committed);
            if committed.len() > OWN_REMEMBERED {
                committed.clear();
            }
            committed.extend(generations);
        }
        self.batches_in_flight.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.answered.notify_one();
    }

    fn none_in_flight(&self) -> bool {
        self.batches_in_flight.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// Whether `generation` was committed by an own claim (forgotten once asked).
    fn take(&self, generation: i64) -> bool {
        lock(&self.committed).remove(&generation)
    }

    /// Leaves in `generations` only those not committed by own claims.
    fn keep_others(&self, generations: &mut Vec<i64>) {
        let mut committed = lock(&self.committed);
        generations.retain(|g| !committed.remove(g));
    }
}

/// How long the catch-up after notifications of own claims alone may wait: it moves the
/// point later catch-ups read from, so that they stay small.
const OWN_CATCH_UP_EVERY: Duration = Duration::from_millis(50);
/// How long a notification not known to be of an own claim waits for the claims in flight
/// to be answered before it is caught up with.
const UNKNOWN_CATCH_UP_AFTER: Duration = Duration::from_millis(5);
/// The least time between two catch-ups of the change feed. Under a stream of another
/// replica's claims a follower caught up after each one: a query and an apply per claim,
/// ~0.25 ms of CPU between it and PostgreSQL for each allocation made elsewhere. Spaced,
/// a catch-up reads what came meanwhile at once. Another replica's change is then applied
/// at most this much later (an allocation that finds its server changed still catches up
/// at once, not through here).
const CATCH_UP_GAP: Duration = Duration::from_millis(20);
/// Servers appended since a kind's last allocation that its next one still runs on the
/// request's task (each is run through the whole chain).
const APPENDED_INLINE: usize = 16;
/// Own generations remembered at most (one notified before its commit was seen stays).
const OWN_REMEMBERED: usize = 65_536;

/// Writes an allocation's answer from what it was decided on.
pub type WriteAnswer<'w, T> = dyn FnMut(&Decided<'_>) -> T + 'w;

/// What an allocation was decided on, held while its answer is written.
pub struct Decided<'d> {
    /// Each server's JSON.
    pub raw: &'d [&'d str],
    /// The same servers, parsed.
    pub servers: &'d [Server<'d>],
    pub allocation: &'d Allocation,
    /// The claims the decision counted, as tickets (after the request's own), when they
    /// were asked to be kept.
    pub claims: Option<&'d [Ticket]>,
    model: &'d Model,
}

impl Decided<'_> {
    /// The servers' JSON (as `raw`), kept past the answer without being copied.
    pub fn shared_texts(&self) -> Vec<crate::record::SharedText> {
        self.model.shared_texts()
    }
}

/// Why an inventory allocation was not answered.
#[derive(Debug)]
pub enum AllocateError {
    /// The inventory is stale or the database out of reach; retry (503).
    Unavailable(String),
    Invalid(FieldError),
    Internal(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inventory {
    /// Connects, migrates, loads the inventory and starts following its changes. Fails
    /// (a start-up error) when the database cannot be reached.
    pub async fn start(config: &InventoryConfig) -> Result<Arc<Inventory>, StoreError> {
        let url = config.url.as_deref().ok_or_else(|| StoreError("inventory.url is not set".into()))?;
        let store = Store::connect(url).await?;
        let (claimer, jobs) = tokio::sync::mpsc::unbounded_channel();
        let inventory = Arc::new(Inventory {
            store: store.clone(),
            config: config.clone(),
            model: RwLock::new(Model::default()),
            claims: Mutex::new(Claims::default()),
            recurrences: Mutex::new(Vec::new()),
            refreshing: tokio::sync::Mutex::new(()),
            status: Mutex::new(Status { listening: false, refreshed: Instant::now(), last_error: None }),
            wake: tokio::sync::Notify::new(),
            claimer,
            own_claims: Arc::default(),
        });
        inventory.refresh().await?;
        tokio::spawn(claim_batches(Arc::downgrade(&inventory), store, config.claim_ttl_s, jobs));
        let listener = inventory.clone();
        tokio::spawn(async move { listener.follow().await });
        let refresher = inventory.clone();
        tokio::spawn(async move {
            loop {
                refresher.wake.notified().await;
                if let Err(e) = refresher.refresh().await {
                    tracing::warn!(error = %e, "inventory catch-up failed");
                }
                tokio::time::sleep(CATCH_UP_GAP).await;
            }
        });
        Ok(inventory)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The servers as the replica holds them (read-locked while the guard lives).
    pub fn model(&self) -> std::sync::RwLockReadGuard<'_, Model> {
        self.model.read().unwrap_or_else(|e| e.into_inner())
    }

    fn status(&self) -> Status {
        lock(&self.status).clone()
    }

    fn update_status(&self, f: impl FnOnce(&mut Status)) {
        f(&mut lock(&self.status));
    }

    /// Reads what changed since the model's generation and applies it: changed servers
    /// re-parsed (off the reactor), the touched servers' claims replaced.
    pub async fn refresh(self: &Arc<Self>) -> Result<cache::Applied, StoreError> {
        let _one = self.refreshing.lock().await;
        let since = self.model().generation();
        let changes = match self.store.changes_since(since).await {
            Ok(changes) => changes,
            Err(e) => {
                self.update_status(|s| s.last_error = Some(e.to_string()));
                return Err(e);
            }
        };
        let this = self.clone();
        let applied = tokio::task::spawn_blocking(move || -> Result<cache::Applied, String> {
            let generations: HashMap<String, i64> =
                changes.servers.iter().map(|c| (c.uuid.clone(), c.generation)).collect();
            let upto = generations.values().copied().max().unwrap_or(since);
            let touched: HashSet<String> = generations.keys().cloned().collect();
            let claims: Vec<_> = changes
                .claims
                .into_iter()
                .map(|c| {
                    let g = generations.get(&c.server_uuid).copied().unwrap_or(upto);
                    (c, g)
                })
                .collect();
            let prepared = cache::prepare(changes.servers)?;
            // Servers first, then claims, under both locks: a decision never sees a VM's
            // claim gone before the VM itself is listed.
            let mut held = lock(&this.claims);
            // Generations alone (claims) move under the read lock: decisions go on.
            let bumped = this.model().bump_only(&prepared);
            let applied = match bumped {
                Some(applied) => applied,
                None => this.model.write().unwrap_or_else(|e| e.into_inner()).apply(prepared),
            };
            held.replace_for(&touched, claims, upto);
            Ok(applied)
        })
        .await
        .map_err(|e| StoreError(e.to_string()))?
        .map_err(StoreError)?;
        self.update_status(|s| {
            s.refreshed = Instant::now();
            s.last_error = None;
        });
        Ok(applied)
    }

    /// Follows the change feed: `LISTEN`, a catch-up after each (re)connection, a
    /// catch-up per notification burst.
    async fn follow(self: Arc<Self>) {
        loop {
            match self.store.listener().await {
                Ok((client, mut connection)) => {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                    let driver = tokio::spawn(async move {
                        loop {
                            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                    // `<uuid> <generation>`
                                    let generation = n.payload().rsplit(' ').next().and_then(|g| g.parse::<i64>().ok());
                                    let _ = tx.send(generation);
                                }
                                Some(Ok(_)) => {}
                                Some(Err(e)) => return e.to_string(),
                                None => return "the connection closed".to_string(),
                            }
                        }
                    });
                    let listened = client.batch_execute(&format!("LISTEN {}", store::CHANNEL)).await;
                    if let Err(e) = listened {
                        driver.abort();
                        self.lost(e.to_string());
                        tokio::time::sleep(RECONNECT_EVERY).await;
                        continue;
                    }
                    // Changes made while this replica was not listening.
                    match self.refresh().await {
                        Ok(_) => {
                            self.update_status(|s| s.listening = true);
                            tracing::info!("inventory: following changes");
                        }
                        Err(e) => {
                            driver.abort();
                            self.lost(e.to_string());
                            tokio::time::sleep(RECONNECT_EVERY).await;
                            continue;
                        }
                    }
                    self.follow_notifications(&mut rx).await;
                    let why = driver.await.unwrap_or_else(|e| e.to_string());
                    drop(client);
                    self.lost(why);
                }
                Err(e) => self.lost(e.to_string()),
            }
            tokio::time::sleep(RECONNECT_EVERY).await;
        }
    }

    /// A catch-up per burst of notifications, until the feed ends. A burst of own claims'
    /// alone needs none now (they are counted here): its catch-up is put off a little
    /// ([`OWN_CATCH_UP_EVERY`]) so that later ones read from a recent point. A notification
    /// that arrives before its claim's answer waits for the claims in flight
    /// ([`UNKNOWN_CATCH_UP_AFTER`] at most).
    async fn follow_notifications(&self, rx: &mut tokio::sync::mpsc::UnboundedReceiver<Option<i64>>) {
        let mut own_since: Option<tokio::time::Instant> = None;
        let mut unknown: Vec<i64> = Vec::new();
        let mut unknown_since = tokio::time::Instant::now();
        loop {
            if !unknown.is_empty() && self.own_claims.none_in_flight() {
                self.own_claims.keep_others(&mut unknown);
                if unknown.is_empty() {
                    own_since.get_or_insert_with(tokio::time::Instant::now);
                } else {
                    // Another replica's change, or a feed: caught up with now.
                    (own_since, unknown) = (None, Vec::new());
                    self.wake.notify_one();
                }
            }
            let now = tokio::time::Instant::now();
            let due = match (unknown.is_empty(), own_since) {
                (false, _) if now >= unknown_since + UNKNOWN_CATCH_UP_AFTER => Some(now),
                (false, _) => Some(unknown_since + UNKNOWN_CATCH_UP_AFTER),
                (true, Some(since)) => Some(since + OWN_CATCH_UP_EVERY),
                (true, None) => None,
            };
            tokio::select! {
                notified = rx.recv() => match notified {
                    None => return,
                    Some(Some(generation)) if self.own_claims.take(generation) => {
                        own_since.get_or_insert_with(tokio::time::Instant::now);
                    }
                    Some(Some(generation)) => {
                        if unknown.is_empty() {
                            unknown_since = tokio::time::Instant::now();
                        }
                        unknown.push(generation);
                    }
                    Some(None) => {
                        (own_since, unknown) = (None, Vec::new());
                        self.wake.notify_one();
                    }
                },
                _ = self.own_claims.answered.notified(), if !unknown.is_empty() => {}
                _ = tokio::time::sleep_until(due.unwrap_or(now)), if due.is_some() => {
                    (own_since, unknown) = (None, Vec::new());
                    self.wake.notify_one();
                }
            }
        }
    }

    fn lost(&self, why: String) {
        let was = self.status().listening;
        self.update_status(|s| {
            if s.listening {
                // The staleness bound counts from here, not from the last change: a feed lost
                // after a quiet minute leaves a view that was current a moment ago.
                s.refreshed = Instant::now();
            }
            s.listening = false;
            s.last_error = Some(why.clone());
        });
        if was {
            tracing::warn!(error = %why, "inventory: lost the database; retrying");
        }
    }

    /// Whether the held state may be decided on: current (following changes) or younger
    /// than the staleness bound.
    pub fn check_fresh(&self) -> Result<(), AllocateError> {
        let status = self.status();
        let bound = Duration::from_millis(self.config.staleness_ms);
        if status.listening || status.refreshed.elapsed() <= bound {
            return Ok(());
        }
        Err(AllocateError::Unavailable(format!(
            "the inventory is {} ms old (bound {} ms): the database is out of reach ({})",
            status.refreshed.elapsed().as_millis(),
            self.config.staleness_ms,
            status.last_error.as_deref().unwrap_or("not following changes")
        )))
    }

    /// `/ping`'s inventory part.
    pub fn health(&self) -> serde_json::Value {
        let status = self.status();
        let claims = lock(&self.claims).len();
        let model = self.model();
        serde_json::json!({
            "state": if status.listening { "following" } else if self.check_fresh().is_ok() { "catching-up" } else { "stale" },
            "servers": model.len(),
            "claims": claims,
            "generation": model.generation(),
            "age_ms": if status.listening { 0 } else { status.refreshed.elapsed().as_millis() as u64 },
            "error": status.last_error,
        })
    }

    /// One attempt at an allocation: runs the chain on the inventory for `request`
    /// (validated, without servers), has `write` make the answer from the servers decided
    /// on (while they are held) and, when a server is chosen, sends its claim to the store
    /// ([`Attempt::Claiming`]: [`Inventory::claimed`] waits for the commit). Synchronous and
    /// short on the recurring path (`counts` without `explain`): the per-server part is run
    /// again only for the servers changed since the last allocation of the same request
    /// kind ([`Recurring`]). With `keep_claims`, `write` is given the claims counted (a
    /// record needs them).
    pub fn decide<T>(
        self: &Arc<Self>,
        engine: &Engine,
        request: &AllocateBody<'_>,
        explain: bool,
        counts: bool,
        keep_claims: bool,
        write: &mut WriteAnswer<'_, T>,
    ) -> Result<Attempt<T>, AllocateError> {
        let vm_uuid = match (&request.vm.vm_uuid, &request.vm.uuid) {
            (Js::Str(u), _) | (_, Js::Str(u)) if !u.is_empty() => u.to_string(),
            _ => {
                return Err(AllocateError::Invalid(FieldError::invalid(
                    "vm.vm_uuid",
                    "inventory mode claims the server for the VM: vm.vm_uuid (or vm.uuid) must be a string",
                )))
            }
        };
        self.check_fresh()?;
        let now = unix_now();
        let mut claims = lock(&self.claims);
        claims.prune(now);
        let model = self.model();
        let mut kept = None;
        // Held until the answer is written: the next decision starts from its states.
        let mut recurrences = (counts && !explain).then(|| lock(&self.recurrences));
        let mut recurred = false;
        let allocation = {
            let tickets = claims.tickets_for(&vm_uuid);
            if keep_claims {
                // A copy: the claims change (this one's) before the answer is written.
                kept = Some(tickets.all().cloned().collect::<Vec<_>>());
            }
            let held = model.held(&tickets);
            // A VM placed again holds a claim already, left out of its own tickets.
            let own_claim = tickets.own_claim_server();
            match recurrences.as_deref_mut() {
                Some(kept) => {
                    recurred = true;
                    let kinds = self.config.recurring_kinds as usize;
                    let recurrence = Recurrence::of_kind(kept, kinds, request);
                    crate::engine::parallel::on_one_core(|| {
                        recurrence.allocate(engine, &model, &claims, held, request, own_claim)
                    })
                }
                _ => engine.allocate_on(held, request, explain),
            }
            .map_err(|e| AllocateError::Internal(e.to_string()))?
        };
        let commit = allocation.chosen.map(|id| {
            // Counted at once: the next decision sees it (a pending claim).
            let server_uuid = model.uuid(id).to_string();
            let resources = claim_resources(request).to_string();
            let claim = Claim {
                vm_uuid: vm_uuid.clone(),
                server_uuid: server_uuid.clone(),
                expires: now + self.config.claim_ttl_s as f64,
                pending: true,
                generation: i64::MAX,
            };
            claims.upsert(claim, &resources);
            let (reply, committed) = tokio::sync::oneshot::channel();
            let job =
                ClaimJob { server_uuid, seen: model.generation_of(id), vm_uuid: vm_uuid.clone(), resources, reply };
            // Sent under the lock: the store takes claims in decision order.
            let _ = self.claimer.send(job);
            Commit { inventory: self.clone(), vm_uuid, outcome: Some(committed) }
        });
        drop(claims);
        let decided_on = Decided {
            raw: model.raw(),
            servers: model.servers(),
            allocation: &allocation,
            claims: kept.as_deref(),
            model: &model,
        };
        let answer = write(&decided_on);
        if let (true, Some(Some(r))) = (recurred, recurrences.as_deref_mut().map(|kept| kept.last_mut())) {
            r.recurring.recycle(allocation);
        }
        Ok(match commit {
            Some(commit) => Attempt::Claiming { answer, commit },
            None => Attempt::Answered(answer),
        })
    }

    /// Whether a counts allocation of `request` would reuse the work of the last one of its
    /// kind (kept, the servers laid out as then, a few appended at most): a fraction of a
    /// millisecond, where otherwise every server is run through the chain.
    pub fn recurs(&self, request: &AllocateBody<'_>) -> bool {
        let model = self.model();
        let (layout, n) = (model.layout(), model.len());
        lock(&self.recurrences)
            .iter()
            .any(|r| r.layout == layout && r.generations.len() + APPENDED_INLINE >= n && r.key.fits(request))
    }

    /// Waits for an attempt's claim: `Some(answer)` once it is committed; `None` when
    /// another replica (or a feed) changed the server first, after catching up (decide
    /// again). The claims held are settled by the claimer, not here; a commit not waited
    /// for to the end is released ([`Commit`]).
    pub async fn claimed<T>(self: &Arc<Self>, answer: T, mut commit: Commit) -> Result<Option<T>, AllocateError> {
        match commit.outcome().await {
            Ok(Some(_)) => Ok(Some(answer)),
            Ok(None) => {
                self.refresh().await.map_err(|e| AllocateError::Unavailable(e.to_string()))?;
                Ok(None)
            }
            Err(e) => Err(AllocateError::Unavailable(format!("the claim could not be stored: {e}"))),
        }
    }

    /// Releases the claim of an allocation given up while its claim was on its way
    /// (`made`: when that claim expires, so that a later claim of the same VM, its retry,
    /// is left alone).
    async fn release_given_up(self: &Arc<Self>, vm_uuid: &str, made: f64) {
        match self.store.release(vm_uuid, Some(made)).await {
            Ok(_) => {
                if let Err(e) = self.refresh().await {
                    tracing::warn!(error = %e, "inventory catch-up after a release failed");
                }
            }
            Err(e) => {
                tracing::warn!(vm_uuid, error = %e, "the claim of a request given up could not be released; it expires")
            }
        }
    }

    /// Records what the store said of a claim: committed (the server at its new
    /// generation), or gone (lost to a change, or not stored).
    fn settle(&self, job: &ClaimJob, result: &Result<Option<(i64, f64)>, String>) {
        match result {
            Ok(Some((generation, expires))) => {
                lock(&self.claims).committed(&job.vm_uuid, *generation, *expires);
                self.model().bump(&job.server_uuid, *generation);
            }
            Ok(None) => lock(&self.claims).remove(&job.vm_uuid),
            Err(_) => {
                lock(&self.claims).remove(&job.vm_uuid);
                self.wake.notify_one();
            }
        }
    }
}

/// One attempt's outcome ([`Inventory::decide`]).
pub enum Attempt<T> {
    /// Nothing to claim (no server fits).
    Answered(T),
    /// A server chosen: the answer holds once its claim is committed.
    Claiming { answer: T, commit: Commit },
}

/// A claim on its way to the store ([`Inventory::claimed`]). Dropped before its outcome
/// is known (the allocation given up: its request timed out while deciding or waiting, the
/// client was answered 503), the claim is released once it is committed: no claim stays
/// without its 200.
pub struct Commit {
    inventory: Arc<Inventory>,
    vm_uuid: String,
    outcome: Option<tokio::sync::oneshot::Receiver<Result<Option<f64>, String>>>,
}

impl Commit {
    async fn outcome(&mut self) -> Result<Option<f64>, String> {
        let Some(outcome) = self.outcome.as_mut() else { return Err("the claim was awaited twice".into()) };
        let outcome = outcome.await.unwrap_or_else(|_| Err("the claim was dropped".into()));
        self.outcome = None;
        outcome
    }
}

impl Drop for Commit {
    fn drop(&mut self) {
        let (Some(outcome), Ok(runtime)) = (self.outcome.take(), tokio::runtime::Handle::try_current()) else { return };
        let (inventory, vm_uuid) = (self.inventory.clone(), std::mem::take(&mut self.vm_uuid));
        runtime.spawn(async move {
            if let Ok(Ok(Some(expires))) = outcome.await {
                inventory.release_given_up(&vm_uuid, expires).await;
            }
        });
    }
}

/// The last allocation of one kind of request: what it kept, and what the inventory was then.
struct Recurrence {
    key: RecurringKey,
    recurring: Recurring,
    layout: u64,
    generations: Vec<i64>,
    revisions: Vec<u64>,
    /// [`Claims::changes`] then.
    claim_changes: u64,
    /// The server whose claim was left out then (a VM placed again does not count its
    /// own): its tickets differ from the claims' both then and at the next allocation.
    left_out: Option<String>,
}

impl Recurrence {
    /// The recurrence of `request`'s kind among those `kept` (most recently used last),
    /// moved last; a new one when there is none, the least recently used dropped beyond
    /// `kinds`.
    fn of_kind<'k>(kept: &'k mut Vec<Recurrence>, kinds: usize, request: &AllocateBody<'_>) -> &'k mut Recurrence {
        match kept.iter().position(|r| r.key.fits(request)) {
            Some(at) => {
                let recurrence = kept.remove(at);
                kept.push(recurrence);
            }
            None => {
                if kept.len() >= kinds.max(1) {
                    kept.remove(0);
                }
                kept.push(Recurrence {
                    key: RecurringKey::of(request),
                    recurring: Recurring::new(),
                    layout: 0,
                    generations: Vec::new(),
                    revisions: Vec::new(),
                    claim_changes: 0,
                    left_out: None,
                });
            }
        }
        let last = kept.len() - 1;
        &mut kept[last]
    }

    /// Allocates `request` (of this kind) on `held` (the model with the claims' tickets),
    /// keeping what it found for the next allocation of its kind: the servers changed since
    /// this kind's last one (their generation moved, or their tickets) and those appended
    /// since are the only ones run through the per-server part again; servers deleted,
    /// reordered or added among the others start afresh.
    /// `left_out`: the server of the placed VM's own claim, left out of `held`.
    #[allow(clippy::too_many_arguments)]
    fn allocate(
        &mut self,
        engine: &Engine,
        model: &Model,
        claims: &Claims,
        held: crate::engine::Held<'_>,
        request: &AllocateBody<'_>,
        left_out: Option<&str>,
    ) -> Result<Allocation, crate::engine::PluginError> {
        let n = model.len();
        // Servers appended since keep the layout: ids from `before` on are new.
        let before = self.generations.len();
        let known = self.layout == model.layout() && before <= n && self.revisions.len() == before;
        let changed: Option<Vec<ServerId>> =
            known.then(|| claims.changed_since(self.claim_changes)).flatten().map(|servers| {
                let left_out_now_or_then = left_out.into_iter().chain(self.left_out.as_deref());
                let mut ids: Vec<ServerId> =
                    servers.chain(left_out_now_or_then).filter_map(|uuid| model.id_of(uuid)).collect();
                ids.extend((0..before).filter(|&id| model.generation_of(id) != self.generations[id]));
                ids.extend(before..n);
                ids
            });
        self.left_out = left_out.map(str::to_string);
        let facts: Vec<ServerId> = if changed.is_some() {
            let fed = (0..before).filter(|&id| model.revision_of(id) != self.revisions[id]);
            fed.chain(before..n).collect()
        } else {
            Vec::new()
        };
        self.layout = model.layout();
        self.generations.clear();
        self.generations.extend((0..n).map(|id| model.generation_of(id)));
        self.revisions.clear();
        self.revisions.extend((0..n).map(|id| model.revision_of(id)));
        self.claim_changes = claims.changes();
        let which = match &changed {
            Some(changed) => Changed::Servers { changed, facts: &facts },
            None => Changed::All,
        };
        self.recurring.allocate(engine, held, request, which)
    }
}

/// The generations this replica's own claims moved a server through: a decision that saw
/// any of them counted every own claim up to the latest.
#[derive(Default)]
struct OwnChain {
    latest: i64,
    from: VecDeque<i64>,
}

/// Sends decided claims to the store, all those waiting in one statement, and settles
/// them ([`Inventory::settle`]) before telling their allocations.
async fn claim_batches(
    inventory: std::sync::Weak<Inventory>,
    store: Store,
    ttl_s: u64,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<ClaimJob>,
) {
    let Some(own_claims) = inventory.upgrade().map(|i| i.own_claims.clone()) else { return };
    let mut chains: HashMap<String, OwnChain> = HashMap::new();
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut in_batch: HashSet<&str> = HashSet::new();
        let requests: Vec<ClaimRequest> = batch
            .iter()
            .map(|job| {
                let follows = !in_batch.insert(job.server_uuid.as_str());
                let expected = match chains.get(&job.server_uuid) {
                    Some(chain) if chain.latest == job.seen || chain.from.contains(&job.seen) => chain.latest,
                    _ => job.seen,
                };
                ClaimRequest {
                    server_uuid: job.server_uuid.clone(),
                    expected,
                    follows,
                    vm_uuid: job.vm_uuid.clone(),
                    resources: job.resources.clone(),
                }
            })
            .collect();
        own_claims.batch_sent();
        let answered = store.claim_batch(&requests, ttl_s).await;
        let committed = answered.iter().flatten().flatten().map(|&(generation, _)| generation);
        own_claims.batch_answered(committed);
        match answered {
            Ok(results) => {
                if chains.len() > 100_000 {
                    chains.clear();
                }

                for (job, (request, result)) in batch.into_iter().zip(requests.iter().zip(results)) {
                    if let Some((generation, _)) = result {
                        // The server went from the expected generation (or, following a
                        // claim of this batch, from that one's) to `generation`, by us.
                        let chain = chains.entry(request.server_uuid.clone()).or_default();
                        if request.follows || chain.latest == request.expected {
                            let latest = chain.latest;
                            chain.from.push_back(latest);
                        } else {
                            chain.from.clear();
                        }
                        chain.from.push_back(request.expected);
                        chain.from.push_back(job.seen);
                        while chain.from.len() > OWN_CHAIN {
                            chain.from.pop_front();
                        }
                        chain.latest = generation;
                    }
                    let result = Ok(result);
                    if let Some(inventory) = inventory.upgrade() {
                        inventory.settle(&job, &result);
                    }
                    let _ = job.reply.send(result.map(|r| r.map(|(_, expires)| expires)));
                }
            }
            Err(e) => {
                let result = Err(e.to_string());
                for job in batch {
                    if let Some(inventory) = inventory.upgrade() {
                        inventory.settle(&job, &result);
                    }
                    let _ = job.reply.send(Err(e.to_string()));
                }
            }
        }
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// What a claim holds, in a CNAPI ticket's `extra` terms (the VM's, else its package's).
fn claim_resources(request: &AllocateBody<'_>) -> serde_json::Value {
    let vm = &request.vm;
    let package = request.package.as_ref();
    let or_package = |own: &Js, from: Option<&Js>| -> serde_json::Value {
        if own.is_undefined() {
            from.map_or(serde_json::Value::Null, Js::to_json)
        } else {
            own.to_json()
        }
    };
    let quota = if vm.quota_gib.is_undefined() {
        package.map_or(serde_json::Value::Null, |p| {
            serde_json::Value::from(p.quota_mib.to_json().as_f64().map_or(0.0, |mib| mib / 1024.0))
        })
    } else {
        vm.quota_gib.to_json()
    };
    serde_json::json!({
        "owner_uuid": vm.owner_uuid.to_json(),
        "max_physical_memory": or_package(&vm.ram_mib, package.map(|p| &p.max_physical_memory_mib)),
        "cpu_cap": or_package(&vm.cpu_cap_pct, package.map(|p| &p.cpu_cap_pct)),
        "quota": quota,
        "brand": vm.brand.to_json(),
    })
}
