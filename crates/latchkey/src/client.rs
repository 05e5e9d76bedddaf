//! The client: its settings ([`ClientBuilder`]), its start (connection, pub/sub hub, watchdog,
//! task queue, Sentinel watcher, replica state) and its accessors. The primitives' factories
//! (`Client::lock`, `Client::semaphore`, …) live with each primitive.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client_info::Registration;
#[cfg(feature = "sentinel")]
use crate::conn::within;
use crate::conn::{Conn, Target};
use crate::connect::{redact, Endpoint, Topology};
use crate::error::{check_range, Error, Result, HOUR};
use crate::keys::check_name;
use crate::metrics::Site;
use crate::pubsub::{Hub, HubSettings, WakePolicy};
use crate::replica::{AcquireCall, ReplicaSync, Replicas, REPLICA_LOSS_GRACE};
use crate::scripts::Invocation;
use crate::sentinel_watch::{self, Follow, Resends};
use crate::task::{self, Agents, Task};
use crate::wait::Waiting;
use crate::watchdog::{self, Registry, MAX_LEASE};

/// Settings of a [`Client`], made with [`Client::builder`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// use std::time::Duration;
///
/// let client = latchkey_redis::Client::builder("redis://127.0.0.1:6379")
///     .watchdog_timeout(Duration::from_secs(10))
///     .command_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is called"]
pub struct ClientBuilder {
    /// The URL connected to, or, for a redis-rs client of the application's, its address as a
    /// URL (for logs and the distinct-servers checks).
    url: String,
    /// A redis-rs client of the application's to connect with, instead of the URL's.
    source: Source,
    #[cfg(feature = "tls")]
    tls_root: Option<Vec<u8>>,
    #[cfg(feature = "tls")]
    tls_identity: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) subscription_linger: Duration,
    pub(crate) namespace: Option<String>,
    pub(crate) replica_sync: ReplicaSync,
    pub(crate) replica_loss_grace: Duration,
    pub(crate) metrics_name_label: bool,
    pub(crate) client_name: Option<String>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &redact(&self.url))
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("subscription_linger", &self.subscription_linger)
            .field("namespace", &self.namespace)
            .field("metrics_name_label", &self.metrics_name_label)
            .field("client_name", &self.client_name)
            .finish()
    }
}

/// Where a [`ClientBuilder`] connects: the URL, or a redis-rs client the application built.
#[derive(Clone)]
enum Source {
    Url,
    Client(Box<redis::Client>),
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterClient>),
    /// Taken by the first `connect` (a sentinel client cannot be cloned).
    #[cfg(feature = "sentinel")]
    Sentinel {
        client: Arc<std::sync::Mutex<Option<redis::sentinel::SentinelClient>>>,
        master: String,
    },
}

