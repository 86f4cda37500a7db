-- The schema of a PostgresStore (see store/postgres.rs): `{schema}` stands for the schema
-- name, which the store has checked to be letters, digits and `_`. Run in one
-- transaction by `PostgresStore::migrate`; idempotent.
--
-- Every object the store creates is named `autoshard_*` and carries the comment
-- 'autoshard store object', so that it cannot collide with an application's objects in
-- a schema they share: an object of one of these names without that comment is the
-- application's, and the migration stops with an error instead of taking it over.
--
-- Every function takes the advisory locks of the keys it writes before writing: that is
-- what makes `autoshard_commit`'s check-then-write atomic.

SELECT pg_advisory_xact_lock(hashtextextended('autoshard migrate {schema}', 0));
CREATE SCHEMA IF NOT EXISTS "{schema}";
DO $check$
DECLARE
    found record;
BEGIN
    FOR found IN
        SELECT c.relname AS name, obj_description(c.oid, 'pg_class') AS note
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = '{schema}'
          AND c.relname IN ('autoshard_documents', 'autoshard_documents_scan', 'autoshard_versions',
                            'autoshard_records')
        UNION ALL
        SELECT p.proname, obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = '{schema}'
          AND p.proname IN ('autoshard_write', 'autoshard_delete', 'autoshard_commit',
                            'autoshard_commit_versioned',
                            'autoshard_in_range', 'autoshard_merge', 'autoshard_keep',
                            'autoshard_with_records', 'autoshard_owned')
    LOOP
        IF found.note IS DISTINCT FROM 'autoshard store object' THEN
            RAISE EXCEPTION 'autoshard: "{schema}".% exists and was not created by autoshard; it is left as it is (use another schema with PostgresOptions::schema)', found.name
                USING ERRCODE = 'AS001';
        END IF;
    END LOOP;
END $check$;
-- The commits of earlier builds: before key groups, without an owner token; then without
-- writes of the owner alone.
DROP FUNCTION IF EXISTS "{schema}".autoshard_commit(text[], bigint[], text[], text[], text[], jsonb[]);
DROP FUNCTION IF EXISTS "{schema}".autoshard_commit(text[], bigint[], text[], text[], text[], jsonb[], text);
CREATE TABLE IF NOT EXISTS "{schema}".autoshard_documents (
    key text COLLATE "C" PRIMARY KEY,
    parent text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    doc jsonb NOT NULL
);
COMMENT ON TABLE "{schema}".autoshard_documents IS 'autoshard store object';
CREATE INDEX IF NOT EXISTS autoshard_documents_scan
    ON "{schema}".autoshard_documents (parent, kind, key);
