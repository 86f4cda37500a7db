//! Commits: planning the KEYS and ARGV of one `lua/commit.lua` call for a
//! [`Transaction`], running it (with the out-of-slot index steps of `index` on a cluster),
//! and decoding its reply. The call format is specified in the script's header. The
//! commit of one document's owner alone, expecting its version and perhaps another
//! document of its entity group absent (what a key group sends per document on a
//! cluster), first goes to `lua/own.lua` (on a cluster with others
//! bound for the same master, `own_batch`), which runs only the commands that
//! transaction needs: it answers as `commit.lua` would, in the same reply format, or
//! writes nothing and answers `slow` (the document does not hold the version expected, the
//! one expected absent exists, or the call's node does not serve it), and then
//! `commit.lua` decides it.

use super::call::ScriptCall;
use super::index::OutOfSlotIndex;
use super::names::Names;
use super::own_batch::OwnCommit;
use super::{RedisStore, reply};
use crate::error::{Error, Result, WHOLE_DOCUMENT};
use crate::key::Key;
use crate::store::merge::RECORD;
use crate::store::ownership::Owner;
use crate::store::{Transaction, Write};
use ::redis::Value;
use std::collections::HashMap;

/// One argument of a commit script call, formatted when the call is written.
enum Arg<'t> {
    Num(u64),
    Text(&'t str),
    Owned(String),
}

/// The `field, JSON` argument pairs of `doc` (the layout in `lua/commit.lua`): `p:name`
/// per property, and `w:<writer>` per entry of the write record. A record that is not a
/// map of entries is a property of a put (stored and read back as it is), and nothing of
/// a values write, which adds the entries its record carries and carries none
/// ([`crate::store::merge::with_kept_record`]).
fn encode_properties(
    key: &Key,
    doc: &crate::document::Document,
    values: bool,
) -> Result<Vec<Arg<'static>>> {
    let mut args = Vec::with_capacity(2 * doc.len());
    let json = |field: &str, value: &serde_json::Value| {
        serde_json::to_string(value).map_err(|e| Error::Malformed {
            key: key.clone(),
            field: field.to_owned(),
            reason: format!("cannot be encoded as JSON: {e}"),
        })
    };
    for (name, value) in doc {
        match value {
            serde_json::Value::Object(entries) if name == RECORD => {
                for (writer, entry) in entries {
                    args.push(Arg::Owned(format!("w:{writer}")));
                    args.push(Arg::Owned(json(name, entry)?));
                }
            }
            _ if values && name == RECORD => {}
            _ => {
                args.push(Arg::Owned(format!("p:{name}")));
                args.push(Arg::Owned(json(name, value)?));
            }
        }
    }
    Ok(args)
}

/// The owner a [`Write::Own`] sets, as its 1-based position among the owner texts of the
/// call (`owners`, each owner's JSON once: a key group's writes all name the same one, so
/// the latest is looked at first), or 0 for none.
fn owner_ref(owner: Option<&Owner>, owners: &mut Vec<(Owner, String)>) -> u64 {
    let Some(owner) = owner else {
        return 0;
    };
    let known = owners.iter().rposition(|(known, _)| known == owner);
    let at = known.unwrap_or_else(|| {
        owners.push((owner.clone(), owner.to_value().to_string()));
        owners.len() - 1
    });
    at as u64 + 1
}

/// The owner token as the scripts take it (`commit.lua`, `own.lua`): `=` followed by the
/// key group `txn` commits for, or empty for none (a group's id may itself be empty).
fn token_text(txn: &Transaction) -> String {
    txn.owner()
        .map_or_else(String::new, |token| format!("={token}"))
}

/// What the commit script did to one write.
#[derive(Clone, Copy, Debug)]
pub(super) struct WriteOutcome {
    pub(super) version: u64,
    pub(super) existed: bool,
}

pub(super) enum Applied {
    Committed(Vec<WriteOutcome>),
    Conflict(Key),
}

/// What a position in a script's KEYS holds, to name it in errors.
enum Role<'t> {
    Doc(&'t Key),
    Counter(Key),
    Index,
}

