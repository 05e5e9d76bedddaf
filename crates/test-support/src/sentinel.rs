//! A primary with replicas, watched by `redis-sentinel` processes.

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;

use crate::server::{RedisServer, SentinelSpec, ServerBuilder};
use crate::util::{poll_until, value_items, value_pairs, value_text};

/// The master name the sentinels monitor.
const MASTER_NAME: &str = "mymaster";
/// How long `spawn` waits for replication and for the sentinels to discover everything.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeouts of the status queries made while polling.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// One primary, its replicas (`replicaof`) and `redis-sentinel` processes monitoring it as
/// `"mymaster"` with quorum `S/2 + 1`, `down-after-milliseconds 1000` and
/// `failover-timeout 5000`. Everything listens on `127.0.0.1` and the sentinels announce
/// `127.0.0.1`. Plain TCP, no password.
///
/// Dropping the group kills the sentinels, then the data servers.
#[derive(Debug)]
pub struct SentinelGroup {
    // Field order matters: sentinels are dropped (killed) before the data servers so they
    // do not start a failover while the group is torn down.
    sentinels: Vec<RedisServer>,
    servers: Vec<RedisServer>,
    quorum: usize,
    last_primary: Mutex<String>,
}

impl SentinelGroup {
    /// Starts a primary, `replicas` replicas and `sentinels` sentinels, and waits until the
    /// replicas are in sync and every sentinel knows all replicas and all other sentinels
    /// (so a failover can be authorized at once).
    ///
    /// # Panics
    ///
    /// If `sentinels == 0`, or the group does not settle within 60 seconds.
    pub fn spawn(replicas: usize, sentinels: usize) -> SentinelGroup {
        assert!(
            sentinels > 0,
            "SentinelGroup::spawn needs at least one sentinel"
        );
        let primary = RedisServer::spawn();
        let primary_addr = primary.addr();
        let mut servers = vec![primary];
        for _ in 0..replicas {
            servers.push(ServerBuilder::new().replica_of(&primary_addr).spawn());
        }
        let mut group = SentinelGroup {
            sentinels: Vec::new(),
            servers,
            quorum: sentinels / 2 + 1,
            last_primary: Mutex::new(primary_addr.clone()),
        };
        if let Err(problem) = poll_until(SETTLE_TIMEOUT, Duration::from_millis(20), || {
            group.replication_problem(replicas)
        }) {
            panic!("replication did not start within {SETTLE_TIMEOUT:?}: {problem}");
        }
        let spec = SentinelSpec {
            master_name: MASTER_NAME.to_string(),
            primary_addr,
            quorum: group.quorum,
            down_after_ms: 1000,
            failover_timeout_ms: 5000,
        };
        for _ in 0..sentinels {
            let sentinel = ServerBuilder::new().sentinel(spec.clone()).spawn();
            group.sentinels.push(sentinel);
        }
        if let Err(problem) = poll_until(SETTLE_TIMEOUT, Duration::from_millis(50), || {
            group.discovery_problem(replicas)
        }) {
            panic!("the sentinels did not settle within {SETTLE_TIMEOUT:?}: {problem}");
        }
        group
    }

    fn replication_problem(&self, replicas: usize) -> Result<(), String> {
        let info = self.servers[0].try_info("replication", QUERY_TIMEOUT)?;
        let online = info
            .iter()
            .filter(|(k, v)| k.starts_with("slave") && v.contains("state=online"))
            .count();
        if online != replicas {
            return Err(format!("{online} of {replicas} replicas online"));
        }
        for replica in &self.servers[1..] {
            let info = replica.try_info("replication", QUERY_TIMEOUT)?;
            if info.get("master_link_status").map(String::as_str) != Some("up") {
                return Err(format!("{} has no link to the primary", replica.addr()));
            }
        }
        Ok(())
    }

    fn sentinel_query(sentinel: &RedisServer, args: &[&str]) -> Result<Value, String> {
        match sentinel.query(args, QUERY_TIMEOUT, QUERY_TIMEOUT) {
            Ok(Value::ServerError(e)) => Err(format!("{args:?} on {}: {e}", sentinel.addr())),
            Ok(value) => Ok(value),
            Err(e) => Err(format!("{args:?} on {}: {e}", sentinel.addr())),
        }
    }

