//! `latchkey status`: snapshots of locks, semaphores, rate limiters and job groups, once or
//! live (`--watch`).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use latchkey_redis::{Client, ClientInfo, Inspection, Kind, LockStatus, RateConfig};
use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::connect::{self, Target};
use crate::duration::human;
use crate::opt::StatusOpt;
use crate::{cron, limit};

/// How often `--watch` redraws (the lease counts down between reads).
const REDRAW: Duration = Duration::from_millis(250);
/// How often `--watch` reads Redis.
const READ_EVERY: u32 = 2;

/// Prints the state of every name given, once, or live with `--watch`.
pub async fn run(opt: StatusOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    if opt.watch {
        return watch(&client, &opt.names).await;
    }
    let mut texts = Vec::new();
    for name in &opt.names {
        let snapshot = Snapshot::read(&client, name).await?;
        if opt.json {
            println!("{}", snapshot.to_json(Duration::ZERO));
        } else {
            texts.push(snapshot.to_text(Duration::ZERO));
        }
    }
    if !opt.json {
        print!("{}", texts.join("\n"));
    }
    Ok(ExitCode::SUCCESS)
}

/// The live view: a Redis read every `READ_EVERY` redraws, the lease interpolated between
/// reads. On a terminal the view is redrawn in place; otherwise each read is printed as it
/// comes. SIGINT (Ctrl-C) ends it with exit 0.
async fn watch(client: &Client, names: &[String]) -> Result<ExitCode> {
    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    let tty = std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(REDRAW);
    let mut drawn_lines = 0usize;
    let mut snapshots: Vec<std::result::Result<Snapshot, String>> = Vec::new();
    let mut read_at = Instant::now();
    let mut tick: u32 = 0;
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = ticks.tick() => {}
        }
        let fresh = tick.is_multiple_of(READ_EVERY);
        tick = tick.wrapping_add(1);
        if fresh {
            snapshots.clear();
            for name in names {
                snapshots.push(
                    Snapshot::read(client, name)
                        .await
                        .map_err(|e| format!("{name}: {e:#}")),
                );
            }
            read_at = Instant::now();
        } else if !tty {
            continue;
        }
        let since = read_at.elapsed();
        let mut frame = String::new();
        for snapshot in &snapshots {
            match snapshot {
                Ok(snapshot) => frame.push_str(&snapshot.to_text(since)),
                Err(error) => frame.push_str(&format!("error     {error}\n")),
            }
            frame.push('\n');
        }
        let mut out = std::io::stdout().lock();
        if tty {
            if drawn_lines > 0 {
                // Back to the first line of the last frame, and clear from there down.
                write!(out, "\x1b[{drawn_lines}F\x1b[J")?;
            }
            drawn_lines = frame.matches('\n').count();
        } else {
            writeln!(out, "--- {}", clock())?;
        }
        out.write_all(frame.as_bytes())?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One name's state, as read.
enum Snapshot {
    /// A lock or fair lock (also a name with nothing in it: a free lock).
    Lock {
        name: String,
        kind: &'static str,
        view: LockView,
    },
    /// A read-write lock.
    RwLock {
        name: String,
        mode: Option<&'static str>,
        view: LockView,
    },
    /// A semaphore.
    Semaphore {
        name: String,
        available: i64,
        total: Option<u64>,
    },
    /// A permit semaphore with leased permits.
    PermitSemaphore {
        name: String,
        available: i64,
        leased: Vec<(String, Duration)>,
    },
    /// A rate limiter: its rate, and the permits left for an overall one.
    RateLimiter {
        name: String,
        config: RateConfig,
        available: Option<i64>,
    },
    /// A job group: each job as `latchkey jobs` shows it, in text and JSON.
    Jobs {
        name: String,
        texts: Vec<String>,
        json: Vec<serde_json::Value>,
    },
}

/// A lock's holders, lease, token and waiters.
struct LockView {
    holders: Vec<HolderView>,
    remaining_lease: Option<Duration>,
    fencing_token: Option<u64>,
    waiting: u64,
    fair_queue: Vec<String>,
}

/// One holder: its owner id, hold count, and what its client registered, if anything.
struct HolderView {
    owner: String,
    holds: u64,
    client: Option<ClientInfo>,
}

/// Who a holder is, for people: what its client registered, or why nothing is known.
pub fn who(client: Option<&ClientInfo>) -> String {
    client.map_or_else(
        || "unknown (a Java client, or one that has stopped)".to_owned(),
        ClientInfo::to_string,
    )
}

/// What a holder's client registered, as JSON (`null` when nothing is known).
pub fn client_json(client: Option<&ClientInfo>) -> serde_json::Value {
    client.map_or(serde_json::Value::Null, |c| {
        json!({
            "id": c.id,
            "name": c.name,
            "host": c.host,
            "pid": c.pid,
            "program": c.program,
            "version": c.version,
        })
    })
}