impl ClientBuilder {
    fn new(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            source: Source::Url,
            #[cfg(feature = "tls")]
            tls_root: None,
            #[cfg(feature = "tls")]
            tls_identity: None,
            watchdog_timeout: Client::DEFAULT_WATCHDOG_TIMEOUT,
            connect_timeout: Duration::from_secs(3),
            command_timeout: Duration::from_secs(3),
            subscription_linger: Duration::from_secs(1),
            namespace: None,
            replica_sync: ReplicaSync::Auto,
            replica_loss_grace: REPLICA_LOSS_GRACE,
            metrics_name_label: false,
            client_name: None,
        }
    }

    /// A name for this client, shown beside its owner ids by the tools that list holders
    /// (`latchkey status`, [`Client::client_info`]) with the host, process id and program,
    /// which every client registers anyway: e.g. the service and its instance. At most 256
    /// bytes, no control characters.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> latchkey_redis::Result<()> {
    /// let client = latchkey_redis::Client::builder("redis://127.0.0.1:6379")
    ///     .client_name("billing-worker-3")
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn client_name(mut self, name: impl Into<String>) -> ClientBuilder {
        self.client_name = Some(name.into());
        self
    }

    /// Trust this CA (PEM) for `rediss://` connections instead of the system's roots.
    /// Certificates are always verified; there is no way to turn verification off.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// // Once, at the start of the program: latchkey uses the process's rustls provider.
    /// let _ = rustls::crypto::ring::default_provider().install_default();
    /// let ca = std::fs::read("ca.pem").expect("the CA file");
    /// let client = latchkey_redis::Client::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(ca)
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.tls_root = Some(pem.into());
        self
    }

    /// Present this client certificate and key (PEM) on `rediss://` connections (mutual TLS).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// let _ = rustls::crypto::ring::default_provider().install_default();
    /// let (cert, key) = (std::fs::read("client.pem"), std::fs::read("client.key"));
    /// let client = latchkey_redis::Client::builder("rediss://redis.internal:6380")
    ///     .tls_client_identity(cert.expect("the certificate"), key.expect("the key"))
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> ClientBuilder {
        self.tls_identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Puts every object of this client under `namespace`: the object called `name` is kept
    /// as `<namespace>:<name>` (its derived keys follow, e.g. `redisson_lock_token:{<namespace>:<name>}`),
    /// like a Redisson `NameMapper` that adds a prefix. A namespace is 1 to 64 characters from
    /// `A-Z a-z 0-9 _ . -`, so `<namespace>:<name>` never reads as another namespace's object.
    pub fn namespace(mut self, namespace: impl Into<String>) -> ClientBuilder {
        self.namespace = Some(namespace.into());
        self
    }

    /// A builder that connects with `client`, the application's own redis-rs client (its
    /// address, TLS, credentials, database and protocol), instead of a URL: every latchkey
    /// connection (commands and pub/sub) is opened from it. The builder's own settings
    /// (namespace, watchdog, timeouts, replica sync) apply as usual; its TLS settings
    /// ([`tls_root_certificate`](ClientBuilder::tls_root_certificate), …) do not, the client's
    /// do. One latchkey [`Client`] opens two connections to the server, however many locks it
    /// takes: one for commands (multiplexed), one for pub/sub.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// // The service's client, built once with its own settings.
    /// let redis = latchkey_redis::redis::Client::open("redis://app:secret@127.0.0.1:6379/0")
    ///     .expect("a valid url");
    /// let client = latchkey_redis::ClientBuilder::from_redis_client(redis)
    ///     .namespace("billing")
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_redis_client(client: redis::Client) -> ClientBuilder {
        let info = client.get_connection_info();
        let scheme = match info.addr() {
            redis::ConnectionAddr::TcpTls { .. } => "rediss",
            redis::ConnectionAddr::Unix(_) => "redis+unix",
            _ => "redis",
        };
        // With the database: MultiLock and RedLock tell servers (and databases) apart by URL.
        let url = format!("{scheme}://{}/{}", info.addr(), info.redis_settings().db());
        ClientBuilder {
            source: Source::Client(Box::new(client)),
            ..ClientBuilder::new(url)
        }
    }

    /// A builder that connects to a Redis Cluster with `client`, the application's own
    /// redis-rs cluster client (seed nodes, TLS, credentials): every latchkey connection is
    /// opened from it, the command connection and the per-shard subscribers. It must speak
    /// RESP3 (`ClusterClientBuilder::use_protocol(ProtocolVersion::RESP3)`): latchkey's sharded
    /// pub/sub needs RESP3 pushes; a RESP2 client fails to connect with [`Error::Config`]
    /// saying so. One latchkey [`Client`] opens, per cluster node it uses, one command
    /// connection and one subscriber connection, however many locks it takes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// use latchkey_redis::redis::{cluster::ClusterClient, ProtocolVersion};
    ///
    /// let redis = ClusterClient::builder(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .use_protocol(ProtocolVersion::RESP3)
    ///     .build()
    ///     .expect("valid seed nodes");
    /// let client = latchkey_redis::ClientBuilder::from_cluster_client(redis).connect().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn from_cluster_client(client: redis::cluster::ClusterClient) -> ClientBuilder {
        ClientBuilder {
            source: Source::Cluster(Box::new(client)),
            ..ClientBuilder::new("redis+cluster://(the application's cluster client)")
        }
    }

    /// A builder that connects to the primary of the Sentinel group named `master` with
    /// `client`, the application's own redis-rs sentinel client (sentinel addresses, the data
    /// nodes' credentials and TLS): the primary is asked of it, and asked again after a
    /// failover, as with a `redis+sentinel://` URL. The other sentinels, which latchkey asks
    /// whether they vouch for a primary and whose `+switch-master` events it follows, are read
    /// from the first sentinel that answers (`SENTINEL SENTINELS`), over plain connections, as
    /// for a URL. One latchkey [`Client`] opens two connections to the primary (commands,
    /// pub/sub) and one to a sentinel, however many locks it takes. The client is used by the
    /// first [`connect`](ClientBuilder::connect) of the builder (a later one fails with
    /// [`Error::Config`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// use latchkey_redis::redis::sentinel::{SentinelClient, SentinelServerType};
    ///
    /// let sentinels = vec!["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"];
    /// let redis = SentinelClient::build(sentinels, "mymaster".to_owned(), None, SentinelServerType::Master)
    ///     .expect("valid sentinel addresses");
    /// let client = latchkey_redis::ClientBuilder::from_sentinel_client(redis, "mymaster")
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn from_sentinel_client(
        client: redis::sentinel::SentinelClient,
        master: impl Into<String>,
    ) -> ClientBuilder {
        let master = master.into();
        ClientBuilder {
            source: Source::Sentinel {
                client: Arc::new(std::sync::Mutex::new(Some(client))),
                master: master.clone(),
            },
            ..ClientBuilder::new(format!(
                "redis+sentinel://(the application's sentinel client)/{master}"
            ))
        }
    }

    /// The target of a builder made with [`ClientBuilder::from_sentinel_client`]: the client
    /// taken out of the builder, and the group's sentinels, asked of the first that answers.
    #[cfg(feature = "sentinel")]
    async fn sentinel_target(
        &self,
        client: &std::sync::Mutex<Option<redis::sentinel::SentinelClient>>,
        master: &str,
    ) -> Result<Target> {
        let taken = client.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut client) = taken else {
            return Err(Error::config(
                "this builder's sentinel client was used by an earlier `connect`; make \
                 a builder with a new one",
            ));
        };
        let timeout = self.connect_timeout + self.command_timeout;
        let discover = async {
            let sentinel = client.async_get_sentinel_client().await?;
            let first = sentinel.get_connection_info().addr().to_string();
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            let others: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
                .arg("SENTINELS")
                .arg(master)
                .query_async(&mut conn)
                .await?;
            let mut urls = vec![format!("redis://{first}")];
            urls.extend(others.iter().filter_map(|fields| {
                Some(format!(
                    "redis://{}:{}",
                    fields.get("ip")?,
                    fields.get("port")?
                ))
            }));
            Ok::<_, redis::RedisError>(urls)
        };
        let sentinels = within(timeout, "asking the sentinels", "", discover).await?;
        Ok(Target::Sentinel(Arc::new(crate::conn::SentinelTarget {
            client: tokio::sync::Mutex::new(client),
            sentinels,
            master: master.to_owned(),
            connect_timeout: self.connect_timeout,
            command_timeout: self.command_timeout,
        })))
    }

    /// The target of this builder's connections, sending nothing (but for a sentinel client's
    /// group, which is asked of its sentinels).
    async fn target(&self, endpoint: &Endpoint) -> Result<Target> {
        match &self.source {
            #[cfg(feature = "sentinel")]
            Source::Sentinel { client, master } => self.sentinel_target(client, master).await,
            Source::Url => endpoint.target(&Topology::parse(&self.url)?),
            Source::Client(client) => Ok(Target::Fixed(client.clone())),
            #[cfg(feature = "cluster")]
            Source::Cluster(client) => Ok(Target::Cluster(Arc::new(crate::conn::ClusterTarget {
                source: crate::conn::ClusterSource::Client(client.clone()),
                connect_timeout: endpoint.connect_timeout,
                command_timeout: endpoint.command_timeout,
            }))),
        }
    }

    /// The URL this client connects to (RedLock checks that its nodes are distinct servers).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn validate(&self) -> Result<()> {
        if let ReplicaSync::Require { replicas, timeout } = self.replica_sync {
            if replicas == 0
                || timeout.is_zero()
                || timeout > Duration::from_secs(60)
                || timeout * 2 > self.watchdog_timeout
            {
                return Err(Error::invalid(
                    "replica sync",
                    format!(
                        "{replicas} replicas within {timeout:?}: ask for at least one replica \
                         and a timeout between 1 ms and 60 s, at most half the watchdog timeout"
                    ),
                ));
            }
        }
        if let Some(ns) = &self.namespace {
            let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
            if ns.is_empty() || ns.len() > 64 || !ns.chars().all(allowed) {
                return Err(Error::invalid(
                    "namespace",
                    format!("`{ns}` must be 1 to 64 characters from A-Z a-z 0-9 _ . -"),
                ));
            }
        }
        if let Some(name) = &self.client_name {
            if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
                return Err(Error::invalid(
                    "client name",
                    format!("{name:?} must be 1 to 256 bytes without control characters"),
                ));
            }
        }
        let (watchdog, min) = (self.watchdog_timeout, Client::MIN_WATCHDOG_TIMEOUT);
        let problem = if watchdog < min {
            Some(format!(
                "is too short for renewal every third of it to keep up; use at least {min:?}"
            ))
        } else if watchdog > MAX_LEASE {
            Some(format!("is longer than the maximum lease {MAX_LEASE:?}"))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(Error::invalid(
                "watchdog timeout",
                format!("{watchdog:?} {problem}"),
            ));
        }
        let hint = "use more than zero and at most one hour";
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("command timeout", self.command_timeout),
        ] {
            check_range(what, value, Duration::from_nanos(1)..=HOUR, hint)?;
        }
        for (what, value) in [
            ("replica loss grace", self.replica_loss_grace),
            ("subscription linger", self.subscription_linger),
        ] {
            check_range(what, value, Duration::ZERO..=HOUR, "use at most one hour")?;
        }
        Ok(())
    }

    /// Connects to Redis and starts the client's background tasks.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection and starts no task.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings, [`Error::Config`] for an unusable URL,
    /// [`Error::Timeout`] or [`Error::Unreachable`] when Redis cannot be reached within the
    /// connect timeout, [`Error::AuthFailed`] for refused credentials.
    pub async fn connect(self) -> Result<Client> {
        self.validate()?;
        let endpoint = self.endpoint();
        let target = self.target(&endpoint).await?;
        let conn = endpoint.connect(&target).await?;
        #[cfg(feature = "cluster")]
        if let Source::Cluster(_) = self.source {
            check_resp3(&conn).await?;
        }
        let replicas = Replicas::detect(
            &conn,
            self.replica_sync,
            self.watchdog_timeout,
            self.replica_loss_grace,
        )
        .await?;
        Ok(Client::start(self, conn, target, replicas))
    }

    /// How to reach the server, for the connection layer.
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.url.clone(),
            #[cfg(feature = "tls")]
            tls_root: self.tls_root.clone(),
            #[cfg(feature = "tls")]
            tls_identity: self.tls_identity.clone(),
            connect_timeout: self.connect_timeout,
            command_timeout: self.command_timeout,
            replica_wait: match self.replica_sync {
                ReplicaSync::Require { timeout, .. } => timeout,
                _ => Duration::from_secs(1),
            },
        }
    }
}