    fn discovery_problem(&self, replicas: usize) -> Result<(), String> {
        for sentinel in &self.sentinels {
            let known = Self::sentinel_query(sentinel, &["SENTINEL", "REPLICAS", MASTER_NAME])?;
            let healthy = value_items(&known)
                .iter()
                .map(value_pairs)
                .filter(|r| {
                    r.get("flags")
                        .is_some_and(|f| !f.contains("s_down") && !f.contains("disconnected"))
                })
                .count();
            if healthy != replicas {
                return Err(format!(
                    "sentinel {} sees {healthy} of {replicas} replicas",
                    sentinel.addr()
                ));
            }
            let peers = Self::sentinel_query(sentinel, &["SENTINEL", "SENTINELS", MASTER_NAME])?;
            let peers = value_items(&peers).len();
            if peers + 1 != self.sentinels.len() {
                return Err(format!(
                    "sentinel {} knows {peers} of {} other sentinels",
                    sentinel.addr(),
                    self.sentinels.len() - 1
                ));
            }
            Self::sentinel_query(sentinel, &["SENTINEL", "CKQUORUM", MASTER_NAME])?;
        }
        Ok(())
    }

    /// `"mymaster"`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The URL a client connects with: `redis+sentinel://<every sentinel>/mymaster`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| s.addr()).collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), MASTER_NAME)
    }

    /// The quorum the sentinels were configured with (`sentinels / 2 + 1`).
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The data servers: the initial primary first, then the initial replicas.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// Data server `index` (as in [`SentinelGroup::servers`]) for changes.
    pub fn server_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.servers[index]
    }

    /// The data server the sentinels currently name as primary.
    ///
    /// # Panics
    ///
    /// As [`SentinelGroup::current_primary_addr`].
    pub fn primary(&self) -> &RedisServer {
        let addr = self.current_primary_addr();
        self.servers
            .iter()
            .find(|s| s.addr() == addr)
            .unwrap_or_else(|| panic!("the sentinels name {addr}, which is not in the group"))
    }

    /// The running data servers other than the current primary.
    ///
    /// # Panics
    ///
    /// As [`SentinelGroup::current_primary_addr`].
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let primary = self.current_primary_addr();
        self.servers
            .iter()
            .filter(|s| s.addr() != primary && s.is_running())
            .collect()
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Sentinel `index` for changes (e.g. `kill`).
    pub fn sentinel_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.sentinels[index]
    }

    /// The sentinels' URLs (`redis://127.0.0.1:PORT`), e.g. for `redis::sentinel`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    fn primary_addr_from(sentinel: &RedisServer) -> Result<String, String> {
        let reply = Self::sentinel_query(
            sentinel,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        )?;
        let parts: Vec<String> = value_items(&reply).iter().filter_map(value_text).collect();
        match parts.as_slice() {
            [host, port] => Ok(format!("{host}:{port}")),
            _ => Err(format!(
                "sentinel {} answered {reply:?} for the primary",
                sentinel.addr()
            )),
        }
    }

    /// The primary's `"127.0.0.1:PORT"` according to the first sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME mymaster`.
    ///
    /// # Panics
    ///
    /// If no sentinel answers.
    pub fn current_primary_addr(&self) -> String {
        let mut problems = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            match Self::primary_addr_from(sentinel) {
                Ok(addr) => return addr,
                Err(e) => problems.push(e),
            }
        }
        panic!("no sentinel named the primary: {problems:?}");
    }

    /// Kills (SIGKILL) the current primary and returns its address. Follow with
    /// [`SentinelGroup::wait_for_failover`].
    ///
    /// # Panics
    ///
    /// As [`SentinelGroup::current_primary_addr`].
    pub fn kill_primary(&mut self) -> String {
        let addr = self.current_primary_addr();
        let server = self
            .servers
            .iter_mut()
            .find(|s| s.addr() == addr)
            .unwrap_or_else(|| panic!("the sentinels name {addr}, which is not in the group"));
        server.kill();
        *self.last_primary.lock().unwrap_or_else(|e| e.into_inner()) = addr.clone();
        addr
    }

    /// Waits until every running sentinel names the same primary, different from the one
    /// last killed by [`SentinelGroup::kill_primary`] (or from the initial primary), and that
    /// server reports `role:master`. Returns its address. With `down-after-milliseconds
    /// 1000` this usually takes a few seconds; pass a generous timeout (e.g. 60 s).
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout`.
    pub fn wait_for_failover(&self, timeout: Duration) -> String {
        let old = self
            .last_primary
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let result = poll_until(timeout, Duration::from_millis(50), || {
            let mut named = None::<String>;
            for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                let addr = Self::primary_addr_from(sentinel)?;
                if addr == old {
                    return Err(format!("sentinel {} still names {old}", sentinel.addr()));
                }
                match &named {
                    Some(other) if *other != addr => {
                        return Err(format!("sentinels disagree: {other} vs {addr}"));
                    }
                    _ => named = Some(addr),
                }
            }
            let addr = named.ok_or_else(|| "no sentinel is running".to_string())?;
            let server = self
                .servers
                .iter()
                .find(|s| s.addr() == addr)
                .ok_or_else(|| format!("the sentinels name {addr}, which is not in the group"))?;
            let info = server.try_info("replication", QUERY_TIMEOUT)?;
            if info.get("role").map(String::as_str) != Some("master") {
                return Err(format!("{addr} is named primary but is not one yet"));
            }
            Ok(addr)
        });
        match result {
            Ok(addr) => {
                *self.last_primary.lock().unwrap_or_else(|e| e.into_inner()) = addr.clone();
                addr
            }
            Err(problem) => panic!("no failover from {old} within {timeout:?}: {problem}"),
        }
    }

    /// Asks a sentinel for a manual failover (`SENTINEL FAILOVER mymaster`) while the primary
    /// keeps running, and waits as [`SentinelGroup::wait_for_failover`] does. Returns the old
    /// and the new primary's addresses. The old primary takes writes until the sentinels
    /// reconfigure it as a replica (see [`SentinelGroup::wait_demoted`]).
    ///
    /// # Panics
    ///
    /// If no sentinel accepts the request or the failover does not finish within `timeout`.
    pub fn manual_failover(&self, timeout: Duration) -> (String, String) {
        let old = self.current_primary_addr();
        *self.last_primary.lock().unwrap_or_else(|e| e.into_inner()) = old.clone();
        // A sentinel refuses while it does not see a healthy replica yet (NOGOODSLAVE) or a
        // failover is still under way (INPROG): ask again.
        let accepted = poll_until(timeout, Duration::from_millis(100), || {
            let mut refusals = Vec::new();
            for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                match Self::sentinel_query(sentinel, &["SENTINEL", "FAILOVER", MASTER_NAME]) {
                    Ok(_) => return Ok(()),
                    Err(e) => refusals.push(e),
                }
            }
            Err(format!("{refusals:?}"))
        });
        if let Err(refusals) = accepted {
            panic!("no sentinel accepted SENTINEL FAILOVER within {timeout:?}: {refusals}");
        }
        let new = self.wait_for_failover(timeout);
        (old, new)
    }

    /// Waits until the server at `addr` is a replica of the current primary with its link up
    /// (the sentinels reconfigure a demoted primary some seconds after a failover).
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout`.
    pub fn wait_demoted(&self, addr: &str, timeout: Duration) {
        let server = self
            .servers
            .iter()
            .find(|s| s.addr() == addr)
            .unwrap_or_else(|| panic!("{addr} is not in the group"));
        let result = poll_until(timeout, Duration::from_millis(50), || {
            let info = server.try_info("replication", QUERY_TIMEOUT)?;
            match (
                info.get("role").map(String::as_str),
                info.get("master_link_status").map(String::as_str),
            ) {
                (Some("slave"), Some("up")) => Ok(()),
                other => Err(format!("{addr} is {other:?}")),
            }
        });
        if let Err(problem) = result {
            panic!("{addr} was not made a replica within {timeout:?}: {problem}");
        }
    }
}
