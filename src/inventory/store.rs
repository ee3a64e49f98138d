//! The PostgreSQL side of inventory mode: migrations, writes (each in one transaction that
//! bumps the generation and notifies the replicas), the catch-up read and the claim.
//!
//! The pool is deadpool-postgres over tokio-postgres: both are maintained, async, and
//! small; a pool saves a connection set-up (~ms) per request and caps connections per
//! replica. Every write takes one advisory lock before drawing its generation, so that
//! generations commit in order and a replica reading `generation > last` misses nothing.

use deadpool_postgres::Transaction;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

/// The channel replicas listen on; the payload is `<uuid> <generation>`.
pub const CHANNEL: &str = "dapi_inventory";

/// Serialises writers (see the module header).
const WRITE_LOCK: i64 = 0x6461_7069; // "dapi"
/// Serialises migrations of replicas starting together.
const MIGRATE_LOCK: i64 = 0x6461_7070;

/// The migrations, in order: (version, SQL). Applied ones are recorded in
/// `schema_migrations`.
const MIGRATIONS: &[(i32, &str)] =
    &[(1, include_str!("../../migrations/0001_init.sql")), (2, include_str!("../../migrations/0002_claim_batch.sql"))];

/// A store failure: the database is out of reach, or refused a statement.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        // The source says why (connection refused, the server's own message).
        let mut message = e.to_string();
        if let Some(db) = e.as_db_error() {
            message = format!("{message}: {}", db.message());
        } else if let Some(source) = std::error::Error::source(&e) {
            message = format!("{message}: {source}");
        }
        StoreError(message)
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> StoreError {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError(other.to_string()),
        }
    }
}

/// A server as stored: its object (VMs apart) and its VMs in order.
#[derive(Debug, Clone)]
pub struct ServerRecord {
    pub uuid: String,
    pub object: String,
    pub vms: Vec<(String, String)>,
}

/// One server changed since a generation.
#[derive(Debug)]
pub struct ServerChange {
    pub uuid: String,
    pub generation: i64,
    pub position: i64,
    pub deleted: bool,
    /// The server's object with its VMs, as a request carries it, when its content
    /// changed (not for a claim alone).
    pub text: Option<String>,
}

impl ServerChange {
    /// A server's move as a catch-up row holds it from column `at` on (uuid, generation,
    /// position, deleted), its text not yet known.
    fn moved(row: &tokio_postgres::Row, at: usize) -> ServerChange {
        ServerChange {
            uuid: row.get(at),
            generation: row.get(at + 1),
            position: row.get(at + 2),
            deleted: row.get(at + 3),
            text: None,
        }
    }
}

/// VM rows read at a time by a catch-up: a replica's first one reads every VM, and rows
/// held all at once would double its start-up peak (and strand their freed pages in the
/// arena of the thread that read them).
const VM_ROWS_AT_ONCE: i32 = 2048;

/// A live claim as stored.
#[derive(Debug, Clone)]
pub struct StoredClaim {
    pub vm_uuid: String,
    pub server_uuid: String,
    /// What it holds, JSON (a ticket's `extra`).
    pub resources: String,
    /// Unix seconds.
    pub expires: f64,
}

impl StoredClaim {
    /// A claim as a catch-up row holds it from column `at` on (vm_uuid, server_uuid,
    /// resources, expires).
    fn read(row: &tokio_postgres::Row, at: usize) -> StoredClaim {
        StoredClaim {
            vm_uuid: row.get(at),
            server_uuid: row.get(at + 1),
            resources: row.get(at + 2),
            expires: row.get(at + 3),
        }
    }
}

/// What changed since a generation.
#[derive(Debug, Default)]
pub struct Changes {
    pub servers: Vec<ServerChange>,
    /// The live claims of the changed servers (all of them on a first read).
    pub claims: Vec<StoredClaim>,
}

/// A claim to take: the server as decided on, at the generation it was seen at.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub server_uuid: String,
    /// The generation the claim expects the server at.
    pub expected: i64,
    /// Decided after an earlier claim of the same batch on the same server, counting it:
    /// expects the generation that one produces.
    pub follows: bool,
    pub vm_uuid: String,
    pub resources: String,
}

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    url: String,
}

