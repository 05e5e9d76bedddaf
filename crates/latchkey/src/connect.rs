//! Connecting: what a URL names (a server, a Sentinel group, a Cluster), how to reach it (TLS,
//! timeouts), the first connection, and the replica counts that decide whether acquires wait
//! for replicas.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::conn::{ClusterTarget, Conn, SentinelTarget, Target};
use crate::error::{Error, Result};

/// Hides a password in a URL for logs and `Debug`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// How to reach Redis: the URL, TLS material and timeouts of a client.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) url: String,
    /// A CA (PEM) to trust instead of the system's roots.
    pub(crate) tls_root: Option<Vec<u8>>,
    /// A client certificate and key (PEM), for mutual TLS.
    pub(crate) tls_identity: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    /// The longest replica `WAIT` an acquire may add to a command: the driver's own response
    /// timeout must let it finish (our timeouts bound each call).
    pub(crate) replica_wait: Duration,
}

impl Endpoint {
    /// Connects to `target` within the connect timeout and asks something of the server, so
    /// that missing or wrong credentials fail here, typed, rather than at the first lock.
    pub(crate) async fn connect(&self, target: &Target) -> Result<Conn> {
        let conn = match tokio::time::timeout(self.connect_timeout, self.connect_conn(target)).await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(Error::from_redis(e, "connecting", "", self.connect_timeout)),
            Err(_) => {
                return Err(Error::Timeout {
                    timeout: self.connect_timeout,
                    context: "connecting",
                })
            }
        };
        let _: String = conn.query(&redis::cmd("PING"), "connecting", "").await?;
        Ok(conn)
    }

    /// A connection to the single server `target` made on first use, and without connection
    /// retries: a command on an unreachable server fails at once with that error, instead of
    /// waiting out the retry delays (up to the command or per-node timeout, as a `Timeout`).
    /// [`Error::Config`] for a Sentinel or Cluster target.
    pub(crate) fn connect_lazy(&self, target: &Target) -> Result<Conn> {
        let Target::Fixed(server) = target else {
            return Err(Error::Config {
                reason: format!(
                    "`{}` is not a single server; only `redis://` and `rediss://` clients can be \
                     lazy, use `connect` for Sentinel and Cluster",
                    redact(&self.url)
                ),
            });
        };
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout + self.replica_wait * 2))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config((**server).clone(), manager_config)
            .map_err(|e| Error::Config {
            reason: format!("cannot use redis url `{}`: {e}", redact(&self.url)),
        })?;
        Ok(Conn::single(manager, self.command_timeout))
    }

    /// Installs the `ring` crypto provider the driver's rustls needs (process-wide) for TLS,
    /// unless the application installed one already.
    pub(crate) fn install_tls_provider(&self) {
        if self.url.starts_with("rediss") || self.tls_root.is_some() {
            // An error only means a provider is installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    }

    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.tls_root.is_none() && self.tls_identity.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self.tls_identity.clone().map(|(client_cert, client_key)| {
                redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }
            }),
            root_cert: self.tls_root.clone(),
        })
    }

    /// Where `topology` is, with this endpoint's TLS material and timeouts. Sends nothing.
    pub(crate) fn target(&self, topology: &Topology) -> Result<Target> {
        let config_error = |e: redis::RedisError| Error::Config {
            reason: format!("cannot use redis url `{}`: {e}", redact(&self.url)),
        };
        match topology {
            Topology::Single(url) => {
                let client = match self.certificates() {
                    Some(certs) => redis::Client::build_with_tls(url.as_str(), certs),
                    None => redis::Client::open(url.as_str()),
                }
                .map_err(config_error)?;
                Ok(Target::Fixed(Box::new(client)))
            }
            Topology::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let node_info = redis::sentinel::SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(node.clone());
                let sentinel = redis::sentinel::SentinelClient::build(
                    sentinels.clone(),
                    master.clone(),
                    Some(node_info),
                    redis::sentinel::SentinelServerType::Master,
                )
                .map_err(config_error)?;
                Ok(Target::Sentinel(Arc::new(SentinelTarget {
                    client: tokio::sync::Mutex::new(sentinel),
                    sentinels: sentinels.clone(),
                    master: master.clone(),
                    connect_timeout: self.connect_timeout,
                    command_timeout: self.command_timeout,
                })))
            }
            Topology::Cluster(nodes) => Ok(Target::Cluster(Arc::new(ClusterTarget {
                nodes: nodes.clone(),
                certificates: self.certificates(),
                connect_timeout: self.connect_timeout,
                command_timeout: self.command_timeout,
                replica_wait: self.replica_wait,
            }))),
        }
    }

    /// The command connection to `target` (no timeout of its own).
    async fn connect_conn(&self, target: &Target) -> redis::RedisResult<Conn> {
        match target {
            Target::Fixed(client) => {
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    // Our own timeouts bound each call; the driver's must also let a replica
                    // WAIT (see `replica_sync`) finish.
                    .set_response_timeout(Some(self.command_timeout + self.replica_wait * 2))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let manager =
                    ConnectionManager::new_with_config((**client).clone(), manager_config).await?;
                Ok(Conn::single(manager, self.command_timeout))
            }
            Target::Cluster(cluster) => {
                let client = cluster.command_client()?;
                let conn = client.get_async_connection().await?;
                Ok(Conn::cluster(conn, self.command_timeout))
            }
            Target::Sentinel(_) => {
                let conn = Conn::sentinel(
                    target.clone(),
                    self.connect_timeout,
                    self.command_timeout + self.replica_wait * 2,
                    self.command_timeout,
                );
                // Connect now, so that a wrong address or password fails here.
                let _: String = conn
                    .query(&redis::cmd("PING"), "connecting", "")
                    .await
                    .map_err(|e| match e {
                        Error::Unreachable { source, .. }
                        | Error::AuthFailed { source }
                        | Error::PermissionDenied { source, .. }
                        | Error::Redis(source) => source,
                        other => redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "connecting through sentinel",
                            other.to_string(),
                        )),
                    })?;
                Ok(conn)
            }
        }
    }
}

