//! The command connection: every call bounded by the command timeout, every error typed.
//!
//! Three deployments share one interface: a single server (a reconnecting multiplexed
//! connection), a Sentinel-managed primary (the primary's address is asked of the sentinels
//! again whenever the connection to it fails, so a failover is followed), and a Redis Cluster
//! (the driver's cluster connection, which follows MOVED/ASK/TRYAGAIN). Sentinel and Cluster are
//! compiled with the `sentinel` and `cluster` features; without them those variants do not exist.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
#[cfg(feature = "sentinel")]
use redis::aio::MultiplexedConnection;
use redis::aio::{ConnectionLike, ConnectionManager};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
#[cfg(feature = "sentinel")]
use redis::sentinel::SentinelClient;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Value};

#[cfg(feature = "sentinel")]
use crate::error::lock;
use crate::error::{Error, Result};
use crate::scripts::{eval_cmd, is_noscript, Invocation};

/// Where the primary (or, for a cluster, the seed nodes) is.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server at a fixed address.
    Fixed(Box<redis::Client>),
    /// Asked of the sentinels each time a connection is made.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<SentinelTarget>),
    /// A Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Arc<ClusterTarget>),
}

/// How to find the primary of a Sentinel-monitored group.
#[cfg(feature = "sentinel")]
pub(crate) struct SentinelTarget {
    pub(crate) client: tokio::sync::Mutex<SentinelClient>,
    /// The sentinels' URLs (`redis://host:port`).
    pub(crate) sentinels: Vec<String>,
    /// The monitored primary's name.
    pub(crate) master: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
}

/// What the sentinels say of a primary (see [`SentinelTarget::verdict`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
pub(crate) enum Verdict {
    /// A majority of the sentinels answered, and every one that answered names it.
    Confirmed,
    /// A sentinel names another primary: the group failed over (or is failing over).
    Moved,
    /// Too few sentinels answered to tell.
    Unknown,
}

/// Without the `sentinel` feature there is no Sentinel deployment: this type has no value, and
/// the code that asks the sentinels is never reached.
#[cfg(not(feature = "sentinel"))]
pub(crate) enum SentinelTarget {}

#[cfg(not(feature = "sentinel"))]
impl SentinelTarget {
    pub(crate) async fn verdict(&self, _addr: &str) -> Verdict {
        match *self {}
    }
}

#[cfg(feature = "sentinel")]
impl SentinelTarget {
    /// Asks every sentinel which server is the primary (`SENTINEL GET-MASTER-ADDR-BY-NAME`,
    /// each within the command timeout) and compares their answers with `addr`. The sentinel
    /// that leads a failover names the promoted replica as soon as it picked it; the others
    /// follow within seconds, so one dissenting answer is enough to distrust `addr`.
    pub(crate) async fn verdict(&self, addr: &str) -> Verdict {
        let asks = self.sentinels.iter().map(|url| async move {
            let ask = async {
                let client = redis::Client::open(url.as_str())?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(self.connect_timeout + self.command_timeout, ask).await {
                Ok(Ok(Some((host, port)))) => Some(format!("{host}:{port}")),
                _ => None,
            }
        });
        let answers: Vec<String> = futures_util::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        if answers.iter().any(|named| named != addr) {
            Verdict::Moved
        } else if answers.len() > self.sentinels.len() / 2 {
            Verdict::Confirmed
        } else {
            Verdict::Unknown
        }
    }
}

/// How to reach a Redis Cluster.
#[cfg(feature = "cluster")]
pub(crate) struct ClusterTarget {
    /// Where the cluster's connections come from.
    pub(crate) source: ClusterSource,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
}

/// Where a cluster's connections come from: seed nodes of a URL, or the application's own
/// client ([`ClientBuilder::from_cluster_client`](crate::ClientBuilder::from_cluster_client)).
#[cfg(feature = "cluster")]
pub(crate) enum ClusterSource {
    Nodes {
        nodes: Vec<String>,
        #[cfg(feature = "tls")]
        certificates: Option<redis::TlsCertificates>,
    },
    Client(Box<redis::cluster::ClusterClient>),
}

#[cfg(feature = "cluster")]
impl ClusterTarget {
    /// A cluster connection, whose driver timeout is `response_timeout`; with `pushes`, a
    /// RESP3 one that delivers pub/sub messages there.
    pub(crate) async fn connect(
        &self,
        pushes: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
        response_timeout: Duration,
    ) -> redis::RedisResult<ClusterConnection> {
        match &self.source {
            ClusterSource::Nodes {
                nodes,
                #[cfg(feature = "tls")]
                certificates,
            } => {
                let mut builder = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(response_timeout);
                #[cfg(feature = "tls")]
                if let Some(certificates) = certificates {
                    builder = builder.certs(certificates.clone());
                }
                if let Some(pushes) = pushes {
                    builder = builder
                        .use_protocol(redis::ProtocolVersion::RESP3)
                        .push_sender(pushes);
                }
                builder.build()?.get_async_connection().await
            }
            // The application's client, with its TLS, credentials and protocol: its pushes need
            // RESP3 (`ClusterClientBuilder::use_protocol`), which the driver checks here.
            ClusterSource::Client(client) => {
                let mut config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(self.connect_timeout)
                    .set_response_timeout(response_timeout);
                if let Some(pushes) = pushes {
                    config = config.set_push_sender(pushes);
                }
                client.get_async_connection_with_config(config).await
            }
        }
    }
}

impl Target {
    /// A client for the current primary (not for a cluster: use [`ClusterTarget::client`]).
    pub(crate) async fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Target::Fixed(client) => Ok((**client).clone()),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(sentinel) => sentinel.client.lock().await.async_get_client().await,
            #[cfg(feature = "cluster")]
            Target::Cluster(_) => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster has no single primary",
            ))),
        }
    }
}

