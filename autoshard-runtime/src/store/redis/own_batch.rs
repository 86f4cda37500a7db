//! Commits of documents' owners alone on a Redis Cluster, sent to each master in batches.
//!
//! A key group on a cluster joins, renews and hands back each document it owns in a commit
//! of its own (every static shard and root document is an entity group of its own): a
//! group of 50 accounts with 4 shards each is 250 commits. Sent one by one, each is a
//! request through the cluster client, whose client-side cost (its task, routing, the
//! node's connection, the wake-ups) is several times the server's. Here the owner-alone
//! commits (`lua/own.lua`) bound for one master (by the slot table, `slots.rs`) wait in
//! that master's queue while one call of `own.lua` for the queue's earlier commits is under
//! way, and go in the next call together, up to [`MOST`] per call.
//!
//! Why each commit stays what it was alone:
//! - `own.lua` decides each document's commit on its own, with the same checks and the
//!   same write as a call for that document alone, and answers each in the same form.
//!   Nothing in one commit depends on another of the call.
//! - The call is routed by its first document. A document its master does not serve (the
//!   table was stale, the slot is migrating) fails its first command before anything is
//!   written to it and is answered `moved`; the commit is then decided by `commit.lua`,
//!   routed on its own as any commit is, and the table is dropped, to be fetched again
//!   (`slots.rs`), as a read that meets such a node drops it.
//! - A call that fails (a lost reply, a connection cut) fails every commit in it with the
//!   same error: each commit's outcome is unknown, as it is when its own call fails, and
//!   callers handle that already (the store contract). The same holds for a commit whose
//!   future is dropped while it waits: the call it joined may still run it, as a call
//!   already written to the socket would.
//! - The calls for one master are sent one at a time, in the order the commits came.

use super::RedisStore;
use super::call::ScriptCall;
use super::reply;
use crate::error::Result;
use crate::key::FastMap;
use crate::sync::lock;
use ::redis::Value;
use ::redis::cluster_routing::Slot;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The most commits one call carries: a script holds the server while it runs, some 6 us
/// per commit (a group of 50 accounts handed back on a 3-master cluster, `INFO
/// commandstats`), so a full call holds it for about a millisecond and a half.
pub(super) const MOST: usize = 256;

/// One owner-alone commit: its document's Redis name, the version it expects, the owner's
/// text (empty to take the owner out), the token (`commit::token_text`), and the Redis
/// name of a document of the same slot it expects absent (empty for none).
pub(super) struct OwnCommit {
    pub name: String,
    pub version: u64,
    pub owner: String,
    pub token: String,
    pub absent: String,
}

/// A commit waiting in a master's queue, and where its answer goes.
struct Waiting {
    commit: OwnCommit,
    answer: oneshot::Sender<Result<Value>>,
}

/// One master's queue; `sending` while a task sends its calls.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    sending: bool,
}

/// The queues of owner-alone commits, per master (`host:port`).
#[derive(Default)]
pub(super) struct OwnBatches {
    queues: Mutex<FastMap<String, Queue>>,
}

impl std::fmt::Debug for OwnBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnBatches").finish_non_exhaustive()
    }
}

/// A master's queue while a task sends it (made before the task is spawned, and moved
/// into it): when the task ends in any way but finding the queue empty (the runtime
/// dropped it before or while it ran, a panic), the queue is taken back, commits still
/// waiting fail as in doubt, and the next commit for the master starts a new task.
struct Sending {
    batches: Arc<OwnBatches>,
    master: String,
    /// The queue was found empty and taken back already.
    done: bool,
}

impl Drop for Sending {
    fn drop(&mut self) {
        if !self.done {
            // Dropping the senders tells each waiting commit that its outcome is unknown.
            lock(&self.batches.queues).remove(&self.master);
        }
    }
}

