//! One `redis-server` (or `redis-sentinel`) child process.

use std::collections::HashMap;
use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionLike, RedisResult, TlsCertificates, Value,
};
use tempfile::TempDir;

use crate::port::free_port;
use crate::process::{kill_and_reap, proc_state, send_signal, spawn_child, wait_timeout};
use crate::tls::{install_crypto_provider, read, TlsFiles};
use crate::util::{binary, conf_quote, parse_info, percent_encode, tail, value_text};

/// How long a starting server has to log that it is ready and answer a PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports a new server tries when another process takes the one it picked.
const PORT_ATTEMPTS: usize = 8;
/// How many times `restart` retries binding its (fixed) port.
const RESTART_BIND_ATTEMPTS: usize = 40;
/// Lines of log printed when a test panics.
const LOG_TAIL_LINES: usize = 60;

/// What a child process runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Server,
    Sentinel,
}

impl Kind {
    fn program(self) -> String {
        match self {
            Kind::Server => binary("LATCHKEY_REDIS_SERVER", "redis-server"),
            Kind::Sentinel => binary("LATCHKEY_REDIS_SENTINEL", "redis-sentinel"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Server => "redis-server",
            Kind::Sentinel => "redis-sentinel",
        }
    }

    /// The log line that says the process has bound its ports and loaded its data.
    fn ready_marker(self) -> &'static str {
        match self {
            Kind::Server => "Ready to accept connections",
            Kind::Sentinel => "Sentinel ID is",
        }
    }
}

/// The monitoring setup of a sentinel process.
#[derive(Clone, Debug)]
pub(crate) struct SentinelSpec {
    pub(crate) master_name: String,
    pub(crate) primary_addr: String,
    pub(crate) quorum: usize,
    pub(crate) down_after_ms: u64,
    pub(crate) failover_timeout_ms: u64,
}