COMMENT ON INDEX "{schema}".autoshard_documents_scan IS 'autoshard store object';
CREATE SEQUENCE IF NOT EXISTS "{schema}".autoshard_versions;
COMMENT ON SEQUENCE "{schema}".autoshard_versions IS 'autoshard store object';
-- The write records, one row per document and writer: a document's `~w` property lives
-- here, so that a merge writes two small rows instead of a document that holds one entry
-- per writer, and a load reads the values only. Documents written by an earlier build may
-- still hold a `~w` property of their own; reads join the two (this table's entries win)
-- and the next write of the document moves it here.
CREATE TABLE IF NOT EXISTS "{schema}".autoshard_records (
    key text COLLATE "C",
    writer text COLLATE "C",
    seq numeric NOT NULL,
    at_ms numeric NOT NULL,
    CONSTRAINT autoshard_records_pkey PRIMARY KEY (key, writer)
);
COMMENT ON TABLE "{schema}".autoshard_records IS 'autoshard store object';
-- Whether `v` is an integer within `lo..=hi` (the range of the property's type): a JSON
-- number whose text has no fraction (`1.0` is not an integer, `1e2` is 100: a number's
-- scale is the count of digits its text has after the point). NULL for NULL.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_in_range(v jsonb, lo numeric, hi numeric)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $f$
    SELECT CASE WHEN jsonb_typeof(v) = 'number'
                THEN scale(v::numeric) = 0 AND v::numeric BETWEEN lo AND hi
                WHEN v IS NULL THEN NULL
                ELSE false END
$f$;
-- Document `d` of key `k` as a read with records answers it: its `~w` property joined
-- with the key's rows of `autoshard_records` (which win). A document that is not an
-- object is answered as stored; a `~w` of its own that is not an object records nothing
-- (`merge::RECORD`), and the rows take its place.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_with_records(k text, d jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $f$
    SELECT CASE
        WHEN r IS NULL OR jsonb_typeof(d) IS DISTINCT FROM 'object' THEN d
        WHEN jsonb_typeof(d -> '~w') = 'object' THEN d || jsonb_build_object('~w', (d -> '~w') || r)
        ELSE d || jsonb_build_object('~w', r)
    END
    FROM (SELECT jsonb_object_agg(writer, jsonb_build_array(seq, at_ms)) AS r
          FROM "{schema}".autoshard_records WHERE key = k) AS records
$f$;
-- Replaces the records of key `k` by the entries of document `d`'s `~w` property and
-- answers `d` without it: what a write stores. Called under the key's lock.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_keep(k text, d jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $f$
BEGIN
    DELETE FROM "{schema}".autoshard_records WHERE key = k;
    IF jsonb_typeof(d) <> 'object' OR NOT d ? '~w' THEN
        RETURN d;
    END IF;
    INSERT INTO "{schema}".autoshard_records (key, writer, seq, at_ms)
    SELECT k, e.key, (e.value ->> 0)::numeric, (e.value ->> 1)::numeric
    FROM jsonb_each(CASE WHEN jsonb_typeof(d -> '~w') = 'object' THEN d -> '~w' ELSE '{}' END) AS e
    WHERE "{schema}".autoshard_in_range(e.value -> 0, 0, 18446744073709551615)
      AND "{schema}".autoshard_in_range(e.value -> 1, 0, 18446744073709551615);
    RETURN d - '~w';
END $f$;
-- The ownership rule of store/ownership.rs for a write carrying the owner token `token`
-- (NULL: none) to document `k`, by the server's clock (a document a transaction holds,
-- `~own.txn`, is owned past its lease): raises AS002 (the document is
-- owned by another live key group; DETAIL: `{"group", "until"}`) or AS003 (the token's
-- group does not own it; DETAIL: the token), which rolls the whole write back. Called
-- under the key's lock.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_owned(k text, token text)
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
    d jsonb;
    grp text;
    until_ms numeric;
BEGIN
    SELECT doc INTO d FROM "{schema}".autoshard_documents WHERE key = k;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF jsonb_typeof(d) = 'object' AND jsonb_typeof(d -> '~own') = 'object'
       AND jsonb_typeof(d -> '~own' -> 'group') = 'string'
       AND "{schema}".autoshard_in_range(d -> '~own' -> 'until', 0, 18446744073709551615)
       AND (NOT d -> '~own' ? 'txn' OR jsonb_typeof(d -> '~own' -> 'txn') = 'string') THEN
        until_ms := (d -> '~own' ->> 'until')::numeric;
        IF until_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)
           OR d -> '~own' ? 'txn' THEN
            grp := d -> '~own' ->> 'group';
        END IF;
    END IF;
    IF grp IS NOT NULL AND grp IS DISTINCT FROM token THEN
        RAISE EXCEPTION USING ERRCODE = 'AS002', MESSAGE = k,
            DETAIL = jsonb_build_object('group', grp, 'until', until_ms)::text;
    END IF;
    IF token IS NOT NULL AND grp IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'AS003', MESSAGE = k, DETAIL = token;
    END IF;
END $f$;
-- Writes document `d` at key `k` (parent `p`, kind `n`): over a present one when
-- `overwrite`, else only when absent. The new version, or NULL when `k` was present and
-- not overwritten.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_write(k text, p text, n text, d jsonb,
    overwrite boolean)
RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE v bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    PERFORM "{schema}".autoshard_owned(k, NULL);
    IF overwrite THEN
        INSERT INTO "{schema}".autoshard_documents (key, parent, kind, version, doc)
        VALUES (k, p, n, nextval('"{schema}".autoshard_versions'), "{schema}".autoshard_keep(k, d))
        ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version, doc = EXCLUDED.doc
        RETURNING version INTO v;
    ELSIF NOT EXISTS (SELECT 1 FROM "{schema}".autoshard_documents WHERE key = k) THEN
        INSERT INTO "{schema}".autoshard_documents (key, parent, kind, version, doc)
        VALUES (k, p, n, nextval('"{schema}".autoshard_versions'), "{schema}".autoshard_keep(k, d))
        RETURNING version INTO v;
    END IF;
    RETURN v;
END $f$;
CREATE OR REPLACE FUNCTION "{schema}".autoshard_delete(k text)
RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    PERFORM "{schema}".autoshard_owned(k, NULL);
    DELETE FROM "{schema}".autoshard_records WHERE key = k;
    DELETE FROM "{schema}".autoshard_documents WHERE key = k;
    RETURN FOUND;
END $f$;
-- Commits one transaction: `rk`/`rv` the expected versions (NULL: the key is absent),
-- `wk`/`wp`/`wn`/`wd` the writes (key, parent, kind, document; a NULL document deletes);
-- where `wo` is true, `wd` is `{"~own": owner}` or `{}`, the owner alone: it replaces the
-- document's `~own` and leaves the rest (nothing for an absent document or one that is
-- not an object); where `wv` is true, `wd` is written keeping the key's records, with
-- the entries of its `~w` added (each replaces its writer's; entries an earlier build
-- left in the stored document move to the records first, where the table's win).
-- Answers an array whose first element is 0 when it wrote everything, else the 1-based
-- index of an expectation that failed (and nothing is written); when it wrote, element
-- 1 + i is the version write i gave its document (0: no document after it). `token`:
-- the key group it commits for (NULL: none), see `autoshard_owned`. A signature of its
-- own (`wv`), so that the migration of an earlier build, which replaces the function
-- without `wv` below, can never take values writes away from this one.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_commit_versioned(
    rk text[], rv bigint[], wk text[], wp text[], wn text[], wd jsonb[], wo boolean[],
    wv boolean[], token text)
RETURNS bigint[] LANGUAGE plpgsql AS $f$
DECLARE
    i integer;
    l record;
    v bigint;
    versions bigint[] := ARRAY[0::bigint];
BEGIN
    -- Without locks first: the losers of a race on a hot document give up here
    -- instead of queueing behind its lock.
    FOR i IN 1 .. coalesce(array_length(rk, 1), 0) LOOP
        IF (SELECT version FROM "{schema}".autoshard_documents WHERE key = rk[i]) IS DISTINCT FROM rv[i] THEN
            RETURN ARRAY[i::bigint];
        END IF;
    END LOOP;
    FOR l IN
        SELECT hashtextextended(a.k, 0) AS id, bool_or(a.w) AS w
        FROM (SELECT unnest(rk), false UNION ALL SELECT unnest(wk), true) AS a(k, w)
        GROUP BY 1 ORDER BY 1
    LOOP
        IF l.w THEN
            PERFORM pg_advisory_xact_lock(l.id);
        ELSE
            PERFORM pg_advisory_xact_lock_shared(l.id);
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(rk, 1), 0) LOOP
        IF (SELECT version FROM "{schema}".autoshard_documents WHERE key = rk[i]) IS DISTINCT FROM rv[i] THEN
            RETURN ARRAY[i::bigint];
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(rk, 1), 0) LOOP
        PERFORM "{schema}".autoshard_owned(rk[i], token);
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(wk, 1), 0) LOOP
        PERFORM "{schema}".autoshard_owned(wk[i], token);
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(wk, 1), 0) LOOP
        v := NULL;
        IF wd[i] IS NULL THEN
            DELETE FROM "{schema}".autoshard_records WHERE key = wk[i];
            DELETE FROM "{schema}".autoshard_documents WHERE key = wk[i];
        ELSIF coalesce(wv[i], false) THEN
            INSERT INTO "{schema}".autoshard_records AS r (key, writer, seq, at_ms)
            SELECT wk[i], e.key, (e.value ->> 0)::numeric, (e.value ->> 1)::numeric
            FROM "{schema}".autoshard_documents AS d,
                 jsonb_each(CASE WHEN jsonb_typeof(d.doc -> '~w') = 'object'
                                 THEN d.doc -> '~w' ELSE '{}' END) AS e
            WHERE d.key = wk[i]
              AND "{schema}".autoshard_in_range(e.value -> 0, 0, 18446744073709551615)
              AND "{schema}".autoshard_in_range(e.value -> 1, 0, 18446744073709551615)
            ON CONFLICT ON CONSTRAINT autoshard_records_pkey DO NOTHING;
            INSERT INTO "{schema}".autoshard_records AS r (key, writer, seq, at_ms)
            SELECT wk[i], e.key, (e.value ->> 0)::numeric, (e.value ->> 1)::numeric
            FROM jsonb_each(CASE WHEN jsonb_typeof(wd[i] -> '~w') = 'object'
                                 THEN wd[i] -> '~w' ELSE '{}' END) AS e
            WHERE "{schema}".autoshard_in_range(e.value -> 0, 0, 18446744073709551615)
              AND "{schema}".autoshard_in_range(e.value -> 1, 0, 18446744073709551615)
            ON CONFLICT ON CONSTRAINT autoshard_records_pkey
            DO UPDATE SET seq = EXCLUDED.seq, at_ms = EXCLUDED.at_ms;
            INSERT INTO "{schema}".autoshard_documents (key, parent, kind, version, doc)
            VALUES (wk[i], wp[i], wn[i], nextval('"{schema}".autoshard_versions'), wd[i] - '~w')
            ON CONFLICT (key) DO UPDATE
            SET version = EXCLUDED.version, doc = EXCLUDED.doc
            RETURNING version INTO v;
        ELSIF wo[i] THEN
            UPDATE "{schema}".autoshard_documents
            SET version = nextval('"{schema}".autoshard_versions'), doc = (doc - '~own') || wd[i]
            WHERE key = wk[i] AND jsonb_typeof(doc) = 'object'
            RETURNING version INTO v;
        ELSE
            INSERT INTO "{schema}".autoshard_documents (key, parent, kind, version, doc)
            VALUES (wk[i], wp[i], wn[i], nextval('"{schema}".autoshard_versions'),
                    "{schema}".autoshard_keep(wk[i], wd[i]))
            ON CONFLICT (key) DO UPDATE
            SET version = EXCLUDED.version, doc = EXCLUDED.doc
            RETURNING version INTO v;
        END IF;
        versions := versions || coalesce(v, 0);
    END LOOP;
    RETURN versions;