impl Store {
    /// Connects (once, to fail at start-up when the database is out of reach) and applies
    /// the migrations not yet applied.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| StoreError(format!("inventory.url is not a PostgreSQL URL: {e}")))?;
        // Every statement here is short, and a prepared one's generic plan can guess it
        // long: compiling it (JIT, on by default where PostgreSQL has LLVM) would cost
        // milliseconds each time. Options given in the URL come first, and stay.
        let options = format!("{} -c jit=off", config.get_options().unwrap_or_default());
        config.options(options.trim_start());
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(8)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(std::time::Duration::from_secs(5)))
            .create_timeout(Some(std::time::Duration::from_secs(5)))
            .build()
            .map_err(|e| StoreError(e.to_string()))?;
        let store = Store { pool, url: url.to_string() };
        store.migrate().await?;
        Ok(store)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK]).await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, \
             applied timestamptz NOT NULL DEFAULT now())",
        )
        .await?;
        let applied: Vec<i32> =
            tx.query("SELECT version FROM schema_migrations", &[]).await?.iter().map(|r| r.get(0)).collect();
        for (version, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|e| StoreError(format!("migration {version}: {}", StoreError::from(e))))?;
            tx.execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[version]).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A write transaction, its generation drawn (after the write lock).
    async fn begin_write<'c>(client: &'c mut deadpool_postgres::Object) -> Result<(Transaction<'c>, i64), StoreError> {
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK]).await?;
        let generation: i64 = tx.query_one("SELECT nextval('inventory_generation')", &[]).await?.get(0);
        Ok((tx, generation))
    }

    async fn notify(tx: &Transaction<'_>, uuid: &str, generation: i64) -> Result<(), tokio_postgres::Error> {
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("{uuid} {generation}")]).await.map(|_| ())
    }

    /// Stores one server (replacing it and, when `vms` is given, its VMs); claims of VMs
    /// now present are dropped. Returns the generation.
    pub async fn put_server(&self, record: &ServerRecord, replace_vms: bool) -> Result<i64, StoreError> {
        let mut client = self.pool.get().await?;
        let (tx, generation) = Self::begin_write(&mut client).await?;
        upsert_server(&tx, record, replace_vms, false, generation).await?;
        Self::notify(&tx, &record.uuid, generation).await?;
        tx.commit().await?;
        Ok(generation)
    }

    /// Replaces the whole inventory (servers not in `records` are deleted) in one
    /// transaction.
    pub async fn load(&self, records: &[ServerRecord]) -> Result<i64, StoreError> {
        let mut client = self.pool.get().await?;
        let (tx, generation) = Self::begin_write(&mut client).await?;
        tx.execute(
            "UPDATE servers SET deleted = true, generation = $1, revision = $1 WHERE NOT deleted",
            &[&generation],
        )
        .await?;
        tx.execute("DELETE FROM vms", &[]).await?;
        for record in records {
            upsert_server(&tx, record, true, true, generation).await?;
        }
        // Claims on the servers the dump no longer lists go with them, as a deleted
        // server's do.
        tx.execute("DELETE FROM claims WHERE server_uuid IN (SELECT uuid FROM servers WHERE deleted)", &[]).await?;
        Self::notify(&tx, "*", generation).await?;
        tx.commit().await?;
        Ok(generation)
    }

    /// Deletes a server (and its VMs and claims); false when there was none.
    pub async fn delete_server(&self, uuid: &str) -> Result<bool, StoreError> {
        let mut client = self.pool.get().await?;
        let (tx, generation) = Self::begin_write(&mut client).await?;
        let n = tx
            .execute(
                "UPDATE servers SET deleted = true, generation = $2, revision = $2 WHERE uuid = $1 AND NOT deleted",
                &[&uuid, &generation],
            )
            .await?;
        tx.execute("DELETE FROM vms WHERE server_uuid = $1", &[&uuid]).await?;
        tx.execute("DELETE FROM claims WHERE server_uuid = $1", &[&uuid]).await?;
        Self::notify(&tx, uuid, generation).await?;
        tx.commit().await?;
        Ok(n > 0)
    }

    /// Stores a VM on a server (moving it from another one if need be); its claim, if
    /// any, is dropped: the VM now counts itself. `Ok(None)` when the server is unknown.
    pub async fn put_vm(&self, uuid: &str, server_uuid: &str, object: &str) -> Result<Option<i64>, StoreError> {
        let mut client = self.pool.get().await?;
        let (tx, generation) = Self::begin_write(&mut client).await?;
        let bumped = tx
            .execute(
                "UPDATE servers SET generation = $2, revision = $2 WHERE (uuid = $1 AND NOT deleted) \
                 OR uuid = (SELECT server_uuid FROM vms WHERE uuid = $3)",
                &[&server_uuid, &generation, &uuid],
            )
            .await?;
        let exists =
            tx.query_opt("SELECT 1 FROM servers WHERE uuid = $1 AND NOT deleted", &[&server_uuid]).await?.is_some();
        if !exists || bumped == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        tx.execute(
            "INSERT INTO vms (uuid, server_uuid, position, object) VALUES ($1, $2, $3, CAST($4::text AS json)) \
             ON CONFLICT (uuid) DO UPDATE SET server_uuid = EXCLUDED.server_uuid, object = EXCLUDED.object, \
             position = CASE WHEN vms.server_uuid = EXCLUDED.server_uuid THEN vms.position ELSE EXCLUDED.position END",
            &[&uuid, &server_uuid, &generation, &object],
        )
        .await?;
        // The claim ends (the VM now counts itself): its server changes too.
        tx.execute(
            "UPDATE servers SET generation = $2 WHERE uuid IN (SELECT server_uuid FROM claims WHERE vm_uuid = $1)",
            &[&uuid, &generation],
        )
        .await?;
        tx.execute("DELETE FROM claims WHERE vm_uuid = $1", &[&uuid]).await?;
        Self::notify(&tx, server_uuid, generation).await?;
        tx.commit().await?;
        Ok(Some(generation))
    }

    /// Deletes a VM; false when there was none.
    pub async fn delete_vm(&self, uuid: &str) -> Result<bool, StoreError> {
        let mut client = self.pool.get().await?;
        let (tx, generation) = Self::begin_write(&mut client).await?;
        let row = tx.query_opt("DELETE FROM vms WHERE uuid = $1 RETURNING server_uuid", &[&uuid]).await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(false);
        };
        let server: String = row.get(0);
        tx.execute("UPDATE servers SET generation = $2, revision = $2 WHERE uuid = $1", &[&server, &generation])
            .await?;
        Self::notify(&tx, &server, generation).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Takes a batch of claims in one statement and one commit (migrations/0002); for each,
    /// in order, the server's new generation and the claim's expiry (Unix seconds), or
    /// `None` when the server changed since (a conflict).
    pub async fn claim_batch(&self, batch: &[ClaimRequest], ttl_s: u64) -> Result<Vec<Option<(i64, f64)>>, StoreError> {
        let client = self.pool.get().await?;
        let statement =
            client.prepare_cached("SELECT k, generation, expires FROM dapi_claim($1, $2, $3, $4, $5, $6)").await?;
        let servers: Vec<&str> = batch.iter().map(|c| c.server_uuid.as_str()).collect();
        let expected: Vec<i64> = batch.iter().map(|c| c.expected).collect();
        let follows: Vec<bool> = batch.iter().map(|c| c.follows).collect();
        let vms: Vec<&str> = batch.iter().map(|c| c.vm_uuid.as_str()).collect();
        let resources: Vec<&str> = batch.iter().map(|c| c.resources.as_str()).collect();
        let ttl = ttl_s as f64;
        let rows = client.query(&statement, &[&servers, &expected, &follows, &vms, &resources, &ttl]).await?;
        let mut out = vec![None; batch.len()];
        for row in rows {
            let k: i32 = row.get(0);
            if let Some(slot) = usize::try_from(k).ok().and_then(|k| out.get_mut(k.wrapping_sub(1))) {
                *slot = Some((row.get(1), row.get(2)));
            }
        }
        Ok(out)
    }

    /// Releases a claim (a failed provision); false when there was none. With `made`, only
    /// the claim that expires then (as the claim statement returned it): a later claim of
    /// the same VM is another's.
    pub async fn release(&self, vm_uuid: &str, made: Option<f64>) -> Result<bool, StoreError> {
        let mut client = self.pool.get().await?;
        let (tx, generation) = Self::begin_write(&mut client).await?;
        let row = tx
            .query_opt(
                "DELETE FROM claims WHERE vm_uuid = $1 \
                 AND ($2::float8 IS NULL OR extract(epoch FROM expires)::float8 = $2) RETURNING server_uuid",
                &[&vm_uuid, &made],
            )
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(false);
        };
        let server: String = row.get(0);
        tx.execute("UPDATE servers SET generation = $2 WHERE uuid = $1", &[&server, &generation]).await?;
        Self::notify(&tx, &server, generation).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Everything changed after generation `since` (0: everything), read in one snapshot,
    /// with every live claim.
    pub async fn changes_since(&self, since: i64) -> Result<Changes, StoreError> {
        let mut client = self.pool.get().await?;
        if since > 0 {
            if let Some(changes) = Self::claims_since(&client, since).await? {
                return Ok(changes);
            }
        }
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let rows = tx
            .query(
                "SELECT uuid, generation, position, deleted, \
                 CASE WHEN revision > $1 AND NOT deleted THEN object::text END \
                 FROM servers WHERE generation > $1",
                &[&since],
            )
            .await?;
        let mut changes = Changes::default();
        let mut changed: Vec<String> = Vec::new();
        let mut touched: Vec<String> = Vec::new();
        // Objects waiting for their VMs, in one buffer: by uuid, their change's place and
        // their range in it. Held apart, 5,000 of them left the holes of their freeing
        // between the texts made meanwhile (a replica's memory after its first catch-up);
        // one buffer is one free block after, which the heap trim hands back.
        let object_bytes = rows.iter().filter_map(|row| row.get::<_, Option<&str>>(4)).map(str::len).sum();
        let mut held_objects = String::with_capacity(object_bytes);
        let mut objects: std::collections::HashMap<String, (usize, std::ops::Range<usize>)> = Default::default();
        for row in rows {
            let change = ServerChange::moved(&row, 0);
            touched.push(change.uuid.clone());
            if let Some(object) = row.get::<_, Option<&str>>(4) {
                changed.push(change.uuid.clone());
                let start = held_objects.len();
                held_objects.push_str(object);
                objects.insert(change.uuid.clone(), (changes.servers.len(), start..held_objects.len()));
            }
            changes.servers.push(change);
        }
        if !changed.is_empty() {
            // A server's VMs come together (ordered by server): its text is made as soon
            // as the next server's begin, and the rows are let go batch by batch.
            let portal = tx
                .bind(
                    "SELECT server_uuid, uuid, object::text FROM vms WHERE server_uuid = ANY($1) \
                     ORDER BY server_uuid, position",
                    &[&changed],
                )
                .await?;
            // The server whose rows are being read, and its VMs' text so far: one buffer
            // for all servers, so that the texts kept are the only allocations that stay.
            let mut current: Option<String> = None;
            let mut vms = String::new();
            let mut finish = |server: String, vms: &mut String, changes: &mut Changes| -> Result<(), StoreError> {
                if let Some((at, range)) = objects.remove(&server) {
                    vms.push('}');
                    changes.servers[at].text =
                        Some(super::records::with_vms(&server, &held_objects[range], Some(vms)).map_err(StoreError)?);
                }
                vms.clear();
                Ok(())
            };
            loop {
                let rows = tx.query_portal(&portal, VM_ROWS_AT_ONCE).await?;
                if rows.is_empty() {
                    break;
                }
                for row in rows {
                    let server: &str = row.get(0);
                    if current.as_deref().is_some_and(|s| s != server) {
                        if let Some(done) = current.take() {
                            finish(done, &mut vms, &mut changes)?;
                        }
                    }
                    if current.is_none() {
                        current = Some(server.to_string());
                        vms.push('{');
                    }
                    if vms.len() > 1 {
                        vms.push(',');
                    }
                    vms.push_str(&crate::js::json::stringify(row.get::<_, &str>(1)));
                    vms.push(':');
                    vms.push_str(row.get(2));
                }
            }
            if let Some(done) = current.take() {
                finish(done, &mut vms, &mut changes)?;
            }
        }
        // Servers without VMs: their object as it is.
        for (_, (at, range)) in objects {
            changes.servers[at].text = Some(held_objects[range].to_string());
        }
        // Every claim change bumps its server's generation: only the touched servers'
        // claims are read (all of them on the first read).
        let claims = tx
            .query(
                "SELECT vm_uuid, server_uuid, resources::text, extract(epoch FROM expires)::float8 \
                 FROM claims WHERE expires > now() AND ($1::bigint = 0 OR server_uuid = ANY($2)) ORDER BY created, vm_uuid",
                &[&since, &touched],
            )
            .await?;
        changes.claims = claims.iter().map(|row| StoredClaim::read(row, 0)).collect();
        tx.commit().await?;
        Ok(changes)
    }

    /// What changed after `since` when no server's content did (the usual catch-up:
    /// claims taken and released), in one prepared statement (one snapshot, one round
    /// trip; each touched server's claims found through its index, `LATERAL ... OFFSET 0`
    /// (not flattened into a hash join over every claim), whatever the generic plan
    /// guesses of how many servers moved); `None` when some server's
    /// content changed.
    async fn claims_since(client: &deadpool_postgres::Object, since: i64) -> Result<Option<Changes>, StoreError> {
        let statement = client
            .prepare_cached(
                "WITH s AS (SELECT uuid, generation, position, deleted, revision > $1 AND NOT deleted AS changed \
                 FROM servers WHERE generation > $1) \
                 SELECT 0 AS kind, uuid, generation, position, deleted, changed, \
                 NULL::text AS vm_uuid, NULL::text AS server_uuid, NULL::text AS resources, \
                 NULL::float8 AS expires, NULL::timestamptz AS created FROM s \
                 UNION ALL \
                 SELECT 1, NULL, NULL, NULL, NULL, NULL, c.vm_uuid, c.server_uuid, c.resources::text, \
                 extract(epoch FROM c.expires)::float8, c.created FROM s, \
                 LATERAL (SELECT * FROM claims WHERE server_uuid = s.uuid AND expires > now() OFFSET 0) c \
                 ORDER BY kind, created, vm_uuid, uuid",
            )
            .await?;
        let rows = client.query(&statement, &[&since]).await?;
        let mut changes = Changes::default();
        for row in rows {
            if row.get::<_, i32>(0) == 0 {
                if row.get::<_, bool>(5) {
                    return Ok(None);
                }
                changes.servers.push(ServerChange::moved(&row, 1));
            } else {
                changes.claims.push(StoredClaim::read(&row, 6));
            }
        }
        Ok(Some(changes))
    }

    /// The servers as stored (live ones), in order, or one of them.
    pub async fn servers(&self, uuid: Option<&str>) -> Result<Vec<(ServerRecord, i64)>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT uuid, object::text, generation FROM servers WHERE NOT deleted \
                 AND ($1::text IS NULL OR uuid = $1) ORDER BY position",
                &[&uuid],
            )
            .await?;
        let uuids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let vms = client
            .query(
                "SELECT server_uuid, uuid, object::text FROM vms WHERE server_uuid = ANY($1) \
                 ORDER BY server_uuid, position",
                &[&uuids],
            )
            .await?;
        let mut by_server: std::collections::HashMap<String, Vec<(String, String)>> = Default::default();
        for row in vms {
            by_server.entry(row.get(0)).or_default().push((row.get(1), row.get(2)));
        }
        Ok(rows
            .iter()
            .map(|r| {
                let uuid: String = r.get(0);
                let vms = by_server.remove(&uuid).unwrap_or_default();
                (ServerRecord { uuid, object: r.get(1), vms }, r.get(2))
            })
            .collect())
    }

    /// A connection of its own for `LISTEN` (a pooled one would be recycled).
    pub async fn listener(
        &self,
    ) -> Result<
        (tokio_postgres::Client, tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>),
        StoreError,
    > {
        Ok(tokio_postgres::connect(&self.url, NoTls).await?)
    }
}

