//! A 3-node Redis Cluster (with or without replicas) for the tests, built from the
//! servers of `redis`: created, failed over, resharded, stopped.

use super::{MISSING, RedisServer, TempDir};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::START_UP_BOUND;

/// A Redis Cluster of 3 masters, with or without replicas.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    dir: TempDir,
}

impl Cluster {
    /// 3 masters, no replicas.
    pub fn start() -> Cluster {
        Self::start_with(0, 5000)
    }

    /// 3 masters with one replica each, and a node timeout of 2 s, so that a replica
    /// takes over a few seconds after its master died.
    pub fn start_with_replicas() -> Cluster {
        let cluster = Self::start_with(1, 2000);
        cluster.wait_for_replicas();
        cluster
    }

    /// A cluster-enabled server in `dir`, in no cluster yet.
    fn node(dir: &Path, node_timeout_ms: u32) -> RedisServer {
        let timeout = node_timeout_ms.to_string();
        // A replica takes over however long its link to the master was down (a test may
        // cut it on purpose, see `cut_replication`).
        RedisServer::start(
            dir,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &timeout,
                "--cluster-replica-validity-factor",
                "0",
            ],
            Some("cluster-port"),
        )
    }

    fn start_with(replicas: usize, node_timeout_ms: u32) -> Cluster {
        let dir = TempDir::new("redis-cluster");
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|i| Self::node(&dir.path().join(format!("node{i}")), node_timeout_ms))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("{MISSING} ({e})"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes, dir };
        cluster.wait_until_ok(None);
        cluster
    }

    /// Adds an empty master (`redis-cli --cluster add-node`) and waits until every node
    /// knows it and reports `cluster_state:ok`; its index in `nodes`.
    pub fn add_master(&mut self) -> usize {
        let index = self.nodes.len();
        let node = Self::node(&self.dir.path().join(format!("node{index}")), 5000);
        let (new, existing) = (
            format!("127.0.0.1:{}", node.port),
            format!("127.0.0.1:{}", self.nodes[0].port),
        );
        self.nodes.push(node);
        redis_cli_cluster(&["add-node", &new, &existing]);
        let deadline = Instant::now() + START_UP_BOUND;
        while !self.nodes.iter().all(|n| {
            n.cli(&["cluster", "nodes"]).lines().count() == self.nodes.len()
                && n.cli(&["cluster", "info"]).contains("cluster_state:ok")
        }) {
            assert!(Instant::now() < deadline, "the new node did not join");
            std::thread::sleep(Duration::from_millis(50));
        }
        index
    }

    /// The cluster id of node `index`.
    pub fn node_id(&self, index: usize) -> String {
        self.nodes[index]
            .cli(&["cluster", "myid"])
            .trim()
            .to_owned()
    }

    /// Moves slots between the masters with `redis-cli --cluster rebalance` (5 keys per
    /// `MIGRATE`) until each holds its share: empty masters included, and node `drain`, if
    /// given, weighted 0 (all its slots move off it). Returns when every slot has moved.
    pub fn rebalance(&self, drain: Option<usize>) {
        let entry = format!("127.0.0.1:{}", self.nodes[0].port);
        let mut args = vec![
            "rebalance".to_owned(),
            entry,
            "--cluster-use-empty-masters".to_owned(),
            "--cluster-pipeline".to_owned(),
            "5".to_owned(),
            "--cluster-yes".to_owned(),
        ];
        if let Some(drain) = drain {
            args.push("--cluster-weight".to_owned());
            args.push(format!("{}=0", self.node_id(drain)));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        redis_cli_cluster(&args);
        self.wait_until_ok(None);
    }

    /// Moves the slot of the Redis key `key`, with every key in it, from its master to
    /// node `to` (`CLUSTER SETSLOT` importing and migrating, `MIGRATE` of the slot's keys,
    /// then the new owner told to every node), and waits until the cluster is ok.
    pub fn move_slot_of(&self, key: &str, to: usize) {
        let from = self.begin_moving_slot_of(key, to);
        let slot = self.nodes[from].cli(&["cluster", "keyslot", key]);
        let slot = slot.trim();
        let to_id = self.node_id(to);
        loop {
            let keys = self.nodes[from].cli(&["cluster", "getkeysinslot", slot, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            self.migrate(from, to, &keys);
        }
        for node in &self.nodes {
            node.cli(&["cluster", "setslot", slot, "node", &to_id]);
        }
        self.wait_until_ok(None);
        let deadline = Instant::now() + START_UP_BOUND;
        while self.master_of(key) != to {
            assert!(
                Instant::now() < deadline,
                "the slot of `{key}` did not move"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sets the slot of `key` migrating from the master that serves it to node `to`
    /// (importing there), and moves no key yet; returns the master it moves from. Node
    /// `to` may already import it ([`Cluster::move_slot_of`] finishes such a move).
    pub fn begin_moving_slot_of(&self, key: &str, to: usize) -> usize {
        let from = self.master_of(key);
        assert_ne!(from, to, "`{key}` is served by node {to} already");
        let slot = self.nodes[from].cli(&["cluster", "keyslot", key]);
        let slot = slot.trim();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let answer = self.nodes[to].cli(&["cluster", "setslot", slot, "importing", &from_id]);
        assert!(answer.contains("OK"), "importing: {answer}");
        let answer = self.nodes[from].cli(&["cluster", "setslot", slot, "migrating", &to_id]);
        assert!(answer.contains("OK"), "migrating: {answer}");
        from
    }

    /// Moves `keys` (of a slot migrating from node `from`) to node `to` with `MIGRATE`.
    pub fn migrate(&self, from: usize, to: usize, keys: &[&str]) {
        let port = self.nodes[to].port.to_string();
        let mut args = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "keys"];
        args.extend(keys);
        let answer = self.nodes[from].cli(&args);
        assert!(answer.contains("OK"), "migrate: {answer}");
    }

    /// How many slots node `index` serves, as it sees itself.
    pub fn slots_of(&self, index: usize) -> usize {
        let me = self.nodes[index].cli(&["cluster", "nodes"]);
        me.lines()
            .find(|line| line.contains("myself"))
            .map_or(0, |line| {
                line.split_whitespace()
                    .skip(8)
                    .filter(|range| !range.starts_with('['))
                    .map(|range| match range.split_once('-') {
                        Some((lo, hi)) => {
                            hi.parse::<usize>().unwrap_or(0) + 1 - lo.parse::<usize>().unwrap_or(0)
                        }
                        None => 1,
                    })
                    .sum()
            })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Waits until every node but `except` reports `cluster_state:ok`.
    pub fn wait_until_ok(&self, except: Option<usize>) {
        let deadline = Instant::now() + START_UP_BOUND;
        for (i, node) in self.nodes.iter().enumerate() {
            if Some(i) == except {
                continue;
            }
            while !node.cli(&["cluster", "info"]).contains("cluster_state:ok") {
                assert!(
                    Instant::now() < deadline,
                    "cluster did not reach cluster_state:ok"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Waits until every replica's link to its master is up.
    pub fn wait_for_replicas(&self) {
        let deadline = Instant::now() + START_UP_BOUND;
        for node in &self.nodes {
            loop {
                let info = node.cli(&["info", "replication"]);
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica did not sync:\n{info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The index in `nodes` of the master that serves the Redis key `key`.
    pub fn master_of(&self, key: &str) -> usize {
        self.serving(key, 0)
            .unwrap_or_else(|| panic!("no master serves `{key}`"))
    }

    /// The index of the live master that serves `key` as node `witness` sees it.
    fn serving(&self, key: &str, witness: usize) -> Option<usize> {
        let node = &self.nodes[witness];
        let slot: u16 = node.cli(&["cluster", "keyslot", key]).trim().parse().ok()?;
        node.cli(&["cluster", "nodes"]).lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let live_master =
                fields.len() > 8 && fields[2].contains("master") && !fields[2].contains("fail");
            let serves = live_master
                && fields[8..].iter().any(|range| {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    matches!(
                        (lo.parse::<u16>(), hi.parse::<u16>()),
                        (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot)
                    )
                });
            if !serves {
                return None;
            }
            let port: u16 = fields[1].split(['@', ':']).nth(1)?.parse().ok()?;
            self.nodes.iter().position(|n| n.port == port)
        })
    }

    /// The index of a replica of node `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let port = format!("master_port:{}", self.nodes[master].port);
        self.nodes
            .iter()
            .position(|node| {
                let info = node.cli(&["info", "replication"]);
                info.contains("role:slave") && info.lines().any(|l| l.trim() == port)
            })
            .unwrap_or_else(|| panic!("node {master} has no replica"))
    }

    /// Stops replication from node `master` to its replica `replica`, while both keep
    /// running: the replica's link is dropped and it cannot authenticate again (a wrong
    /// `masterauth`), so writes the master acknowledges from now on never reach it.
    pub fn cut_replication(&self, master: usize, replica: usize) {
        self.nodes[replica].cli(&["config", "set", "masterauth", "not-the-password"]);
        self.nodes[master].cli(&["client", "kill", "type", "replica"]);
        let deadline = Instant::now() + START_UP_BOUND;
        while !self.nodes[replica]
            .cli(&["info", "replication"])
            .contains("master_link_status:down")
        {
            assert!(Instant::now() < deadline, "the replica's link stayed up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets node `replica` authenticate to its master again (after `cut_replication`).
    pub fn restore_replication(&self, replica: usize) {
        self.nodes[replica].cli(&["config", "set", "masterauth", ""]);
    }

    /// Waits until a node other than `dead` (a master that was killed) serves `key`, and
    /// the other nodes report `cluster_state:ok`.
    pub fn wait_for_failover(&self, key: &str, dead: usize) {
        let witness = usize::from(dead == 0);
        let deadline = Instant::now() + START_UP_BOUND * 4;
        while self
            .serving(key, witness)
            .is_none_or(|serving| serving == dead)
        {
            assert!(
                Instant::now() < deadline,
                "no replica took over `{key}` from node {dead}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.wait_until_ok(Some(dead));
    }
}

/// Runs `redis-cli --cluster <args>`, failing the test when it fails.
fn redis_cli_cluster(args: &[&str]) {
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{MISSING} ({e})"));
    assert!(
        out.status.success(),
        "redis-cli --cluster {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
