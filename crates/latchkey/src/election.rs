//! Leader election: one leader among the clients that campaign under one name, with a term
//! (a fencing token) per leader, hand-over on resignation, and observers of every change.
//!
//! Built on the lock machinery: a leadership is a hold in the client's registry (renewed by the
//! watchdog with the lock's renew script, `lost()` when it ends), standbys wait in the one wait
//! loop ([`Waiting`]) with the lock's wake-one queue, and the leadership guard is a
//! [`GuardCore`]. The election's own scripts (`scripts/election_*.lua`) also keep the leader's
//! value and a short change log that observers read.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::Stream;
use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::{Error, Result};
use crate::guard::{attempt_hold, Claim, GuardCore, Holds};
use crate::keys::{check_name, named_debug, ElectionKeys};
use crate::lock::HAND_OFF_RESERVATION;
use crate::pubsub::{Subscription, WakePolicy};
use crate::replica::AcquireCall;
use crate::scripts::{self, Invoke};
use crate::task::{detached_try, Task};
use crate::wait::{deadline_after, unbounded, unexpected, Attempt, Waiting};
use crate::watchdog::{Lease, COUNTER_IDLE};

/// How often an observer reads the election when no message comes: the bound on how late it
/// sees a change whose message it missed, or a leader whose lease ran out (an expiry publishes
/// nothing).
pub(crate) const OBSERVE_POLL: Duration = Duration::from_secs(1);

impl Client {
    /// The leader election named `name`: a handle shared freely, every campaign through it a
    /// candidate of its own.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let election = client.election("reports");
    /// let leadership = election.campaign("node-a:8080").await?;
    /// println!("leading in term {}", leadership.term());
    /// leadership.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        let (client, name) = (self.clone(), name.into());
        let keys = ElectionKeys::new(client.namespace(), &name);
        Election {
            inner: Arc::new(ElectionInner { client, name, keys }),
        }
    }
}

/// The leader of an election: its value and term, from [`Election::leader`] and
/// [`Election::observe`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader campaigned with, or proclaimed since (an address, a node name).
    pub value: String,
    /// The leader's term: strictly larger than every earlier leader's.
    pub term: u64,
    /// The owner id of the leader's campaign (`<client id>:<n>`; see
    /// [`Client::client_info`](crate::Client::client_info) for the process behind it), from
    /// [`Election::leader`]; `None` from [`Election::observe`], whose change log keeps values
    /// and terms only.
    pub owner: Option<String>,
}

/// A leader election kept in Redis: of all the clients that [campaign](Election::campaign)
/// under one name, one leads at a time; the others wait as standbys and the first of them in
/// line leads as soon as the leader resigns, or within its lease when it dies.
///
/// Made by [`Client::election`]. Every campaign is a candidate of its own (an owner id of its
/// own), whatever handle or clone it is made through. Each leader gets a **term**, a fencing
/// token strictly larger than every earlier leader's (also after the counter expired with the
/// election idle); give it to the storage the leader writes to, as a lock's fencing token. Anybody can read the [leader](Election::leader) or [observe](Election::observe) its
/// changes.
///
/// # Leases and clocks
///
/// A leadership is kept like a lock taken without a lease: its lease is the client's
/// [watchdog timeout](crate::ClientBuilder::watchdog_timeout), renewed by the watchdog every
/// third of it. The leader's [`Leadership::lost`] fires when Redis reports the leadership gone,
/// or when the lease, counted from *before* the last successful renewal was sent, has run out
/// on the leader's own clock. That is before Redis can expire it, and so before any standby can
/// lead, as long as the leader's clock does not run slower than the server's by more than the
/// lease's margin and the leader's process is not paused (a stopped process hears `lost()` only
/// when it runs again: write with the term to fenced storage). A leader that dies is replaced
/// within its lease; one that resigns (or drops its [`Leadership`]), at once.
///
/// # Keys
///
/// All in the election's cluster slot: the leader `latchkey_election:{name}` (a hash with one
/// field, the leader's owner id, holding `<term>:<value>`; its TTL is the lease), the term
/// counter `latchkey_election_term:{name}` and the change log `latchkey_election_log:{name}`
/// (the last 16 changes; both expire a minute after the last change), the wait queue
/// `latchkey_election_queue:{name}`,
/// `latchkey_election_alive:{name}` and `latchkey_election_handoff:{name}` (they expire by
/// themselves), and the channels `latchkey_election_channel:{name}` (standbys are woken there,
/// one at a time) and `latchkey_election_observe:{name}` (every change is published there).
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let election = client.election("scheduler");
/// let leadership = election.campaign("node-a").await?; // waits as a standby until it leads
/// tokio::select! {
///     _ = leadership.lost() => eprintln!("no longer the leader"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => leadership.resign().await?,
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Election {
    inner: Arc<ElectionInner>,
}

