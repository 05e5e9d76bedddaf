//! A private `redis-server` for `demo` and `bench` when no Redis is given.
//!
//! Started from `PATH` (or `LATCHKEY_REDIS_SERVER`) on a free loopback port, without
//! persistence (`--save ""`, `--appendonly no`) in a temporary directory; killed and reaped when
//! dropped, and killed by the kernel if latchkey dies first.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::sys;

/// How long a starting server has to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports to try when another process takes the one picked.
const PORT_ATTEMPTS: usize = 8;

/// What to tell someone without `redis-server`.
pub const INSTALL_HINT: &str =
    "install it with `apt-get install -y redis-server` (Debian/Ubuntu, as \
root; run `apt-get update` first on a fresh machine), or point latchkey at a running Redis with \
--redis redis://HOST:PORT or REDIS_URL";

/// A `redis-server` child process on 127.0.0.1.
#[derive(Debug)]
pub struct EmbeddedRedis {
    child: Child,
    port: u16,
    version: String,
    _dir: TempDir,
}

impl EmbeddedRedis {
    /// Starts a server and waits until it answers PING. Call from the main thread (see
    /// [`sys::die_with_parent`]).
    pub fn start() -> Result<EmbeddedRedis> {
        let program = find_program()?;
        let version = version(&program);
        let dir = tempfile::Builder::new()
            .prefix("latchkey-redis-")
            .tempdir()
            .context("creating a temporary directory for redis-server")?;
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let log = dir.path().join("redis.log");
            let stderr_path = dir.path().join("stderr.log");
            let _ = std::fs::remove_file(&log);
            let stderr = std::fs::File::create(&stderr_path)
                .context("creating redis-server's stderr file")?;
            let mut command = Command::new(&program);
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--protected-mode", "yes", "--loglevel", "notice"])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr);
            sys::die_with_parent(&mut command, libc::SIGKILL);
            let mut child = command
                .spawn()
                .with_context(|| format!("starting {}", program.display()))?;
            if wait_ready(&mut child, port) {
                return Ok(EmbeddedRedis {
                    child,
                    port,
                    version,
                    _dir: dir,
                });
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = format!(
                "{}{}",
                std::fs::read_to_string(&log).unwrap_or_default(),
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
            if !last_log.contains("Address already in use") {
                break;
            }
        }
        bail!(
            "the private redis-server did not start; its log ends with:\n{}",
            tail(&last_log, 20)
        )
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's version, as `redis-server --version` says (`7.0.15`), or `?`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl Drop for EmbeddedRedis {
    fn drop(&mut self) {
        // Killed before its directory is removed (the TempDir field is dropped after this).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the server answers PING; false if it exited or did not answer in time.
fn wait_ready(child: &mut Child, port: u16) -> bool {
    let started = Instant::now();
    while started.elapsed() < READY_TIMEOUT {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if ping(port) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Finds `redis-server`: `LATCHKEY_REDIS_SERVER`, else the first one on `PATH`.
fn find_program() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("LATCHKEY_REDIS_SERVER") {
        return Ok(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("redis-server");
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    bail!("no Redis given and `redis-server` is not on PATH: {INSTALL_HINT}")
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `7.0.15` from `Redis server v=7.0.15 sha=…`.
fn version(program: &Path) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.split_whitespace()
                .find_map(|word| word.strip_prefix("v="))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// A loopback port that is free right now (another process may still take it: the caller
/// retries).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
