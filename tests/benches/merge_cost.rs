//! Measurement, not a test: the Redis server's time per merge, beside what the fewest
//! commands that count a vote exactly once cost, in the same run on the same server.
//!
//! Five variants, each `CALLS` calls from 64 writers, one call in flight each (a
//! writer's sequence numbers grow call by call):
//! - `raw HINCRBY`: one command, no exactly-once;
//! - `3-call script`: a Lua script that reads the writer's record (`HGET`), writes it
//!   (`HSET`) and adds (`HINCRBY`): the least a script can do to count a vote once;
//! - `4-call floor`: the commands the merge's common case runs (`lua/merge_common.lua`),
//!   and nothing else: the document's version, value and owner (`HMGET`), the writer's
//!   record entry (`HGET`), the new version and value (`HSET`), the new entry (`HSET`).
//!   What the store contract adds to the 3-call script (a version every write changes,
//!   a key group's owner every write respects) before any check of what the script read;
//! - `2-call floor`: the same with the record entries in the document's own hash (one
//!   `HMGET`, one `HSET`): the layout the records had before they moved to a hash of their
//!   own, so that loads read values without them;
//! - `merge`: `DocumentStore::merge` of `RedisStore` (an integer `sum` into one static
//!   shard document, as `Mapper::apply` sends it), its real script and arguments.
//!
//! The figures are the server's own (`INFO commandstats`, `usec_per_call`), so they do
//! not depend on how fast the client is. Run it with the server pinned to one core and
//! this process to another (`scripts/merge-cost` does both): on shared cores the
//! server's time per call also counts the time it waits while it is preempted.
//!
//! ```sh
//! scripts/merge-cost                      # pinned, a server started for the run
//! REDIS_URL=redis://127.0.0.1:6379/ cargo bench -p autoshard-integration --bench merge_cost
//! ```
//!
//! Without `REDIS_URL` a standalone Redis is started here, unpinned. `VARIANT` (`raw`,
//! `3-call`, `4-call`, `2-call` or `merge`) runs that one alone: `scripts/merge-cost` does so to count the
//! server's instructions per call of each (`INSTRUCTIONS=1`).

use autoshard::store::{DocumentStore, Fold, Merge, Merged, RedisOptions, RedisStore, WriteId};
use autoshard::{Entity, Mapper, layout};
use autoshard_test_support::entities::Question;
use autoshard_test_support::redis::{Standalone, namespace};
use futures::future::try_join_all;
use std::collections::BTreeMap;
use std::sync::Arc;

const WRITERS: u64 = 64;

/// The 3-call exactly-once script: `KEYS`: the counter hash, the record hash; `ARGV`:
/// writer, sequence number, increment.
const THREE_CALLS: &str = r"
local seen = redis.call('HGET', KEYS[2], ARGV[1])
if seen and tonumber(seen) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[1], 'n', ARGV[3])
";

/// The floor of the merge's common case: its four commands, on a document hash (`v`,
/// `n`, and the owner field it must find absent) and a record hash, with the 3-call
/// script's `KEYS` and `ARGV`.
const FOUR_CALLS: &str = r"
local doc = redis.call('HMGET', KEYS[1], 'v', 'n', 'p:~own')
if doc[3] then return -1 end
local seen = redis.call('HGET', KEYS[2], ARGV[1])
if seen and tonumber(seen) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'v', (doc[1] or 0) + 1, 'n', (doc[2] or 0) + ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
";

/// [`FOUR_CALLS`] with the record entries in the document's hash (`KEYS[2]` unused).
const TWO_CALLS: &str = r"
local doc = redis.call('HMGET', KEYS[1], 'v', 'n', 'p:~own', ARGV[1])
if doc[3] then return -1 end
if doc[4] and tonumber(doc[4]) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'v', (doc[1] or 0) + 1, 'n', (doc[2] or 0) + ARGV[3], ARGV[1], ARGV[2])
return 1
";

/// Calls of each variant (`CALLS` in the environment; 100,000 by default).
fn calls() -> u64 {
    std::env::var("CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

/// Whether the variant `name` runs: every one unless `VARIANT` names one.
fn runs(name: &str) -> bool {
    std::env::var("VARIANT").map_or(true, |only| only == name)
}

/// Server time per call of each command since the last `CONFIG RESETSTAT`: name →
/// (calls, microseconds per call).
async fn commandstats(
    conn: &mut redis::aio::MultiplexedConnection,
) -> BTreeMap<String, (u64, f64)> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .map(str::to_owned)
            };
            let calls = field("calls")?.parse().ok()?;
            let per_call = field("usec_per_call")?.parse().ok()?;
            Some((name.to_owned(), (calls, per_call)))
        })
        .collect()
}

/// Runs `call(writer, seq)` for every writer, concurrently, and each writer's sequence
/// numbers in order, and returns the server's time per call of `command` and of the commands
/// it ran inside (a script's `redis.call`s).
async fn measure<F, Fut>(
    conn: &mut redis::aio::MultiplexedConnection,
    command: &str,
    call: F,
) -> (f64, f64)
where
    F: Fn(u64, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let per_writer = calls() / WRITERS;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .unwrap();
    let tasks = (0..WRITERS).map(|writer| {
        let call = call.clone();
        tokio::spawn(async move {
            for seq in 1..=per_writer {
                call(writer, seq).await;
            }
        })
    });
    try_join_all(tasks).await.unwrap();
    let stats = commandstats(conn).await;
    let (calls, per_call) = stats[command];
    // Microseconds in all: far below 2^52, exact as `f64`.
    #[allow(clippy::cast_precision_loss)]
    let inside: f64 = 0.0
        + stats
            .iter()
            .filter(|(name, _)| ![command, "config|resetstat"].contains(&name.as_str()))
            .map(|(_, &(n, us))| n as f64 * us)
            .sum::<f64>()
            / calls as f64;
    (per_call, inside)
}

