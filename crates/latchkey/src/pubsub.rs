//! The pub/sub hub: one subscriber connection per client, multiplexing every channel that any
//! waiter of this client listens on.
//!
//! Each channel has a reference count (one per [`Subscription`]) and a FIFO queue of local
//! waiters. A message wakes waiters according to the channel's [`WakePolicy`] (for a lock: one
//! waiter per unlock message), so an unlock does not stampede every task of the client.
//! Channels nobody uses are unsubscribed after a short linger. When the connection is lost, the
//! hub reconnects, resubscribes every channel in use, and wakes every waiter, because messages
//! may have been missed meanwhile.
//!
//! All SUBSCRIBE / UNSUBSCRIBE traffic goes through the hub task, so their order on the wire is
//! the order of the decisions, and a waiter is registered (its slot queued) before its
//! subscription is confirmed and before it retries: no wake-up can be lost in between.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::Target;
use crate::error::{Error, Result};
use crate::metrics;
use crate::task::Task;

/// What a message on a channel does to the channel's local waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // `All` and `Count` serve the synchronizers
pub(crate) enum WakePolicy {
    /// Lock channels. A number of 2 or more is a hand-off to the client with that wake id: it
    /// wakes one waiter of that client only, and the `"0"` published right after it (for
    /// Redisson clients) is ignored. A `"0"` on its own (a Redisson or forced unlock, or nobody
    /// registered) wakes one waiter; `"1"` (Redisson's read unlock) wakes every waiter.
    Lock,
    /// A fair-lock waiter's own channel (`redisson_lock__channel:{name}:<owner id>`): a
    /// `<token>:<seq>` is a grant on release to this owner's registration `seq` (see
    /// `scripts/fair_release.lua`), taken by the waiter that made it; anything else (Redisson's
    /// `"0"`) wakes one waiter.
    Fair,
    /// Every message wakes every waiter.
    All,
    /// The message is a count `n` (released permits): wake up to `n` waiters (at least one).
    Count,
}

/// One waiter's place in a channel's queue.
#[derive(Debug, Default)]
struct Slot {
    /// Woken and not yet consumed.
    pending: AtomicBool,
    notify: Notify,
    /// A grant on release to this waiter, not taken yet, and how to give it back.
    granted: Mutex<Option<(Granted, Dispose)>>,
    /// The waiter is gone (set under the channels' lock): a grant for it is given back.
    closed: AtomicBool,
}

impl Slot {
    fn wake(&self) -> bool {
        if self.pending.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.notify.notify_one();
        true
    }
}

/// What gives back a grant on release nobody took: the release task for a fencing token.
#[derive(Clone)]
pub(crate) struct Dispose(pub(crate) Arc<dyn Fn(u64) -> Task + Send + Sync>);

impl Dispose {
    /// The task that gives back the grant with `token`.
    pub(crate) fn task(&self, token: u64) -> Task {
        (self.0)(token)
    }
}

impl std::fmt::Debug for Dispose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dispose")
    }
}

/// A registration that takes grants on release, made by a waiter of this client.
#[derive(Debug)]
struct Expected {
    slot: Weak<Slot>,
    dispose: Dispose,
    /// When it was made, before the attempt that carries it was sent.
    made: Instant,
    /// The park of that attempt (the registration's life, and so the grant's lease).
    park: Duration,
}

/// A grant on release that reached a waiter: the registration it was made for, when that
/// registration was made (before its attempt was sent: the grant came later), the park of that
/// attempt, and the fencing token. The lease the grantee counts on follows from the last two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) seq: u64,
    pub(crate) token: u64,
    pub(crate) registered_at: Instant,
    pub(crate) park: Duration,
}

/// How long a registration that takes grants is remembered: far longer than it stays live in
/// Redis (its park and 2 s), so a late message still finds who to give its grant back for.
const EXPECTED_FOR: Duration = Duration::from_secs(30);

/// Where a channel is in reading an announced grant: `-<wake id>`, `-<token>`, `-<seq>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum GrantParse {
    #[default]
    Idle,
    /// A grant to this client: its token comes next.
    Mine,
    /// A grant to this client with this token: its registration comes next.
    MineToken(u64),
    /// A grant to another client: this many of its messages are still to come.
    Other(u8),
}

