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