impl LockView {
    fn from_status(status: &LockStatus, fair_queue: Vec<String>) -> LockView {
        LockView {
            holders: status
                .holders
                .iter()
                .map(|h| HolderView {
                    owner: h.owner.clone(),
                    holds: h.holds,
                    client: None,
                })
                .collect(),
            remaining_lease: status.remaining_lease,
            fencing_token: status.fencing_token.map(latchkey_redis::FencingToken::get),
            waiting: status.waiting_clients,
            fair_queue,
        }
    }

    fn from_inspection(found: &Inspection) -> LockView {
        LockView {
            holders: found
                .holders
                .iter()
                .map(|h| HolderView {
                    owner: h.owner.clone(),
                    holds: h.holds,
                    client: None,
                })
                .collect(),
            remaining_lease: found.remaining_lease,
            fencing_token: found.fencing_token.map(latchkey_redis::FencingToken::get),
            waiting: found.waiting_clients,
            fair_queue: found.fair_queue.clone(),
        }
    }

    /// Reads what each holder's client registered (one read per holder; a failed read leaves
    /// the holder unknown).
    async fn identify(mut self, client: &Client) -> LockView {
        for holder in &mut self.holders {
            holder.client = client.client_info(&holder.owner).await.ok().flatten();
        }
        self
    }

    /// The lease left `since` the read, counted down.
    fn lease_left(&self, since: Duration) -> Option<Duration> {
        self.remaining_lease.map(|left| left.saturating_sub(since))
    }
}

impl Snapshot {
    /// Reads `name` through the library: what it holds ([`Client::inspect`]), or, when nothing
    /// is there, the state of a free lock (its fencing token outlives it).
    async fn read(client: &Client, name: &str) -> Result<Snapshot> {
        let context = || format!("reading `{name}`");
        let Some(found) = client.inspect(name).await.with_context(context)? else {
            let status = client.lock(name).status().await.with_context(context)?;
            let queue = client.fair_lock(name).queue().await.with_context(context)?;
            return Ok(Snapshot::Lock {
                name: name.to_owned(),
                kind: "lock",
                view: LockView::from_status(&status, queue).identify(client).await,
            });
        };
        let name = name.to_owned();
        if let (Kind::RateLimiter, Some(config)) = (found.kind, found.rate) {
            return Ok(Snapshot::RateLimiter {
                name,
                config,
                available: found.available_permits,
            });
        }
        Ok(match found.kind {
            Kind::RwLock => Snapshot::RwLock {
                view: LockView::from_inspection(&found).identify(client).await,
                mode: found.rw_mode.map(|m| m.as_str()),
                name,
            },
            Kind::Semaphore => Snapshot::Semaphore {
                available: found.available_permits.unwrap_or(0),
                total: found.total_permits,
                name,
            },
            Kind::PermitSemaphore => Snapshot::PermitSemaphore {
                available: found.available_permits.unwrap_or(0),
                leased: found
                    .leased_permits
                    .iter()
                    .map(|p| (p.id.to_string(), p.remaining_lease))
                    .collect(),
                name,
            },
            Kind::JobGroup => {
                let jobs = client
                    .scheduler(name.clone())
                    .jobs()
                    .await
                    .with_context(context)?;
                let (mut texts, mut json) = (Vec::new(), Vec::new());
                for job in &jobs {
                    texts.push(cron::job_text(client, job).await);
                    json.push(cron::job_json(client, job).await);
                }
                Snapshot::Jobs { name, texts, json }
            }
            kind => Snapshot::Lock {
                view: LockView::from_inspection(&found).identify(client).await,
                kind: kind.as_str(),
                name,
            },
        })
    }

    /// The JSON form (one object; durations in milliseconds, counted down by `since`, `null`
    /// when absent).
    fn to_json(&self, since: Duration) -> serde_json::Value {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        match self {
            Snapshot::Lock { name, kind, view } => json!({
                "lock": name,
                "kind": kind,
                "locked": !view.holders.is_empty(),
                "holders": holders_json(view),
                "remaining_lease_ms": ms(view.lease_left(since)),
                "fencing_token": view.fencing_token,
                "waiting_clients": view.waiting,
                "fair_queue": view.fair_queue,
            }),
            Snapshot::RwLock { name, mode, view } => json!({
                "lock": name,
                "kind": "rw_lock",
                "locked": !view.holders.is_empty(),
                "mode": mode,
                "holders": holders_json(view),
                "remaining_lease_ms": ms(view.lease_left(since)),
                "fencing_token": view.fencing_token,
                "waiting_writers": view.waiting,
            }),
            Snapshot::Semaphore {
                name,
                available,
                total,
            } => json!({
                "semaphore": name,
                "kind": "semaphore",
                "available": available,
                "permits": total,
            }),
            Snapshot::PermitSemaphore {
                name,
                available,
                leased,
            } => json!({
                "semaphore": name,
                "kind": "permit_semaphore",
                "available": available,
                "leased": leased.iter().map(|(id, left)| json!({
                    "id": id,
                    "remaining_lease_ms": left.saturating_sub(since).as_millis() as u64,
                })).collect::<Vec<_>>(),
            }),
            Snapshot::RateLimiter {
                name,
                config,
                available,
            } => limit::to_json(name, config, *available),
            Snapshot::Jobs { name, json, .. } => json!({
                "group": name,
                "kind": "jobs",
                "jobs": json,
            }),
        }
    }