#[derive(Debug)]
struct Channel {
    refs: usize,
    policy: WakePolicy,
    waiters: VecDeque<Arc<Slot>>,
    /// The last message was a hand-off: the `"0"` that follows it is for Redisson clients.
    after_hand_off: bool,
    /// The announcement of a grant on release being read.
    grant: GrantParse,
    /// This client's registrations that take grants, by sequence number.
    expected: HashMap<u64, Expected>,
    /// The grant channel of this client for this lock (`<channel>:latchkey:<wake id>`),
    /// subscribed together with the channel: grants on release to this client's registrations
    /// are announced there, one message read by this client only, rather than on the shared
    /// channel that every waiting client (and Redisson) reads. `None` for other primitives, and
    /// when the server refused it (an ACL narrower than `redisson_*` channels).
    grant_channel: Option<String>,
    /// The server has confirmed the subscription on the current connection.
    confirmed: bool,
    /// How many times the channel has fallen out of use (its references went to zero). A
    /// lingering entry unsubscribes the channel only if no later use came and went since it
    /// was queued, so a channel in steady use is never dropped and subscribed again.
    idle_generation: u64,
}

impl Channel {
    /// Wakes up to `count` waiters not woken yet; returns how many it woke.
    fn wake(&self, count: usize) -> usize {
        let mut woken = 0;
        for slot in &self.waiters {
            if woken == count {
                break;
            }
            if slot.wake() {
                woken += 1;
            }
        }
        woken
    }

    fn wake_all(&self) {
        for slot in &self.waiters {
            slot.wake();
        }
    }

    /// One message of a grant's announcement (the payload without its `-`); returns the task
    /// that gives a grant back when its waiter is gone.
    fn grant_message(&mut self, number: &[u8], my_wake_id: &str) -> Option<Task> {
        let value = std::str::from_utf8(number)
            .ok()
            .and_then(|n| n.parse::<u64>().ok());
        match (self.grant, value) {
            (GrantParse::Idle, _) => {
                // No "0" follows a grant (the lock stays held): the next "0" is a release.
                self.after_hand_off = false;
                self.grant = if number == my_wake_id.as_bytes() {
                    GrantParse::Mine
                } else {
                    GrantParse::Other(2)
                };
            }
            (GrantParse::Mine, Some(token)) => self.grant = GrantParse::MineToken(token),
            (GrantParse::MineToken(token), Some(seq)) => {
                self.grant = GrantParse::Idle;
                return self.granted(seq, token);
            }
            (GrantParse::Other(left), _) if left > 1 => self.grant = GrantParse::Other(left - 1),
            _ => self.grant = GrantParse::Idle,
        }
        None
    }

    /// The lock was granted to this client's registration `seq` with `token`: the waiter that
    /// made it takes it, or, gone, gives it back. On a fair lock's channel (one owner's), a
    /// grant for a waiter that is gone goes to another waiter of the same owner (a clone's)
    /// still waiting, if there is one: the grant took the owner's one place in the queue, which
    /// that waiter would otherwise lose.
    fn granted(&mut self, seq: u64, token: u64) -> Option<Task> {
        let expected = self.expected.remove(&seq)?;
        let free = |slot: &Arc<Slot>| {
            !slot.closed.load(Ordering::Acquire)
                && slot
                    .granted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_none()
        };
        let target = expected.slot.upgrade().filter(free).or_else(|| {
            if self.policy == WakePolicy::Fair {
                self.waiters.iter().find(|slot| free(slot)).cloned()
            } else {
                None
            }
        });
        if let Some(slot) = target {
            let granted = Granted {
                seq,
                token,
                registered_at: expected.made,
                park: expected.park,
            };
            *slot.granted.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((granted, expected.dispose));
            slot.wake();
            metrics::count(metrics::HANDOFFS, &[("event", "granted")], 1);
            return None;
        }
        metrics::count(metrics::HANDOFFS, &[("event", "given_back")], 1);
        Some(expected.dispose.task(token))
    }

    /// A message on this channel's grant channel: `<token>:<seq>`, a grant to this client.
    fn private_grant(&mut self, payload: &[u8]) -> Option<Task> {
        let (token, seq) = std::str::from_utf8(payload).ok()?.split_once(':')?;
        let (token, seq) = (token.parse().ok()?, seq.parse().ok()?);
        self.granted(seq, token)
    }

    fn deliver(&mut self, payload: &[u8], my_wake_id: &str) -> Option<Task> {
        if self.policy == WakePolicy::Lock {
            if let Some(number) = payload.strip_prefix(b"-") {
                return self.grant_message(number, my_wake_id);
            }
            self.grant = GrantParse::Idle;
        }
        let after_hand_off = std::mem::take(&mut self.after_hand_off);
        match self.policy {
            WakePolicy::Fair if payload.contains(&b':') => return self.private_grant(payload),
            WakePolicy::Fair => {
                self.wake(1);
            }
            WakePolicy::All => self.wake_all(),
            WakePolicy::Lock => match payload {
                b"0" if after_hand_off => {}
                b"1" => self.wake_all(),
                b"0" => {
                    self.wake(1);
                }
                id if id.len() > 1 && id.iter().all(u8::is_ascii_digit) => {
                    self.after_hand_off = true;
                    if id == my_wake_id.as_bytes() {
                        metrics::count(metrics::HANDOFFS, &[("event", "received")], 1);
                        self.wake(1);
                    }
                }
                _ => {
                    self.wake(1);
                }
            },
            WakePolicy::Count => {
                let n = std::str::from_utf8(payload)
                    .ok()
                    .and_then(|s| s.trim().parse::<usize>().ok())
                    .unwrap_or(1)
                    .max(1);
                self.wake(n);
            }
        }
        None
    }
}

