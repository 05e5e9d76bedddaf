//! Unit tests of the hub's delivery: the per-channel waiter queue, the wake policies, what a
//! waiter that finishes, passes on or gives up does to the others, and the linger of unused
//! channels. No server: the subscriber connection is the only part left out. Where the hub
//! task would have the server confirm a SUBSCRIBE, [`Rig::subscribe`] records the confirmation
//! the way [`HubTask::subscribe`] does on success; every other step runs the hub's own code.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Command, Hub, HubSettings, HubState, HubTask, Subscription, WakePolicy};
use crate::conn::Target;
use crate::error::lock;
use crate::task::Task;

/// The commands the tests read off the hub's queue, as they compare them.
impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Subscribe { channel, .. } => write!(f, "Subscribe({channel})"),
            Command::Unused { channel, .. } => write!(f, "Unused({channel})"),
            Command::Reconnect => write!(f, "Reconnect"),
        }
    }
}

/// This client's wake id in every test.
const WAKE_ID: u64 = 4242;
const LINGER: Duration = Duration::from_secs(1);

/// A hub and its task, not started: the test drives the task's handlers.
struct Rig {
    hub: Hub,
    task: HubTask,
    /// The clean-up scripts waiters hand to the background task.
    background: mpsc::UnboundedReceiver<Task>,
}

fn rig() -> Rig {
    let (background_tx, background) = mpsc::unbounded_channel();
    let (commands_tx, commands) = mpsc::unbounded_channel();
    let state = Arc::new(HubState {
        channels: Mutex::new(super::ChannelMap::default()),
        wake_id: WAKE_ID.to_string(),
        background: background_tx,
    });
    // Never connected to: no test lets the task run while a channel is in use.
    let client = redis::Client::open("redis://127.0.0.1:1/").expect("a valid url");
    let task = HubTask {
        target: Target::Fixed(Box::new(client)),
        state: state.clone(),
        commands,
        settings: HubSettings {
            connect_timeout: Duration::from_secs(1),
            command_timeout: Duration::from_secs(1),
            linger: LINGER,
        },
        conn: None,
        subscribed: HashSet::new(),
        lingering: VecDeque::new(),
        dropped: HashSet::new(),
        ever_connected: false,
    };
    Rig {
        hub: Hub {
            state,
            commands: commands_tx,
        },
        task,
        background,
    }
}

impl Rig {
    /// `Hub::subscribe`, with the server's confirmation recorded as the hub task records it.
    async fn subscribe(
        &mut self,
        channel: &str,
        policy: WakePolicy,
        on_leave: Option<Task>,
    ) -> Subscription {
        let Rig { hub, task, .. } = self;
        let confirm = async {
            match task.commands.recv().await {
                Some(Command::Subscribe { channel, reply }) => {
                    if let Some(c) = lock(&task.state.channels).get_mut(&channel) {
                        c.confirmed = true;
                    }
                    task.subscribed.insert(channel);
                    reply.send(Ok(())).expect("the subscriber waits");
                }
                other => panic!("expected a subscribe command, got {other:?}"),
            }
        };
        let subscribing = hub.subscribe(channel, policy, on_leave);
        let (subscription, ()) = tokio::join!(subscribing, confirm);
        subscription.expect("subscribed")
    }

    /// `n` waiters on `channel`, in queue order.
    async fn waiters(&mut self, channel: &str, policy: WakePolicy, n: usize) -> Vec<Subscription> {
        let mut waiters = vec![self.subscribe(channel, policy, None).await];
        for _ in 1..n {
            waiters.push(self.hub.try_join(channel, || None).expect("confirmed"));
        }
        waiters
    }

    /// A message arrives on `channel`.
    fn publish(&self, channel: &str, payload: &str) {
        self.task.deliver(channel, payload.as_bytes());
    }

    /// Handles every command the waiters sent the hub task.
    async fn pump(&mut self) {
        while let Ok(command) = self.task.commands.try_recv() {
            self.task.handle(command).await;
        }
    }

    fn refs(&self, channel: &str) -> Option<usize> {
        lock(&self.hub.state.channels).get(channel).map(|c| c.refs)
    }
}

/// Which of `waiters` hold a wake-up they have not consumed.
fn woken(waiters: &[Subscription]) -> Vec<bool> {
    waiters
        .iter()
        .map(|w| w.slot.pending.load(Ordering::Acquire))
        .collect()
}

/// Consumes the wake-up `waiter` holds; panics if it has none.
async fn consume(waiter: &Subscription) {
    assert!(
        waiter.wait_until(Instant::now()).await,
        "the waiter was woken"
    );
}