/// How many replicas the primary behind `conn` has now (`INFO replication`); on a cluster, the
/// primary that owns `slot`.
pub(crate) async fn connected_replicas(conn: &Conn, slot: u16) -> Result<u32> {
    let info: String = conn
        .query_on_slot(
            slot,
            redis::cmd("INFO").arg("replication"),
            "reading replication info",
            "",
        )
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0))
}

/// The deployment a URL names.
pub(crate) enum Topology {
    /// `redis://…` or `rediss://…`.
    Single(String),
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>]`: the
    /// sentinels' addresses and the monitored primary's name; the credentials are those of the
    /// data nodes.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        node: redis::RedisConnectionInfo,
    },
    /// `redis+cluster://[user:password@]host:port[,host:port…]` (or `rediss+cluster://`): seed
    /// nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

impl Topology {
    /// Reads `url`; [`Error::Config`] if it cannot be used.
    pub(crate) fn parse(url: &str) -> Result<Topology> {
        let bad = |why: &str| Error::Config {
            reason: format!("cannot use redis url `{}`: {why}", redact(url)),
        };
        for (prefix, scheme) in [
            ("redis+cluster://", "redis"),
            ("rediss+cluster://", "rediss"),
        ] {
            if let Some(rest) = url.strip_prefix(prefix) {
                let (auth, hosts) = match rest.rsplit_once('@') {
                    Some((auth, hosts)) => (format!("{auth}@"), hosts),
                    None => (String::new(), rest),
                };
                let nodes: Vec<String> = hosts
                    .trim_end_matches('/')
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(|h| format!("{scheme}://{auth}{h}"))
                    .collect();
                if nodes.is_empty() {
                    return Err(bad("no cluster node address"));
                }
                return Ok(Topology::Cluster(nodes));
            }
        }
        let Some(rest) = url.strip_prefix("redis+sentinel://") else {
            return Ok(Topology::Single(url.to_owned()));
        };
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (Some(auth), rest),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').ok_or_else(|| {
            bad("give the master name after the hosts: redis+sentinel://h:p,h:p/mymaster")
        })?;
        let mut path = path.split('/');
        let master = path
            .next()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| bad("the master name is empty"))?;
        let db = match path.next() {
            Some(db) if !db.is_empty() => db
                .parse::<i64>()
                .map_err(|_| bad("the database is not a number"))?,
            _ => 0,
        };
        let sentinels: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(|h| format!("redis://{h}"))
            .collect();
        if sentinels.is_empty() {
            return Err(bad("no sentinel address"));
        }
        let mut node = redis::RedisConnectionInfo::default().set_db(db);
        if let Some(auth) = auth {
            let (user, password) = match auth.split_once(':') {
                Some((user, password)) => (user, password),
                None => ("", auth),
            };
            if !user.is_empty() {
                node = node.set_username(user);
            }
            if !password.is_empty() {
                node = node.set_password(password);
            }
        }
        Ok(Topology::Sentinel {
            sentinels,
            master: master.to_owned(),
            node,
        })
    }
}

/// One shard of a Redis Cluster: the slot ranges its primary serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) slots: Vec<(u16, u16)>,
}

/// The shards in a `CLUSTER NODES` reply: one per primary that serves slots. (Not
/// `CLUSTER SLOTS`: it leaves out replicas whose offset the node has not heard of yet.)
pub(crate) fn parse_cluster_nodes(text: &str) -> Vec<Shard> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = || fields.get(2).into_iter().flat_map(|f| f.split(','));
            if fields.len() < 9
                || !flags().any(|flag| flag == "master")
                || flags().any(|flag| matches!(flag, "fail" | "noaddr"))
            {
                return None;
            }
            let slots: Vec<(u16, u16)> = fields[8..]
                .iter()
                // `[slot->-node]` / `[slot-<-node]`: a slot being migrated or imported.
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => range.parse().ok().map(|slot| (slot, slot)),
                })
                .collect();
            (!slots.is_empty()).then_some(Shard { slots })
        })
        .collect()
}

/// The cluster's shards, as the primary of `slot` sees them (any node without a slot).
pub(crate) async fn cluster_shards(conn: &Conn, slot: Option<u16>) -> Result<Vec<Shard>> {
    let cmd = redis::cmd("CLUSTER").arg("NODES").clone();
    let context = "reading the cluster's shards";
    let reply: String = match slot {
        Some(slot) => conn.query_on_slot(slot, &cmd, context, "").await?,
        None => conn.query(&cmd, context, "").await?,
    };
    Ok(parse_cluster_nodes(&reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("redis://user:secret@host:1/0"),
            "redis://***@host:1/0"
        );
        assert_eq!(redact("redis://host:1"), "redis://host:1");
    }

    #[test]
    fn cluster_nodes_give_each_primary_its_slots() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5461->-67ed]
6ec2 127.0.0.1:30003@40003 master - 0 0 3 connected
9a1b 127.0.0.1:30005@40005 master,fail - 0 0 5 disconnected 12001-16383
";
        assert_eq!(
            parse_cluster_nodes(text),
            vec![
                Shard {
                    slots: vec![(5461, 10922)],
                },
                Shard {
                    slots: vec![(0, 5460), (12000, 12000)],
                },
            ]
        );
        assert!(parse_cluster_nodes("").is_empty());
    }
}
