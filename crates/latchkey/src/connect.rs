//! Connecting: what a URL names (a server, a Sentinel group, a Cluster), how to reach it (TLS,
//! timeouts), the first connection, and the replica counts that decide whether acquires wait
//! for replicas.
//!
//! Each deployment but a plain server needs its cargo feature (`tls`, `cluster`, `sentinel`): a
//! URL is always read, so that a build without the feature can say which one to enable.

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

#[cfg(feature = "sentinel")]
use crate::conn::SentinelTarget;
use crate::conn::{within, Conn, Target};
#[cfg(feature = "cluster")]
use crate::conn::{ClusterSource, ClusterTarget};
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
    #[cfg(feature = "tls")]
    pub(crate) tls_root: Option<Vec<u8>>,
    /// A client certificate and key (PEM), for mutual TLS.
    #[cfg(feature = "tls")]
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
        let connecting = self.connect_conn(target);
        let conn = within(self.connect_timeout, "connecting", "", connecting).await?;
        let _: String = conn.query(&redis::cmd("PING"), "connecting", "").await?;
        Ok(conn)
    }

    /// A connection to the single server `target` made on first use, and without connection
    /// retries: a command on an unreachable server fails at once with that error, instead of
    /// waiting out the retry delays (up to the command or per-node timeout, as a `Timeout`).
    /// [`Error::Config`] for a Sentinel or Cluster target.
    pub(crate) fn connect_lazy(&self, target: &Target) -> Result<Conn> {
        // Irrefutable without the `cluster` and `sentinel` features.
        #[allow(irrefutable_let_patterns)]
        let Target::Fixed(server) = target
        else {
            return Err(Error::config(format!(
                "`{}` is not a single server; only `redis://` and `rediss://` clients can be \
                 lazy, use `connect` for Sentinel and Cluster",
                redact(&self.url)
            )));
        };
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout + self.replica_wait * 2))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config((**server).clone(), manager_config)
            .map_err(|e| {
            Error::config(format!("cannot use redis url `{}`: {e}", redact(&self.url)))
        })?;
        Ok(Conn::single(manager, self.command_timeout))
    }

    /// Whether TLS, if the URL asks for it (`rediss://`, `rediss+cluster://`), can be used:
    /// [`Error::Config`] when no rustls crypto provider is installed. The driver builds its rustls configuration from the
    /// process-wide default provider and panics without one; latchkey does not install one
    /// (that is the application's choice), so it says so here instead.
    #[cfg(feature = "tls")]
    fn check_tls_provider(&self) -> Result<()> {
        if !self.url.starts_with("rediss") {
            return Ok(());
        }
        match rustls::crypto::CryptoProvider::get_default() {
            Some(_) => Ok(()),
            None => Err(Error::config(format!(
                "`{}` needs TLS, and no rustls crypto provider is installed: call \
                 `rustls::crypto::ring::default_provider().install_default()` (or \
                 `aws_lc_rs`) once at the start of the program, before connecting",
                redact(&self.url)
            ))),
        }
    }

    #[cfg(feature = "tls")]
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
    /// [`Error::FeatureDisabled`] for a deployment whose feature this build leaves out.
    pub(crate) fn target(&self, topology: &Topology) -> Result<Target> {
        missing_feature(&self.url, topology, built_with)?;
        #[cfg(feature = "tls")]
        self.check_tls_provider()?;
        let config_error = |e: redis::RedisError| {
            Error::config(format!("cannot use redis url `{}`: {e}", redact(&self.url)))
        };
        match topology {
            Topology::Single(url) => {
                #[cfg(feature = "tls")]
                let client = match self.certificates() {
                    Some(certs) => redis::Client::build_with_tls(url.as_str(), certs),
                    None => redis::Client::open(url.as_str()),
                };
                #[cfg(not(feature = "tls"))]
                let client = redis::Client::open(url.as_str());
                Ok(Target::Fixed(Box::new(client.map_err(config_error)?)))
            }
            // Refused by `missing_feature` already.
            #[cfg(not(feature = "sentinel"))]
            Topology::Sentinel { .. } => Err(disabled("sentinel", "Sentinel", &self.url)),
            #[cfg(feature = "sentinel")]
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
            #[cfg(not(feature = "cluster"))]
            Topology::Cluster(_) => Err(disabled("cluster", "Cluster", &self.url)),
            #[cfg(feature = "cluster")]
            Topology::Cluster(nodes) => Ok(Target::Cluster(Arc::new(ClusterTarget {
                source: ClusterSource::Nodes {
                    nodes: nodes.clone(),
                    #[cfg(feature = "tls")]
                    certificates: self.certificates(),
                },
                connect_timeout: self.connect_timeout,
                command_timeout: self.command_timeout,
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
            #[cfg(feature = "cluster")]
            Target::Cluster(cluster) => {
                // The driver's timeout also lets a replica `WAIT` finish (ours bound each call).
                let timeout = self.command_timeout + self.replica_wait * 2;
                let conn = cluster.connect(None, timeout).await?;
                Ok(Conn::cluster(conn, self.command_timeout))
            }
            #[cfg(feature = "sentinel")]
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
        .query_on(
            Some(slot),
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

/// Whether this build has the cargo feature `feature` of latchkey.
fn built_with(feature: &str) -> bool {
    (feature == "tls" && cfg!(feature = "tls"))
        || (feature == "cluster" && cfg!(feature = "cluster"))
        || (feature == "sentinel" && cfg!(feature = "sentinel"))
}

/// [`Error::FeatureDisabled`] if `url` (which names `topology`) needs a feature that `enabled`
/// says this build leaves out: `tls` for `rediss://` and `rediss+cluster://`, `cluster` for a
/// Cluster, `sentinel` for a Sentinel group.
fn missing_feature(url: &str, topology: &Topology, enabled: impl Fn(&str) -> bool) -> Result<()> {
    let needs = [
        (
            matches!(topology, Topology::Sentinel { .. }),
            "sentinel",
            "Sentinel",
        ),
        (
            matches!(topology, Topology::Cluster(_)),
            "cluster",
            "Cluster",
        ),
        (url.starts_with("rediss"), "tls", "TLS"),
    ];
    match needs
        .into_iter()
        .find(|&(needs, feature, _)| needs && !enabled(feature))
    {
        Some((_, feature, kind)) => Err(disabled(feature, kind, url)),
        None => Ok(()),
    }
}

fn disabled(feature: &'static str, kind: &str, url: &str) -> Error {
    Error::FeatureDisabled {
        feature,
        what: format!("the {kind} url `{}`", redact(url)),
    }
}

/// The deployment a URL names.
pub(crate) enum Topology {
    /// `redis://…` or `rediss://…`.
    Single(String),
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>]`: the
    /// sentinels' addresses and the monitored primary's name; the credentials are those of the
    /// data nodes.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        node: redis::RedisConnectionInfo,
    },
    /// `redis+cluster://[user:password@]host:port[,host:port…]` (or `rediss+cluster://`): seed
    /// nodes of a Redis Cluster.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Cluster(Vec<String>),
}

impl Topology {
    /// Reads `url`; [`Error::Config`] if it cannot be used.
    pub(crate) fn parse(url: &str) -> Result<Topology> {
        let bad =
            |why: &str| Error::config(format!("cannot use redis url `{}`: {why}", redact(url)));
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
pub(crate) type Shard = Vec<(u16, u16)>;

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
            let slots: Shard = fields[8..]
                .iter()
                // `[slot->-node]` / `[slot-<-node]`: a slot being migrated or imported.
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => range.parse().ok().map(|slot| (slot, slot)),
                })
                .collect();
            (!slots.is_empty()).then_some(slots)
        })
        .collect()
}

/// The cluster's shards, as the primary of `slot` sees them (any node without a slot).
pub(crate) async fn cluster_shards(conn: &Conn, slot: Option<u16>) -> Result<Vec<Shard>> {
    let cmd = redis::cmd("CLUSTER").arg("NODES").clone();
    let context = "reading the cluster's shards";
    let reply: String = conn.query_on(slot, &cmd, context, "").await?;
    Ok(parse_cluster_nodes(&reply))
}

#[cfg(test)]
#[path = "connect_tests.rs"]
mod tests;