/// The channels in use, by name: looked up on every acquire (hashed with foldhash, not SipHash).
type ChannelMap = HashMap<String, Channel, foldhash::fast::RandomState>;

#[derive(Debug)]
struct HubState {
    channels: Mutex<ChannelMap>,
    /// The grant channels in use, each with the channel it belongs to.
    grant_channels: Mutex<HashMap<String, String>>,
    /// This client's wake id, as published by lock releases.
    wake_id: String,
    /// The next registration number of a registration that takes grants on release.
    next_seq: AtomicU64,
    /// Where a waiter that gives up sends its clean-up script.
    background: mpsc::UnboundedSender<Task>,
}

impl HubState {
    fn channels(&self) -> std::sync::MutexGuard<'_, ChannelMap> {
        // A panic while holding this lock cannot leave the map inconsistent (every critical
        // section is a handful of infallible updates), so poisoning is ignored.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn grant_channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.grant_channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The channel `name` belongs to: itself, or the channel of the grant channel `name`.
    fn owner_of(&self, name: &str) -> String {
        self.grant_channels()
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }

    /// `channels` and their grant channels: what to subscribe for them.
    fn with_grant_channels(&self, channels: &[String]) -> Vec<String> {
        let map = self.channels();
        let mut all = channels.to_vec();
        all.extend(
            channels
                .iter()
                .filter_map(|c| map.get(c).and_then(|c| c.grant_channel.clone())),
        );
        all
    }
}

enum Command {
    Subscribe {
        channel: String,
        reply: oneshot::Sender<Result<()>>,
    },
    Unused {
        channel: String,
        /// The channel's `idle_generation` when it fell out of use.
        generation: u64,
    },
    /// The primary moved (a Sentinel failover): connect again, to the new one.
    Reconnect,
}

/// The client's pub/sub hub (see the module docs).
#[derive(Debug)]
pub(crate) struct Hub {
    state: Arc<HubState>,
    commands: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Subscribe { channel, .. } => write!(f, "Subscribe({channel})"),
            Command::Unused { channel, .. } => write!(f, "Unused({channel})"),
            Command::Reconnect => write!(f, "Reconnect"),
        }
    }
}

/// How the hub connects and how long it keeps channels nobody uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HubSettings {
    /// How long connecting (and resubscribing) may take.
    pub(crate) connect_timeout: Duration,
    /// How long one SUBSCRIBE, UNSUBSCRIBE or PING may take.
    pub(crate) command_timeout: Duration,
    /// How long an unused channel stays subscribed.
    pub(crate) linger: Duration,
}

impl Hub {
    /// Starts the hub task; it connects on the first subscription.
    pub(crate) fn start(
        target: Target,
        settings: HubSettings,
        wake_id: u64,
        background: mpsc::UnboundedSender<Task>,
        shutdown: CancellationToken,
    ) -> Hub {
        let state = Arc::new(HubState {
            channels: Mutex::new(ChannelMap::default()),
            grant_channels: Mutex::new(HashMap::new()),
            wake_id: wake_id.to_string(),
            next_seq: AtomicU64::new(1),
            background,
        });
        let (commands, rx) = mpsc::unbounded_channel();
        let task = HubTask {
            target,
            state: state.clone(),
            commands: rx,
            connect_timeout: settings.connect_timeout,
            command_timeout: settings.command_timeout,
            linger: settings.linger,
            conn: None,
            subscribed: HashSet::new(),
            lingering: VecDeque::new(),
            dropped: HashSet::new(),
            ever_connected: false,
        };
        tokio::spawn(task.run(shutdown));
        Hub { state, commands }
    }