/// The TLS material of the admin client.
#[derive(Clone)]
struct ClientTls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// Paths of the TLS files a builder will copy into the server's directory.
#[derive(Clone, Debug)]
struct TlsSource {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// Why a start attempt failed.
enum StartError {
    /// The port (or the cluster bus port) was taken: try another one.
    PortTaken(String),
    /// Anything else; the message holds the log.
    Failed(String),
}

/// Options for a [`RedisServer`]; made by [`RedisServer::builder`].
///
/// Every server is started from a `redis.conf` written into its temporary directory with
/// `bind 127.0.0.1`, `save ""`, `appendonly no` (unless asked), `dir` and `logfile` in that
/// directory and `enable-debug-command yes`; the options below add to it.
#[derive(Clone, Debug, Default)]
pub struct ServerBuilder {
    appendonly: bool,
    extra: Vec<(String, String)>,
    password: Option<String>,
    admin: Option<(String, String)>,
    acl_file: Option<PathBuf>,
    acl_users: Vec<String>,
    tls: Option<TlsSource>,
    cluster: bool,
    replica_of: Option<String>,
    port: Option<u16>,
    sentinel: Option<SentinelSpec>,
}

impl ServerBuilder {
    /// A builder with the default options (same as [`RedisServer::builder`]).
    pub fn new() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Turns the append-only file on (with `appendfsync always`, so every acknowledged
    /// write survives a SIGKILL and is replayed by [`RedisServer::restart`]) or off.
    pub fn appendonly(mut self, on: bool) -> ServerBuilder {
        self.appendonly = on;
        self
    }

    /// Adds the configuration line `name value`, written verbatim after every other line (so
    /// it overrides them). `value` may hold several words, e.g.
    /// `.arg("client-output-buffer-limit", "pubsub 0 0 0")`; quote it yourself if one word
    /// contains spaces.
    pub fn arg(mut self, name: &str, value: &str) -> ServerBuilder {
        self.extra.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets `requirepass` (the default user's password). The admin client, [`RedisServer::url`]
    /// and replicas made with [`ServerBuilder::replica_of`] on the same builder (`masterauth`)
    /// use it too.
    pub fn password(mut self, password: &str) -> ServerBuilder {
        self.password = Some(password.to_string());
        self
    }

    /// The user name and password of the admin client and of [`RedisServer::url`], for
    /// setups where the default user is disabled or has no password. Overrides what
    /// [`ServerBuilder::password`] implies.
    pub fn admin_credentials(mut self, user: &str, password: &str) -> ServerBuilder {
        self.admin = Some((user.to_string(), password.to_string()));
        self
    }

    /// Loads users from an ACL file (`aclfile`). The file is copied into the server's
    /// directory first, so `ACL SAVE` writes to the copy. Cannot be combined with
    /// [`ServerBuilder::acl_user`] (Redis refuses that).
    pub fn acl_file(mut self, path: impl AsRef<Path>) -> ServerBuilder {
        self.acl_file = Some(path.as_ref().to_path_buf());
        self
    }

    /// Adds an ACL user line to the configuration, e.g.
    /// `"alice on >secret ~lock:* +@all"` (a leading `user ` is optional).
    pub fn acl_user(mut self, line: &str) -> ServerBuilder {
        let line = line.trim();
        let line = line.strip_prefix("user ").unwrap_or(line).trim_start();
        self.acl_users.push(format!("user {line}"));
        self
    }

    /// Serves TLS only: `port 0` and `tls-port` on the chosen port, with the server
    /// certificate and CA of `files` (copied into the server's directory, so `files` may be
    /// dropped). Clients are verified if they present a certificate
    /// (`tls-auth-clients optional`; use `.arg("tls-auth-clients", "yes")` to require one).
    /// Replication and the cluster bus use TLS as well. The admin client trusts the CA and
    /// presents the client certificate of `files`; [`RedisServer::url`] is `rediss://…`.
    pub fn tls(mut self, files: &TlsFiles) -> ServerBuilder {
        self.tls = Some(TlsSource {
            ca: files.ca_cert(),
            server_cert: files.server_cert(),
            server_key: files.server_key(),
            client_cert: files.client_cert(),
            client_key: files.client_key(),
        });
        self
    }

    /// Enables cluster mode (`cluster-enabled yes`, `cluster-node-timeout 2000`,
    /// `cluster-announce-ip 127.0.0.1`). The node is not joined to anything; see
    /// [`crate::RedisCluster`].
    pub fn cluster(mut self, on: bool) -> ServerBuilder {
        self.cluster = on;
        self
    }

    /// Makes the server a replica of `addr` (`"127.0.0.1:PORT"`).
    pub fn replica_of(mut self, addr: &str) -> ServerBuilder {
        self.replica_of = Some(addr.to_string());
        self
    }

    /// Uses this port instead of a random free one (no retry if it is taken).
    pub fn port(mut self, port: u16) -> ServerBuilder {
        self.port = Some(port);
        self
    }

    pub(crate) fn sentinel(mut self, spec: SentinelSpec) -> ServerBuilder {
        self.sentinel = Some(spec);
        self
    }

    fn kind(&self) -> Kind {
        if self.sentinel.is_some() {
            Kind::Sentinel
        } else {
            Kind::Server
        }
    }

    fn admin_credentials_for_client(&self) -> Option<(String, String)> {
        self.admin.clone().or_else(|| {
            self.password
                .as_ref()
                .map(|p| ("default".to_string(), p.clone()))
        })
    }

    /// Starts the server and waits until it answers PING.
    ///
    /// A random free port is used; if another process takes it first, a new port is tried
    /// (a few times).
    ///
    /// # Panics
    ///
    /// If the server cannot start or is not ready within 10 seconds; the message holds
    /// the server's log.
    pub fn spawn(self) -> RedisServer {
        if self.acl_file.is_some() && !self.acl_users.is_empty() {
            panic!("ServerBuilder: acl_file and acl_user cannot be combined (Redis refuses it)");
        }
        let kind = self.kind();
        let dir = tempfile::Builder::new()
            .prefix(&format!("latchkey-{}-", kind.name()))
            .tempdir()
            .expect("create a temporary directory for the server");
        let tls = self.tls.as_ref().map(|source| {
            let copy = |from: &Path, name: &str| {
                let to = dir.path().join(name);
                std::fs::copy(from, &to)
                    .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), name));
            };
            copy(&source.ca, "tls-ca.crt");
            copy(&source.server_cert, "tls-server.crt");
            copy(&source.server_key, "tls-server.key");
            ClientTls {
                ca: read(&source.ca),
                cert: read(&source.client_cert),
                key: read(&source.client_key),
            }
        });
        if let Some(acl) = &self.acl_file {
            std::fs::copy(acl, dir.path().join("users.acl"))
                .unwrap_or_else(|e| panic!("copy ACL file {}: {e}", acl.display()));
        }
        let log_name = match kind {
            Kind::Server => "redis.log",
            Kind::Sentinel => "sentinel.log",
        };
        let conf_name = match kind {
            Kind::Server => "redis.conf",
            Kind::Sentinel => "sentinel.conf",
        };
        let mut server = RedisServer {
            child: Mutex::new(None),
            pid: 0,
            port: 0,
            kind,
            tls,
            admin: self.admin_credentials_for_client(),
            conf_path: dir.path().join(conf_name),
            log_path: dir.path().join(log_name),
            output_path: dir.path().join("output.log"),
            quiet: false,
            dir,
        };
        let attempts = if self.port.is_some() {
            1
        } else {
            PORT_ATTEMPTS
        };
        let mut last = String::new();
        for _ in 0..attempts {
            let port = self.port.unwrap_or_else(free_port);
            server.port = port;
            let conf = self.render(port, server.dir.path(), &server.log_path);
            std::fs::write(&server.conf_path, conf).expect("write the server configuration");
            match server.start() {
                Ok(()) => return server,
                Err(StartError::PortTaken(report)) => last = report,
                Err(StartError::Failed(report)) => {
                    server.quiet = true;
                    panic!("{report}");
                }
            }
        }
        server.quiet = true;
        panic!(
            "{} could not bind a port after {attempts} attempt(s):\n{last}",
            kind.name()
        );
    }

