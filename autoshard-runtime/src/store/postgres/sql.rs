//! The statements the store sends, for one schema (the schema, tables and write
//! functions in `schema.sql`).

use crate::store::merge::{self};

/// The statements, for one schema.
pub(super) struct Sql {
    pub(super) schema: String,
    pub(super) migrate: String,
    pub(super) merge: String,
    pub(super) get: String,
    pub(super) get_many: String,
    pub(super) write: String,
    pub(super) delete: String,
    pub(super) commit: String,
    pub(super) lookup: String,
    pub(super) fold_lookup: String,
    pub(super) scan: String,
    pub(super) scan_roots: String,
    pub(super) now: String,
    pub(super) durable: String,
}

impl Sql {
    pub(super) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let t = format!("{s}.autoshard_documents");
        Sql {
            schema: schema.to_owned(),
            migrate: include_str!("schema.sql").replace("{schema}", schema),
            merge: format!(
                "SELECT {s}.autoshard_merge($1, $2, $3, $4, $5::text::numeric, $6::text::numeric, \
                 $7, $8::text::numeric, $9::text::numeric, $10::text::numeric, $11, $12)"
            ),
            get: format!(
                "SELECT version, {s}.autoshard_with_records(key, doc) FROM {t} WHERE key = $1"
            ),
            get_many: format!(
                "SELECT key, version, {s}.autoshard_with_records(key, doc) FROM {t} \
                 WHERE key = ANY($1)"
            ),
            write: format!("SELECT {s}.autoshard_write($1, $2, $3, $4, $5)"),
            delete: format!("SELECT {s}.autoshard_delete($1)"),
            now: "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint".to_owned(),
            // A transaction that writes a record to the log and changes no data: its
            // commit waits for the synchronous standbys (`make_durable`).
            durable: "SELECT pg_logical_emit_message(true, 'autoshard', 'durable')::text"
                .to_owned(),
            commit: format!("SELECT {s}.autoshard_commit($1, $2, $3, $4, $5, $6, $7)"),
            // Part 0: the documents by key; part i: the first page of scan i (its
            // parent '' for roots). `$1` says whether documents keep their write record.
            lookup: format!(
                "SELECT 0::bigint, key, version, \
                        CASE WHEN $1 THEN {s}.autoshard_with_records(key, doc) ELSE doc - '{record}' END \
                 FROM {t} WHERE key = ANY($2) \
                 UNION ALL \
                 SELECT s.i, d.key, d.version, \
                        CASE WHEN $1 THEN {s}.autoshard_with_records(d.key, d.doc) \
                             ELSE d.doc - '{record}' END \
                 FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[]) \
                      WITH ORDINALITY AS s(parent, kind, after, lim, i) \
                 CROSS JOIN LATERAL ( \
                     SELECT key, version, doc FROM {t} \
                     WHERE parent = s.parent AND kind = s.kind AND key > s.after \
                     ORDER BY key LIMIT s.lim \
                 ) AS d",
                record = merge::RECORD
            ),
            // A folding lookup (`store::fold_lookup`): part 0 the main document `$1`,
            // part 1 the shards `$2` without the folded properties `$3`, part 2 + i the
            // fold of property i: its status (0 no shard holds it, 1 folded, 2 not folded
            // here: a fold other than sum, max or min, a value that is not an integer of
            // the type `$5..=$6`, a sum out of it) and its value as text; part -i the
            // first page of scan i (`$7..$10` as in `lookup`).
            fold_lookup: format!(
                "WITH d AS (SELECT key, version, doc FROM {t} WHERE key = $1 OR key = ANY($2)), \
                 p AS (SELECT * FROM unnest($3::text[], $4::text[], $5::text[]::numeric[], \
                           $6::text[]::numeric[]) WITH ORDINALITY AS p(name, fold, lo, hi, i)), \
                 f AS ( \
                     SELECT p.i, p.fold, p.lo, p.hi, \
                            count(*) FILTER (WHERE d.doc ? p.name) AS held, \
                            bool_and({s}.autoshard_in_range(d.doc -> p.name, p.lo, p.hi)) \
                                FILTER (WHERE d.doc ? p.name) AS takes, \
                            sum((d.doc ->> p.name)::numeric) FILTER (WHERE d.doc ? p.name \
                                AND {s}.autoshard_in_range(d.doc -> p.name, p.lo, p.hi)) AS total, \
                            max((d.doc ->> p.name)::numeric) FILTER (WHERE d.doc ? p.name \
                                AND {s}.autoshard_in_range(d.doc -> p.name, p.lo, p.hi)) AS high, \
                            min((d.doc ->> p.name)::numeric) FILTER (WHERE d.doc ? p.name \
                                AND {s}.autoshard_in_range(d.doc -> p.name, p.lo, p.hi)) AS low \
                     FROM p LEFT JOIN d ON d.key = ANY($2) AND jsonb_typeof(d.doc) = 'object' \
                     GROUP BY p.i, p.name, p.fold, p.lo, p.hi) \
                 SELECT 0::bigint, key, version, doc - '{record}', NULL::text FROM d WHERE key = $1 \
                 UNION ALL \
                 SELECT 1, key, version, doc - '{record}' - $3::text[], NULL FROM d \
                 WHERE key = ANY($2) \
                 UNION ALL \
                 SELECT 1 + i, NULL, \
                        CASE WHEN held = 0 THEN 0 \
                             WHEN fold NOT IN ('sum', 'max', 'min') OR NOT takes THEN 2 \
                             WHEN fold = 'sum' AND total NOT BETWEEN lo AND hi THEN 2 \
                             ELSE 1 END, \
                        NULL, \
                        CASE fold WHEN 'sum' THEN total::text WHEN 'max' THEN high::text \
                                  ELSE low::text END \
                 FROM f \
                 UNION ALL \
                 SELECT -s.i, c.key, c.version, c.doc - '{record}', NULL \
                 FROM unnest($7::text[], $8::text[], $9::text[], $10::bigint[]) \
                      WITH ORDINALITY AS s(parent, kind, after, lim, i) \
                 CROSS JOIN LATERAL ( \
                     SELECT key, version, doc FROM {t} \
                     WHERE parent = s.parent AND kind = s.kind AND key > s.after \
                     ORDER BY key LIMIT s.lim \
                 ) AS c",
                record = merge::RECORD
            ),
            scan: format!(
                "SELECT key, version, {s}.autoshard_with_records(key, doc) FROM {t} \
                 WHERE parent = $1 AND kind = $2 AND key > $3 ORDER BY key LIMIT $4"
            ),
            scan_roots: format!(
                "SELECT key, version, {s}.autoshard_with_records(key, doc) FROM {t} \
                 WHERE parent = '' AND kind = $1 AND key > $2 ORDER BY key LIMIT $3"
            ),
        }
    }
}