/// The client's command connection, cheap to clone.
#[derive(Clone)]
pub(crate) struct Conn {
    backend: Backend,
    timeout: Duration,
}

#[derive(Clone)]
enum Backend {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<SentinelConn>),
}

/// A multiplexed connection to the primary a sentinel named, replaced after it fails.
#[cfg(feature = "sentinel")]
struct SentinelConn {
    target: Target,
    connect_timeout: Duration,
    /// The driver's own response timeout: long enough for a replica WAIT.
    response_timeout: Duration,
    /// The connection to the primary, and that primary's address (`host:port`).
    current: std::sync::Mutex<Option<(MultiplexedConnection, Arc<str>)>>,
    /// Serializes reconnects, so that one failover makes one new connection.
    connecting: tokio::sync::Mutex<()>,
}

#[cfg(feature = "sentinel")]
impl SentinelConn {
    /// The connection to the primary and that primary's address, read together.
    async fn get_with_addr(&self) -> redis::RedisResult<(MultiplexedConnection, Arc<str>)> {
        if let Some(current) = lock(&self.current).as_ref() {
            return Ok(current.clone());
        }
        let _connecting = self.connecting.lock().await;
        if let Some(current) = lock(&self.current).as_ref() {
            return Ok(current.clone());
        }
        let client = self.target.client().await?;
        let addr: Arc<str> = Arc::from(client.get_connection_info().addr().to_string());
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *lock(&self.current) = Some((conn.clone(), addr.clone()));
        Ok((conn, addr))
    }

    /// Forgets the connection after an error that suggests the primary moved or died.
    fn failed(&self, err: Option<&redis::RedisError>) {
        let moved = err.is_none_or(|err| {
            err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal()
                || err.is_timeout()
                || matches!(err.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
        });
        if moved {
            *lock(&self.current) = None;
        }
    }
}

/// One connection to run a command on.
enum Handle {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
    /// A cluster connection that sends every command and pipeline to the primary of one slot
    /// (keyless commands such as `WAIT`, `INFO` or `SCRIPT LOAD` would otherwise go to a
    /// random node, or to every primary). A `MOVED` reply is still followed.
    #[cfg(feature = "cluster")]
    SlotPrimary(ClusterConnection, u16),
    #[cfg(feature = "sentinel")]
    Plain(MultiplexedConnection),
}

#[cfg(feature = "cluster")]
fn slot_primary(slot: u16) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master))
}

