//! A TCP proxy that injects network faults.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often idle proxy threads look at the controls.
const TICK: Duration = Duration::from_millis(5);

/// One proxied connection: the accepted client socket and the socket to the upstream.
struct Conn {
    client: TcpStream,
    upstream: TcpStream,
    closed: AtomicBool,
    finished_directions: AtomicUsize,
}

impl Conn {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

struct Shared {
    upstream: String,
    delay_micros: AtomicU64,
    blackhole: AtomicBool,
    refuse: AtomicBool,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    accepted: AtomicU64,
    live_threads: AtomicUsize,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_micros.load(Ordering::SeqCst))
    }

    fn blackholed(&self) -> bool {
        self.blackhole.load(Ordering::SeqCst)
    }

    fn close_all(&self) {
        let conns: Vec<Arc<Conn>> = self.conns().drain().map(|(_, c)| c).collect();
        for conn in conns {
            conn.close();
        }
    }
}

/// Counts a running proxy thread until dropped.
struct ThreadToken(Arc<Shared>);

impl ThreadToken {
    fn new(shared: &Arc<Shared>) -> ThreadToken {
        shared.live_threads.fetch_add(1, Ordering::SeqCst);
        ThreadToken(Arc::clone(shared))
    }
}

impl Drop for ThreadToken {
    fn drop(&mut self) {
        self.0.live_threads.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A TCP proxy from `127.0.0.1:PORT` to an upstream address, run by its own `std` threads
/// (independent of any async runtime), with fault controls that take effect immediately,
/// also on open connections:
///
/// * [`FaultProxy::set_delay`] — every chunk read from either side is forwarded only after
///   the delay (so a request/response round trip takes at least twice the delay);
/// * [`FaultProxy::blackhole`] — connections are accepted and kept open but nothing is
///   forwarded; data read meanwhile is held (like packets a partition keeps back) and
///   delivered once the black hole is lifted, unless the connection is dropped first;
/// * [`FaultProxy::drop_connections`] — closes every open connection now;
/// * [`FaultProxy::refuse`] — new connections are closed right after being accepted.
///
/// Each connection is forwarded independently: when one side closes, the proxy passes the
/// close on. Dropping the proxy closes the listener and every connection.
pub struct FaultProxy {
    shared: Arc<Shared>,
    port: u16,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr())
            .field("upstream", &self.shared.upstream)
            .field("delay", &self.shared.delay())
            .field("blackhole", &self.shared.blackholed())
            .field("refuse", &self.shared.refuse.load(Ordering::SeqCst))
            .field("open_connections", &self.connection_count())
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream` (`"127.0.0.1:PORT"`,
    /// e.g. [`crate::RedisServer::addr`]). The upstream is connected to once per accepted
    /// connection; if that fails, the accepted connection is closed.
    ///
    /// # Panics
    ///
    /// If the listener cannot be bound.
    pub fn start(upstream: &str) -> FaultProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the proxy listener");
        let port = listener
            .local_addr()
            .expect("proxy listener address")
            .port();
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            delay_micros: AtomicU64::new(0),
            blackhole: AtomicBool::new(false),
            refuse: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            live_threads: AtomicUsize::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || accept_loop(listener, accept_shared))
            .expect("spawn the proxy thread");
        FaultProxy {
            shared,
            port,
            acceptor: Some(acceptor),
        }
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"` of the proxy.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT` of the proxy (plain TCP scheme, no credentials).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The upstream address.
    pub fn upstream(&self) -> &str {
        &self.shared.upstream
    }

    /// Delays every chunk, in both directions, by `delay` (zero turns it off). Applies to
    /// chunks read from now on.
    pub fn set_delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_micros.store(micros, Ordering::SeqCst);
    }

    /// Starts (`true`) or ends (`false`) black-holing: nothing is forwarded in either
    /// direction, but connections stay open and new ones are accepted.
    pub fn blackhole(&self, on: bool) {
        self.shared.blackhole.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection (both sides) now. New connections are still accepted.
    pub fn drop_connections(&self) {
        self.shared.close_all();
    }

    /// Starts (`true`) or ends (`false`) refusing: new connections are closed immediately
    /// after being accepted. Open connections are not affected.
    pub fn refuse(&self, on: bool) {
        self.shared.refuse.store(on, Ordering::SeqCst);
    }

    /// How many proxied connections are open now.
    pub fn connection_count(&self) -> usize {
        self.shared.conns().len()
    }

    /// How many connections were accepted and forwarded so far (refused ones not counted).
    pub fn accepted_count(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor, which blocks in accept().
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_secs(1),
        );
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.shared.close_all();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.shared.live_threads.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(TICK);
        }
    }
}

fn connect_upstream(upstream: &str) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in upstream.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("upstream address resolved to nothing")))
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for incoming in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let client = match incoming {
            Ok(client) => client,
            Err(_) => {
                std::thread::sleep(TICK);
                continue;
            }
        };
        if shared.refuse.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let upstream = match connect_upstream(&shared.upstream) {
            Ok(upstream) => upstream,
            Err(_) => {
                let _ = client.shutdown(Shutdown::Both);
                continue;
            }
        };
        // On failure (out of threads or descriptors) the connection has been closed.
        let _ = forward(&shared, client, upstream);
    }
}

fn forward(shared: &Arc<Shared>, client: TcpStream, upstream: TcpStream) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let conn = Arc::new(Conn {
        client: client.try_clone()?,
        upstream: upstream.try_clone()?,
        closed: AtomicBool::new(false),
        finished_directions: AtomicUsize::new(0),
    });
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    shared.conns().insert(id, Arc::clone(&conn));
    shared.accepted.fetch_add(1, Ordering::SeqCst);
    let result = pump(
        shared,
        &conn,
        id,
        client.try_clone()?,
        upstream.try_clone()?,
    )
    .and_then(|()| pump(shared, &conn, id, upstream, client));
    if result.is_err() {
        conn.close();
        shared.conns().remove(&id);
    }
    result
}

/// Forwards `from` → `to` with a reader thread and a writer thread.
fn pump(
    shared: &Arc<Shared>,
    conn: &Arc<Conn>,
    id: u64,
    mut from: TcpStream,
    mut to: TcpStream,
) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_shared = Arc::clone(shared);
    let reader_token = ThreadToken::new(shared);
    std::thread::Builder::new()
        .name("fault-proxy-read".into())
        .spawn(move || {
            let _token = reader_token;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let due = Instant::now() + reader_shared.delay();
                        if tx.send((due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
        })?;
    let writer_shared = Arc::clone(shared);
    let writer_conn = Arc::clone(conn);
    let writer_token = ThreadToken::new(shared);
    std::thread::Builder::new()
        .name("fault-proxy-write".into())
        .spawn(move || {
            let _token = writer_token;
            let shared = writer_shared;
            let conn = writer_conn;
            'outer: loop {
                match rx.recv_timeout(Duration::from_millis(20)) {
                    Ok((due, data)) => {
                        // Hold the chunk until it is due and no black hole is in force.
                        loop {
                            if conn.is_closed() || shared.stop.load(Ordering::SeqCst) {
                                break 'outer;
                            }
                            let now = Instant::now();
                            if now >= due && !shared.blackholed() {
                                break;
                            }
                            let wait = if now < due {
                                (due - now).min(TICK)
                            } else {
                                TICK
                            };
                            std::thread::sleep(wait);
                        }
                        if to.write_all(&data).is_err() {
                            conn.close();
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        if conn.is_closed() {
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        // The source side closed: pass the close on.
                        let _ = to.shutdown(Shutdown::Write);
                        break;
                    }
                }
            }
            if conn.finished_directions.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                conn.close();
                shared.conns().remove(&id);
            }
        })?;
    Ok(())
}
