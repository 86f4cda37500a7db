-- The schema of a PostgresStore (see store/postgres.rs): `{schema}` stands for the schema
-- name, which the store has checked to be letters, digits and `_`. Run in one
-- transaction by `PostgresStore::migrate`; idempotent.
--
-- Every function takes the advisory locks of the keys it writes before writing: that is
-- what makes `commit_documents`'s check-then-write atomic.

SELECT pg_advisory_xact_lock(hashtextextended('autoshard migrate {schema}', 0));
CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS "{schema}".documents (
    key text COLLATE "C" PRIMARY KEY,
    parent text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    doc jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_scan ON "{schema}".documents (parent, kind, key);
CREATE SEQUENCE IF NOT EXISTS "{schema}".versions;
CREATE OR REPLACE FUNCTION "{schema}".put_document(k text, p text, n text, d jsonb)
RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE v bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    INSERT INTO "{schema}".documents (key, parent, kind, version, doc)
    VALUES (k, p, n, nextval('"{schema}".versions'), d)
    ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version, doc = EXCLUDED.doc
    RETURNING version INTO v;
    RETURN v;
END $f$;
CREATE OR REPLACE FUNCTION "{schema}".insert_document(k text, p text, n text, d jsonb)
RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE v bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    INSERT INTO "{schema}".documents (key, parent, kind, version, doc)
    VALUES (k, p, n, nextval('"{schema}".versions'), d)
    ON CONFLICT (key) DO NOTHING
    RETURNING version INTO v;
    RETURN v;
END $f$;
CREATE OR REPLACE FUNCTION "{schema}".delete_document(k text)
RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    DELETE FROM "{schema}".documents WHERE key = k;
    RETURN FOUND;
END $f$;
-- Commits one transaction: `rk`/`rv` the expected versions (NULL: the key is absent),
-- `wk`/`wp`/`wn`/`wd` the writes (key, parent, kind, document; a NULL document deletes).
-- Answers 0 when it wrote everything, else the 1-based index of an expectation that
-- failed (and writes nothing).
CREATE OR REPLACE FUNCTION "{schema}".commit_documents(
    rk text[], rv bigint[], wk text[], wp text[], wn text[], wd jsonb[])
RETURNS integer LANGUAGE plpgsql AS $f$
DECLARE
    i integer;
    l record;
BEGIN
    -- Without locks first: the losers of a race on a hot document give up here
    -- instead of queueing behind its lock.
    FOR i IN 1 .. coalesce(array_length(rk, 1), 0) LOOP
        IF (SELECT version FROM "{schema}".documents WHERE key = rk[i]) IS DISTINCT FROM rv[i] THEN
            RETURN i;
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
        IF (SELECT version FROM "{schema}".documents WHERE key = rk[i]) IS DISTINCT FROM rv[i] THEN
            RETURN i;
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(wk, 1), 0) LOOP
        IF wd[i] IS NULL THEN
            DELETE FROM "{schema}".documents WHERE key = wk[i];
        ELSE
            INSERT INTO "{schema}".documents (key, parent, kind, version, doc)
            VALUES (wk[i], wp[i], wn[i], nextval('"{schema}".versions'), wd[i])
            ON CONFLICT (key) DO UPDATE
            SET version = EXCLUDED.version, doc = EXCLUDED.doc;
        END IF;
    END LOOP;
    RETURN 0;
END $f$;
-- Whether `v` is an integer a built-in fold takes (an i64 or u64, as serde_json has it).
CREATE OR REPLACE FUNCTION "{schema}".fold_integer(v jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $f$
    SELECT jsonb_typeof(v) = 'number' AND v::text ~ '^-?[0-9]+$'
       AND v::text::numeric BETWEEN -9223372036854775808 AND 18446744073709551615
$f$;
-- Whether `v` is a set a union takes: an array of strings and integers.
CREATE OR REPLACE FUNCTION "{schema}".fold_set(v jsonb)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    RETURN jsonb_typeof(v) = 'array' AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(v) AS e(x)
        WHERE jsonb_typeof(x) <> 'string' AND NOT "{schema}".fold_integer(x));
END $f$;
-- The store contract's merge (store/merge.rs; `merge::apply` is the reference this
-- must equal): fold `operand` into property `prop` of document `k` with `fold`
-- ('sum' within `sum_min..=sum_max`, 'max', 'min', 'union') at most once per write id
-- (`writer`, `seq`), under the key's lock. `guard_prop` NULL: no guard; else the
-- property must hold the string `guard_value` (NULL: must be absent). Answers
-- 'applied', 'already', 'missing', 'unsupported' or 'overflow' (nothing written but
-- for 'applied'). Record entries older than `horizon_ms` are dropped on the merges
-- whose `seq` is a multiple of 16, as the contract allows, so most merges do not visit
-- the whole record.
CREATE OR REPLACE FUNCTION "{schema}".merge_document(
    k text, prop text, fold text, operand jsonb, sum_min numeric, sum_max numeric,
    writer text, seq numeric, at_ms numeric, horizon_ms numeric, guard_prop text, guard_value text)
RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    d jsonb;
    stored jsonb;
    folded jsonb;
    total numeric;
    entries jsonb;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0));
    SELECT doc INTO d FROM "{schema}".documents WHERE key = k;
    IF NOT FOUND THEN
        RETURN 'missing';
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
    IF "{schema}".fold_integer(d -> '~w' -> writer -> 0)
       AND (d -> '~w' -> writer ->> 0)::numeric >= 0
       AND (d -> '~w' -> writer ->> 0)::numeric >= seq THEN
        RETURN 'already';
    END IF;
    IF d ? prop THEN
        stored := d -> prop;
    ELSIF fold = 'sum' THEN
        stored := '0';
    END IF;
    IF fold = 'union' THEN
        IF NOT "{schema}".fold_set(operand)
           OR (stored IS NOT NULL AND NOT "{schema}".fold_set(stored)) THEN
            RETURN 'unsupported';
        END IF;
    ELSIF NOT "{schema}".fold_integer(operand)
          OR (stored IS NOT NULL AND NOT "{schema}".fold_integer(stored)) THEN
        RETURN 'unsupported';
    END IF;
    IF stored IS NULL THEN
        folded := operand;
    ELSIF fold = 'sum' THEN
        total := stored::text::numeric + operand::text::numeric;
        IF total < sum_min OR total > sum_max THEN
            RETURN 'overflow';
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
    entries := CASE WHEN jsonb_typeof(d -> '~w') = 'object' THEN d -> '~w' ELSE '{}' END;
    IF seq % 16 = 0 THEN
        SELECT coalesce(jsonb_object_agg(w, e), '{}') INTO entries
        FROM jsonb_each(entries) AS r(w, e)
        WHERE "{schema}".fold_integer(e -> 1) AND (e ->> 1)::numeric >= horizon_ms;
    END IF;
    entries := entries || jsonb_build_object(writer, jsonb_build_array(seq, at_ms));
    d := d || jsonb_build_object(prop, folded, '~w', entries);
    UPDATE "{schema}".documents SET version = nextval('"{schema}".versions'), doc = d
    WHERE key = k;
    RETURN 'applied';
END $f$;