impl RedisStore {
    /// The answer of `own.lua` to `commit` (as to a call for it alone): batched with the
    /// other owner-alone commits bound for the same master on a cluster whose slot table
    /// is known, else sent alone.
    pub(super) async fn own(&self, commit: OwnCommit, what: &str) -> Result<Value> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let table = runtime.as_ref().and_then(|_| self.conns.slot_table());
        let master = table.as_ref().and_then(|table| {
            table
                .owner(Slot::for_key(&commit.name))
                .map(|(_, node)| format!("{}:{}", node.host, node.port))
        });
        let (Some(master), Some(runtime), Some(table)) = (master, runtime, table) else {
            // Outside a runtime (no task to send a queue), or no slot table: alone.
            let mut answers = self.send_owners(std::slice::from_ref(&commit)).await?;
            return Ok(slow_if_moved(answers.swap_remove(0)));
        };
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut queues = lock(&self.own_batches.queues);
            let queue = queues.entry(master.clone()).or_default();
            queue.waiting.push(Waiting { commit, answer });
            !std::mem::replace(&mut queue.sending, true)
        };
        if start {
            let sending = Sending {
                batches: Arc::clone(&self.own_batches),
                master,
                done: false,
            };
            let store = self.clone();
            runtime.spawn(async move { store.drain(sending).await });
        }
        let answer = answered.await.unwrap_or_else(|_| {
            Err(self.backend(
                format!("{what}: an owner commit"),
                "the call that carried it ended without an answer: its outcome is unknown",
            ))
        })?;
        if reply::text(&answer) == Some("moved") {
            // The table sent it to a master that does not serve it: the table is stale.
            self.conns.drop_slot_table(&table);
        }
        Ok(slow_if_moved(answer))
    }

    /// Sends the queue of `sending`'s master, one call at a time, until it is empty.
    async fn drain(&self, mut sending: Sending) {
        loop {
            // The commits of the same round (a group's documents, sent together) queue up.
            tokio::task::yield_now().await;
            let batch: Vec<Waiting> = {
                let mut queues = lock(&self.own_batches.queues);
                let Some(queue) = queues.get_mut(&sending.master) else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queues.remove(&sending.master);
                    sending.done = true;
                    return;
                }
                let take = queue.waiting.len().min(MOST);
                queue.waiting.drain(..take).collect()
            };
            let (commits, answers): (Vec<OwnCommit>, Vec<_>) =
                batch.into_iter().map(|w| (w.commit, w.answer)).unzip();
            match self.send_owners(&commits).await {
                Ok(replies) => {
                    for (answer, reply) in answers.into_iter().zip(replies) {
                        let _ = answer.send(Ok(reply));
                    }
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// One call of `own.lua` for `commits` (at least one), routed by the first: one
    /// answer per commit.
    async fn send_owners(&self, commits: &[OwnCommit]) -> Result<Vec<Value>> {
        let first = &commits[0];
        let mut call = ScriptCall::new(
            &self.scripts.own,
            &[first.name.as_str()],
            5 * commits.len() - 1,
        );
        call.arg(first.version)
            .arg(first.owner.as_str())
            .arg(first.token.as_str())
            .arg(first.absent.as_str());
        for commit in &commits[1..] {
            call.arg(commit.name.as_str())
                .arg(commit.version)
                .arg(commit.owner.as_str())
                .arg(commit.token.as_str())
                .arg(commit.absent.as_str());
        }
        let what = || match commits.len() {
            1 => format!("owner commit of `{}`", first.name),
            n => format!("{n} owner commits on the master of `{}`", first.name),
        };
        let reply = self.run_write(&call, what).await?;
        match reply {
            Value::Array(answers) if answers.len() == commits.len() => Ok(answers),
            other => Err(self.backend(what(), reply::unexpected("own.lua", &other))),
        }
    }
}

/// `answer`, or `slow` for `moved` (a document the call's node does not serve, which
/// `commit.lua` then decides, routed on its own).
fn slow_if_moved(answer: Value) -> Value {
    if reply::text(&answer) == Some("moved") {
        Value::SimpleString("slow".to_owned())
    } else {
        answer
    }
}
