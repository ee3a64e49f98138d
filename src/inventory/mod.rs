//! Inventory mode: dapi keeps the datacenter in PostgreSQL and in memory, and allocates
//! without being sent it (`inventory.url` switches it on).
//!
//! * [`store`]: the schema (migrations/), writes, the catch-up read and the claim;
//! * [`cache`]: the replica's copy, parsed into the engine's model when a server changes;
//! * [`records`]: servers and VMs as fed (checked as `/allocate` checks servers);
//! * this module: the replica ([`Inventory`]): start-up load, `LISTEN` for changes and
//!   catch-up after a reconnect, allocation with an atomic claim, the staleness bound.
//!
//! A claim is decided on the generation the replica saw: the claim's transaction bumps
//! the server's generation only if it is still that one; otherwise another replica (or a
//! feed) changed the server first, and the allocation is run again on fresh state.

pub mod cache;
pub mod records;
pub mod store;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::InventoryConfig;
use crate::engine::{Allocation, Engine};
use crate::js::Js;
use crate::model::{AllocateBody, FieldError};
use cache::{Claim, Rows, View};
use store::{ClaimError, Store, StoreError};

/// Times an allocation is run again after losing its claim to another replica.
const CLAIM_RETRIES: usize = 8;
/// Wait between reconnection attempts.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// The replica's connection to its inventory.
#[derive(Debug, Clone)]
struct Status {
    /// The change feed (`LISTEN`) is up: the view is at most a notification behind.
    listening: bool,
    /// The last catch-up that succeeded.
    refreshed: Instant,
    last_error: Option<String>,
}

pub struct Inventory {
    store: Store,
    config: InventoryConfig,
    view: RwLock<Arc<View>>,
    rows: tokio::sync::Mutex<Rows>,
    status: Mutex<Status>,
    wake: tokio::sync::Notify,
}

/// Why an inventory allocation was not answered.
#[derive(Debug)]
pub enum AllocateError {
    /// The inventory is stale or the database out of reach; retry (503).
    Unavailable(String),
    Invalid(FieldError),
    Internal(String),
}

/// An allocation with the view it was decided on (the answer is written from it).
pub struct Allocated {
    pub view: Arc<View>,
    pub allocation: Allocation,
}

impl Inventory {
    /// Connects, migrates, loads the inventory and starts following its changes. Fails
    /// (a start-up error) when the database cannot be reached.
    pub async fn start(config: &InventoryConfig) -> Result<Arc<Inventory>, StoreError> {
        let url = config.url.as_deref().ok_or_else(|| StoreError("inventory.url is not set".into()))?;
        let store = Store::connect(url).await?;
        let inventory = Arc::new(Inventory {
            store,
            config: config.clone(),
            view: RwLock::new(Arc::new(View::empty())),
            rows: tokio::sync::Mutex::new(Rows::default()),
            status: Mutex::new(Status { listening: false, refreshed: Instant::now(), last_error: None }),
            wake: tokio::sync::Notify::new(),
        });
        inventory.refresh().await?;
        let listener = inventory.clone();
        tokio::spawn(async move { listener.follow().await });
        let refresher = inventory.clone();
        tokio::spawn(async move {
            loop {
                refresher.wake.notified().await;
                if let Err(e) = refresher.refresh().await {
                    tracing::warn!(error = %e, "inventory catch-up failed");
                }
            }
        });
        Ok(inventory)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn view(&self) -> Arc<View> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_view(&self, view: View) {
        *self.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(view);
    }

    fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update_status(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Reads what changed since the view's generation and installs the new view.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let mut rows = self.rows.lock().await;
        let current = self.view();
        let changes = match self.store.changes_since(current.generation).await {
            Ok(changes) => changes,
            Err(e) => {
                self.update_status(|s| s.last_error = Some(e.to_string()));
                return Err(e);
            }
        };
        let view = rows.apply(&current, changes).map_err(StoreError)?;
        self.set_view(view);
        self.update_status(|s| {
            s.refreshed = Instant::now();
            s.last_error = None;
        });
        Ok(())
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
                                Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => {
                                    let _ = tx.send(());
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
                        Ok(()) => {
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
                    while rx.recv().await.is_some() {
                        self.wake.notify_one();
                    }
                    let why = driver.await.unwrap_or_else(|e| e.to_string());
                    drop(client);
                    self.lost(why);
                }
                Err(e) => self.lost(e.to_string()),
            }
            tokio::time::sleep(RECONNECT_EVERY).await;
        }
    }