/// Refuses an application's cluster client that speaks RESP2, on which latchkey's sharded
/// subscriptions would never deliver a message (see
/// [`ClientBuilder::from_cluster_client`]). A user who may not run `CLIENT INFO` is not checked.
/// Builder methods that set a field to the value given.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)+) => {
        impl ClientBuilder {
            $(
                $(#[$doc])*
                pub fn $field(mut self, $field: $ty) -> ClientBuilder {
                    self.$field = $field;
                    self
                }
            )+
        }
    };
}

setters! {
    /// Whether the metrics this client records carry the lock, semaphore, latch or queue name
    /// as a `name` label (default `false`). Off by default because every distinct name becomes
    /// a time series of its own in the metrics backend: turn it on only when the names are few
    /// and fixed (not one lock per order or per user). Every metric is listed in the table of
    /// `docs/metrics.md` (see "Metrics and tracing" in the crate docs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> latchkey_redis::Result<()> {
    /// let client = latchkey_redis::Client::builder("redis://127.0.0.1:6379")
    ///     .metrics_name_label(true) // latchkey_acquires_total{primitive="lock",name="nightly-report",…}
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    metrics_name_label: bool;

    /// The lease of a lock taken without an explicit lease (default
    /// [`Client::DEFAULT_WATCHDOG_TIMEOUT`], 30 s). The watchdog renews such locks every third
    /// of it for as long as they are held. At least [`Client::MIN_WATCHDOG_TIMEOUT`].
    watchdog_timeout: Duration;

    /// How long connecting may take before it fails with [`Error::Timeout`] (default 3 s).
    connect_timeout: Duration;

    /// How long one command may take before it fails with [`Error::Timeout`] (default 3 s).
    command_timeout: Duration;

    /// Replica-synced acquires: after the acquire script of a lock, fair lock, read-write lock,
    /// semaphore or permit semaphore granted something, `WAIT` (pipelined on the same
    /// connection) for replicas to acknowledge it; if too few do within the timeout, the grant
    /// is undone (released, or the permits given back) and the acquire fails with
    /// [`Error::NotReplicated`]. Other writes (latches, queues, releases) are not waited for.
    /// This narrows the window in which a failover to a replica that never saw the lock gives it
    /// to a second holder — it does not close it (`WAIT` does not make Redis strongly
    /// consistent: a replica that acknowledged may still not be the one promoted, and writes are
    /// not fsynced by `WAIT`).
    /// Default [`ReplicaSync::Auto`].
    replica_sync: ReplicaSync;

    /// With [`ReplicaSync::Auto`]: how long grants on a primary that had replicas and lost
    /// them all are refused with [`Error::NotReplicated`] before the loss is taken for real
    /// (default 15 s, at most one hour). Losing every replica at once is what a failover
    /// looks like from the demoted primary, which takes writes until the sentinels reconfigure
    /// it; a grant there would be a second holder's. After the grace (and, on Sentinel, only
    /// if every sentinel that answers names this primary) acquires go on without waiting, and
    /// a warning is logged.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let client = latchkey_redis::Client::builder("redis+sentinel://127.0.0.1:26379/mymaster")
    ///     .replica_loss_grace(Duration::from_secs(30))
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    replica_loss_grace: Duration;

    /// How long an unused pub/sub subscription is kept before it is dropped (default 1 s), so
    /// that waiters that come and go on a busy lock do not subscribe and unsubscribe each time.
    subscription_linger: Duration;
}

