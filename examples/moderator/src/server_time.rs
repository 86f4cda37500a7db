//! The server time a vote costs on each node of a Redis Cluster, from the CPU time of
//! each node's main thread (`INFO cpu`), and what that says about one hot entity on
//! dedicated nodes.
//!
//! One key is served by one node, so raw `HINCRBY` on a hot counter is capped by one
//! node's core however large the cluster. A statically sharded entity spreads its shards
//! over slots, so over nodes: each node runs only the votes that land in its shards. With
//! each node on a core of its own, the node with the most CPU time per vote bounds the
//! entity at `1,000,000 / (its microseconds per vote)` votes per second, against
//! `1,000,000 / (the same for HINCRBY)` for the raw counter. The main thread's CPU time
//! counts everything a node does for a vote (reading the request, running the command or
//! script, writing the reply), and not the time it waits for a core, so it holds on
//! shared cores too. It also counts the node's background work (its cron, the cluster
//! bus), spread over the votes of the run, and what else the node served meanwhile (the
//! readings themselves: one `INFO` per node before and after). `docs/results.md` sets
//! these ceilings beside measured throughput.

use crate::backend::Backend;
use autoshard::{Error, Result};

/// Connections to every master of a cluster, to read their command statistics.
pub struct ServerClock {
    nodes: Vec<(String, redis::aio::MultiplexedConnection)>,
}

impl ServerClock {
    /// The clock of `backend`'s masters when it is a Redis Cluster.
    pub async fn of(backend: &Backend) -> Result<Option<ServerClock>> {
        match backend {
            Backend::RedisCluster(urls) => Ok(Some(ServerClock::connect(urls).await?)),
            _ => Ok(None),
        }
    }

    /// Connects to every master of the cluster that `urls` reach (listed by the first
    /// node that answers `CLUSTER NODES`), with the credentials of that URL.
    pub async fn connect(urls: &[String]) -> Result<ServerClock> {
        let fail = |what: &str, e: redis::RedisError| Error::backend(what.to_owned(), e);
        let mut last = None;
        for url in urls {
            let client = match redis::Client::open(url.as_str()) {
                Ok(client) => client,
                Err(e) => {
                    last = Some(fail("cannot parse a cluster URL", e));
                    continue;
                }
            };
            let mut conn = match client.get_multiplexed_async_connection().await {
                Ok(conn) => conn,
                Err(e) => {
                    last = Some(fail("cannot reach a cluster node", e));
                    continue;
                }
            };
            let listing: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await
                .map_err(|e| fail("CLUSTER NODES failed", e))?;
            let mut nodes = Vec::new();
            for address in masters(&listing) {
                let info = client.get_connection_info().clone();
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_owned(), p.parse().ok()?)))
                    .ok_or_else(|| {
                        Error::backend("CLUSTER NODES", format!("a node address `{address}`"))
                    })?;
                let info = info.set_addr(redis::ConnectionAddr::Tcp(host, port));
                let node = redis::Client::open(info).map_err(|e| fail("a node", e))?;
                let conn = node
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| fail("cannot reach a cluster node", e))?;
                nodes.push((address.to_owned(), conn));
            }
            nodes.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(ServerClock { nodes });
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no cluster URL".to_owned())))
    }

    /// The masters' addresses, in the order of [`ServerClock::usec`].
    #[must_use]
    pub fn nodes(&self) -> Vec<&str> {
        self.nodes.iter().map(|(a, _)| a.as_str()).collect()
    }

    /// Each master's main-thread CPU time so far, in microseconds.
    pub async fn usec(&self) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(self.nodes.len());
        for (address, conn) in &self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("cpu")
                .query_async(&mut conn.clone())
                .await
                .map_err(|e| Error::backend(format!("INFO cpu of {address}"), e))?;
            let usec = cpu_usec(&info)
                .ok_or_else(|| Error::backend(format!("INFO cpu of {address}"), "no CPU times"))?;
            out.push(usec);
        }
        Ok(out)
    }
}

/// Each master's CPU time so far ([`ServerClock::usec`]); nothing without a clock.
pub async fn usec(clock: Option<&ServerClock>) -> Result<Vec<u64>> {
    match clock {
        Some(clock) => clock.usec().await,
        None => Ok(Vec::new()),
    }
}

/// The addresses (`host:port`) of the masters a `CLUSTER NODES` reply lists.
fn masters(listing: &str) -> impl Iterator<Item = &str> {
    listing.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        let address = fields.nth(1)?;
        let flags = fields.next()?;
        let master = flags.split(',').any(|f| f == "master");
        let failed = flags.split(',').any(|f| f == "fail");
        (master && !failed).then(|| address.split('@').next().unwrap_or(address))
    })
}

/// The main thread's CPU time (user and system) of an `INFO cpu` reply in
/// microseconds; the whole process's where the server does not report the main thread's
/// (before Redis 6.2).
fn cpu_usec(info: &str) -> Option<u64> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|secs| secs.trim().parse::<f64>().ok())
    };
    let main = field("used_cpu_user_main_thread").zip(field("used_cpu_sys_main_thread"));
    let (user, sys) = main.or_else(|| field("used_cpu_user").zip(field("used_cpu_sys")))?;
    // Microseconds as the server prints them (six decimals): below 2^53, exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Some(((user + sys) * 1e6).round() as u64)
}

/// Each node's server time per committed vote (microseconds) between two readings.
#[must_use]
#[allow(clippy::cast_precision_loss)] // counts and microseconds stay far below 2^52
pub fn per_vote(before: &[u64], after: &[u64], votes: u64) -> Vec<f64> {
    let votes = votes.max(1) as f64;
    before
        .iter()
        .zip(after)
        .map(|(b, a)| a.saturating_sub(*b) as f64 / votes)
        .collect()
}

/// What dedicated nodes would reach: votes per second the busiest node allows.
#[must_use]
pub fn ceiling(per_vote: &[f64]) -> Option<f64> {
    let busiest = per_vote.iter().copied().fold(0.0_f64, f64::max);
    (busiest > 0.0).then(|| 1_000_000.0 / busiest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_are_the_live_master_lines() {
        let listing = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7003@17003 slave a1 0 0 1 connected
d4 127.0.0.1:7004@17004 master,fail - 0 0 3 disconnected
";
        assert_eq!(
            masters(listing).collect::<Vec<_>>(),
            ["127.0.0.1:7001", "127.0.0.1:7002"]
        );
    }

    #[test]
    fn cpu_time_is_the_main_threads_where_given() {
        let info = "# CPU\r\nused_cpu_sys:3.706913\r\nused_cpu_user:6.488810\r\n\
            used_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n\
            used_cpu_sys_main_thread:3.000001\r\nused_cpu_user_main_thread:6.000002\r\n";
        assert_eq!(cpu_usec(info), Some(9_000_003));
        let old = "used_cpu_sys:1.5\r\nused_cpu_user:0.25\r\n";
        assert_eq!(cpu_usec(old), Some(1_750_000));
        assert_eq!(cpu_usec("# CPU\r\n"), None);
    }

    #[test]
    fn the_busiest_node_bounds_the_ceiling() {
        let per_vote = per_vote(&[0, 10, 0], &[100, 210, 50], 100);
        assert_eq!(per_vote, [1.0, 2.0, 0.5]);
        assert_eq!(ceiling(&per_vote), Some(500_000.0));
        assert_eq!(ceiling(&[0.0]), None);
    }
}
