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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::{within, Target};
use crate::error::{lock, Error, Result};
use crate::metrics;
use crate::task::Task;

/// What a message on a channel does to the channel's local waiters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum WakePolicy {
    /// Lock channels. A number of 2 or more is a hand-off to the client with that wake id: it
    /// wakes one waiter of that client only, and the `"0"` published right after it (for
    /// Redisson clients) is ignored. A `"0"` on its own (a Redisson or forced unlock, or nobody
    /// registered) wakes one waiter; `"1"` (Redisson's read unlock) wakes every waiter.
    #[default]
    Lock,
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

#[derive(Debug, Default)]
struct Channel {
    refs: usize,
    policy: WakePolicy,
    waiters: VecDeque<Arc<Slot>>,
    /// The last message was a hand-off: the `"0"` that follows it is for Redisson clients.
    after_hand_off: bool,
    /// The server has confirmed the subscription on the current connection.
    confirmed: bool,
    /// How many times the channel has fallen out of use (its references went to zero). A
    /// lingering entry unsubscribes the channel only if no later use came and went since it
    /// was queued, so a channel in steady use is never dropped and subscribed again.
    idle_generation: u64,
}

impl Channel {
    /// Wakes up to `count` waiters not woken yet, in order; returns how many it woke.
    fn wake(&self, count: usize) -> usize {
        self.waiters
            .iter()
            .filter(|slot| slot.wake())
            .take(count)
            .count()
    }

    fn wake_all(&self) {
        self.wake(usize::MAX);
    }