    /// Subscribes to `channel` and queues a waiter on it. Returns once the server confirmed the
    /// subscription, so every message published afterwards reaches the returned waiter.
    ///
    /// Cancel safe: dropping the future releases the waiter and the channel reference.
    ///
    /// `on_leave` runs in the background if this waiter gives up (is dropped without
    /// [`Subscription::finish`]) while no other local waiter is left on the channel.
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        policy: WakePolicy,
        on_leave: Option<Task>,
    ) -> Result<Subscription> {
        self.subscribe_with(channel, None, policy, on_leave).await
    }

    /// [`Hub::subscribe`], with this client's grant channel for `channel` (see
    /// `Channel::grant_channel`) when it is first subscribed.
    pub(crate) async fn subscribe_with(
        &self,
        channel: &str,
        grant_channel: Option<&str>,
        policy: WakePolicy,
        on_leave: Option<Task>,
    ) -> Result<Subscription> {
        let slot = Arc::new(Slot::default());
        {
            let mut channels = self.state.channels();
            let entry = channels.entry(channel.to_owned()).or_insert_with(|| {
                if let Some(grants) = grant_channel {
                    self.state
                        .grant_channels()
                        .insert(grants.to_owned(), channel.to_owned());
                }
                Channel {
                    refs: 0,
                    policy,
                    waiters: VecDeque::new(),
                    after_hand_off: false,
                    grant: GrantParse::Idle,
                    expected: HashMap::new(),
                    grant_channel: grant_channel.map(str::to_owned),
                    confirmed: false,
                    idle_generation: 0,
                }
            });
            entry.refs += 1;
            entry.waiters.push_back(slot.clone());
        }
        let subscription = Subscription {
            state: self.state.clone(),
            commands: self.commands.clone(),
            channel: channel.to_owned(),
            slot,
            finished: false,
            on_leave,
        };
        let (reply, confirmed) = oneshot::channel();
        self.commands
            .send(Command::Subscribe {
                channel: channel.to_owned(),
                reply,
            })
            .map_err(|_| Error::Closed)?;
        confirmed.await.map_err(|_| Error::Closed)??;
        Ok(subscription)
    }

    /// Queues a waiter on `channel` without any I/O, if the channel is already subscribed and
    /// confirmed (used by other waiters, or lingering). Every message published after this call
    /// returns reaches the returned waiter, so the caller's next attempt needs no retry after it.
    pub(crate) fn try_join(
        &self,
        channel: &str,
        on_leave: impl FnOnce() -> Option<Task>,
    ) -> Option<Subscription> {
        let slot;
        {
            let mut channels = self.state.channels();
            let entry = channels.get_mut(channel).filter(|c| c.confirmed)?;
            slot = Arc::new(Slot::default());
            entry.refs += 1;
            entry.waiters.push_back(slot.clone());
        }
        Some(Subscription {
            state: self.state.clone(),
            commands: self.commands.clone(),
            channel: channel.to_owned(),
            slot,
            finished: false,
            on_leave: on_leave(),
        })
    }

    /// A callback that makes the hub drop its connection and connect again (to the primary
    /// the sentinels name now), waking every waiter.
    pub(crate) fn reconnect_callback(&self) -> std::sync::Arc<dyn Fn() + Send + Sync> {
        let commands = self.commands.clone();
        std::sync::Arc::new(move || {
            let _ = commands.send(Command::Reconnect);
        })
    }

    /// Hands `task` (giving back a grant on release) to the client's background queue.
    pub(crate) fn give_back(&self, task: Task) {
        let _ = self.state.background.send(task);
    }

    /// Channels subscribed or lingering.
    pub(crate) fn channel_count(&self) -> usize {
        self.state.channels().len()
    }

    /// Whether this client listens on `channel` now (subscribed, or lingering after use).
    pub(crate) fn listens(&self, channel: &str) -> bool {
        self.state
            .channels()
            .get(channel)
            .is_some_and(|c| c.confirmed)
    }

    /// How many local waiters are queued on `channel`.
    pub(crate) fn waiters_on(&self, channel: &str) -> usize {
        self.state
            .channels()
            .get(channel)
            .map_or(0, |c| c.waiters.len())
    }
}

/// A waiter's registration on a channel. Dropping it gives up the place in the queue (passing
/// on a wake-up it received and did not use) and releases the channel reference.
#[derive(Debug)]
pub(crate) struct Subscription {
    state: Arc<HubState>,
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    slot: Arc<Slot>,
    finished: bool,
    on_leave: Option<Task>,
}

impl Subscription {
    /// Waits until a message wakes this waiter or `deadline` passes. Returns whether it was
    /// woken. A wake-up that arrived while the waiter was busy is delivered at once.
    pub(crate) async fn wait_until(&self, deadline: Instant) -> bool {
        tokio::select! {
            biased;
            _ = self.slot.notify.notified() => {
                self.slot.pending.store(false, Ordering::Release);
                true
            }
            _ = tokio::time::sleep_until(deadline) => false,
        }
    }

    /// Marks the wait as successful: a pending wake-up is consumed rather than passed on.
    pub(crate) fn finish(mut self) {
        self.finished = true;
    }

    /// Wakes another waiter of this client on the channel, if there is one: a grant on release
    /// took this client out of the lock's wait queue, and the other waiter's attempt puts it
    /// back in.
    pub(crate) fn wake_another(&self) {
        let channels = self.state.channels();
        let other = channels.get(&self.channel).and_then(|channel| {
            channel
                .waiters
                .iter()
                .find(|slot| !Arc::ptr_eq(slot, &self.slot))
        });
        if let Some(slot) = other {
            slot.wake();
        }
    }