/// The KEYS and ARGV of one commit script call for a transaction borrowed for `'t`.
#[derive(Default)]
struct Call<'t> {
    keys: Vec<String>,
    roles: Vec<Role<'t>>,
    /// The positions of documents, by key (each name formatted once).
    docs: HashMap<&'t Key, usize>,
    /// The positions of the other keys (counters, indexes), by name.
    positions: HashMap<String, usize>,
    args: Vec<Arg<'t>>,
}

impl<'t> Call<'t> {
    /// The 1-based KEYS position of the document at `key`, adding it when new.
    fn doc(&mut self, names: &Names, key: &'t Key) -> usize {
        if let Some(&pos) = self.docs.get(key) {
            return pos;
        }
        self.keys.push(names.doc(key));
        self.roles.push(Role::Doc(key));
        let pos = self.keys.len();
        self.docs.insert(key, pos);
        pos
    }

    /// The 1-based KEYS position of the counter or index `name`, adding it when new.
    fn key(&mut self, name: String, role: Role<'t>) -> usize {
        if let Some(&pos) = self.positions.get(&name) {
            return pos;
        }
        self.keys.push(name.clone());
        self.roles.push(role);
        let pos = self.keys.len();
        self.positions.insert(name, pos);
        pos
    }
}

/// The operation of one write in the script's ARGV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Put,
    Values,
    Delete,
    Own,
}

impl Op {
    /// The op code `lua/commit.lua` reads (the first argument of a write).
    fn code(self) -> &'static str {
        match self {
            Op::Put => "p",
            Op::Values => "u",
            Op::Delete => "d",
            Op::Own => "o",
        }
    }
}