    /// The human form, the lease counted down by `since`.
    fn to_text(&self, since: Duration) -> String {
        match self {
            Snapshot::Lock { name, view, .. } => lock_text("lock     ", name, view, since),
            Snapshot::RwLock { name, mode, view } => {
                let mut out = lock_text("rw lock  ", name, view, since);
                if let Some(mode) = mode {
                    out = out.replacen("state     held", &format!("state     {mode}-held"), 1);
                }
                out.replace(" client(s)\n", " writer(s)\n")
            }
            Snapshot::Semaphore {
                name,
                available,
                total,
            } => {
                let mut out = format!("semaphore {name}\n");
                match total {
                    Some(total) => out.push_str(&format!(
                        "permits   {available} available of {total} ({} taken)\n",
                        *total as i64 - available
                    )),
                    None => out.push_str(&format!("permits   {available} available\n")),
                }
                out
            }
            Snapshot::PermitSemaphore {
                name,
                available,
                leased,
            } => {
                let mut out = format!("semaphore {name} (permit semaphore)\n");
                out.push_str(&format!(
                    "permits   {available} available, {} leased\n",
                    leased.len()
                ));
                for (id, left) in leased {
                    out.push_str(&format!(
                        "holder    permit {id}  (lease {} left)\n",
                        human(left.saturating_sub(since))
                    ));
                }
                out
            }
            Snapshot::RateLimiter {
                name,
                config,
                available,
            } => limit::to_text(name, config, *available),
            Snapshot::Jobs { name, texts, .. } => {
                let mut out = format!(
                    "jobs      {name} (job group of {} job{}, as `latchkey jobs {name}` shows)\n",
                    texts.len(),
                    if texts.len() == 1 { "" } else { "s" }
                );
                for text in texts {
                    out.push_str(text);
                }
                out
            }
        }
    }
}

fn holders_json(view: &LockView) -> Vec<serde_json::Value> {
    view.holders
        .iter()
        .map(|h| {
            json!({
                "owner": h.owner,
                "holds": h.holds,
                "client": client_json(h.client.as_ref()),
            })
        })
        .collect()
}

/// A lock's lines; `label` is the first line's 9-column label.
fn lock_text(label: &str, name: &str, view: &LockView, since: Duration) -> String {
    let mut out = format!("{label} {name}\n");
    if view.holders.is_empty() {
        out.push_str("state     free\n");
    } else {
        out.push_str(&format!(
            "state     held by {} owner{}\n",
            view.holders.len(),
            if view.holders.len() == 1 { "" } else { "s" }
        ));
        for holder in &view.holders {
            out.push_str(&format!(
                "holder    {}  ({} hold{})\n",
                holder.owner,
                holder.holds,
                if holder.holds == 1 { "" } else { "s" }
            ));
            out.push_str(&format!("client    {}\n", who(holder.client.as_ref())));
        }
        match view.lease_left(since) {
            Some(left) => out.push_str(&format!("lease     {} left\n", human(left))),
            None => out.push_str("lease     no expiry\n"),
        }
    }
    match view.fencing_token {
        Some(token) => out.push_str(&format!(
            "token     {token} (the latest holder's fencing token)\n"
        )),
        // The token counter expires 60 s after the lease of the last grant would run out.
        None => out.push_str("token     none (not taken by latchkey recently)\n"),
    }
    out.push_str(&format!("waiting   {} client(s)\n", view.waiting));
    if !view.fair_queue.is_empty() {
        out.push_str(&format!(
            "in line   {} (fair lock queue, first in line first)\n",
            view.fair_queue.join(", ")
        ));
    }
    out
}

/// The human form of a lock's status (as `latchkey status` prints a lock), for `release`.
pub fn to_text(name: &str, status: &LockStatus, fair_queue: &[String]) -> String {
    lock_text(
        "lock     ",
        name,
        &LockView::from_status(status, fair_queue.to_vec()),
        Duration::ZERO,
    )
}

/// The time of day (UTC, `HH:MM:SS.mmm`), to stamp the snapshots of a non-terminal watch.
fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        now.subsec_millis()
    )
}