struct ElectionInner {
    client: Client,
    name: String,
    keys: ElectionKeys,
}

named_debug!(Election);

impl Election {
    /// The longest value latchkey accepts, in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Election::MAX_VALUE_LEN, 4096);
    /// ```
    pub const MAX_VALUE_LEN: usize = 4096;

    /// The election's name as given to [`Client::election`] (without the namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.election("scheduler").name(), "scheduler");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Campaigns with `value` (what observers see: an address, a node name) and waits as long
    /// as it takes to lead. Standbys wait in line: when the leader resigns, the election is
    /// handed over to the earliest-arrived live standby client, and only that one is woken.
    ///
    /// Every campaign is a candidate of its own: one made while this process already leads
    /// (through any handle) waits until that leadership ends, like any standby's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no leadership, waiter entry, subscription or
    /// renewal behind: a leadership granted just as the future was dropped is resigned by the
    /// client's background task (handing it over to the next standby), and a client whose last
    /// campaign gives up leaves the wait queue, passing on a hand-over meant for it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or value (empty, or longer than
    /// [`Election::MAX_VALUE_LEN`]); nothing is sent then. [`Error::WrongType`] if one of the
    /// election's keys holds another type (nothing is written), connection errors
    /// ([`Error::is_connection`]), [`Error::NotReplicated`] with replica sync.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let leadership = client.election("scheduler").campaign("node-a").await?;
    /// assert!(leadership.term() > 0);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "campaign", skip_all, fields(primitive = "election", name = %self.inner.name))]
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        Ok(unbounded(self.run_campaign(value.into(), None).await?))
    }

    /// Campaigns with `value` and waits at most `wait` to lead; `Ok(None)` if it did not lead
    /// in time. `Duration::ZERO` tries once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Election::campaign`].
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`], and [`Error::InvalidArgument`] if `wait` is too large to add
    /// to the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let election = client.election("scheduler");
    /// match election.try_campaign("node-a", Duration::from_secs(1)).await? {
    ///     Some(leadership) => leadership.resign().await?,
    ///     None => println!("somebody else leads"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "try_campaign", skip_all, fields(primitive = "election", name = %self.inner.name, wait = ?wait))]
    pub async fn try_campaign(
        &self,
        value: impl Into<String>,
        wait: Duration,
    ) -> Result<Option<Leadership>> {
        let deadline = deadline_after(wait, "`campaign()`")?;
        self.run_campaign(value.into(), Some(deadline)).await
    }

    /// The current leader, `None` when nobody leads. One command (`HGETALL` of the leader key),
    /// so value and term are read together.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] if the leader key is
    /// not a hash, connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// match client.election("scheduler").leader().await? {
    ///     Some(leader) => println!("{} leads in term {}", leader.value, leader.term),
    ///     None => println!("no leader"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "leader", skip_all, fields(primitive = "election", name = %self.inner.name))]
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let cmd = redis::cmd("HGETALL").arg(&*self.inner.keys.leader).clone();
        let fields: Vec<(String, String)> = self.read(&cmd, "reading an election's leader").await?;
        Ok(fields.first().and_then(|(owner, payload)| {
            let mut leader = parse_payload(payload)?;
            leader.owner = Some(owner.clone());
            Some(leader)
        }))
    }

    /// A stream of the election's leader changes: first the current leader (`Some`) or its
    /// absence (`None`), then every change: a new leader, a new value
    /// ([`Leadership::proclaim`]), no leader (resigned, or its lease ran out).
    ///
    /// Changes are published by the scripts that make them; the stream reads the election's
    /// leader and its change log (the last 16 changes) on every message, and every
    /// second without one, so a missed message or an expiry (which publishes nothing) is seen
    /// within a second. It never goes backwards (a term lower than one it yielded is never
    /// yielded after it) and skips no change that is still in the log when it reads: an observer
    /// that falls more than 16 changes behind misses the oldest.
    ///
    /// Errors (connection errors, [`Error::WrongType`]) are yielded and the stream goes on,
    /// trying again after a second; a bad name is yielded once and ends it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops its subscription; nothing else is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// let mut changes = std::pin::pin!(client.election("scheduler").observe());
    /// while let Some(change) = changes.next().await {
    ///     match change? {
    ///         Some(leader) => println!("leader {} (term {})", leader.value, leader.term),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static {
        let observer = Observer {
            election: self.clone(),
            cursor: Cursor::default(),
            pending: VecDeque::new(),
            subscription: None,
            read_now: true,
            failed: false,
            done: false,
        };
        futures_util::stream::unfold(observer, |mut observer| async move {
            if observer.done {
                return None;
            }
            let item = observer.next().await;
            Some((item, observer))
        })
    }

    async fn run_campaign(
        &self,
        value: String,
        deadline: Option<Instant>,
    ) -> Result<Option<Leadership>> {
        check_name(&self.inner.name)?;
        check_value(&value)?;
        let value: Arc<str> = Arc::from(value);
        let claim = Claim::new(self);
        let leave = || self.leave_task();
        let waiting = Waiting {
            on_leave: Some(&leave),
            ..Waiting::new(
                &self.inner.client.inner.hub,
                &self.inner.keys.channel,
                WakePolicy::Lock,
            )
        };
        waiting
            .run(deadline, |turn| {
                let (claim, value, queue) = (claim.clone(), value.clone(), turn.queue());
                detached_try(async move { attempt(claim, &value, turn.park, queue).await }.boxed())
            })
            .await
    }

    /// KEYS of the resign and leave scripts: the leader key, the wake channel and the queue.
    fn queue_keys(&self) -> Vec<Arc<str>> {
        let k = &self.inner.keys;
        vec![
            k.leader.clone(),
            k.channel.clone(),
            k.queue.clone(),
            k.alive.clone(),
            k.hand_off.clone(),
        ]
    }

    /// The resignation of the leadership of `field` (the guard's release), in `term` only if
    /// given.
    fn resign_task(&self, field: &str, term: Option<u64>) -> Task {
        let inner = &self.inner;
        let mut keys = self.queue_keys();
        keys.extend([inner.keys.log.clone(), inner.keys.observe.clone()]);
        Task::new(
            &scripts::ELECTION_RESIGN,
            keys,
            vec![
                field.to_owned(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
                term.map(|t| t.to_string()).unwrap_or_default(),
                COUNTER_IDLE.as_millis().to_string(),
            ],
            "resigning an election's leadership",
        )
    }

    /// The clean-up when this client's last campaign gives up.
    fn leave_task(&self) -> Task {
        let inner = &self.inner;
        Task::new(
            &scripts::ELECTION_LEAVE,
            self.queue_keys(),
            vec![
                inner.client.inner.wake_id.to_string(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "leaving an election's wait queue",
        )
    }

    /// The leader, the term counter and the change log, in one read-only script call.
    async fn snapshot(&self) -> Result<Snapshot> {
        let k = &self.inner.keys;
        let mut invocation = scripts::ELECTION_OBSERVE.invocation();
        invocation.key(&*k.leader).key(&*k.term).key(&*k.log);
        let (payload, term, log): (String, i64, Vec<String>) =
            self.script(&invocation, "observing an election").await?;
        Ok(Snapshot {
            leader: parse_payload(&payload),
            term: u64::try_from(term).unwrap_or(0),
            log: log
                .iter()
                .filter_map(|entry| Change::parse(entry))
                .collect(),
        })
    }
}

/// One campaign script call of `claim` (run detached by the caller: a grant whose caller went
/// away is dropped where it lands, which resigns it).
async fn attempt(
    claim: Claim<Election>,
    value: &Arc<str>,
    park: Duration,
    queue: &'static str,
) -> Result<Attempt<Leadership>> {
    let inner = &claim.held().inner;
    let client = &inner.client.inner;
    let k = &inner.keys;
    let keys = [
        &*k.leader,
        &*k.term,
        &*k.queue,
        &*k.alive,
        &*k.hand_off,
        &*k.log,
        &*k.observe,
    ];
    let args = |lease_ms: u64| {
        vec![
            lease_ms.to_string(),
            claim.owner().to_string(),
            client.wake_id.to_string(),
            (park.as_millis() as u64).to_string(),
            queue.to_owned(),
            value.to_string(),
            client.conn.publish_command().to_owned(),
            COUNTER_IDLE.as_millis().to_string(),
        ]
    };
    attempt_hold(
        &claim,
        Lease::Watchdog,
        AcquireCall {
            script: &scripts::ELECTION_CAMPAIGN,
            keys: &keys,
            args: &[],
            context: "campaigning in an election",
            name: &inner.name,
        },
        args,
        |core| Leadership {
            core,
            value: value.to_string(),
        },
        |reply| match reply {
            [0, retry_after] => Ok(Attempt::retry_after_ms(*retry_after)),
            other => Err(unexpected("the campaign script", other)),
        },
    )
    .await
}

crate::client::object!(Election);

impl Holds for Election {
    const KIND: &'static str = "leader";

    fn key(&self) -> &Arc<str> {
        &self.inner.keys.leader
    }

    fn release_task(&self, field: &str) -> Task {
        self.resign_task(field, None)
    }

    /// The resignation in `term` only, sent again to a new primary after a Sentinel failover:
    /// the first one may have reached only the demoted primary.
    fn resend_task(&self, field: &str, term: u64) -> Option<Task> {
        let mut task = self.resign_task(field, Some(term));
        task.context = "resigning an election's leadership again after a failover";
        Some(task)
    }
}

/// Checks a leader value: not empty, at most [`Election::MAX_VALUE_LEN`] bytes.
fn check_value(value: &str) -> Result<()> {
    let reason = if value.is_empty() {
        "the value is empty; give what observers should see of the leader, such as its \
         address or node name"
            .to_owned()
    } else if value.len() > Election::MAX_VALUE_LEN {
        let (len, max) = (value.len(), Election::MAX_VALUE_LEN);
        format!("the value is {len} bytes long; the limit is {max} bytes")
    } else {
        return Ok(());
    };
    Err(Error::invalid("value", reason))
}

/// The leader in a leader key's payload `<term>:<value>`.
fn parse_payload(payload: &str) -> Option<Leader> {
    let (term, value) = payload.split_once(':')?;
    Some(Leader {
        value: value.to_owned(),
        term: term.parse().ok()?,
        owner: None,
    })
}

/// A leadership of an [`Election`], from [`Election::campaign`]: while it lasts (and
/// [`Leadership::lost`] has not fired) this handle leads.
///
/// Resigning ([`Leadership::resign`], or dropping it) hands the election over to the next
/// standby at once. The guard owns what it needs (`'static`, `Send`, `Sync`); dropping it never
/// blocks. It is a [`Guard`](crate::Guard) too, whose fencing token is the term and whose
/// `unlock` resigns.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    core: GuardCore<Election>,
    value: String,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.core.debug(f, "Leadership")
    }
}