    /// Makes a registration number for a registration that takes grants on release, and
    /// routes the grant announced with it to this waiter. `dispose` gives back a grant that
    /// comes when this waiter is gone, or that it does not take. Also returns whether the
    /// client listens on its grant channel for the lock (then the registration asks for its
    /// grant to be announced there).
    pub(crate) fn expect_grant(&mut self, dispose: Dispose, park: Duration) -> (u64, bool) {
        let seq = self.state.next_seq.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut channels = self.state.channels();
        let mut private = false;
        if let Some(channel) = channels.get_mut(&self.channel) {
            private = channel.grant_channel.is_some();
            channel
                .expected
                .retain(|_, e| now.saturating_duration_since(e.made) < EXPECTED_FOR);
            channel.expected.insert(
                seq,
                Expected {
                    slot: Arc::downgrade(&self.slot),
                    dispose,
                    made: now,
                    park,
                },
            );
        }
        (seq, private)
    }

    /// The grant on release this waiter got, if any. Taking it makes the caller its holder
    /// (or the one to give it back).
    pub(crate) fn take_grant(&self) -> Option<Granted> {
        self.take_granted().map(|(granted, _)| granted)
    }

    /// [`Subscription::take_grant`], with how to give the grant back.
    fn take_granted(&self) -> Option<(Granted, Dispose)> {
        self.slot
            .granted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Passes a wake-up this waiter got but could not use on to the waiter queued right behind
    /// it (semaphores: a request for more permits than were released lets a smaller one behind
    /// it try). Never wraps around to the front, so a chain of passes ends at the last waiter.
    pub(crate) fn pass_on(&self) {
        let channels = self.state.channels();
        let Some(channel) = channels.get(&self.channel) else {
            return;
        };
        let behind = channel
            .waiters
            .iter()
            .position(|slot| Arc::ptr_eq(slot, &self.slot))
            .and_then(|pos| channel.waiters.get(pos + 1));
        if let Some(slot) = behind {
            if slot.wake() {
                metrics::count(metrics::HANDOFFS, &[("event", "passed_on")], 1);
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.state.channels();
        // Under the channels' lock, as the hub grants: a grant is either here now, or comes
        // after and finds the waiter closed.
        self.slot.closed.store(true, Ordering::Release);
        let gave_back = match self.take_granted() {
            Some((granted, dispose)) => {
                metrics::count(metrics::HANDOFFS, &[("event", "given_back")], 1);
                let _ = self.state.background.send(dispose.task(granted.token));
                true
            }
            _ => false,
        };
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        if let Some(pos) = channel
            .waiters
            .iter()
            .position(|slot| Arc::ptr_eq(slot, &self.slot))
        {
            channel.waiters.remove(pos);
        }
        if gave_back && self.finished {
            // The grant took this client out of the lock's queue: another waiter's attempt
            // puts it back.
            channel.wake(1);
        }
        if !self.finished {
            if self.slot.pending.load(Ordering::Acquire) {
                // This waiter was woken for a release it will not use: wake the next one instead.
                if channel.wake(1) > 0 {
                    metrics::count(metrics::HANDOFFS, &[("event", "passed_on")], 1);
                }
            }
            if channel.waiters.is_empty() {
                if let Some(task) = self.on_leave.take() {
                    let _ = self.state.background.send(task);
                }
            }
        }
        channel.refs = channel.refs.saturating_sub(1);
        if channel.refs == 0 {
            channel.idle_generation += 1;
            let _ = self.commands.send(Command::Unused {
                channel: self.channel.clone(),
                generation: channel.idle_generation,
            });
        }
    }
}

struct HubTask {
    target: Target,
    state: Arc<HubState>,
    commands: mpsc::UnboundedReceiver<Command>,
    connect_timeout: Duration,
    command_timeout: Duration,
    linger: Duration,
    conn: Option<SubConn>,
    /// Channels the server has confirmed on the current connection.
    subscribed: HashSet<String>,
    /// Channels whose last user left, with the time to unsubscribe them.
    lingering: VecDeque<(Instant, String, u64)>,
    /// Channels in use whose subscription the server ended on its own, to subscribe again.
    dropped: HashSet<String>,
    ever_connected: bool,
}

const HEALTH_CHECK_EVERY: Duration = Duration::from_secs(5);

impl HubTask {
    async fn run(mut self, shutdown: CancellationToken) {
        let mut health = tokio::time::interval(HEALTH_CHECK_EVERY);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Duration::from_millis(50);
        loop {
            let next_linger = self.lingering.front().map(|(at, ..)| *at);
            let needs_reconnect = self.conn.is_none() && self.in_use();
            let needs_resubscribe = self.conn.is_some() && !self.dropped.is_empty();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                command = self.commands.recv() => match command {
                    Some(command) => self.handle(command).await,
                    None => return,
                },
                incoming = next_incoming(&mut self.conn) => match incoming {
                    Incoming::Message { channel, payload } => self.deliver(&channel, &payload),
                    Incoming::Gap => self.wake_everyone(),
                    Incoming::Dropped { channel } => self.dropped(channel),
                    Incoming::Closed => self.disconnected("the subscriber connection closed"),
                },
                _ = sleep_until_opt(next_linger) => self.expire_lingering().await,
                _ = health.tick(), if self.conn.is_some() => self.health_check().await,
                _ = tokio::time::sleep(backoff), if needs_resubscribe => {
                    if self.resubscribe_dropped().await {
                        backoff = Duration::from_millis(50);
                    } else {
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                }
                _ = tokio::time::sleep(backoff), if needs_reconnect => {
                    if self.reconnect().await {
                        backoff = Duration::from_millis(50);
                    } else {
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                }
            }
        }
    }

    fn in_use(&self) -> bool {
        self.state.channels().values().any(|c| c.refs > 0)
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Subscribe { channel, reply } => {
                let wanted = self
                    .state
                    .channels()
                    .get(&channel)
                    .is_some_and(|c| c.refs > 0);
                if !wanted || self.subscribed.contains(&channel) {
                    let _ = reply.send(Ok(()));
                    return;
                }
                let result = self.subscribe(vec![channel.clone()]).await;
                let result = match result {
                    Err(e) if e.is_permission_denied() && self.drop_grant_channel(&channel) => {
                        // Refused with its grant channel (an ACL narrower than `redisson_*`
                        // channels): grants to this client are announced on the channel.
                        tracing::debug!(channel, "grant channel refused; using the lock's channel");
                        self.subscribe(vec![channel]).await
                    }
                    result => result,
                };
                let _ = reply.send(result);
            }
            Command::Reconnect => {
                if self.conn.is_some() {
                    self.disconnected("the primary moved");
                    // Anything published on the new primary meanwhile was missed.
                    self.wake_everyone();
                }
            }
            Command::Unused {
                channel,
                generation,
            } => {
                self.lingering
                    .push_back((Instant::now() + self.linger, channel, generation));
            }
        }
    }

    /// Forgets the grant channel of `channel`; returns whether it had one.
    fn drop_grant_channel(&self, channel: &str) -> bool {
        let grants = self
            .state
            .channels()
            .get_mut(channel)
            .and_then(|c| c.grant_channel.take());
        match grants {
            Some(grants) => {
                self.state.grant_channels().remove(&grants);
                true
            }
            None => false,
        }
    }

    /// Connects if needed and subscribes to `channels` (and their grant channels).
    async fn subscribe(&mut self, channels: Vec<String>) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            self.connect().await?;
            // `connect` resubscribed every channel in use, these included.
            return Ok(());
        };
        let all = self.state.with_grant_channels(&channels);
        match tokio::time::timeout(self.command_timeout, conn.subscribe(&all)).await {
            Ok(Ok(())) => {
                let mut map = self.state.channels();
                for channel in &channels {
                    if let Some(c) = map.get_mut(channel) {
                        c.confirmed = true;
                    }
                }
                drop(map);
                self.subscribed.extend(channels);
                Ok(())
            }
            Ok(Err(e)) => {
                let err = Error::from_redis(e, "subscribing", &channels[0], self.command_timeout);
                if err.is_connection() {
                    self.disconnected("subscribe failed");
                }
                Err(err)
            }
            Err(_) => {
                self.disconnected("subscribe timed out");
                Err(Error::Timeout {
                    timeout: self.command_timeout,
                    context: "subscribing",
                })
            }
        }
    }

    /// Opens the subscriber connection and subscribes every channel in use.
    async fn connect(&mut self) -> Result<()> {
        let connecting = SubConn::connect(self.target.clone());
        let mut conn = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                return Err(Error::from_redis(
                    e,
                    "connecting the subscriber",
                    "",
                    self.connect_timeout,
                ))
            }
            Err(_) => {
                return Err(Error::Timeout {
                    timeout: self.connect_timeout,
                    context: "connecting the subscriber",
                })
            }
        };
        let wanted: Vec<String> = self
            .state
            .channels()
            .iter()
            .filter(|(_, c)| c.refs > 0)
            .map(|(name, _)| name.clone())
            .collect();
        if !wanted.is_empty() {
            let all = self.state.with_grant_channels(&wanted);
            match tokio::time::timeout(self.command_timeout, conn.subscribe(&all)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(Error::from_redis(
                        e,
                        "resubscribing",
                        &wanted[0],
                        self.command_timeout,
                    ))
                }
                Err(_) => {
                    return Err(Error::Timeout {
                        timeout: self.command_timeout,
                        context: "resubscribing",
                    })
                }
            }
        }
        {
            let mut map = self.state.channels();
            for channel in &wanted {
                if let Some(c) = map.get_mut(channel) {
                    c.confirmed = true;
                }
            }
        }
        self.subscribed = wanted.into_iter().collect();
        self.conn = Some(conn);
        if self.ever_connected {
            // Messages may have been published while we were away: every waiter retries.
            self.wake_everyone();
            tracing::info!("latchkey subscriber reconnected");
            metrics::count(metrics::PUBSUB_RECONNECTS, &[], 1);
            metrics::count(
                metrics::PUBSUB_RESUBSCRIPTIONS,
                &[],
                self.subscribed.len() as u64,
            );
        }
        self.ever_connected = true;
        Ok(())
    }

    async fn reconnect(&mut self) -> bool {
        match self.connect().await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e.chain(), "latchkey subscriber reconnect failed");
                false
            }
        }
    }

    fn wake_everyone(&self) {
        for channel in self.state.channels().values_mut() {
            // Messages may have been missed: an announcement being read is incomplete.
            channel.grant = GrantParse::Idle;
            channel.wake_all();
        }
    }

    fn disconnected(&mut self, why: &str) {
        if self.conn.is_some() {
            // It reconnects on its own, and waiters retry by their park meanwhile: not for an
            // operator (`latchkey_pubsub_reconnects_total` counts the reconnections).
            tracing::info!("latchkey subscriber lost its connection: {why}");
        }
        self.conn = None;
        self.subscribed.clear();
        self.dropped.clear();
        for channel in self.state.channels().values_mut() {
            channel.confirmed = false;
        }
    }

    /// The server ended the subscription to `channel` (see [`Incoming::Dropped`]). Our own
    /// unsubscribes end this way too; a channel still in use is subscribed again — on a
    /// cluster the driver routes the new `SSUBSCRIBE` to the node that owns the slot now,
    /// following `MOVED` — and its waiters retry at once, since a release may have been
    /// published while nobody listened.
    fn dropped(&mut self, channel: String) {
        // A grant channel is the channel's: both are subscribed again.
        let channel = self.state.owner_of(&channel);
        let mut channels = self.state.channels();
        let Some(entry) = channels.get_mut(&channel) else {
            return;
        };
        // A lingering channel (no references) is not needed: let the linger forget it.
        if entry.refs == 0 {
            drop(channels);
            self.subscribed.remove(&channel);
            return;
        }
        entry.confirmed = false;
        entry.wake_all();
        drop(channels);
        tracing::debug!(
            channel,
            "latchkey subscription ended by the server; subscribing again"
        );
        self.subscribed.remove(&channel);
        self.dropped.insert(channel);
    }

    /// Subscribes the dropped channels that are still in use again. Returns whether all of them
    /// are subscribed now.
    async fn resubscribe_dropped(&mut self) -> bool {
        let wanted: Vec<String> = {
            let channels = self.state.channels();
            self.dropped
                .iter()
                .filter(|c| channels.get(*c).is_some_and(|c| c.refs > 0))
                .cloned()
                .collect()
        };
        self.dropped.clear();
        if wanted.is_empty() {
            return true;
        }
        match self.subscribe(wanted.clone()).await {
            Ok(()) => {
                metrics::count(metrics::PUBSUB_RESUBSCRIPTIONS, &[], wanted.len() as u64);
                // Anything published between the drop and now was missed.
                let channels = self.state.channels();
                for channel in &wanted {
                    if let Some(c) = channels.get(channel) {
                        c.wake_all();
                    }
                }
                true
            }
            Err(e) => {
                tracing::debug!(error = %e.chain(), "latchkey resubscribe failed; trying again");
                if self.conn.is_some() {
                    self.dropped.extend(wanted);
                }
                false
            }
        }
    }

    fn deliver(&self, channel: &str, payload: &[u8]) {
        let owner = self.state.grant_channels().get(channel).cloned();
        let give_back = match owner {
            Some(owner) => self
                .state
                .channels()
                .get_mut(&owner)
                .and_then(|c| c.private_grant(payload)),
            None => match self.state.channels().get_mut(channel) {
                Some(channel) => channel.deliver(payload, &self.state.wake_id),
                None => None,
            },
        };
        if let Some(task) = give_back {
            let _ = self.state.background.send(task);
        }
    }

    async fn expire_lingering(&mut self) {
        let now = Instant::now();
        let mut to_drop = Vec::new();
        while let Some((at, ..)) = self.lingering.front() {
            if *at > now {
                break;
            }
            let (_, channel, generation) = self.lingering.pop_front().expect("front exists");
            let mut channels = self.state.channels();
            // Unused for a whole linger: no use came and went since this entry was queued.
            if channels
                .get(&channel)
                .is_some_and(|c| c.refs == 0 && c.idle_generation == generation)
            {
                let removed = channels.remove(&channel).and_then(|c| c.grant_channel);
                let subscribed = self.subscribed.remove(&channel);
                if subscribed {
                    to_drop.push(channel);
                }
                if let Some(grants) = removed {
                    self.state.grant_channels().remove(&grants);
                    if subscribed {
                        to_drop.push(grants);
                    }
                }
            }
        }
        if to_drop.is_empty() {
            return;
        }
        if let Some(conn) = self.conn.as_mut() {
            match tokio::time::timeout(self.command_timeout, conn.unsubscribe(&to_drop)).await {
                Ok(Ok(())) => {}
                _ => self.disconnected("unsubscribe failed"),
            }
        }
    }

    async fn health_check(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let ok = matches!(
            tokio::time::timeout(self.command_timeout, conn.ping()).await,
            Ok(Ok(()))
        );
        if !ok {
            self.disconnected("health check failed");
        }
    }
}