/// Raw `HINCRBY` on a hash of its own.
async fn raw(conn: &redis::aio::MultiplexedConnection, counter: &str) -> (f64, f64) {
    let (conn, counter) = (conn.clone(), counter.to_owned());
    measure(&mut conn.clone(), "hincrby", move |_, _| {
        let (mut conn, counter) = (conn.clone(), counter.clone());
        async move {
            let _: i64 = redis::cmd("HINCRBY")
                .arg(&counter)
                .arg("raw")
                .arg(1)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    })
    .await
}

/// An exactly-once script (`KEYS`: a counter hash, a record hash; `ARGV`: writer,
/// sequence number, increment) on hashes of its own; every call counts (its reply is
/// positive).
async fn script(
    conn: &redis::aio::MultiplexedConnection,
    source: &str,
    counter: &str,
) -> (f64, f64) {
    let script = Arc::new(redis::Script::new(source));
    let _: String = script
        .prepare_invoke()
        .load_async(&mut conn.clone())
        .await
        .unwrap();
    let (conn, counter, record) = (conn.clone(), counter.to_owned(), format!("{counter}/~w"));
    measure(&mut conn.clone(), "evalsha", move |writer, seq| {
        let (mut conn, script) = (conn.clone(), script.clone());
        let (counter, record) = (counter.clone(), record.clone());
        async move {
            let reply: i64 = script
                .key(&counter)
                .key(&record)
                .arg(format!("writer-{writer}"))
                .arg(seq)
                .arg(1)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            assert!(reply > 0, "a call the script counts");
        }
    })
    .await
}

/// `store.merge` of 1 into vote shard 0 of question 1, as `Mapper::apply` sends it:
/// an integer sum, guarded by the shard's incarnation.
async fn merges(conn: &redis::aio::MultiplexedConnection, store: &RedisStore) -> (f64, f64) {
    let shard = layout::static_shard(&<Question as Entity>::key_for(&1), "votes", 0);
    let stored = store
        .get(&shard)
        .await
        .unwrap()
        .expect("the inserted shard");
    let incarnation = stored
        .doc
        .get("~inc")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let at_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let merge_of = move |writer: Arc<str>, seq: u64| {
        let write = WriteId {
            writer,
            seq,
            at_ms,
            horizon_ms: at_ms - 60_000,
        };
        Merge::new(shard.clone(), "shard_votes", Fold::SUM_I64, 1.into(), write)
            .only_if("~inc", incarnation.clone())
    };
    // The script is loaded at the store's first call, before the statistics reset.
    let warm = store.merge(&merge_of("warm-up".into(), 1)).await.unwrap();
    assert_eq!(warm, Merged::Applied, "a merge the store applies");
    let writers: Arc<[Arc<str>]> = (0..WRITERS)
        .map(|w| Arc::from(format!("writer-{w}")))
        .collect();
    let store = store.clone();
    measure(&mut conn.clone(), "evalsha", move |writer, seq| {
        let store = store.clone();
        let merge = merge_of(writers[usize::try_from(writer).unwrap()].clone(), seq);
        async move {
            let merged = store.merge(&merge).await.unwrap();
            assert_eq!(merged, Merged::Applied);
        }
    })
    .await
}

#[tokio::main]
async fn main() {
    let started;
    let url = if let Ok(url) = std::env::var("REDIS_URL") {
        url
    } else {
        println!("(no REDIS_URL: a standalone Redis started here, not pinned to a core)");
        started = Standalone::start();
        started.url()
    };
    let ns = namespace("merge-cost");
    let store = RedisStore::connect_with(&url, RedisOptions::default().namespace(ns.clone()))
        .await
        .unwrap();
    let mapper = Mapper::new(store.clone());
    mapper.insert(&mut Question::new(1, "?", 0)).await.unwrap();
    let conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    let raw = if runs("raw") {
        Some(raw(&conn, &format!("{ns}-raw")).await)
    } else {
        None
    };
    let minimal = if runs("3-call") {
        Some(script(&conn, THREE_CALLS, &format!("{ns}-once")).await)
    } else {
        None
    };
    let four = if runs("4-call") {
        Some(script(&conn, FOUR_CALLS, &format!("{ns}-four")).await)
    } else {
        None
    };
    let two = if runs("2-call") {
        Some(script(&conn, TWO_CALLS, &format!("{ns}-two")).await)
    } else {
        None
    };
    let merge = if runs("merge") {
        let merge = merges(&conn, &store).await;
        let votes = mapper.load::<Question>(&1).await.unwrap().votes;
        let sent = i64::try_from(calls() / WRITERS * WRITERS + 1).unwrap();
        assert_eq!(votes, sent, "every merge counted once");
        Some(merge)
    } else {
        None
    };

    println!(
        "server time per call, INFO commandstats ({} calls each):",
        calls()
    );
    println!(
        "{:<16}{:>12}{:>22}{:>18}",
        "variant", "us per call", "commands inside (us)", "÷ 3-call script"
    );
    for (name, measured) in [
        ("raw HINCRBY", raw),
        ("3-call script", minimal),
        ("4-call floor", four),
        ("2-call floor", two),
        ("merge", merge),
    ] {
        let Some((per_call, inside)) = measured else {
            continue;
        };
        let ratio = minimal.map_or_else(
            || "-".to_owned(),
            |(base, _)| format!("{:.2}", per_call / base),
        );
        println!("{name:<16}{per_call:>12.2}{inside:>22.2}{ratio:>18}");
    }
}