impl ConnectionLike for Handle {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Handle::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Handle::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Handle::SlotPrimary(c, slot) => {
                let routing = RoutingInfo::SingleNode(slot_primary(*slot));
                Box::pin(c.route_command(cmd.clone(), routing))
            }
            #[cfg(feature = "sentinel")]
            Handle::Plain(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Handle::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Handle::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Handle::SlotPrimary(c, slot) => {
                Box::pin(c.route_pipeline(pipeline.clone(), offset, count, slot_primary(*slot)))
            }
            #[cfg(feature = "sentinel")]
            Handle::Plain(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Handle::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Handle::Cluster(c) | Handle::SlotPrimary(c, _) => c.get_db(),
            #[cfg(feature = "sentinel")]
            Handle::Plain(c) => c.get_db(),
        }
    }
}

impl Conn {
    pub(crate) fn single(manager: ConnectionManager, timeout: Duration) -> Conn {
        Conn {
            backend: Backend::Single(manager),
            timeout,
        }
    }

    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(conn: ClusterConnection, timeout: Duration) -> Conn {
        Conn {
            backend: Backend::Cluster(conn),
            timeout,
        }
    }

    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel(
        target: Target,
        connect_timeout: Duration,
        response_timeout: Duration,
        timeout: Duration,
    ) -> Conn {
        Conn {
            backend: Backend::Sentinel(Arc::new(SentinelConn {
                target,
                connect_timeout,
                response_timeout,
                current: std::sync::Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
            })),
            timeout,
        }
    }

    /// The address (`host:port`) of the primary the sentinels named for the current
    /// connection; `None` off Sentinel or while not connected.
    pub(crate) fn sentinel_primary(&self) -> Option<Arc<str>> {
        match &self.backend {
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => lock(&s.current).as_ref().map(|(_, addr)| addr.clone()),
            _ => None,
        }
    }

    /// The sentinels behind this connection, if it follows a Sentinel-monitored primary.
    pub(crate) fn sentinels(&self) -> Option<&SentinelTarget> {
        match &self.backend {
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => match &s.target {
                Target::Sentinel(target) => Some(target),
                _ => None,
            },
            _ => None,
        }
    }

    /// Drops the connection to the primary at `addr` (any primary with `None`), so that the
    /// next command asks the sentinels again. Commands already sent finish on the old one.
    pub(crate) fn forget_primary(&self, addr: Option<&str>) {
        #[cfg(not(feature = "sentinel"))]
        let _ = addr;
        #[cfg(feature = "sentinel")]
        if let Backend::Sentinel(s) = &self.backend {
            let mut current = lock(&s.current);
            if addr.is_none_or(|addr| current.as_ref().is_some_and(|(_, a)| &**a == addr)) {
                *current = None;
            }
        }
    }