    fn lost(&self, why: String) {
        let was = self.status().listening;
        self.update_status(|s| {
            s.listening = false;
            s.last_error = Some(why.clone());
        });
        if was {
            tracing::warn!(error = %why, "inventory: lost the database; retrying");
        }
    }

    /// The view, if it may be decided on: current (following changes) or younger than
    /// the staleness bound.
    pub fn fresh_view(&self) -> Result<Arc<View>, AllocateError> {
        let status = self.status();
        let bound = Duration::from_millis(self.config.staleness_ms);
        if status.listening || status.refreshed.elapsed() <= bound {
            return Ok(self.view());
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
        let view = self.view();
        serde_json::json!({
            "state": if status.listening { "following" } else if self.fresh_view().is_ok() { "catching-up" } else { "stale" },
            "servers": view.generations.len(),
            "claims": view.claims.len(),
            "generation": view.generation,
            "age_ms": if status.listening { 0 } else { status.refreshed.elapsed().as_millis() as u64 },
            "error": status.last_error,
        })
    }

    /// Runs the chain on the inventory for `request` (validated, without servers) and
    /// claims the chosen server. Blocking: runs on the blocking pool, `handle` runs the
    /// database round trips.
    pub fn allocate(
        &self,
        engine: &Engine,
        request: &AllocateBody<'_>,
        explain: bool,
        handle: &tokio::runtime::Handle,
    ) -> Result<Allocated, AllocateError> {
        let vm_uuid = match (&request.vm.vm_uuid, &request.vm.uuid) {
            (Js::Str(u), _) | (_, Js::Str(u)) if !u.is_empty() => u.to_string(),
            _ => {
                return Err(AllocateError::Invalid(FieldError::invalid(
                    "vm.vm_uuid",
                    "inventory mode claims the server for the VM: vm.vm_uuid (or vm.uuid) must be a string",
                )))
            }
        };
        let resources = claim_resources(request).to_string();
        for _ in 0..CLAIM_RETRIES {
            let view = self.fresh_view()?;
            let now = unix_now();
            let mut tickets = request.tickets.clone();
            tickets.extend(view.live_tickets(now, &vm_uuid));
            let allocation = engine
                .allocate_on(view.parsed.servers(), view.parsed.raw(), request, &tickets, explain)
                .map_err(|e| AllocateError::Internal(e.to_string()))?;
            let Some(id) = allocation.chosen else {
                return Ok(Allocated { view, allocation });
            };
            let server = view.parsed.servers()[id].uuid.to_js_string();
            let seen = view.generations[id];
            let claimed =
                handle.block_on(self.store.claim(&server, seen, &vm_uuid, &resources, self.config.claim_ttl_s));
            match claimed {
                Ok((generation, expires)) => {
                    let claim = Claim::new(vm_uuid.clone(), server.clone(), &resources, expires);
                    handle.block_on(async {
                        let mut rows = self.rows.lock().await;
                        let current = self.view();
                        self.set_view(rows.claimed(&current, &server, generation, claim));
                    });
                    return Ok(Allocated { view, allocation });
                }
                Err(ClaimError::Conflict) => {
                    // Another replica (or a feed) changed the server: decide again on
                    // fresh state.
                    handle.block_on(self.refresh()).map_err(|e| AllocateError::Unavailable(e.to_string()))?;
                }
                Err(ClaimError::Store(e)) => {
                    self.wake.notify_one();
                    return Err(AllocateError::Unavailable(format!("the claim could not be stored: {e}")));
                }
            }
        }
        Err(AllocateError::Unavailable(format!("the chosen server kept changing ({CLAIM_RETRIES} tries); retry")))
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