impl Leadership {
    /// The term of this leadership: strictly larger than every earlier leader's term of this
    /// election. Give it to the storage the leader writes to, as a fencing token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let leadership = client.election("scheduler").campaign("node-a").await?;
    /// println!("term {}", leadership.term());
    /// # Ok(())
    /// # }
    /// ```
    pub fn term(&self) -> u64 {
        self.core.fencing_token().get()
    }

    /// The term as a [`FencingToken`](crate::FencingToken), as every guard's.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let leadership = client.election("scheduler").campaign("node-a").await?;
    /// assert_eq!(leadership.fencing_token().get(), leadership.term());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> crate::FencingToken {
        self.core.fencing_token()
    }

    /// The value this leader campaigned with, or proclaimed last.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let leadership = client.election("scheduler").campaign("node-a").await?;
    /// assert_eq!(leadership.value(), "node-a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The election this leadership belongs to.
    pub fn election(&self) -> &Election {
        self.core.held()
    }

    /// Whether the leadership is known to be lost (see [`Leadership::lost`]).
    pub fn is_lost(&self) -> bool {
        self.core.is_lost()
    }

    /// Resolves when the leadership is lost: Redis no longer has it (its lease ran out while
    /// renewals failed, or the data was lost), or the lease ran out on this client's clock
    /// before a renewal got through — before Redis can expire it, so before a standby can lead
    /// (see [`Election`]'s clock assumptions). Stop acting as the leader then.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// # async fn lead() {}
    /// let leadership = client.election("scheduler").campaign("node-a").await?;
    /// tokio::select! {
    ///     _ = leadership.lost() => eprintln!("lost the leadership"),
    ///     _ = lead() => leadership.resign().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> crate::Lost {
        self.core.lost()
    }

    /// Gives the leadership up and waits for Redis to confirm it. The earliest-arrived live
    /// standby is handed the election and woken at once; observers see "no leader", then it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future still resigns: the script was sent, or the guard's drop hands it to
    /// the background task.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the leadership was already gone (lost, expired); nothing changes
    /// then, and a successor is untouched. Connection errors: the leadership then ends with
    /// its lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let leadership = client.election("scheduler").campaign("node-a").await?;
    /// leadership.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "resign", skip_all, fields(primitive = "election", term = self.term()))]
    pub async fn resign(self) -> Result<()> {
        self.core.unlock().await
    }

    /// Changes the leader's value to `value`, only while this leadership still holds in its
    /// term (checked in the same script that writes); observers see the new value.
    ///
    /// # Cancel safety
    ///
    /// One script call: dropped early, the new value may or may not be in Redis, and
    /// [`Leadership::value`] still shows the old one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad value (nothing is sent). [`Error::NotOwner`] if
    /// this handle no longer leads in this term (nothing changes). Connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let mut leadership = client.election("scheduler").campaign("node-a").await?;
    /// leadership.proclaim("node-a (draining)").await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "proclaim", skip_all, fields(primitive = "election", term = self.term()))]
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        let election = self.core.held().clone();
        let not_leader = || Error::not_owner(&election.inner.name);
        if self.core.is_lost() {
            return Err(not_leader());
        }
        let inner = &election.inner;
        let mut invocation = scripts::ELECTION_PROCLAIM.invocation();
        invocation
            .key(&*inner.keys.leader)
            .key(&*inner.keys.log)
            .key(&*inner.keys.observe)
            .arg(&**self.core.field())
            .arg(self.term())
            .arg(&value)
            .arg(inner.client.inner.conn.publish_command())
            .arg(COUNTER_IDLE.as_millis() as u64);
        let changed: i64 = election
            .script(&invocation, "proclaiming a leader's value")
            .await?;
        if changed != 1 {
            return Err(not_leader());
        }
        self.value = value;
        Ok(())
    }
}