#[cfg(feature = "cluster")]
async fn check_resp3(conn: &Conn) -> Result<()> {
    let info: std::result::Result<String, _> = conn
        .query(
            redis::cmd("CLIENT").arg("INFO"),
            "checking the cluster client's protocol",
            "",
        )
        .await;
    match info {
        Ok(info) if info.split_whitespace().any(|field| field == "resp=2") => Err(Error::config(
            "the cluster client speaks RESP2; latchkey's sharded pub/sub needs RESP3: \
             build it with `ClusterClientBuilder::use_protocol(ProtocolVersion::RESP3)`",
        )),
        _ => Ok(()),
    }
}

/// A connection to Redis shared by every lock, synchronizer and queue made from it.
///
/// Cheap to clone (an `Arc` inside). Each client has a random id (UUID v4 from the OS random
/// number generator) that names it as an owner, one command connection, one pub/sub
/// connection shared by every waiter, and one watchdog task that renews every lock it holds.
/// The background tasks stop when the last clone of the client, and of every handle and guard
/// made from it, is dropped.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:1001");
/// let guard = lock.lock().await?;
/// // … the critical section …
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) id: String,
    /// This client's wake id: the number lock releases publish to hand a lock to one of its
    /// waiters (see `scripts/lock_release.lua`). At least 2, below 2^63, so that Redisson
    /// clients, which read lock messages as Java longs, ignore it.
    pub(crate) wake_id: u64,
    /// Whether acquires wait for replicas, and what the client knows of them.
    pub(crate) replicas: Replicas,
    /// Follows a Sentinel failover (reconnects, releases again what the old primary took).
    pub(crate) follow: Follow,
    pub(crate) conn: Conn,
    pub(crate) config: ClientBuilder,
    pub(crate) hub: Hub,
    pub(crate) registry: Arc<Registry>,
    pub(crate) background: mpsc::UnboundedSender<Task>,
    /// The queues' transfer agents of this client.
    pub(crate) agents: Agents,
    handles: AtomicU64,
    /// Cancelled when the client shuts down (its last clone is dropped), for background tasks
    /// that must stop with the client without keeping it alive.
    pub(crate) shutdown: CancellationToken,
}

