-- Inventory mode's store: servers as CNAPI returns them, their VMs, and the claims of
-- allocations whose VMs do not exist yet.
--
-- Objects are `json`, not `jsonb`: json keeps the text as given (key order included), so
-- that an allocation on the inventory reads the server exactly as the stateless request
-- would (NIC and VM order can decide ties) and echoes it the same way.

-- Every change takes the next value: a server's `generation` is the optimistic lock of
-- claims, and replicas catch up with `generation > last seen`.
CREATE SEQUENCE inventory_generation;
-- Servers' order: a new server goes last; a load orders them as the dump does.
CREATE SEQUENCE inventory_position;

CREATE TABLE servers (
    uuid        text PRIMARY KEY,
    -- The order servers are given to the chain (on a score tie the later one wins).
    position    bigint NOT NULL,
    -- The server object, its `vms` emptied (`{}`) when they were an object: VMs live in
    -- `vms`. A non-object `vms` (null, an array) is kept as given.
    object      json NOT NULL,
    -- Bumped by every change to the server, its VMs or its claims.
    generation  bigint NOT NULL,
    -- Bumped only when the object or its VMs change (a claim leaves it): replicas re-read
    -- the object only then.
    revision    bigint NOT NULL,
    -- Deleted servers stay as tombstones so that replicas catching up see the deletion.
    deleted     boolean NOT NULL DEFAULT false
);
CREATE INDEX servers_generation ON servers (generation);

CREATE TABLE vms (
    uuid        text PRIMARY KEY,
    server_uuid text NOT NULL,
    position    bigint NOT NULL,
    object      json NOT NULL
);
CREATE INDEX vms_server ON vms (server_uuid, position);

CREATE TABLE claims (
    vm_uuid     text PRIMARY KEY,
    server_uuid text NOT NULL,
    -- What the claim holds, as a CNAPI ticket's `extra`: owner_uuid, max_physical_memory
    -- (MiB), cpu_cap, quota (GiB), brand.
    resources   json NOT NULL,
    created     timestamptz NOT NULL DEFAULT now(),
    expires     timestamptz NOT NULL
);
CREATE INDEX claims_server ON claims (server_uuid);