crate::guard::forward_guard!(
    Leadership,
    |guard| crate::client::Object::name(guard.core.held()),
    Some(guard.core.fencing_token()),
    guard.core.unlock()
);

/// One entry of the change log, `<version>:<term>:<kind>:<value>`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Change {
    version: u64,
    term: u64,
    /// `Some(value)` for a leader (elected or proclaimed), `None` for "no leader after `term`".
    leader: Option<String>,
}

impl Change {
    fn parse(entry: &str) -> Option<Change> {
        let mut parts = entry.splitn(4, ':');
        let version = parts.next()?.parse().ok()?;
        let term = parts.next()?.parse().ok()?;
        let kind = parts.next()?;
        let value = parts.next()?;
        let leader = match kind {
            "L" | "P" => Some(value.to_owned()),
            "N" => None,
            _ => return None,
        };
        Some(Change {
            version,
            term,
            leader,
        })
    }
}

/// What one observer read found.
#[derive(Debug)]
struct Snapshot {
    leader: Option<Leader>,
    /// The last term handed out (0: never).
    term: u64,
    log: Vec<Change>,
}

/// An observer's position: the last change it yielded.
#[derive(Debug, Default)]
struct Cursor {
    /// The newest log entry it has looked at.
    version: u64,
    /// The last yielded state: term, whether it was "no leader" (a term's end comes after its
    /// leader), and the leader's value.
    last: Option<(u64, bool, Option<String>)>,
}

