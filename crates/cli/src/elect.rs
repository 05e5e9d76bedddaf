//! `latchkey elect`: a command that runs only while this process leads an election; and
//! `latchkey leader`: who leads, and (with `--watch`) every change.

use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use futures_util::StreamExt;
use latchkey_redis::{Client, ClientInfo, Election, Leader, Leadership};
use serde_json::json;

use crate::connect::{self, redact, Target};
use crate::duration::human;
use crate::exit::{self, coded};
use crate::opt::{ElectOpt, LeaderOpt};
use crate::run::{spawn_command, status_code, stop_command, supervise, Ended, Signals, TOKEN_ENV};
use crate::sys;

/// The environment variable that carries the leader's term to the command.
pub const TERM_ENV: &str = "LATCHKEY_TERM";
/// The environment variable that carries the election's name to the command.
pub const ELECTION_ENV: &str = "LATCHKEY_ELECTION";

/// Runs `latchkey elect`. Errors of latchkey itself exit [`exit::RUN_FAILED`], as `run`'s do.
pub async fn run(opt: ElectOpt) -> Result<ExitCode> {
    match elect(opt).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(error) if error.downcast_ref::<exit::Coded>().is_some() => Err(error),
        Err(error) => Err(coded(exit::RUN_FAILED, error)),
    }
}

/// The value this process campaigns with: `--value`, else `<host name>:<pid>`.
fn value(opt: &ElectOpt) -> String {
    opt.value.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        format!("{host}:{}", std::process::id())
    })
}

async fn elect(opt: ElectOpt) -> Result<u8> {
    let target = Target::given_or_default(&opt.connect);
    let mut signals = Signals::new()?;
    sys::become_subreaper();
    let watchdog = opt.watchdog.unwrap_or(Client::DEFAULT_WATCHDOG_TIMEOUT);
    let client = connect::client(&target.url, Some(watchdog)).await?;
    let election = client.election(opt.election.clone());
    let value = value(&opt);
    let campaign = async {
        match opt.wait {
            Some(wait) => election.try_campaign(value.as_str(), wait).await,
            None => election.campaign(value.as_str()).await.map(Some),
        }
    };
    let leadership = tokio::select! {
        led = campaign => led.with_context(|| format!("campaigning in the election `{}`", opt.election))?,
        signo = signals.recv() => {
            eprintln!("latchkey: interrupted while waiting to lead `{}`", opt.election);
            return Ok(exit::SIGNAL_BASE + signo as u8);
        }
    };
    let Some(leadership) = leadership else {
        let leader = match election.leader().await {
            Ok(Some(leader)) => format!(" (led by {}, term {})", leader.value, leader.term),
            _ => String::new(),
        };
        let gave_up = match opt.wait {
            Some(wait) if !wait.is_zero() => format!("gave up after {} (--wait)", human(wait)),
            _ => "tried once (--wait 0)".to_owned(),
        };
        return Err(coded(
            exit::BUSY,
            anyhow!("somebody else leads `{}`{leader}; {gave_up}", opt.election),
        ));
    };
    let term = leadership.term();
    if opt.verbose {
        eprintln!(
            "latchkey: leading `{}` on {} in term {term} as {value}",
            opt.election,
            redact(&target.url)
        );
    }
    let env = [
        (TERM_ENV, term.to_string()),
        (TOKEN_ENV, term.to_string()),
        (ELECTION_ENV, opt.election.clone()),
    ];
    let mut child = match spawn_command(&opt.command, &env) {
        Ok(child) => child,
        Err((code, error)) => {
            let _ = leadership.resign().await;
            return Err(coded(code, error));
        }
    };
    let pid = child.id().unwrap_or(0);
    match supervise(&mut child, &mut signals, leadership.lost()).await? {
        Ended::Exited(status) => Ok(resign(&opt, leadership, status_code(status), watchdog).await),
        Ended::Lost => {
            eprintln!(
                "latchkey: LOST the leadership of `{}` (term {term}) while the command ran: \
                 Redis no longer has it (expired while renewals failed, or the server lost its \
                 data). Another leader may be running now. Sending SIGTERM to the command (pid \
                 {pid}) and its processes.",
                opt.election
            );
            stop_command(&mut child, opt.grace).await;
            Ok(exit::LOST)
        }
    }
}

/// The command exited: resign (handing over to the next standby) and pass its status on.
async fn resign(
    opt: &ElectOpt,
    leadership: Leadership,
    code: u8,
    watchdog: std::time::Duration,
) -> u8 {
    match leadership.resign().await {
        Ok(()) => {
            if opt.verbose {
                eprintln!("latchkey: resigned the leadership of `{}`", opt.election);
            }
            code
        }
        Err(e) if e.is_not_owner() => {
            eprintln!(
                "latchkey: LOST the leadership of `{}` before the command finished (it exited \
                 with {code}); its work may have overlapped with another leader's",
                opt.election
            );
            exit::LOST
        }
        Err(e) => {
            eprintln!(
                "latchkey: could not resign the leadership of `{}`: {}; it ends by itself \
                 within {}",
                opt.election,
                exit::one_line(&e),
                human(watchdog)
            );
            code
        }
    }
}

/// Runs `latchkey leader`: prints the leader and term, and with `--watch` every change until
/// interrupted.
pub async fn leader(opt: LeaderOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let election = client.election(opt.election.clone());
    if !opt.watch {
        let leader = election
            .leader()
            .await
            .with_context(|| format!("reading the election `{}`", opt.election))?;
        let who = match leader.as_ref().and_then(|l| l.owner.as_deref()) {
            Some(owner) => client.client_info(owner).await.ok().flatten(),
            None => None,
        };
        println!(
            "{}",
            describe(&election, leader.as_ref(), Some(who.as_ref()), opt.json)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut changes = std::pin::pin!(election.observe());
    while let Some(change) = changes.next().await {
        match change {
            Ok(leader) => println!("{}", describe(&election, leader.as_ref(), None, opt.json)),
            Err(error) if error.is_invalid_argument() => {
                return Err(anyhow::Error::new(error)
                    .context(format!("watching the election `{}`", opt.election)));
            }
            // The stream goes on: it reads again after a second.
            Err(error) => eprintln!(
                "latchkey: watching `{}`: {}",
                opt.election,
                exit::one_line(&error)
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `leader node-a:8080 term 3`, `no leader`, or the JSON object; with `client` (what the
/// leader's client registered, looked up: not while watching), also the leader's owner id and
/// client (`client <owner>: <who>` on a second line).
fn describe(
    election: &Election,
    leader: Option<&Leader>,
    client: Option<Option<&ClientInfo>>,
    as_json: bool,
) -> String {
    let owner = leader.and_then(|l| l.owner.as_deref());
    if as_json {
        let mut object = json!({
            "election": election.name(),
            "leader": leader.map(|l| l.value.clone()),
            "term": leader.map(|l| l.term),
        });
        if let Some(client) = client {
            object["owner"] = json!(owner);
            object["client"] = crate::status::client_json(client);
        }
        return object.to_string();
    }
    match (leader, client, owner) {
        (Some(leader), Some(client), Some(owner)) => format!(
            "leader {} term {}\nclient {owner}: {}",
            leader.value,
            leader.term,
            crate::status::who(client)
        ),
        (Some(leader), ..) => format!("leader {} term {}", leader.value, leader.term),
        (None, ..) => "no leader".to_owned(),
    }
}