impl Inner {
    /// Runs an acquire script, waiting for replicas as the client's replica sync asks: see
    /// [`Replicas::acquire_script`].
    ///
    /// A plain function returning that future, not an `async fn` around it: one more layer of
    /// future nesting overflows the compiler's trait-solving depth in the crates that await it.
    pub(crate) fn acquire_script<'a, T: FromRedisValue + Send + 'a>(
        &'a self,
        call: AcquireCall<'a>,
        granted: impl FnOnce(&T) -> bool + 'a,
        undo: impl FnOnce() -> Task + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        self.replicas
            .acquire_script(&self.conn, &self.follow, call, granted, undo)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A named object of a client (a lock, a semaphore, a queue, …): its commands run on the
/// client's command connection, within the command timeout, and name it in errors.
pub(crate) trait Object {
    fn client(&self) -> &Client;

    /// The name as the user gave it, for errors.
    fn name(&self) -> &str;

    /// Runs one script call on the object (see [`Conn::script`]).
    async fn script<T: FromRedisValue + Send>(
        &self,
        invocation: &Invocation<'_>,
        context: &'static str,
    ) -> Result<T> {
        let conn = &self.client().inner.conn;
        conn.script(invocation, context, self.name()).await
    }

    /// One read-only command on the object (the name checked first).
    async fn read<T: FromRedisValue + Send>(&self, cmd: &Cmd, context: &'static str) -> Result<T> {
        check_name(self.name())?;
        self.client()
            .inner
            .conn
            .query(cmd, context, self.name())
            .await
    }

    /// The wait of an acquire of this object on `channel`, its acquire metrics recorded as
    /// `primitive`'s.
    fn waiting<'a>(
        &'a self,
        channel: &'a str,
        policy: WakePolicy,
        primitive: &'static str,
    ) -> Waiting<'a> {
        // Recording the acquire metrics of this handle.
        let site = Site::new(self.client(), primitive, self.name());
        Waiting {
            site: Some(site),
            ..Waiting::new(&self.client().inner.hub, channel, policy)
        }
    }
}