impl Cursor {
    /// The changes of `snapshot` to yield, in order: log entries not looked at yet (none on the
    /// first read, which yields the current state only), then the current state; each only if
    /// it comes after the last one yielded.
    fn advance(&mut self, snapshot: Snapshot) -> Vec<Option<Leader>> {
        let newest = snapshot.log.last().map_or(0, |c| c.version);
        if newest < self.version {
            // The log was lost (a restart without persistence): read it from the start; the
            // order of terms still keeps the stream from going back.
            self.version = 0;
        }
        let mut changes = Vec::new();
        if self.last.is_some() {
            let seen = self.version;
            for change in snapshot.log.iter().filter(|c| c.version > seen) {
                self.offer(change.term, change.leader.clone(), &mut changes);
            }
        }
        self.version = self.version.max(newest);
        match snapshot.leader {
            Some(leader) => self.offer(leader.term, Some(leader.value), &mut changes),
            // Nobody leads: the last term seen has ended, whatever the counter says (it may
            // have expired with the election idle).
            None => {
                let seen = self.last.as_ref().map_or(0, |(term, ..)| *term);
                self.offer(snapshot.term.max(seen), None, &mut changes)
            }
        }
        changes
    }

    /// Yields `(term, leader)` if it comes after the last yielded state: a later term, the end
    /// of the current term, or a new value in it.
    fn offer(&mut self, term: u64, leader: Option<String>, out: &mut Vec<Option<Leader>>) {
        let key = (term, leader.is_none());
        let newer = match &self.last {
            None => true,
            Some((last_term, last_ended, last_value)) => {
                let last_key = (*last_term, *last_ended);
                key > last_key || (key == last_key && leader.is_some() && leader != *last_value)
            }
        };
        if newer {
            out.push(leader.clone().map(|value| Leader {
                value,
                term,
                owner: None,
            }));
            self.last = Some((term, leader.is_none(), leader));
        }
    }
}