async fn upsert_server(
    tx: &Transaction<'_>,
    record: &ServerRecord,
    replace_vms: bool,
    reorder: bool,
    generation: i64,
) -> Result<(), tokio_postgres::Error> {
    // A revived (deleted) server goes to the end, as a new one does; a load puts every
    // server where the dump has it.
    tx.execute(
        "INSERT INTO servers (uuid, position, object, generation, revision) \
         VALUES ($1, nextval('inventory_position'), CAST($3::text AS json), $2, $2) \
         ON CONFLICT (uuid) DO UPDATE SET object = EXCLUDED.object, generation = $2, revision = $2, \
         position = CASE WHEN servers.deleted OR $4 THEN EXCLUDED.position ELSE servers.position END, \
         deleted = false",
        &[&record.uuid, &generation, &record.object, &reorder],
    )
    .await?;
    if replace_vms {
        tx.execute("DELETE FROM vms WHERE server_uuid = $1", &[&record.uuid]).await?;
        if !record.vms.is_empty() {
            let uuids: Vec<&str> = record.vms.iter().map(|(u, _)| u.as_str()).collect();
            let objects: Vec<&str> = record.vms.iter().map(|(_, o)| o.as_str()).collect();
            // A VM listed on another server moves here: that server changes too.
            tx.execute(
                "UPDATE servers SET generation = $2, revision = $2 WHERE uuid IN \
                 (SELECT server_uuid FROM vms WHERE uuid = ANY($1))",
                &[&uuids, &generation],
            )
            .await?;
            tx.execute(
                "INSERT INTO vms (uuid, server_uuid, position, object) \
                 SELECT u, $1, o, CAST(j AS json) FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(u, j, o) \
                 ON CONFLICT (uuid) DO UPDATE SET server_uuid = EXCLUDED.server_uuid, object = EXCLUDED.object, \
                 position = EXCLUDED.position",
                &[&record.uuid, &uuids, &objects],
            )
            .await?;
            tx.execute(
                "UPDATE servers SET generation = $2 WHERE uuid IN \
                 (SELECT server_uuid FROM claims WHERE vm_uuid = ANY($1))",
                &[&uuids, &generation],
            )
            .await?;
            tx.execute("DELETE FROM claims WHERE vm_uuid = ANY($1)", &[&uuids]).await?;
        }
    }
    Ok(())
}