fn leave_task(context: &'static str) -> Task {
    Task {
        script: &crate::scripts::LOCK_RENEW,
        keys: vec![Arc::from("k")],
        args: Vec::new(),
        context,
        lost: None,
        resend: false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_unlock_wakes_one_waiter_in_queue_order() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 3).await;
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, false, false]);
    // The first waiter has not retried yet: the next unlock goes to the next one.
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, true, false]);
    consume(&w[0]).await;
    assert_eq!(woken(&w), [false, true, false]);
    // A waiter keeps its place while it retries.
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, true, false]);
}

#[tokio::test(start_paused = true)]
async fn a_hand_off_to_this_client_wakes_one_and_its_trailing_zero_is_ignored() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 3).await;
    rig.publish("c", &WAKE_ID.to_string());
    assert_eq!(woken(&w), [true, false, false]);
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, false, false], "the 0 is for Redisson");
    rig.publish("c", "0");
    assert_eq!(
        woken(&w),
        [true, true, false],
        "a 0 on its own wakes one again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hand_off_to_another_client_wakes_nobody_here() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 2).await;
    rig.publish("c", "77");
    rig.publish("c", "0");
    assert_eq!(woken(&w), [false, false]);
    rig.publish("c", &(WAKE_ID + 1).to_string());
    rig.publish("c", "0");
    assert_eq!(woken(&w), [false, false]);
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, false], "a 0 on its own wakes one");
}

#[tokio::test(start_paused = true)]
async fn a_lock_read_unlock_wakes_every_waiter_and_other_messages_wake_one() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 3).await;
    rig.publish("c", "1");
    assert_eq!(woken(&w), [true, true, true]);
    for waiter in &w {
        consume(waiter).await;
    }
    // Not a wake id (one digit, or not a number): one waiter, like an unlock.
    rig.publish("c", "7");
    assert_eq!(woken(&w), [true, false, false]);
    rig.publish("c", "x");
    assert_eq!(woken(&w), [true, true, false]);
    rig.publish("c", "");
    assert_eq!(woken(&w), [true, true, true]);
}

#[tokio::test(start_paused = true)]
async fn policy_all_wakes_every_waiter_on_any_message() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::All, 3).await;
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, true, true]);
    for waiter in &w {
        consume(waiter).await;
    }
    // Not a hand-off under `All`: a number still wakes everyone.
    rig.publish("c", "77");
    assert_eq!(woken(&w), [true, true, true]);
}

#[tokio::test(start_paused = true)]
async fn policy_count_wakes_as_many_waiters_as_permits_released() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Count, 4).await;
    rig.publish("c", "2");
    assert_eq!(woken(&w), [true, true, false, false]);
    // More than are left unwoken: every remaining one, skipping those already woken.
    rig.publish("c", "5");
    assert_eq!(woken(&w), [true, true, true, true]);
    for waiter in &w {
        consume(waiter).await;
    }
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, false, false, false], "at least one");
    rig.publish("c", "not a number");
    assert_eq!(woken(&w), [true, true, false, false], "one when unreadable");
    rig.publish("c", " 2 ");
    assert_eq!(woken(&w), [true, true, true, true]);
}

#[tokio::test(start_paused = true)]
async fn a_message_on_another_or_an_unknown_channel_wakes_nobody() {
    let mut rig = rig();
    let a = rig.waiters("a", WakePolicy::All, 2).await;
    let b = rig.waiters("b", WakePolicy::All, 1).await;
    rig.publish("a", "0");
    rig.publish("zzz", "0");
    assert_eq!(woken(&a), [true, true]);
    assert_eq!(woken(&b), [false]);
}

#[tokio::test(start_paused = true)]
async fn wait_until_delivers_an_earlier_wake_up_at_once_and_otherwise_times_out() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 1).await;
    let start = Instant::now();
    assert!(
        !w[0].wait_until(start + Duration::from_secs(3)).await,
        "nothing was published"
    );
    assert_eq!(Instant::now(), start + Duration::from_secs(3));

    // Woken while busy (not waiting): the next wait returns at once.
    rig.publish("c", "0");
    let before = Instant::now();
    assert!(w[0].wait_until(before + Duration::from_secs(3)).await);
    assert_eq!(Instant::now(), before, "no time passed");
    assert_eq!(woken(&w), [false], "the wake-up is consumed");
    assert!(!w[0].wait_until(before + Duration::from_secs(1)).await);

    // Woken while waiting.
    let waiting = w[0].wait_until(Instant::now() + Duration::from_secs(10));
    let publish = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        rig.publish("c", "0");
    };
    let (was_woken, ()) = tokio::join!(waiting, publish);
    assert!(was_woken);
    assert_eq!(woken(&w), [false]);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_woken_hands_its_wake_up_on() {
    let mut rig = rig();
    let mut w = rig.waiters("c", WakePolicy::Lock, 3).await;
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, false, false]);
    drop(w.remove(0));
    assert_eq!(woken(&w), [true, false], "the next waiter got it");
    assert_eq!(rig.hub.waiters_on("c"), 2);

    // A waiter that already consumed its wake-up (it retried) has nothing to hand on.
    consume(&w[0]).await;
    drop(w.remove(0));
    assert_eq!(woken(&w), [false]);

    // Nor has one that was never woken.
    let more = rig.hub.try_join("c", || None).expect("confirmed");
    drop(more);
    assert_eq!(woken(&w), [false]);
}