/// The subscriber connection: a RESP2 pub/sub connection to one server, or, on a cluster, a
/// RESP3 cluster connection with sharded subscriptions (SSUBSCRIBE), which the driver renews
/// after topology changes.
enum SubConn {
    Plain {
        sink: PubSubSink,
        stream: PubSubStream,
    },
    #[cfg(feature = "cluster")]
    Cluster {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    },
}

/// What the subscriber connection delivered. (Only a cluster connection reports a gap or a
/// dropped subscription.)
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
enum Incoming {
    Message {
        channel: String,
        payload: Vec<u8>,
    },
    /// The connection was interrupted and restored: messages may have been missed.
    Gap,
    /// The server ended our subscription to a channel on its own (on a cluster: the node no
    /// longer owns the channel's slot after a failover or a slot migration).
    Dropped {
        channel: String,
    },
    Closed,
}

impl SubConn {
    async fn connect(target: Target) -> redis::RedisResult<SubConn> {
        match target {
            #[cfg(feature = "cluster")]
            Target::Cluster(cluster) => {
                let (tx, pushes) = mpsc::unbounded_channel();
                let conn = cluster.client(Some(tx))?.get_async_connection().await?;
                Ok(SubConn::Cluster { conn, pushes })
            }
            target => {
                let (sink, stream) = target.client().await?.get_async_pubsub().await?.split();
                Ok(SubConn::Plain { sink, stream })
            }
        }
    }

