-- Claims in one statement: a replica sends the claims it decided since its last call
-- together (group commit: one round trip and one commit for the lot), each checked against
-- the server's generation and, if it still holds, bumping it and inserting the claim.
--
-- `follows[k]`: claim k was decided after claim j < k of the same call on the same server
-- (the same replica counted it), so it expects the generation j produced; if j failed, k
-- fails too. Otherwise it expects `expected[k]`.
--
-- Writers take the inventory's write lock first (as every other write does), so that
-- generations commit in order and a catch-up by `generation > last` misses nothing.
CREATE FUNCTION dapi_claim(
    p_servers   text[],
    p_expected  bigint[],
    p_follows   boolean[],
    p_vms       text[],
    p_resources text[],
    p_ttl_s     float8
) RETURNS TABLE (k integer, generation bigint, expires float8)
LANGUAGE plpgsql AS $$
DECLARE
    last_gen jsonb := '{}';
    want     bigint;
    g        bigint;
    e        float8;
BEGIN
    PERFORM pg_advisory_xact_lock(1684107369); -- store.rs WRITE_LOCK ("dapi")
    FOR i IN 1 .. coalesce(array_length(p_servers, 1), 0) LOOP
        IF p_follows[i] THEN
            IF NOT last_gen ? p_servers[i] THEN
                CONTINUE;
            END IF;
            want := (last_gen ->> p_servers[i])::bigint;
        ELSE
            want := p_expected[i];
        END IF;
        g := nextval('inventory_generation');
        UPDATE servers s SET generation = g
            WHERE s.uuid = p_servers[i] AND s.generation = want AND NOT s.deleted;
        IF NOT FOUND THEN
            last_gen := last_gen - p_servers[i];
            CONTINUE;
        END IF;
        INSERT INTO claims AS c (vm_uuid, server_uuid, resources, expires)
            VALUES (p_vms[i], p_servers[i], CAST(p_resources[i] AS json), now() + make_interval(secs => p_ttl_s))
            ON CONFLICT (vm_uuid) DO UPDATE SET server_uuid = EXCLUDED.server_uuid,
                resources = EXCLUDED.resources, created = now(), expires = EXCLUDED.expires
            RETURNING extract(epoch FROM c.expires)::float8 INTO e;
        PERFORM pg_notify('dapi_inventory', p_servers[i] || ' ' || g);
        last_gen := jsonb_set(last_gen, ARRAY[p_servers[i]], to_jsonb(g));
        k := i;
        generation := g;
        expires := e;
        RETURN NEXT;
    END LOOP;
END
$$;