#[tokio::test(start_paused = true)]
async fn a_finished_waiter_keeps_its_wake_up() {
    let mut rig = rig();
    let mut w = rig.waiters("c", WakePolicy::Lock, 2).await;
    rig.publish("c", "0");
    w.remove(0).finish();
    assert_eq!(woken(&w), [false], "the wake-up was used, not handed on");
    assert_eq!(rig.hub.waiters_on("c"), 1);
    assert_eq!(rig.refs("c"), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_hands_on_to_the_first_unwoken_one() {
    let mut rig = rig();
    let mut w = rig.waiters("c", WakePolicy::Lock, 3).await;
    rig.publish("c", "0");
    rig.publish("c", "0");
    assert_eq!(woken(&w), [true, true, false]);
    drop(w.remove(0));
    assert_eq!(woken(&w), [true, true]);
}

#[tokio::test(start_paused = true)]
async fn pass_on_wakes_the_waiter_right_behind_and_never_wraps_around() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Count, 4).await;
    w[1].pass_on();
    assert_eq!(woken(&w), [false, false, true, false]);
    w[3].pass_on();
    assert_eq!(
        woken(&w),
        [false, false, true, false],
        "the last waiter passes to nobody"
    );
    // The one behind is already woken: the chain stops there.
    w[1].pass_on();
    assert_eq!(woken(&w), [false, false, true, false]);
    w[2].pass_on();
    assert_eq!(woken(&w), [false, false, true, true]);
    w[0].pass_on();
    assert_eq!(woken(&w), [false, true, true, true]);
}