impl RedisStore {
    /// The commit script call for `txn`, and the index updates it leaves to the caller
    /// (out-of-slot indexes on a cluster).
    fn plan<'t>(&self, txn: &'t Transaction) -> Result<(Call<'t>, Vec<OutOfSlotIndex>)> {
        let cluster = self.is_cluster();
        let documents = txn.reads().len() + txn.writes().len();
        let mut call = Call {
            keys: Vec::with_capacity(documents),
            roles: Vec::with_capacity(documents),
            docs: HashMap::with_capacity(documents),
            ..Call::default()
        };
        // By KEYS position (1-based): whether the document is checked, and whether a
        // version is expected of it (it exists).
        let mut checked = vec![false; documents + 1];
        let mut expects_existing = vec![false; documents + 1];
        let mut checks = Vec::with_capacity(documents);
        for (key, expected) in txn.reads() {
            let pos = call.doc(&self.names, key);
            checked[pos] = true;
            expects_existing[pos] |= expected.is_some();
            checks.push((pos, expected.map_or(Arg::Text("-"), |v| Arg::Num(v.0))));
        }
        let positions: Vec<usize> = txn
            .writes()
            .iter()
            .map(|(key, _)| call.doc(&self.names, key))
            .collect();
        for &pos in &positions {
            if !std::mem::replace(&mut checked[pos], true) {
                checks.push((pos, Arg::Text("*")));
            }
        }
        call.args
            .reserve(2 * checks.len() + 6 * txn.writes().len() + 4);
        call.args.push(Arg::Num(checks.len() as u64));
        for (pos, expected) in checks {
            call.args.push(Arg::Num(pos as u64));
            call.args.push(expected);
        }
        let mut owners = Vec::new();
        let mut writes = Vec::with_capacity(6 * txn.writes().len());
        let mut out_of_slot = Vec::new();
        for (i, ((key, write), &pos)) in txn.writes().iter().zip(&positions).enumerate() {
            let (op, props) = match write {
                // The owner alone neither creates nor deletes (no index entry changes),
                // and counts the document's version up by itself (no counter).
                Write::Own(owner) => {
                    let owner = owner_ref(owner.as_ref(), &mut owners);
                    writes.extend([
                        Arg::Text(Op::Own.code()),
                        Arg::Num(pos as u64),
                        Arg::Num(owner),
                    ]);
                    continue;
                }
                Write::Put(doc) => (Op::Put, encode_properties(key, doc, false)?),
                Write::Values(doc) => (Op::Values, encode_properties(key, doc, true)?),
                Write::Delete => (Op::Delete, Vec::new()),
            };
            let counter = call.key(self.names.counter(key), Role::Counter(key.group()));
            let (index, same_group) = self.names.index_of(key);
            let index_pos = if cluster && !same_group {
                out_of_slot.push(OutOfSlotIndex {
                    write: i,
                    index,
                    member: key.encode(),
                    doc: call.keys[pos - 1].clone(),
                    put: op != Op::Delete,
                    may_create: !expects_existing[pos],
                });
                0
            } else {
                call.key(index, Role::Index)
            };
            writes.extend([
                Arg::Text(op.code()),
                Arg::Num(pos as u64),
                Arg::Num(counter as u64),
                Arg::Num(index_pos as u64),
                Arg::Num((props.len() / 2) as u64),
            ]);
            writes.extend(props);
        }
        call.args.push(Arg::Num(owners.len() as u64));
        call.args
            .extend(owners.into_iter().map(|(_, text)| Arg::Owned(text)));
        call.args.push(Arg::Num(txn.writes().len() as u64));
        call.args.extend(writes);
        call.args.push(Arg::Owned(token_text(txn)));
        call.args.push(Arg::Num(self.names.prefix().len() as u64));
        Ok((call, out_of_slot))
    }

    /// Runs `txn` through the commit script, with the out-of-slot index steps on a
    /// cluster (module docs).
    pub(super) async fn run_commit(&self, txn: &Transaction, what: &str) -> Result<Applied> {
        if self.is_cluster() && !txn.single_group() {
            return Err(Error::Invalid(format!(
                "a Redis Cluster commits within one entity group only; this transaction \
                 spans several: {}",
                txn.keys().map(Key::encode).collect::<Vec<_>>().join(", ")
            )));
        }
        txn.check_nesting()?;
        if txn.reads().is_empty() && txn.writes().is_empty() {
            return Ok(Applied::Committed(Vec::new()));
        }
        if let Some((call, own)) = self.owner_alone(txn) {
            let reply = self.own(own, what).await?;
            if reply::text(&reply) != Some("slow") {
                return self.decode_commit(&call, 1, &reply, what);
            }
        }
        let (call, out_of_slot) = self.plan(txn)?;

        // Step 1 on a cluster: index entries of documents this write may create.
        let pre = out_of_slot
            .iter()
            .filter(|o| o.put && o.may_create)
            .map(|o| self.index_add(o));
        futures::future::try_join_all(pre).await?;

        let mut script = ScriptCall::new(&self.scripts.commit, &call.keys, call.args.len());
        for arg in &call.args {
            match arg {
                Arg::Num(n) => script.arg(*n),
                Arg::Text(text) => script.arg(*text),
                Arg::Owned(text) => script.arg(text.as_str()),
            };
        }
        let first = &call.keys[0];
        let reply = self
            .run_write(&script, || format!("{what} of `{first}`"))
            .await?;
        let applied = self.decode_commit(&call, txn.writes().len(), &reply, what)?;

        // Step 2 on a cluster: entries of created documents again, deleted ones out.
        if let Applied::Committed(outcomes) = &applied {
            let post = out_of_slot.iter().filter_map(|o| {
                let existed = outcomes.get(o.write).is_some_and(|w| w.existed);
                match (o.put, existed) {
                    (true, false) => Some(futures::future::Either::Left(self.index_add(o))),
                    (false, true) => Some(futures::future::Either::Right(self.index_remove(o))),
                    _ => None,
                }
            });
            futures::future::try_join_all(post).await?;
        }
        Ok(applied)
    }

    /// The commit for `lua/own.lua` (`own_batch.rs`) when `txn` is the commit of one
    /// document's owner alone expecting its version, and perhaps another document of its
    /// entity group absent (what a key group sends per document on a cluster: a member's
    /// main document is joined expecting its intent document absent), with the one
    /// document it names for decoding the answer (the owner alone touches no counter and
    /// no index, so that is all its plan holds). `None` for any other transaction.
    fn owner_alone<'t>(&self, txn: &'t Transaction) -> Option<(Call<'t>, OwnCommit)> {
        let [(key, Write::Own(owner))] = txn.writes() else {
            return None;
        };
        let (version, absent) = match txn.reads() {
            [(read, Some(version))] if read == key => (version, None),
            [(read, Some(version)), (other, None)] | [(other, None), (read, Some(version))]
                if read == key && other != key && other.group() == key.group() =>
            {
                (version, Some(other))
            }
            _ => return None,
        };
        let mut call = Call::default();
        call.doc(&self.names, key);
        let own = OwnCommit {
            name: call.keys[0].clone(),
            version: version.0,
            owner: owner
                .as_ref()
                .map_or_else(String::new, |owner| owner.to_value().to_string()),
            token: token_text(txn),
            absent: absent.map_or_else(String::new, |other| self.names.doc(other)),
        };
        Some((call, own))
    }

    fn decode_commit(
        &self,
        call: &Call,
        writes: usize,
        reply: &Value,
        what: &str,
    ) -> Result<Applied> {
        let bad = || self.backend(what, reply::unexpected("the commit script", reply));
        let items = reply::array(reply).ok_or_else(bad)?;
        match items.first().and_then(reply::text) {
            Some("ok") if items.len() == 1 + 2 * writes => {
                let mut outcomes = Vec::with_capacity(writes);
                for pair in items[1..].chunks_exact(2) {
                    outcomes.push(WriteOutcome {
                        version: reply::uint(&pair[0]).ok_or_else(bad)?,
                        existed: reply::int(&pair[1]).ok_or_else(bad)? != 0,
                    });
                }
                Ok(Applied::Committed(outcomes))
            }
            Some("conflict") if items.len() == 2 => {
                let pos = reply::position(&items[1], call.keys.len()).ok_or_else(bad)?;
                match &call.roles[pos] {
                    Role::Doc(key) => Ok(Applied::Conflict((*key).clone())),
                    _ => Err(bad()),
                }
            }
            Some("grouped") if items.len() == 4 => {
                let pos = reply::position(&items[1], call.keys.len()).ok_or_else(bad)?;
                let (Role::Doc(key), Some(group), Some(until)) = (
                    &call.roles[pos],
                    reply::text(&items[2]),
                    reply::text(&items[3]),
                ) else {
                    return Err(bad());
                };
                Err(Error::Grouped {
                    key: (*key).clone(),
                    group: group.to_owned(),
                    until_ms: until.parse().map_err(|_| bad())?,
                })
            }
            Some("lost") if items.len() == 3 => {
                let pos = reply::position(&items[1], call.keys.len()).ok_or_else(bad)?;
                let (Role::Doc(key), Some(group)) = (&call.roles[pos], reply::text(&items[2]))
                else {
                    return Err(bad());
                };
                Err(Error::GroupLost {
                    key: (*key).clone(),
                    group: group.to_owned(),
                })
            }
            Some("malformed") if items.len() == 3 => {
                let pos = reply::position(&items[1], call.keys.len()).ok_or_else(bad)?;
                let reason = reply::text(&items[2]).unwrap_or("not ours").to_owned();
                match &call.roles[pos] {
                    Role::Doc(key) => Err(Error::Malformed {
                        key: (*key).clone(),
                        field: WHOLE_DOCUMENT.to_owned(),
                        reason,
                    }),
                    Role::Counter(group) => Err(Error::Malformed {
                        key: group.clone(),
                        field: "(version counter)".to_owned(),
                        reason: format!("`{}`: {reason}", call.keys[pos]),
                    }),
                    Role::Index => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }

    /// The outcome of the one write of a single-write transaction.
    pub(super) fn single(&self, outcomes: &[WriteOutcome], what: &str) -> Result<WriteOutcome> {
        outcomes
            .first()
            .copied()
            .ok_or_else(|| self.backend(what, "the commit script reported no write"))
    }
}