/// [`Object`] for a handle whose `inner` (or the field path given) has the client and the name.
macro_rules! object {
    ($handle:ty) => {
        crate::client::object!($handle, inner);
    };
    ($handle:ty, $($inner:ident).+) => {
        impl crate::client::Object for $handle {
            fn client(&self) -> &crate::client::Client {
                &self.$($inner).+.client
            }

            fn name(&self) -> &str {
                &self.$($inner).+.name
            }
        }
    };
}
pub(crate) use object;

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The lease of a lock taken without an explicit lease unless set with
    /// [`ClientBuilder::watchdog_timeout`] (30 s, Redisson's `lockWatchdogTimeout`): the
    /// watchdog renews such a lock every third of it while it is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::Client::DEFAULT_WATCHDOG_TIMEOUT, Duration::from_secs(30));
    /// ```
    pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);

    /// The shortest watchdog timeout latchkey accepts (300 ms): renewal runs every third of it,
    /// and a shorter period cannot be kept on a loaded machine.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::Client::MIN_WATCHDOG_TIMEOUT, Duration::from_millis(300));
    /// ```
    pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(300);

    /// Connects with default settings; see [`Client::builder`] for the others.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`ClientBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: impl Into<String>) -> Result<Client> {
        Client::builder(url).connect().await
    }

    /// Starts a [`ClientBuilder`] for the given `redis://` URL.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    fn start(config: ClientBuilder, conn: Conn, target: Target, replicas: Replicas) -> Client {
        let shutdown = CancellationToken::new();
        let registry = Arc::new(Registry::default().with_name_label(config.metrics_name_label));
        let id = uuid::Uuid::new_v4();
        let wake_id = 2 + ((id.as_u128() >> 66) as u64);
        let registration = Arc::new(Registration::new(
            &id.to_string(),
            config.client_name.as_deref(),
        ));
        let period = config.watchdog_timeout / 3;
        tokio::spawn(watchdog::renew_loop(
            conn.clone(),
            registry.clone(),
            registration,
            config.watchdog_timeout,
            period,
            config.command_timeout.min(period),
            shutdown.clone(),
        ));
        let (background, tasks) = mpsc::unbounded_channel();
        tokio::spawn(task::run(conn.clone(), tasks, shutdown.clone()));
        let hub = Hub::start(
            target,
            HubSettings {
                connect_timeout: config.connect_timeout,
                command_timeout: config.command_timeout,
                linger: config.subscription_linger,
            },
            wake_id,
            background.clone(),
            shutdown.clone(),
        );
        let follow = Follow {
            conn: conn.clone(),
            hub_reconnect: hub.reconnect_callback(),
            resends: Arc::new(Resends::new(conn.sentinels().is_some())),
            last_moved: Arc::default(),
        };
        sentinel_watch::start(follow.clone(), replicas.joined_callback(), shutdown.clone());
        Client {
            inner: Arc::new(Inner {
                id: id.to_string(),
                wake_id,
                replicas,
                follow,
                conn,
                config,
                hub,
                registry,
                background,
                agents: Agents::default(),
                handles: AtomicU64::new(1),
                shutdown,
            }),
        }
    }

    /// This client's random id, the first half of every owner id it uses.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The lease given to locks taken without one, renewed by the watchdog.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.config.watchdog_timeout
    }

    /// The namespace set with [`ClientBuilder::namespace`], if any.
    pub fn namespace(&self) -> Option<&str> {
        self.inner.config.namespace.as_deref()
    }

    /// A new owner id for a handle: `<client id>:<n>`.
    pub(crate) fn next_owner(&self) -> String {
        let n = self.inner.handles.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.inner.id)
    }

    /// Whether acquires wait for replicas, and for how many (see [`ClientBuilder::replica_sync`]).
    pub fn replica_sync(&self) -> Option<(u32, Duration)> {
        self.inner.replicas.sync
    }

    /// How many pub/sub channels this client is subscribed to right now (including lingering
    /// ones). Useful to check that nothing is left behind.
    pub fn subscription_count(&self) -> usize {
        self.inner.hub.channel_count()
    }

    /// How many locks the watchdog currently tracks for this client.
    pub fn tracked_lock_count(&self) -> usize {
        self.inner.registry.len()
    }
}