    /// Whether this is a Redis Cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        match self.backend {
            #[cfg(feature = "cluster")]
            Backend::Cluster(_) => true,
            _ => false,
        }
    }

    /// The command scripts publish notices with: sharded `spublish` on a cluster (so a notice
    /// goes to one shard, not to every node), `publish` elsewhere.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "spublish"
        } else {
            "publish"
        }
    }

    /// The command timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn handle(&self) -> redis::RedisResult<Handle> {
        Ok(match &self.backend {
            Backend::Single(c) => Handle::Single(c.clone()),
            #[cfg(feature = "cluster")]
            Backend::Cluster(c) => Handle::Cluster(c.clone()),
            // Boxed: the sentinel look-up nests the driver's futures deeply.
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => Handle::Plain(Box::pin(s.get_with_addr()).await?.0),
        })
    }

    /// A connection to the primary that owns `slot`: on a cluster, one that routes everything
    /// there; elsewhere the one primary.
    async fn handle_for_slot(&self, slot: Option<u16>) -> redis::RedisResult<Handle> {
        match (&self.backend, slot) {
            #[cfg(feature = "cluster")]
            (Backend::Cluster(c), Some(slot)) => Ok(Handle::SlotPrimary(c.clone(), slot)),
            _ => self.handle().await,
        }
    }

    fn failed(&self, err: Option<&redis::RedisError>) {
        #[cfg(feature = "sentinel")]
        if let Backend::Sentinel(s) = &self.backend {
            s.failed(err);
        }
        #[cfg(not(feature = "sentinel"))]
        let _ = err;
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT) within the command timeout.
    ///
    /// `context` says what was being done and `key` names the object, for error messages.
    pub(crate) async fn script<T: FromRedisValue + Send>(
        &self,
        invocation: &Invocation<'_>,
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        self.script_within(invocation, context, key, self.timeout)
            .await
    }

    /// Runs `script` with `keys` and `args` (EVALSHA; sent whole on NOSCRIPT, see
    /// [`is_noscript`]) within the command timeout, like [`Conn::script`]: the command is built
    /// once at its final size, where an invocation copies every argument twice and grows its
    /// buffers as it goes (about 60 reallocations per lock+unlock pair, measured with
    /// callgrind).
    pub(crate) async fn evalsha<T: FromRedisValue + Send>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: &[&str],
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        let build = |whole| {
            eval_cmd(
                script.get_hash(),
                whole,
                keys.iter().map(|k| k.as_bytes()),
                args.iter().map(|a| a.as_bytes()),
            )
        };
        self.eval(build, context, key, self.timeout).await
    }

    /// Like [`Conn::script`] with another timeout.
    pub(crate) async fn script_within<T: FromRedisValue + Send>(
        &self,
        invocation: &Invocation<'_>,
        context: &'static str,
        key: &str,
        timeout: Duration,
    ) -> Result<T> {
        self.eval(|whole| invocation.cmd(whole), context, key, timeout)
            .await
    }

    /// Runs the script call `build(false)` (EVALSHA) within `timeout`, and `build(true)` (EVAL,
    /// the script whole) on the same connection if the server does not know the script.
    async fn eval<T: FromRedisValue + Send>(
        &self,
        build: impl Fn(bool) -> Cmd + Send + Sync,
        context: &'static str,
        key: &str,
        timeout: Duration,
    ) -> Result<T> {
        // Boxed as a `dyn Future`: the driver's deeply nested future types stay out of every
        // caller's future type (auto-trait checks of those overflowed the compiler's limit),
        // and kept `Sync` (see `boxed_sync`).
        let run = boxed_sync(async {
            let mut handle = self.handle().await?;
            match build(false).query_async(&mut handle).await {
                Err(e) if is_noscript(&e) => build(true).query_async(&mut handle).await,
                other => other,
            }
        });
        self.finish(timeout, run, context, key).await
    }

    /// Runs `script` and then `tail` on the same connection, in one pipeline, within the
    /// command timeout plus `extra`: a `WAIT replicas timeout` (which cannot run inside a
    /// script) counts the replicas that acknowledged the script's writes. On a cluster the
    /// pipeline, and the script sent whole after a `NOSCRIPT`, go to the primary that owns the
    /// slot of the first key, so that a `WAIT` counts that shard's replicas. Also returns, on a
    /// Sentinel deployment, the address of the primary both ran on (the connection may have
    /// moved to another primary by the time they are answered).
    pub(crate) async fn script_then<T: FromRedisValue + Send, U: FromRedisValue + Send>(
        &self,
        (invocation, slot): (&Invocation<'_>, u16),
        tail: &Cmd,
        extra: Duration,
        context: &'static str,
        key: &str,
    ) -> Result<(T, U, Option<Arc<str>>)> {
        let pipeline = |whole| {
            let mut pipeline = redis::pipe();
            pipeline
                .add_command(invocation.cmd(whole))
                .add_command(tail.clone());
            pipeline
        };
        let timeout = self.timeout + extra;
        // Boxed: see `Conn::evalsha`.
        let run = boxed_sync(async {
            let (mut handle, ran_on) = match &self.backend {
                #[cfg(feature = "sentinel")]
                Backend::Sentinel(s) => {
                    let (conn, addr) = Box::pin(s.get_with_addr()).await?;
                    (Handle::Plain(conn), Some(addr))
                }
                _ => (self.handle_for_slot(Some(slot)).await?, None),
            };
            let (first, then) = match pipeline(false).query_async::<(T, U)>(&mut handle).await {
                // A new primary that never saw the script (Redis does not replicate SCRIPT
                // LOAD): sent whole, in the same pipeline, to the same node.
                Err(e) if is_noscript(&e) => pipeline(true).query_async(&mut handle).await?,
                other => other?,
            };
            Ok((first, then, ran_on))
        });
        self.finish(timeout, run, context, key).await
    }

    /// Runs one command within the command timeout.
    pub(crate) async fn query<T: FromRedisValue + Send>(
        &self,
        cmd: &Cmd,
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        self.query_on(None, cmd, context, key).await
    }

    /// One slot of each primary, to reach every primary with [`Conn::query_on`] (for a
    /// `SCAN`, whose cursor belongs to one node): on a cluster from `CLUSTER SLOTS`, elsewhere
    /// the one primary (slot 0).
    pub(crate) async fn primary_slots(&self) -> Result<Vec<u16>> {
        if !self.is_cluster() {
            return Ok(vec![0]);
        }
        let ranges: Vec<Value> = self
            .query(
                redis::cmd("CLUSTER").arg("SLOTS"),
                "reading the cluster's slots",
                "",
            )
            .await?;
        let mut primaries = std::collections::BTreeMap::new();
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Array(primary))) =
                (parts.first(), parts.get(2))
            else {
                continue;
            };
            let address = (
                primary.first().map(|host| format!("{host:?}")),
                primary.get(1).map(|port| format!("{port:?}")),
            );
            primaries.entry(address).or_insert(*start as u16);
        }
        Ok(primaries.into_values().collect())
    }

    /// Runs one command within the command timeout on the primary that owns `slot` (on a
    /// cluster; elsewhere on the one primary), or, without a slot, where the connection sends it.
    pub(crate) async fn query_on<T: FromRedisValue + Send>(
        &self,
        slot: Option<u16>,
        cmd: &Cmd,
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        // Boxed: see `Conn::evalsha`.
        let run = boxed_sync(async {
            let mut handle = self.handle_for_slot(slot).await?;
            cmd.query_async(&mut handle).await
        });
        self.finish(self.timeout, run, context, key).await
    }

    /// Runs `work` within `timeout`, its error typed; a failure that suggests the primary moved
    /// forgets the connection to it (Sentinel).
    async fn finish<T>(
        &self,
        timeout: Duration,
        work: impl Future<Output = redis::RedisResult<T>>,
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        let Ok(done) = tokio::time::timeout(timeout, work).await else {
            self.failed(None);
            return Err(Error::Timeout { timeout, context });
        };
        done.map_err(|e| {
            self.failed(Some(&e));
            let err = Error::from_redis(e, context, key, timeout);
            if self.is_cluster() {
                err.sharded()
            } else {
                err
            }
        })
    }
}

/// Runs `work` within `timeout`, its error typed (see [`Error::from_redis`]): for the calls made
/// outside a [`Conn`] (connecting, subscribing).
pub(crate) async fn within<T>(
    timeout: Duration,
    context: &'static str,
    key: &str,
    work: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, work).await {
        Ok(done) => done.map_err(|e| Error::from_redis(e, context, key, timeout)),
        Err(_) => Err(Error::Timeout { timeout, context }),
    }
}

/// `work` boxed as a `dyn Future + Send` that is also `Sync`, as the futures of the public API
/// are (tokio's are too): a `dyn Future + Send` is not `Sync`, so the box sits in a mutex that
/// is reached only through `&mut self` (`Mutex::get_mut`: no locking).
pub(crate) fn boxed_sync<'a, T>(work: impl Future<Output = T> + Send + 'a) -> SyncBoxed<'a, T> {
    SyncBoxed(std::sync::Mutex::new(Box::pin(work)))
}

/// The future of [`boxed_sync`].
pub(crate) struct SyncBoxed<'a, T>(std::sync::Mutex<BoxFuture<'a, T>>);

impl<T> Future for SyncBoxed<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let work = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        work.as_mut().poll(cx)
    }
}
