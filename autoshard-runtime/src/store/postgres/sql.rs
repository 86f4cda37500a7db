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
            commit: format!(
                "SELECT {s}.autoshard_commit_versioned($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            // Part 0: the documents by key; part i: the first page of scan i (its
            // parent '' for roots). `$1` says whether documents keep their write record,
            // `$7` (or NULL) the writer whose entry they keep without it.
            lookup: format!(
                "SELECT 0::bigint, o.key, o.version, {doc} \
                 FROM {t} AS o WHERE o.key = ANY($2) \
                 UNION ALL \
                 SELECT s.i, d.key, d.version, {page_doc} \
                 FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[]) \
                      WITH ORDINALITY AS s(parent, kind, after, lim, i) \
                 CROSS JOIN LATERAL ( \
                     SELECT key, version, doc FROM {t} \
                     WHERE parent = s.parent AND kind = s.kind AND key > s.after \
                     ORDER BY key LIMIT s.lim \
                 ) AS d",
                doc = looked_up(&s, "o.key", "o.doc"),
                page_doc = looked_up(&s, "d.key", "d.doc"),
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

/// The document `doc` of key `key` as a lookup answers it (`$1`: with its write record;
/// `$7`: the writer whose entry it keeps without one). The entry is the one a read with
/// records answers for that writer (`autoshard_with_records`): the writer's row, else the
/// entry of the document's own record where that is an object.
fn looked_up(s: &str, key: &str, doc: &str) -> String {
    format!(
        "CASE WHEN $1 THEN {s}.autoshard_with_records({key}, {doc}) \
              WHEN $7::text IS NULL OR jsonb_typeof({doc}) <> 'object' THEN {doc} - '{record}' \
              ELSE ({doc} - '{record}') || COALESCE( \
                  (SELECT jsonb_build_object('{record}', jsonb_build_object($7::text, \
                              jsonb_build_array(r.seq, r.at_ms))) \
                   FROM {s}.autoshard_records AS r WHERE r.key = {key} AND r.writer = $7::text), \
                  CASE WHEN jsonb_typeof({doc} -> '{record}') = 'object' AND {doc} -> '{record}' ? $7::text \
                       THEN jsonb_build_object('{record}', \
                                jsonb_build_object($7::text, {doc} -> '{record}' -> $7::text)) \
                       ELSE '{{}}'::jsonb END) \
         END",
        record = merge::RECORD
    )
}