#[tokio::test(start_paused = true)]
async fn on_leave_runs_when_the_clients_last_waiter_gives_up() {
    let mut rig = rig();
    let first = rig
        .subscribe("c", WakePolicy::Lock, Some(leave_task("first leaves")))
        .await;
    let second = rig
        .hub
        .try_join("c", || Some(leave_task("second leaves")))
        .expect("confirmed");
    drop(first);
    assert!(
        rig.background.try_recv().is_err(),
        "another waiter of this client is still on the channel"
    );
    drop(second);
    let task = rig
        .background
        .try_recv()
        .expect("the last waiter's clean-up");
    assert_eq!(task.context, "second leaves");
    assert!(rig.background.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn on_leave_does_not_run_for_a_finished_waiter() {
    let mut rig = rig();
    let only = rig
        .subscribe("c", WakePolicy::Lock, Some(leave_task("leaves")))
        .await;
    only.finish();
    assert!(rig.background.try_recv().is_err());
    assert_eq!(rig.hub.waiters_on("c"), 0);
    assert_eq!(rig.refs("c"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn try_join_needs_a_confirmed_subscription() {
    let mut rig = rig();
    let mut called = false;
    assert!(rig
        .hub
        .try_join("c", || {
            called = true;
            None
        })
        .is_none());
    assert!(!called, "no clean-up is made for a waiter never queued");
    assert_eq!(rig.hub.channel_count(), 0, "nothing is created");

    let w = rig.waiters("c", WakePolicy::Lock, 1).await;
    assert!(rig.hub.try_join("c", || None).is_some());

    // The connection is lost: until the hub has subscribed again, a waiter could miss an unlock.
    rig.task.disconnected("test");
    assert!(rig.hub.try_join("c", || None).is_none());
    assert_eq!(rig.refs("c"), Some(1), "the failed join took no reference");
    drop(w);
}

#[tokio::test(start_paused = true)]
async fn a_subscription_the_server_ended_wakes_its_waiters_and_is_subscribed_again() {
    let mut rig = rig();
    let a = rig.waiters("a", WakePolicy::Lock, 2).await;
    let b = rig.waiters("b", WakePolicy::Lock, 1).await;
    rig.task.dropped("a".to_owned());
    assert_eq!(woken(&a), [true, true], "an unlock may have been missed");
    assert_eq!(woken(&b), [false]);
    assert!(rig.task.dropped.contains("a"), "queued to subscribe again");
    assert!(!rig.task.subscribed.contains("a"));
    assert!(rig.hub.try_join("a", || None).is_none());
    assert!(rig.hub.try_join("b", || None).is_some());

    // A lingering channel nobody uses is only forgotten.
    let c = rig.waiters("c", WakePolicy::Lock, 1).await;
    drop(c);
    rig.task.dropped("c".to_owned());
    assert!(!rig.task.dropped.contains("c"));
    assert!(!rig.task.subscribed.contains("c"));
}

#[tokio::test(start_paused = true)]
async fn a_gap_in_the_connection_wakes_every_waiter_of_every_channel() {
    let mut rig = rig();
    let lock = rig.waiters("lock", WakePolicy::Lock, 2).await;
    let count = rig.waiters("sem", WakePolicy::Count, 2).await;
    rig.task.wake_everyone();
    assert_eq!(woken(&lock), [true, true]);
    assert_eq!(woken(&count), [true, true]);
}

#[tokio::test(start_paused = true)]
async fn an_unused_channel_is_dropped_after_the_linger_and_joinable_until_then() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 2).await;
    drop(w);
    assert_eq!(rig.refs("c"), Some(0));
    rig.pump().await;
    tokio::time::advance(LINGER - Duration::from_millis(1)).await;
    rig.task.expire_lingering().await;
    assert_eq!(rig.hub.channel_count(), 1, "still lingering");

    // A waiter that comes now needs no new subscription.
    let again = rig.hub.try_join("c", || None).expect("a lingering channel");
    drop(again);
    rig.pump().await;
    tokio::time::advance(Duration::from_millis(1)).await;
    rig.task.expire_lingering().await;
    assert_eq!(
        rig.hub.channel_count(),
        1,
        "used again during the linger: it lingers from its last use"
    );
    tokio::time::advance(LINGER).await;
    rig.task.expire_lingering().await;
    assert_eq!(rig.hub.channel_count(), 0);
    assert!(!rig.task.subscribed.contains("c"));
    assert!(rig.hub.try_join("c", || None).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_channel_in_use_when_its_linger_ends_is_kept() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 1).await;
    drop(w);
    rig.pump().await;
    let kept = rig.hub.try_join("c", || None).expect("a lingering channel");
    tokio::time::advance(LINGER * 2).await;
    rig.task.expire_lingering().await;
    assert_eq!(rig.hub.channel_count(), 1);
    assert!(rig.task.subscribed.contains("c"));
    rig.publish("c", "0");
    assert_eq!(woken(std::slice::from_ref(&kept)), [true]);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_subscribe_leaves_no_waiter_and_no_reference() {
    let mut rig = rig();
    // The hub task never answers: the caller gives up while waiting for the confirmation.
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        rig.hub.subscribe("c", WakePolicy::Lock, None),
    )
    .await;
    assert!(gave_up.is_err());
    assert_eq!(rig.hub.waiters_on("c"), 0);
    assert_eq!(rig.refs("c"), Some(0));
    let commands: Vec<String> = std::iter::from_fn(|| rig.task.commands.try_recv().ok())
        .map(|c| format!("{c:?}"))
        .collect();
    assert_eq!(
        commands,
        ["Subscribe(c)", "Unused(c)"],
        "the channel lingers"
    );
}

#[tokio::test(start_paused = true)]
async fn subscribe_fails_closed_when_the_hub_is_gone_and_leaves_nothing_queued() {
    let rig = rig();
    let Rig { hub, task, .. } = rig;
    drop(task);
    let err = hub
        .subscribe("c", WakePolicy::Lock, None)
        .await
        .expect_err("no hub task");
    assert!(matches!(err, crate::Error::Closed), "{err}");
    assert_eq!(hub.waiters_on("c"), 0);
}

#[tokio::test(start_paused = true)]
async fn the_hub_task_forgets_an_idle_channel_after_the_linger() {
    let mut rig = rig();
    let w = rig.waiters("c", WakePolicy::Lock, 1).await;
    drop(w);
    let Rig { hub, task, .. } = rig;
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let running = tokio::spawn(task.run(shutdown.clone()));
    tokio::time::sleep_until(start + LINGER - Duration::from_millis(1)).await;
    assert_eq!(hub.channel_count(), 1, "still lingering");
    tokio::time::sleep_until(start + LINGER + Duration::from_millis(1)).await;
    assert_eq!(hub.channel_count(), 0, "forgotten after a whole linger");
    shutdown.cancel();
    running.await.expect("the hub task did not panic");
}