    fn deliver(&mut self, payload: &[u8], my_wake_id: &str) {
        let after_hand_off = std::mem::take(&mut self.after_hand_off);
        match self.policy {
            WakePolicy::All => self.wake_all(),
            WakePolicy::Lock => match payload {
                b"0" if after_hand_off => {}
                b"1" => self.wake_all(),
                id if id.len() > 1 && id.iter().all(u8::is_ascii_digit) => {
                    self.after_hand_off = true;
                    if id == my_wake_id.as_bytes() {
                        metrics::count(metrics::HANDOFFS, &[("event", "received")], 1);
                        self.wake(1);
                    }
                }
                // `"0"` (with no hand-off before it), or anything else.
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
    }
}

/// The channels in use, by name: looked up on every acquire (hashed with foldhash, not SipHash).
type ChannelMap = HashMap<String, Channel, foldhash::fast::RandomState>;

#[derive(Debug)]
struct HubState {
    channels: Mutex<ChannelMap>,
    /// This client's wake id, as published by lock releases.
    wake_id: String,
    /// Where a waiter that gives up sends its clean-up script.
    background: mpsc::UnboundedSender<Task>,
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
            wake_id: wake_id.to_string(),
            background,
        });
        let (commands, rx) = mpsc::unbounded_channel();
        let task = HubTask {
            target,
            state: state.clone(),
            commands: rx,
            settings,
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
        let subscription = {
            let mut channels = lock(&self.state.channels);
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    policy,
                    ..Channel::default()
                });
            self.join(entry, channel, on_leave)
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
        let mut channels = lock(&self.state.channels);
        let entry = channels.get_mut(channel).filter(|c| c.confirmed)?;
        Some(self.join(entry, channel, on_leave()))
    }

    /// Queues a new waiter on the channel `entry` (of the locked map), with a reference to it.
    fn join(&self, entry: &mut Channel, channel: &str, on_leave: Option<Task>) -> Subscription {
        let slot = Arc::new(Slot::default());
        entry.refs += 1;
        entry.waiters.push_back(slot.clone());
        Subscription {
            state: self.state.clone(),
            commands: self.commands.clone(),
            channel: channel.to_owned(),
            slot,
            finished: false,
            on_leave,
        }
    }

    /// A callback that makes the hub drop its connection and connect again (to the primary
    /// the sentinels name now), waking every waiter.
    pub(crate) fn reconnect_callback(&self) -> std::sync::Arc<dyn Fn() + Send + Sync> {
        let commands = self.commands.clone();
        std::sync::Arc::new(move || {
            let _ = commands.send(Command::Reconnect);
        })
    }

    /// Channels subscribed or lingering.
    pub(crate) fn channel_count(&self) -> usize {
        lock(&self.state.channels).len()
    }

    /// How many local waiters are queued on `channel`.
    pub(crate) fn waiters_on(&self, channel: &str) -> usize {
        lock(&self.state.channels)
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

    /// Passes a wake-up this waiter got but could not use on to the waiter queued right behind
    /// it (semaphores: a request for more permits than were released lets a smaller one behind
    /// it try). Never wraps around to the front, so a chain of passes ends at the last waiter.
    pub(crate) fn pass_on(&self) {
        let channels = lock(&self.state.channels);
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
        let mut channels = lock(&self.state.channels);
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        channel
            .waiters
            .retain(|slot| !Arc::ptr_eq(slot, &self.slot));
        if !self.finished {
            if self.slot.pending.load(Ordering::Acquire) {
                // This waiter was woken for a release it will not use: wake the next one instead.
                if channel.wake(1) > 0 {
                    metrics::count(metrics::HANDOFFS, &[("event", "passed_on")], 1);
                }
            }
            if channel.waiters.is_empty() {
                if let Some(mut task) = self.on_leave.take() {
                    // A client's place in a queue: not sent again, a later waiter of this
                    // client may have taken it again by then.
                    task.resend = false;
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
    settings: HubSettings,
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
            let in_use = || lock(&self.state.channels).values().any(|c| c.refs > 0);
            let needs_reconnect = self.conn.is_none() && in_use();
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
                _ = tokio::time::sleep(backoff), if needs_reconnect || needs_resubscribe => {
                    let repaired = if needs_reconnect {
                        let connected = self.connect().await.inspect_err(|e| {
                            tracing::debug!(error = %e.chain(), "latchkey subscriber reconnect failed");
                        });
                        connected.is_ok()
                    } else {
                        self.resubscribe_dropped().await
                    };
                    backoff = if repaired {
                        Duration::from_millis(50)
                    } else {
                        (backoff * 2).min(Duration::from_secs(1))
                    };
                }
            }
        }
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Subscribe { channel, reply } => {
                let wanted = lock(&self.state.channels)
                    .get(&channel)
                    .is_some_and(|c| c.refs > 0);
                if !wanted || self.subscribed.contains(&channel) {
                    let _ = reply.send(Ok(()));
                    return;
                }
                let result = self.subscribe(vec![channel]).await;
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
                self.lingering.push_back((
                    Instant::now() + self.settings.linger,
                    channel,
                    generation,
                ));
            }
        }
    }

    /// Connects if needed and subscribes to `channels`.
    async fn subscribe(&mut self, channels: Vec<String>) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            self.connect().await?;
            // `connect` resubscribed every channel in use, these included.
            return Ok(());
        };
        let subscribing = conn.subscribe(&channels, true);
        let timeout = self.settings.command_timeout;
        if let Err(err) = within(timeout, "subscribing", &channels[0], subscribing).await {
            if err.is_connection() {
                let timed_out = err.is_uncertain();
                self.disconnected(if timed_out {
                    "subscribe timed out"
                } else {
                    "subscribe failed"
                });
            }
            return Err(err);
        }
        self.confirm(&channels);
        self.subscribed.extend(channels);
        Ok(())
    }

    /// Marks `channels` confirmed by the server.
    fn confirm(&self, channels: &[String]) {
        let mut map = lock(&self.state.channels);
        for channel in channels {
            if let Some(c) = map.get_mut(channel) {
                c.confirmed = true;
            }
        }
    }

    /// Opens the subscriber connection and subscribes every channel in use.
    async fn connect(&mut self) -> Result<()> {
        let connecting = SubConn::connect(self.target.clone());
        let context = "connecting the subscriber";
        let mut conn = within(self.settings.connect_timeout, context, "", connecting).await?;
        let wanted: Vec<String> = lock(&self.state.channels)
            .iter()
            .filter(|(_, c)| c.refs > 0)
            .map(|(name, _)| name.clone())
            .collect();
        if let Some(first) = wanted.first() {
            let subscribing = conn.subscribe(&wanted, true);
            within(
                self.settings.command_timeout,
                "resubscribing",
                first,
                subscribing,
            )
            .await?;
        }
        self.confirm(&wanted);
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

    fn wake_everyone(&self) {
        for channel in lock(&self.state.channels).values() {
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
        for channel in lock(&self.state.channels).values_mut() {
            channel.confirmed = false;
        }
    }

    /// The server ended the subscription to `channel` (see [`Incoming::Dropped`]). Our own
    /// unsubscribes end this way too; a channel still in use is subscribed again — on a
    /// cluster the driver routes the new `SSUBSCRIBE` to the node that owns the slot now,
    /// following `MOVED` — and its waiters retry at once, since a release may have been
    /// published while nobody listened.
    fn dropped(&mut self, channel: String) {
        let mut channels = lock(&self.state.channels);
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
            let channels = lock(&self.state.channels);
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
                let channels = lock(&self.state.channels);
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
        if let Some(channel) = lock(&self.state.channels).get_mut(channel) {
            channel.deliver(payload, &self.state.wake_id);
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
            let mut channels = lock(&self.state.channels);
            // Unused for a whole linger: no use came and went since this entry was queued.
            if channels
                .get(&channel)
                .is_some_and(|c| c.refs == 0 && c.idle_generation == generation)
            {
                channels.remove(&channel);
                if self.subscribed.remove(&channel) {
                    to_drop.push(channel);
                }
            }
        }
        if to_drop.is_empty() {
            return;
        }
        if let Some(conn) = self.conn.as_mut() {
            match tokio::time::timeout(
                self.settings.command_timeout,
                conn.subscribe(&to_drop, false),
            )
            .await
            {
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
            tokio::time::timeout(self.settings.command_timeout, conn.ping()).await,
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
                let conn = cluster.connect(Some(tx), cluster.command_timeout).await?;
                Ok(SubConn::Cluster { conn, pushes })
            }
            target => {
                let (sink, stream) = target.client().await?.get_async_pubsub().await?.split();
                Ok(SubConn::Plain { sink, stream })
            }
        }
    }

    /// Subscribes to `channels` (`on`), or unsubscribes from them.
    async fn subscribe(&mut self, channels: &[String], on: bool) -> redis::RedisResult<()> {
        match self {
            SubConn::Plain { sink, .. } if on => sink.subscribe(channels).await,
            SubConn::Plain { sink, .. } => sink.unsubscribe(channels).await,
            #[cfg(feature = "cluster")]
            SubConn::Cluster { conn, .. } => {
                // One at a time: channels of different slots live on different shards.
                for channel in channels {
                    match on {
                        true => conn.ssubscribe(channel).await?,
                        false => conn.sunsubscribe(channel).await?,
                    }
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

/// Sleeps until `at`, or for ever without it.
pub(crate) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "pubsub_tests.rs"]
mod delivery_tests;
