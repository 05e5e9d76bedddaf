//! A Redis Cluster of `redis-server` processes.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::Value;

use crate::process::{kill_and_reap, spawn_child, wait_timeout};
use crate::server::{RedisServer, ServerBuilder};
use crate::util::{binary, poll_until, tail, value_items, value_text};

/// Number of hash slots in a Redis Cluster.
const SLOTS: u32 = 16384;
/// How long `spawn` and `failover` wait for the cluster to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeouts of the status queries made while polling (a paused node must not stall them).
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
    connected: bool,
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }
}

fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            // "127.0.0.1:30001@40001" or "127.0.0.1:30001@40001,hostname".
            let host_port = fields[1].split(['@', ',']).next().unwrap_or("");
            let port = host_port
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(0);
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => {
                        let slot = s.parse().ok()?;
                        Some((slot, slot))
                    }
                })
                .collect();
            Some(NodeLine {
                id: fields[0].to_string(),
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                connected: fields[7] == "connected",
                slots,
            })
        })
        .collect()
}

/// A Redis Cluster on `127.0.0.1`: cluster-enabled [`RedisServer`]s joined with
/// `redis-cli --cluster create … --cluster-replicas R --cluster-yes`.
///
/// Node indices (into [`RedisCluster::nodes`]) are stable; roles are not (after a
/// failover), so [`RedisCluster::primaries`] and [`RedisCluster::replicas`] ask the nodes.
/// Nodes use plain TCP and no password. Dropping the cluster kills every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `primaries * (1 + replicas_per_primary)` nodes, creates the cluster and waits
    /// until every node reports `cluster_state:ok`, all nodes agree on the topology, all
    /// 16384 slots are served and every replica's link to its primary is up.
    ///
    /// # Panics
    ///
    /// If `primaries < 3` (`redis-cli` requires three), or the cluster does not come up
    /// within 60 seconds (the message says what was missing; node logs go to stderr).
    pub fn spawn(primaries: usize, replicas_per_primary: usize) -> RedisCluster {
        assert!(
            primaries >= 3,
            "RedisCluster::spawn: redis-cli needs at least 3 primaries, got {primaries}"
        );
        let total = primaries * (1 + replicas_per_primary);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| ServerBuilder::new().cluster(true).spawn())
            .collect();
        let cluster = RedisCluster { nodes };
        cluster.create(replicas_per_primary);
        if let Err(problem) = cluster.wait_settled(true, SETTLE_TIMEOUT) {
            panic!("the cluster did not come up within {SETTLE_TIMEOUT:?}: {problem}");
        }
        cluster
    }

    fn create(&self, replicas_per_primary: usize) {
        let program = binary("LATCHKEY_REDIS_CLI", "redis-cli");
        let out_path = self.nodes[0].dir().join("cluster-create.log");
        let out = File::create(&out_path).expect("create cluster-create.log");
        let err = out.try_clone().expect("clone the output file");
        let mut command = Command::new(&program);
        command.args(["--cluster", "create"]);
        command.args(self.nodes.iter().map(RedisServer::addr));
        command
            .args(["--cluster-replicas", &replicas_per_primary.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let mut child =
            spawn_child(command).unwrap_or_else(|e| panic!("cannot run `{program}`: {e}"));
        let status = wait_timeout(&mut child, Duration::from_secs(90));
        if status.is_none() {
            kill_and_reap(&mut child);
        }
        let output = std::fs::read_to_string(&out_path).unwrap_or_default();
        match status {
            Some(status) if status.success() => {}
            other => panic!(
                "`{program} --cluster create` failed ({}):\n{}",
                other.map_or("timed out".to_string(), |s| s.to_string()),
                tail(&output, 80)
            ),
        }
    }

    /// For a cluster kept in a `static` (shared by the tests of one file, never dropped):
    /// removes its nodes' temporary directories when the test process exits. The processes
    /// themselves die with the test process (see `spawn_child`); without this, their
    /// directories would be left in the temp dir after every run.
    pub fn remove_dirs_at_exit(&'static self) {
        crate::process::remove_at_exit(self.nodes.iter().map(|n| n.dir().to_path_buf()));
    }

    /// All nodes, in start order (indices are stable).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `index` for changes (e.g. `restart`, `pause_process`).
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    fn role(node: &RedisServer) -> Option<String> {
        if !node.is_running() {
            return None;
        }
        let reply = node.query(&["ROLE"], QUERY_TIMEOUT, QUERY_TIMEOUT).ok()?;
        value_items(&reply).first().and_then(value_text)
    }

    /// The running nodes that currently say they are primaries (`ROLE`), in index order.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| Self::role(n).as_deref() == Some("master"))
            .collect()
    }

    /// The running nodes that currently say they are replicas (`ROLE`), in index order.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| Self::role(n).as_deref() == Some("slave"))
            .collect()
    }

    /// The URLs of the running nodes: seeds for `redis::cluster::ClusterClient`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(RedisServer::url)
            .collect()
    }

    /// A `ClusterClient` seeded with [`RedisCluster::urls`].
    ///
    /// # Panics
    ///
    /// If redis-rs rejects the URLs (not expected).
    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.urls()).expect("build a ClusterClient")
    }

    /// An async cluster connection from [`RedisCluster::client`].
    ///
    /// # Panics
    ///
    /// If the connection fails.
    pub async fn async_conn(&self) -> redis::cluster_async::ClusterConnection {
        self.client()
            .get_async_connection()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the cluster: {e}"))
    }

    fn any_live(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("no node of the cluster is running")
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, so hash tags are honoured).
    ///
    /// # Panics
    ///
    /// If no node answers.
    pub fn key_slot(&self, key: &str) -> u16 {
        match self.any_live().cmd_sync(&["CLUSTER", "KEYSLOT", key]) {
            Value::Int(slot) => slot as u16,
            other => panic!("CLUSTER KEYSLOT {key:?} answered {other:?}"),
        }
    }

    /// The node that serves `slot` as primary, according to a running node's
    /// `CLUSTER NODES`.
    ///
    /// # Panics
    ///
    /// If `slot >= 16384` or no running primary serves it.
    pub fn node_for_slot(&self, slot: u16) -> &RedisServer {
        assert!(u32::from(slot) < SLOTS, "slot {slot} out of range");
        let view = self
            .view_of(self.any_live())
            .unwrap_or_else(|e| panic!("{e}"));
        let owner = view
            .iter()
            .find(|line| line.is_master() && !line.has_flag("fail") && line.serves(slot))
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"));
        self.nodes
            .iter()
            .find(|n| n.port() == owner.port)
            .unwrap_or_else(|| panic!("slot {slot} is served by unknown port {}", owner.port))
    }

    /// The primary that serves `key`.
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::key_slot`] and [`RedisCluster::node_for_slot`].
    pub fn node_for_key(&self, key: &str) -> &RedisServer {
        self.node_for_slot(self.key_slot(key))
    }

    /// Runs `CLUSTER FAILOVER` on the `replica_index`-th entry of
    /// [`RedisCluster::replicas`] and waits until it is a primary and the cluster has
    /// settled again (all nodes agree, the old primary replicates from it). Returns the new
    /// primary.
    ///
    /// # Panics
    ///
    /// If there is no such replica or the failover does not complete within 60 seconds.
    pub fn failover(&self, replica_index: usize) -> &RedisServer {
        let port = {
            let replicas = self.replicas();
            let replica = replicas.get(replica_index).unwrap_or_else(|| {
                panic!(
                    "failover: no replica #{replica_index} (there are {})",
                    replicas.len()
                )
            });
            replica.port()
        };
        let node = self
            .nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("the replica is one of the nodes");
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let mut last_request = None::<Instant>;
        loop {
            // A promotion counts once the whole cluster has settled with it: a replica can
            // call itself primary for a moment and lose to a higher config epoch (a manual
            // failover of a shard failed over a moment before does so), which leaves the
            // old primary pausing writes until its failover times out.
            if Self::role(node).as_deref() == Some("master") {
                let remaining = deadline.saturating_duration_since(Instant::now());
                match self.wait_settled(false, remaining.max(Duration::from_secs(5))) {
                    Ok(()) if Self::role(node).as_deref() == Some("master") => break,
                    Ok(()) => {}
                    Err(problem) => {
                        panic!("the cluster did not settle after the failover: {problem}")
                    }
                }
            }
            // A manual failover that cannot finish is abandoned by Redis after a few
            // seconds; ask again then.
            if last_request.is_none_or(|t| t.elapsed() > Duration::from_millis(5500)) {
                let _ = node.query(&["CLUSTER", "FAILOVER"], QUERY_TIMEOUT, QUERY_TIMEOUT);
                last_request = Some(Instant::now());
            }
            if Instant::now() >= deadline {
                panic!(
                    "CLUSTER FAILOVER on {} did not make it a primary within {SETTLE_TIMEOUT:?}",
                    node.addr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    /// Kills node `index` (SIGKILL). Does not wait for the cluster to notice; see
    /// [`RedisCluster::wait_healthy`].
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Waits until the *running* nodes form a healthy cluster again: each reports
    /// `cluster_state:ok`, they agree on the topology among themselves, running primaries
    /// serve all 16384 slots, and every running replica of a running primary has its link
    /// up. After killing a primary this includes its replica's automatic promotion
    /// (node timeout is 2 s).
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout`.
    pub fn wait_healthy(&self, timeout: Duration) {
        if let Err(problem) = self.wait_settled(false, timeout) {
            panic!("the cluster is not healthy after {timeout:?}: {problem}");
        }
    }

    fn wait_settled(&self, all_running: bool, timeout: Duration) -> Result<(), String> {
        poll_until(timeout, Duration::from_millis(50), || {
            self.health_problem(all_running)
        })
    }

    fn view_of(&self, node: &RedisServer) -> Result<Vec<NodeLine>, String> {
        match node.query(&["CLUSTER", "NODES"], QUERY_TIMEOUT, QUERY_TIMEOUT) {
            Ok(Value::ServerError(e)) => Err(format!("CLUSTER NODES on {}: {e}", node.addr())),
            Ok(reply) => Ok(parse_cluster_nodes(&value_text(&reply).unwrap_or_default())),
            Err(e) => Err(format!("CLUSTER NODES on {}: {e}", node.addr())),
        }
    }

    /// `Ok` if the cluster is settled, else a description of the first problem found.
    fn health_problem(&self, all_running: bool) -> Result<(), String> {
        let live: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.is_running()).collect();
        if live.is_empty() {
            return Err("no node is running".into());
        }
        if all_running && live.len() != self.nodes.len() {
            return Err(format!(
                "only {} of {} nodes are running",
                live.len(),
                self.nodes.len()
            ));
        }
        let live_ports: HashSet<u16> = live.iter().map(|n| n.port()).collect();
        // Normalized view: (port, is_master, master's port, slots), sorted by port.
        type Entry = (u16, bool, u16, Vec<(u16, u16)>);
        let mut reference: Option<(u16, Vec<Entry>)> = None;
        for node in &live {
            let info = node.try_info_cmd(&["CLUSTER", "INFO"], QUERY_TIMEOUT)?;
            if info.get("cluster_state").map(String::as_str) != Some("ok") {
                return Err(format!(
                    "{} reports cluster_state:{}",
                    node.addr(),
                    info.get("cluster_state").map_or("?", String::as_str)
                ));
            }
            let view = self.view_of(node)?;
            let port_of: HashMap<&str, u16> =
                view.iter().map(|l| (l.id.as_str(), l.port)).collect();
            let mut entries: Vec<Entry> = Vec::new();
            let mut myself_replica_of = None;
            for line in view.iter().filter(|l| live_ports.contains(&l.port)) {
                for bad in ["fail", "fail?", "handshake", "noaddr"] {
                    if line.has_flag(bad) {
                        return Err(format!(
                            "{} flags {}:{} as {bad}",
                            node.addr(),
                            line.id,
                            line.port
                        ));
                    }
                }
                let myself = line.has_flag("myself");
                if !myself && !line.connected {
                    return Err(format!("{} has no link to port {}", node.addr(), line.port));
                }
                let master_port = line
                    .master_id
                    .as_deref()
                    .and_then(|id| port_of.get(id).copied())
                    .unwrap_or(0);
                if myself && !line.is_master() {
                    myself_replica_of = Some(master_port);
                }
                let mut slots = line.slots.clone();
                slots.sort_unstable();
                entries.push((line.port, line.is_master(), master_port, slots));
            }
            entries.sort();
            let known: HashSet<u16> = entries.iter().map(|e| e.0).collect();
            if known != live_ports {
                return Err(format!(
                    "{} knows running ports {known:?}, expected {live_ports:?}",
                    node.addr()
                ));
            }
            let covered: u32 = entries
                .iter()
                .filter(|e| e.1)
                .flat_map(|e| e.3.iter())
                .map(|&(lo, hi)| u32::from(hi) - u32::from(lo) + 1)
                .sum();
            if covered != SLOTS {
                return Err(format!(
                    "{} sees running primaries serving {covered} of {SLOTS} slots",
                    node.addr()
                ));
            }
            if let Some(master_port) = myself_replica_of {
                if live_ports.contains(&master_port) {
                    let replication = node.try_info("replication", QUERY_TIMEOUT)?;
                    if replication.get("master_link_status").map(String::as_str) != Some("up") {
                        return Err(format!(
                            "replica {} has no replication link up to port {master_port}",
                            node.addr()
                        ));
                    }
                }
            }
            match &reference {
                None => reference = Some((node.port(), entries)),
                Some((port, expected)) if *expected != entries => {
                    return Err(format!(
                        "127.0.0.1:{port} and {} disagree on the topology: {expected:?} vs {entries:?}",
                        node.addr()
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5461->-67ed]
6ec2 :0@0 master,fail,noaddr - 0 0 0 disconnected
";
        let lines = parse_cluster_nodes(text);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].port, 30004);
        assert_eq!(lines[0].master_id.as_deref(), Some("e7d1"));
        assert!(!lines[0].is_master());
        assert_eq!(lines[1].port, 30002);
        assert_eq!(lines[1].slots, vec![(5461, 10922)]);
        assert!(lines[2].has_flag("myself") && lines[2].is_master());
        assert_eq!(lines[2].slots, vec![(0, 5460), (12000, 12000)]);
        assert!(lines[2].serves(12000) && !lines[2].serves(12001));
        assert!(lines[3].has_flag("fail") && !lines[3].connected);
        assert_eq!(lines[3].port, 0);
    }
}