    fn render(&self, port: u16, dir: &Path, log_path: &Path) -> String {
        let mut lines: Vec<String> = vec![
            "# written by latchkey-test-support".into(),
            "bind 127.0.0.1".into(),
            "daemonize no".into(),
            format!("dir {}", conf_quote(&dir.to_string_lossy())),
            format!("logfile {}", conf_quote(&log_path.to_string_lossy())),
        ];
        if let Some(spec) = &self.sentinel {
            let (host, primary_port) = split_addr(&spec.primary_addr);
            let name = &spec.master_name;
            lines.extend([
                format!("port {port}"),
                "sentinel announce-ip 127.0.0.1".into(),
                format!("sentinel announce-port {port}"),
                format!(
                    "sentinel monitor {name} {host} {primary_port} {}",
                    spec.quorum
                ),
                format!(
                    "sentinel down-after-milliseconds {name} {}",
                    spec.down_after_ms
                ),
                format!(
                    "sentinel failover-timeout {name} {}",
                    spec.failover_timeout_ms
                ),
                format!("sentinel parallel-syncs {name} 1"),
            ]);
            if let Some(password) = &self.password {
                lines.push(format!(
                    "sentinel auth-pass {name} {}",
                    conf_quote(password)
                ));
            }
        } else {
            lines.extend([
                "save \"\"".into(),
                "enable-debug-command yes".into(),
                // Full syncs start at once instead of after the default 5 s.
                "repl-diskless-sync-delay 0".into(),
                format!("appendonly {}", if self.appendonly { "yes" } else { "no" }),
            ]);
            if self.appendonly {
                lines.push("appendfsync always".into());
            }
            if self.tls.is_some() {
                lines.extend([
                    "port 0".into(),
                    format!("tls-port {port}"),
                    format!(
                        "tls-cert-file {}",
                        conf_quote(&dir_file(dir, "tls-server.crt"))
                    ),
                    format!(
                        "tls-key-file {}",
                        conf_quote(&dir_file(dir, "tls-server.key"))
                    ),
                    format!(
                        "tls-ca-cert-file {}",
                        conf_quote(&dir_file(dir, "tls-ca.crt"))
                    ),
                    "tls-auth-clients optional".into(),
                    "tls-replication yes".into(),
                ]);
                if self.cluster {
                    lines.push("tls-cluster yes".into());
                }
            } else {
                lines.push(format!("port {port}"));
            }
            if self.cluster {
                lines.extend([
                    "cluster-enabled yes".into(),
                    "cluster-config-file nodes.conf".into(),
                    "cluster-node-timeout 2000".into(),
                    "cluster-announce-ip 127.0.0.1".into(),
                ]);
            }
            if let Some(password) = &self.password {
                lines.push(format!("requirepass {}", conf_quote(password)));
            }
            if let Some(addr) = &self.replica_of {
                let (host, primary_port) = split_addr(addr);
                lines.push(format!("replicaof {host} {primary_port}"));
                if let Some(password) = &self.password {
                    lines.push(format!("masterauth {}", conf_quote(password)));
                }
            }
            if self.acl_file.is_some() {
                lines.push(format!(
                    "aclfile {}",
                    conf_quote(&dir_file(dir, "users.acl"))
                ));
            }
            lines.extend(self.acl_users.iter().cloned());
        }
        for (name, value) in &self.extra {
            lines.push(format!("{name} {value}"));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

fn dir_file(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

/// Splits `"host:port"`.
///
/// # Panics
///
/// If there is no `:port`.
pub(crate) fn split_addr(addr: &str) -> (&str, u16) {
    let (host, port) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("address {addr:?} is not HOST:PORT"));
    let port = port
        .parse()
        .unwrap_or_else(|_| panic!("address {addr:?} has no valid port"));
    (host, port)
}

/// One `redis-server` child process listening on `127.0.0.1`, with its own temporary
/// directory (configuration, log, AOF).
///
/// Dropping it kills (SIGKILL) and reaps the process and deletes the directory; if the
/// thread is panicking, the tail of the log is printed to stderr first.
pub struct RedisServer {
    child: Mutex<Option<Child>>,
    pid: u32,
    port: u16,
    kind: Kind,
    tls: Option<ClientTls>,
    admin: Option<(String, String)>,
    conf_path: PathBuf,
    log_path: PathBuf,
    output_path: PathBuf,
    /// Set when the failure was reported already (no second log dump on drop).
    quiet: bool,
    dir: TempDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("kind", &self.kind)
            .field("addr", &self.addr())
            .field("pid", &self.pid)
            .field("tls", &self.tls.is_some())
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl RedisServer {
    /// Starts a server with the default options and waits until it answers PING.
    ///
    /// # Panics
    ///
    /// If it cannot start; the message holds the server's log.
    pub fn spawn() -> RedisServer {
        ServerBuilder::new().spawn()
    }

    /// A builder for a server with non-default options.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::new()
    }

    /// The port (the TLS port when the server uses TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://…` with TLS; with `user:password@` when the
    /// builder set a password (user `default`) or admin credentials.
    ///
    /// A TLS URL alone is not enough to connect: the client also needs the CA (see
    /// [`TlsFiles::certificates`] or [`RedisServer::client`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.admin {
            Some((user, password)) => format!(
                "{scheme}://{}:{}@127.0.0.1:{}",
                percent_encode(user),
                percent_encode(password),
                self.port
            ),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// The server's working directory (configuration, log, AOF, `nodes.conf`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The configuration file the server was started from (Redis may rewrite it, e.g.
    /// `CONFIG REWRITE` or a sentinel's state).
    pub fn conf_path(&self) -> &Path {
        &self.conf_path
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Whether this is a `redis-sentinel` process.
    pub fn is_sentinel(&self) -> bool {
        self.kind == Kind::Sentinel
    }

    /// Whether the server uses TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A client for the admin connection: the URL of [`RedisServer::url`] and, with TLS,
    /// the CA and client certificate the server was started with.
    ///
    /// # Panics
    ///
    /// If redis-rs rejects the URL or the certificates (not expected).
    pub fn client(&self) -> redis::Client {
        let url = self.url();
        match &self.tls {
            Some(tls) => {
                install_crypto_provider();
                redis::Client::build_with_tls(
                    url.as_str(),
                    TlsCertificates {
                        client_tls: Some(ClientTlsConfig {
                            client_cert: tls.cert.clone(),
                            client_key: tls.key.clone(),
                        }),
                        root_cert: Some(tls.ca.clone()),
                    },
                )
            }
            None => redis::Client::open(url.as_str()),
        }
        .unwrap_or_else(|e| panic!("cannot build a client for {url}: {e}"))
    }

    /// An async admin connection (connection timeout 5 s, response timeout 20 s).
    ///
    /// # Panics
    ///
    /// If the connection fails.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(20)));
        self.client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.addr()))
    }

    /// Runs one command on a new blocking admin connection and returns the reply; an error
    /// reply is returned as [`Value::ServerError`], not as a panic.
    ///
    /// # Panics
    ///
    /// If `args` is empty or the connection fails (use [`RedisServer::try_cmd_sync`] to
    /// get the error instead, e.g. in a `Drop`).
    pub fn cmd_sync(&self, args: &[&str]) -> Value {
        self.try_cmd_sync(args)
            .unwrap_or_else(|e| panic!("{:?} on {} failed: {e}", args, self.addr()))
    }

    /// Like [`RedisServer::cmd_sync`], but returns connection errors (timeouts: 5 s to
    /// connect, 30 s for the reply).
    pub fn try_cmd_sync(&self, args: &[&str]) -> RedisResult<Value> {
        self.query(args, Duration::from_secs(5), Duration::from_secs(30))
    }

    pub(crate) fn query(
        &self,
        args: &[&str],
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> RedisResult<Value> {
        let (name, rest) = args
            .split_first()
            .expect("cmd_sync needs at least the command name");
        let mut con = self.client().get_connection_with_timeout(connect_timeout)?;
        con.set_read_timeout(Some(read_timeout))?;
        con.set_write_timeout(Some(read_timeout))?;
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        con.req_command(&cmd)
    }

    /// `INFO section` as `field -> value`.
    ///
    /// # Panics
    ///
    /// If the connection fails or the reply is an error.
    pub fn info(&self, section: &str) -> HashMap<String, String> {
        match self.cmd_sync(&["INFO", section]) {
            Value::ServerError(e) => panic!("INFO {section} on {}: {e}", self.addr()),
            reply => parse_info(&value_text(&reply).unwrap_or_default()),
        }
    }

    /// How many times `command` (lower case, e.g. `"wait"`, `"evalsha"`, `"subscribe"`) has
    /// run on this server since it started or `CONFIG RESETSTAT`, from `INFO commandstats`
    /// (commands run by scripts included); 0 if it never ran.
    ///
    /// # Panics
    ///
    /// If the server does not answer `INFO`.
    pub fn command_calls(&self, command: &str) -> u64 {
        self.info("commandstats")
            .get(&format!("cmdstat_{command}"))
            .and_then(|v| v.split("calls=").nth(1))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// For a replica: waits until `INFO replication` reports `master_link_status:up` (the
    /// initial sync is done). [`ServerBuilder::spawn`] does not wait for that.
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout`.
    pub fn wait_until_synced(&self, timeout: Duration) {
        let result = crate::util::poll_until(timeout, Duration::from_millis(20), || {
            let info = self.try_info("replication", Duration::from_secs(2))?;
            match info.get("master_link_status").map(String::as_str) {
                Some("up") => Ok(()),
                other => Err(format!("master_link_status is {other:?}")),
            }
        });
        if let Err(problem) = result {
            panic!("{} did not sync within {timeout:?}: {problem}", self.addr());
        }
    }

    /// For a primary: waits until `INFO replication` reports exactly `count` connected replicas
    /// (e.g. 0 after a replica was killed: the primary notices only when the link breaks).
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout`.
    pub fn wait_until_replicas(&self, count: usize, timeout: Duration) {
        let want = count.to_string();
        let result = crate::util::poll_until(timeout, Duration::from_millis(20), || {
            let info = self.try_info("replication", Duration::from_secs(2))?;
            match info.get("connected_slaves") {
                Some(n) if *n == want => Ok(()),
                other => Err(format!("connected_slaves is {other:?}")),
            }
        });
        if let Err(problem) = result {
            panic!(
                "{} did not get to {count} replicas within {timeout:?}: {problem}",
                self.addr()
            );
        }
    }

    /// `CLUSTER INFO` as `field -> value` (e.g. `cluster_state`).
    ///
    /// # Panics
    ///
    /// If the connection fails or the reply is an error (e.g. not in cluster mode).
    pub fn cluster_info(&self) -> HashMap<String, String> {
        match self.cmd_sync(&["CLUSTER", "INFO"]) {
            Value::ServerError(e) => panic!("CLUSTER INFO on {}: {e}", self.addr()),
            reply => parse_info(&value_text(&reply).unwrap_or_default()),
        }
    }

    /// Runs an INFO-like command (`INFO section`, `CLUSTER INFO`) with short timeouts.
    pub(crate) fn try_info_cmd(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> Result<HashMap<String, String>, String> {
        match self.query(args, timeout, timeout) {
            Ok(Value::ServerError(e)) => Err(format!("{args:?} on {}: {e}", self.addr())),
            Ok(reply) => Ok(parse_info(&value_text(&reply).unwrap_or_default())),
            Err(e) => Err(format!("{args:?} on {}: {e}", self.addr())),
        }
    }

    pub(crate) fn try_info(
        &self,
        section: &str,
        timeout: Duration,
    ) -> Result<HashMap<String, String>, String> {
        self.try_info_cmd(&["INFO", section], timeout)
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills the process with SIGKILL and reaps it. Does nothing if it is not running.
    pub fn kill(&mut self) {
        let mut guard = self.lock_child();
        if let Some(child) = guard.as_mut() {
            kill_and_reap(child);
        }
        *guard = None;
    }

    /// Stops the server with `SHUTDOWN NOSAVE NOW` (resuming it first if paused), falling
    /// back to SIGTERM and finally SIGKILL if it does not exit; waits until it is reaped.
    /// Does nothing if it is not running.
    pub fn shutdown_nosave(&mut self) {
        if !self.is_running() {
            return;
        }
        send_signal(self.pid, libc::SIGCONT);
        // The connection is closed by the shutdown, so an error here is expected.
        let _ = self.query(
            &["SHUTDOWN", "NOSAVE", "NOW"],
            Duration::from_secs(2),
            Duration::from_secs(5),
        );
        let mut guard = self.lock_child();
        if let Some(child) = guard.as_mut() {
            if wait_timeout(child, Duration::from_secs(10)).is_none() {
                send_signal(child.id(), libc::SIGTERM);
                if wait_timeout(child, Duration::from_secs(5)).is_none() {
                    kill_and_reap(child);
                }
            }
        }
        *guard = None;
    }

    /// Starts the server again on the same port, directory and configuration (so the AOF,
    /// if on, is replayed, and a cluster node rejoins with its `nodes.conf`), and waits until
    /// it answers PING. If it is still running it is killed (SIGKILL) first; call
    /// [`RedisServer::shutdown_nosave`] before for a graceful stop.
    ///
    /// # Panics
    ///
    /// If it cannot start again (the message holds the log).
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        for _ in 0..RESTART_BIND_ATTEMPTS {
            match self.start() {
                Ok(()) => return,
                Err(StartError::PortTaken(report)) => {
                    last = report;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(StartError::Failed(report)) => {
                    self.quiet = true;
                    panic!("restart failed: {report}");
                }
            }
        }
        self.quiet = true;
        panic!("restart could not bind port {} again:\n{last}", self.port);
    }

    /// Stops the process with SIGSTOP (it keeps its connections but answers nothing) and
    /// waits until the kernel reports it stopped.
    ///
    /// # Panics
    ///
    /// If the server is not running.
    pub fn pause_process(&self) {
        assert!(
            self.is_running(),
            "pause_process: {} is not running",
            self.addr()
        );
        send_signal(self.pid, libc::SIGSTOP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while proc_state(self.pid).is_some_and(|s| s != 'T' && s != 't')
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Continues a process stopped by [`RedisServer::pause_process`] (SIGCONT).
    pub fn resume_process(&self) {
        if !self.is_running() {
            return;
        }
        send_signal(self.pid, libc::SIGCONT);
        let deadline = Instant::now() + Duration::from_secs(5);
        while proc_state(self.pid).is_some_and(|s| s == 'T' || s == 't')
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether the process is alive (a paused process is alive). Reaps it if it has exited.
    pub fn is_running(&self) -> bool {
        let mut guard = self.lock_child();
        let running = match guard.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        };
        if !running {
            *guard = None;
        }
        running
    }

    /// The server's log file so far (empty if it cannot be read).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// The process id (of the last process started, if it is not running any more).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Launches the process from the configuration file and waits until it is ready.
    fn start(&mut self) -> Result<(), StartError> {
        let log_offset = file_len(&self.log_path);
        let output_offset = file_len(&self.output_path);
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.output_path)
            .and_then(|f| Ok((f.try_clone()?, f)));
        let (stdout, stderr) = match output {
            Ok(pair) => pair,
            Err(e) => return Err(StartError::Failed(format!("open output.log: {e}"))),
        };
        let program = self.kind.program();
        let mut command = Command::new(&program);
        command
            .arg(&self.conf_path)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        let child = match spawn_child(command) {
            Ok(child) => child,
            Err(e) => {
                return Err(StartError::Failed(format!(
                    "cannot run `{program}`: {e} (is Redis installed? set LATCHKEY_REDIS_SERVER / \
                     LATCHKEY_REDIS_SENTINEL to override)"
                )))
            }
        };
        self.pid = child.id();
        *self.lock_child() = Some(child);
        let result = self.wait_ready(log_offset, output_offset);
        if result.is_err() {
            let mut guard = self.lock_child();
            if let Some(child) = guard.as_mut() {
                kill_and_reap(child);
            }
            *guard = None;
        }
        result
    }

    fn wait_ready(&self, log_offset: u64, output_offset: u64) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last_probe = String::from("no PING attempted yet");
        loop {
            let exited = {
                let mut guard = self.lock_child();
                match guard.as_mut() {
                    Some(child) => child.try_wait().ok().flatten(),
                    None => None,
                }
            };
            let log = read_from(&self.log_path, log_offset);
            if let Some(status) = exited {
                let output = read_from(&self.output_path, output_offset);
                let report = self.report(
                    &format!("exited ({status}) before it was ready"),
                    &log,
                    &output,
                );
                return if log.contains("Address already in use")
                    || output.contains("Address already in use")
                {
                    Err(StartError::PortTaken(report))
                } else {
                    Err(StartError::Failed(report))
                };
            }
            if log.contains(self.kind.ready_marker()) {
                match self.probe() {
                    Ok(()) => return Ok(()),
                    Err(e) => last_probe = e,
                }
            }
            if Instant::now() >= deadline {
                let output = read_from(&self.output_path, output_offset);
                return Err(StartError::Failed(self.report(
                    &format!("was not ready within {READY_TIMEOUT:?} (last PING: {last_probe})"),
                    &log,
                    &output,
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `Ok` if the server answers anything to PING (an authentication error counts: the
    /// server is up).
    fn probe(&self) -> Result<(), String> {
        let answered = |e: &redis::RedisError| {
            !(e.is_io_error() || e.is_connection_refusal() || e.is_timeout())
        };
        let mut con = match self
            .client()
            .get_connection_with_timeout(Duration::from_secs(1))
        {
            Ok(con) => con,
            Err(e) if answered(&e) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
        match con.req_command(&redis::cmd("PING")) {
            Ok(_) => Ok(()),
            Err(e) if answered(&e) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn report(&self, what: &str, log: &str, output: &str) -> String {
        let mut text = format!(
            "{} on {} {what}\n--- {} (last {LOG_TAIL_LINES} lines) ---\n{}\n",
            self.kind.name(),
            self.addr(),
            self.log_path.display(),
            tail(log, LOG_TAIL_LINES)
        );
        if !output.trim().is_empty() {
            text.push_str(&format!(
                "--- stdout/stderr ---\n{}\n",
                tail(output, LOG_TAIL_LINES)
            ));
        }
        text
    }

    fn print_log_tail(&self) {
        let mut text = self.report(
            "(test panicked)",
            &self.log(),
            &read_from(&self.output_path, 0),
        );
        text.push_str("--- end ---\n");
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.quiet {
            self.print_log_tail();
        }
        let mut guard = self.lock_child();
        if let Some(child) = guard.as_mut() {
            kill_and_reap(child);
        }
        *guard = None;
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn read_from(path: &Path, offset: u64) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            String::from_utf8_lossy(&bytes[start..]).into_owned()
        }
        Err(_) => String::new(),
    }
}

/// Several independent servers (e.g. for Redlock), each with default options.
///
/// Dereferences to a slice of [`RedisServer`], so `servers[0].kill()`, `servers.len()` and
/// `servers.iter()` work.
#[derive(Debug)]
pub struct RedisServers {
    servers: Vec<RedisServer>,
}

impl RedisServers {
    /// Starts `n` servers with default options.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::spawn`].
    pub fn spawn(n: usize) -> RedisServers {
        Self::spawn_with(n, |_| ServerBuilder::new())
    }

    /// Starts `n` servers, the `i`-th with the builder `options(i)` returns.
    ///
    /// # Panics
    ///
    /// As [`ServerBuilder::spawn`].
    pub fn spawn_with(n: usize, mut options: impl FnMut(usize) -> ServerBuilder) -> RedisServers {
        RedisServers {
            servers: (0..n).map(|i| options(i).spawn()).collect(),
        }
    }

    /// The servers' URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The servers' `127.0.0.1:PORT` addresses, in order.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::addr).collect()
    }

    /// One admin client per server, in order.
    pub fn clients(&self) -> Vec<redis::Client> {
        self.servers.iter().map(RedisServer::client).collect()
    }

    /// The servers as a vector.
    pub fn into_vec(self) -> Vec<RedisServer> {
        self.servers
    }
}

impl Deref for RedisServers {
    type Target = [RedisServer];

    fn deref(&self) -> &[RedisServer] {
        &self.servers
    }
}

impl DerefMut for RedisServers {
    fn deref_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }
}

impl<'a> IntoIterator for &'a RedisServers {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.servers.iter()
    }
}

impl IntoIterator for RedisServers {
    type Item = RedisServer;
    type IntoIter = std::vec::IntoIter<RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.servers.into_iter()
    }
}