END $f$;
-- The commits as builds before values writes call them, without `wv`: the versioned
-- one, and the one that answers 0 when it wrote everything, else the 1-based index of
-- the expectation that failed.
CREATE OR REPLACE FUNCTION "{schema}".autoshard_commit_versioned(
    rk text[], rv bigint[], wk text[], wp text[], wn text[], wd jsonb[], wo boolean[],
    token text)
RETURNS bigint[] LANGUAGE sql AS $f$
    SELECT "{schema}".autoshard_commit_versioned(rk, rv, wk, wp, wn, wd, wo, '{}', token)
$f$;
CREATE OR REPLACE FUNCTION "{schema}".autoshard_commit(
    rk text[], rv bigint[], wk text[], wp text[], wn text[], wd jsonb[], wo boolean[],
    token text)
RETURNS integer LANGUAGE sql AS $f$
    SELECT ("{schema}".autoshard_commit_versioned(rk, rv, wk, wp, wn, wd, wo, '{}', token))[1]::integer
$f$;
-- The store contract's merge (store/merge/mod.rs; `merge::reference` is the reference this
-- must equal): fold `operand` into property `prop` of document `k` with `fold`
-- ('sum', 'max' or 'min' of integers within `lo..=hi`, the property type's range;
-- 'union-strings', or 'union-integers' of elements within `lo..=hi`) at most once per
-- write id (`writer`, `seq`), under the key's lock. A stored value or operand not of
-- the property's type is answered 'unsupported'. `guard_prop` NULL: no guard; else the
-- property must hold the string `guard_value` (NULL: must be absent). Answers
-- 'applied', 'already', 'missing', 'unsupported', 'overflow' or 'malformed' (a stored
-- document that is not an object; nothing written but for 'applied'). The write id is
-- recorded in `autoshard_records`; the key's entries older than `horizon_ms` (but the
-- writer's own) are dropped on the merges whose `seq` is a multiple of 256
-- (`store::merge::PRUNE_EVERY`).
CREATE OR REPLACE FUNCTION "{schema}".autoshard_merge(
    k text, prop text, fold text, operand jsonb, lo numeric, hi numeric,
    writer text, seq numeric, at_ms numeric, horizon_ms numeric, guard_prop text, guard_value text)
RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    d jsonb;
    stored jsonb;
    folded jsonb;
    total numeric;
    element_kind text;
    refused text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    SELECT doc INTO d FROM "{schema}".autoshard_documents WHERE key = k;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    -- Only a document with an owner can be owned by another group.
    IF jsonb_typeof(d) <> 'object' THEN
        RETURN 'malformed';
    ELSIF d ? '~own' THEN
        PERFORM "{schema}".autoshard_owned(k, NULL);
    END IF;
    IF guard_prop IS NOT NULL THEN
        IF guard_value IS NULL THEN
            IF d ? guard_prop THEN
                RETURN 'missing';
            END IF;
        ELSIF jsonb_typeof(d -> guard_prop) IS DISTINCT FROM 'string'
              OR d ->> guard_prop <> guard_value THEN
            RETURN 'missing';
        END IF;
    END IF;
    -- Only an entry whose first two elements are integers within u64 records a write.
    IF d ? '~w'
       AND "{schema}".autoshard_in_range(d -> '~w' -> writer -> 0, 0, 18446744073709551615)
       AND "{schema}".autoshard_in_range(d -> '~w' -> writer -> 1, 0, 18446744073709551615)
       AND (d -> '~w' -> writer ->> 0)::numeric >= seq THEN
        -- Answered from what was read: a record in the log, so that this commit waits for
        -- the synchronous standbys and covers the write the answer stands for.
        PERFORM pg_logical_emit_message(true, 'autoshard', 'already');
        RETURN 'already';
    END IF;
    -- The fold, or why the change cannot be folded (`refused`).
    <<folding>>
    BEGIN
        IF d ? prop THEN
            stored := d -> prop;
        ELSIF fold = 'sum' THEN
            stored := '0';
        END IF;
        IF fold IN ('union-strings', 'union-integers') THEN
            IF jsonb_typeof(operand) <> 'array'
               OR (stored IS NOT NULL AND jsonb_typeof(stored) <> 'array') THEN
                refused := 'unsupported';
                EXIT folding;
            END IF;
            IF EXISTS (
                SELECT 1
                FROM (SELECT x FROM jsonb_array_elements(operand) AS o(x)
                      UNION ALL
                      SELECT x FROM jsonb_array_elements(coalesce(stored, '[]')) AS s(x)) AS items
                WHERE CASE WHEN fold = 'union-strings' THEN jsonb_typeof(x) <> 'string'
                           ELSE NOT "{schema}".autoshard_in_range(x, lo, hi) END) THEN
                refused := 'unsupported';
                EXIT folding;
            END IF;
        ELSIF NOT (CASE WHEN fold = 'sum'
                        -- The change a sum adds may be any integer of i64 or u64.
                        THEN "{schema}".autoshard_in_range(operand, -9223372036854775808, 18446744073709551615)
                        ELSE "{schema}".autoshard_in_range(operand, lo, hi) END)
              OR (stored IS NOT NULL AND NOT "{schema}".autoshard_in_range(stored, lo, hi)) THEN
            refused := 'unsupported';
            EXIT folding;
        END IF;
        IF stored IS NULL THEN
            folded := operand;
        ELSIF fold = 'sum' THEN
            total := stored::text::numeric + operand::text::numeric;
            IF total < lo OR total > hi THEN
                refused := 'overflow';
                EXIT folding;
            END IF;
            folded := to_jsonb(total);
        ELSIF fold = 'max' THEN
            folded := CASE WHEN stored::text::numeric >= operand::text::numeric
                           THEN stored ELSE operand END;
        ELSIF fold = 'min' THEN
            folded := CASE WHEN stored::text::numeric <= operand::text::numeric
                           THEN stored ELSE operand END;
        ELSE
            SELECT coalesce(jsonb_agg(x ORDER BY pos), '[]') INTO folded
            FROM (SELECT x, min(n) AS pos
                  FROM (SELECT x, n FROM jsonb_array_elements(stored) WITH ORDINALITY AS s(x, n)
                        UNION ALL
                        SELECT x, n + 4294967296
                        FROM jsonb_array_elements(operand) WITH ORDINALITY AS o(x, n)) AS items
                  GROUP BY x) AS distinct_items;
        END IF;
    END;
    IF refused IS NOT NULL THEN
        -- A write already applied is answered so, whatever its change would do now.
        IF (SELECT r.seq FROM "{schema}".autoshard_records AS r
            WHERE r.key = k AND r.writer = autoshard_merge.writer) >= seq THEN
            PERFORM pg_logical_emit_message(true, 'autoshard', 'already');
            RETURN 'already';
        END IF;
        RETURN refused;
    END IF;
    -- The writer's record, checked and written in one statement: it changes only for a
    -- write newer than the one it holds, else the write was already applied.
    INSERT INTO "{schema}".autoshard_records AS r (key, writer, seq, at_ms)
    VALUES (k, writer, seq, at_ms)
    ON CONFLICT ON CONSTRAINT autoshard_records_pkey
    DO UPDATE SET seq = EXCLUDED.seq, at_ms = EXCLUDED.at_ms WHERE r.seq < EXCLUDED.seq;
    IF NOT FOUND THEN
        PERFORM pg_logical_emit_message(true, 'autoshard', 'already');
        RETURN 'already';
    END IF;
    IF seq % 256 = 0 THEN
        DELETE FROM "{schema}".autoshard_records AS r
        WHERE r.key = k AND r.at_ms < horizon_ms AND r.writer <> autoshard_merge.writer;
    END IF;
    UPDATE "{schema}".autoshard_documents
    SET version = nextval('"{schema}".autoshard_versions'), doc = d || jsonb_build_object(prop, folded)
    WHERE key = k;
    RETURN 'applied';
END $f$;
COMMENT ON FUNCTION "{schema}".autoshard_write(text, text, text, jsonb, boolean)
    IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_delete(text) IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_commit(text[], bigint[], text[], text[], text[], jsonb[], boolean[], text)
    IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_commit_versioned(text[], bigint[], text[], text[], text[], jsonb[], boolean[], text)
    IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_commit_versioned(text[], bigint[], text[], text[], text[], jsonb[], boolean[], boolean[], text)
    IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_owned(text, text) IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_in_range(jsonb, numeric, numeric) IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_with_records(text, jsonb) IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_keep(text, jsonb) IS 'autoshard store object';
COMMENT ON FUNCTION "{schema}".autoshard_merge(text, text, text, jsonb, numeric, numeric, text,
    numeric, numeric, numeric, text, text) IS 'autoshard store object';