/// Lazy clients (RedLock nodes that may be down when a service starts).
impl ClientBuilder {
    /// Makes the client **without connecting**: the connection is made on first use and made
    /// again after it fails, so a client can be built while its server is down. Sends nothing.
    ///
    /// This is how to build the nodes of a [`RedLock`](crate::RedLock): a service can start
    /// with a minority of the nodes down and lock with the majority from its first call; a node
    /// that comes up later is used again (see [`RedLock`](crate::RedLock)). With
    /// [`ClientBuilder::connect`] a down server fails at once instead, and a wrong address or
    /// password is reported there; a lazy client reports them at its first command (as
    /// [`Error::Unreachable`], [`Error::Timeout`] or [`Error::AuthFailed`]).
    ///
    /// While its server cannot be reached, each command makes one connection attempt and fails
    /// with [`Error::Unreachable`] as soon as it is refused, rather than waiting for reconnection
    /// retries as a connected client's commands do: a RedLock learns at once that the node is
    /// down.
    ///
    /// Only single servers (`redis://`, `rediss://`) can be lazy. [`ReplicaSync::Auto`] cannot
    /// ask a server that is not there whether it has replicas, so a lazy client waits for
    /// replicas only with [`ReplicaSync::Require`].
    ///
    /// Must be called within a Tokio runtime: it starts the client's background tasks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Config`] for an unusable URL, a
    /// Sentinel or Cluster URL, or a call outside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// use latchkey_redis::{Client, RedLock};
    ///
    /// let mut nodes = Vec::new();
    /// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
    ///     nodes.push(Client::builder(url).connect_lazy()?); // succeeds with a node down
    /// }
    /// let guard = RedLock::new("reports:nightly", nodes)?.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_lazy(self) -> Result<Client> {
        self.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::config(
                "`connect_lazy` was called outside a Tokio runtime; call it from async \
                 code or within `Runtime::enter`",
            ));
        }
        let endpoint = self.endpoint();
        let target = match &self.source {
            Source::Url => endpoint.target(&Topology::parse(&self.url)?)?,
            Source::Client(client) => Target::Fixed(client.clone()),
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::config(
                    "only a single server can be lazy; use `connect` for Sentinel and \
                     Cluster",
                ))
            }
        };
        let conn = endpoint.connect_lazy(&target)?;
        let replicas = Replicas::lazy(
            self.replica_sync,
            self.watchdog_timeout,
            self.replica_loss_grace,
        );
        Ok(Client::start(self, conn, target, replicas))
    }
}