    async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            SubConn::Plain { sink, .. } => sink.subscribe(channels).await,
            #[cfg(feature = "cluster")]
            SubConn::Cluster { conn, .. } => {
                // One at a time: channels of different slots live on different shards.
                for channel in channels {
                    conn.ssubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    async fn unsubscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            SubConn::Plain { sink, .. } => sink.unsubscribe(channels).await,
            #[cfg(feature = "cluster")]
            SubConn::Cluster { conn, .. } => {
                for channel in channels {
                    conn.sunsubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    async fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            SubConn::Plain { sink, .. } => sink.ping::<redis::Value>().await.map(drop),
            #[cfg(feature = "cluster")]
            SubConn::Cluster { conn, .. } => redis::cmd("PING")
                .query_async::<redis::Value>(conn)
                .await
                .map(drop),
        }
    }

    async fn next(&mut self) -> Incoming {
        match self {
            SubConn::Plain { stream, .. } => match stream.next().await {
                Some(msg) => Incoming::Message {
                    channel: msg.get_channel_name().to_owned(),
                    payload: msg.get_payload_bytes().to_vec(),
                },
                None => Incoming::Closed,
            },
            #[cfg(feature = "cluster")]
            SubConn::Cluster { pushes, .. } => loop {
                let Some(push) = pushes.recv().await else {
                    return Incoming::Closed;
                };
                match push.kind {
                    redis::PushKind::SMessage | redis::PushKind::Message => {
                        if let [channel, payload, ..] = push.data.as_slice() {
                            let channel: Option<String> = redis::from_redis_value_ref(channel).ok();
                            let payload: Option<Vec<u8>> =
                                redis::from_redis_value_ref(payload).ok();
                            if let (Some(channel), Some(payload)) = (channel, payload) {
                                return Incoming::Message { channel, payload };
                            }
                        }
                    }
                    redis::PushKind::Disconnection => return Incoming::Gap,
                    redis::PushKind::SUnsubscribe | redis::PushKind::Unsubscribe => {
                        let channel = push
                            .data
                            .first()
                            .and_then(|c| redis::from_redis_value_ref::<String>(c).ok());
                        if let Some(channel) = channel {
                            return Incoming::Dropped { channel };
                        }
                    }
                    _ => {}
                }
            },
        }
    }
}

async fn next_incoming(conn: &mut Option<SubConn>) -> Incoming {
    match conn {
        Some(conn) => conn.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "pubsub_tests.rs"]
mod delivery_tests;