/// The state behind [`Election::observe`].
struct Observer {
    election: Election,
    cursor: Cursor,
    /// Changes read and not yielded yet.
    pending: VecDeque<Option<Leader>>,
    subscription: Option<Subscription>,
    /// Read without waiting first (the first read, and after subscribing).
    read_now: bool,
    /// The last call failed: pause before the next.
    failed: bool,
    /// The stream has ended (a bad name).
    done: bool,
}

impl Observer {
    async fn next(&mut self) -> Result<Option<Leader>> {
        if let Err(err) = check_name(&self.election.inner.name) {
            self.done = true;
            return Err(err);
        }
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(change);
            }
            if std::mem::take(&mut self.failed) {
                tokio::time::sleep(OBSERVE_POLL).await;
                self.read_now = true;
            }
            let Some(subscription) = &self.subscription else {
                // Subscribed before the read, so a change after the read is heard.
                let inner = &self.election.inner;
                match inner
                    .client
                    .inner
                    .hub
                    .subscribe(&inner.keys.observe, WakePolicy::All, None)
                    .await
                {
                    Ok(subscription) => self.subscription = Some(subscription),
                    Err(err) => {
                        self.failed = true;
                        return Err(err);
                    }
                }
                self.read_now = true;
                continue;
            };
            if !std::mem::take(&mut self.read_now) {
                subscription.wait_until(Instant::now() + OBSERVE_POLL).await;
            }
            match self.election.snapshot().await {
                Ok(snapshot) => self.pending.extend(self.cursor.advance(snapshot)),
                Err(err) => {
                    self.failed = true;
                    return Err(err);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "election_tests.rs"]
mod tests;
