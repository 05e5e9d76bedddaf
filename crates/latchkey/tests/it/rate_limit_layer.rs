//! The tower layer (`RateLimitLayer`) against a real server: an axum router behind it, driven
//! with `ServiceExt::oneshot` (no network), and bare `service_fn`s where the typed error itself
//! is what is checked.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use latchkey_redis::{
    Client, Error, FailPolicy, GcraLimiter, Quota, RateLimitError, RateLimitLayer,
    RateLimitService, RateLimited, ResponseFuture, MAX_NAME_LEN,
};
use latchkey_test_support::RedisServer;
use redis::AsyncCommands;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};

use crate::helpers::{client, data_keys, eventually, poll_then_drop};

const PATIENCE: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);

/// The key of a test request: its `x-api-key` header, if it has one.
fn api_key(req: &Request) -> Option<String> {
    req.headers()
        .get("x-api-key")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// `GET /`, with an `x-api-key` header if `key` is given.
fn request(key: Option<&str>) -> Request {
    let mut builder = Request::builder().uri("/");
    if let Some(key) = key {
        builder = builder.header("x-api-key", key);
    }
    builder.body(Body::empty()).unwrap()
}

/// What the routers' `HandleErrorLayer` answers: `429` with `Retry-After` for a refusal (the
/// refusal itself in the response's extensions, for the test to compare), `503` when the
/// limiter could not decide (its error in the extensions).
async fn rejected(err: RateLimitError<Infallible>) -> Response {
    match err {
        RateLimitError::Limited(limited) => {
            let retry_after = limited.retry_after_secs().to_string();
            let mut response = (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", retry_after)],
            )
                .into_response();
            response.extensions_mut().insert(limited);
            response
        }
        RateLimitError::Redis(err) => {
            let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
            response.extensions_mut().insert(Arc::new(err));
            response
        }
        RateLimitError::Inner(never) => match never {},
        other => panic!("an error the test does not know: {other}"),
    }
}

/// A router whose one route counts the requests it serves in `served`, behind `layer`.
fn router<F>(layer: RateLimitLayer<F>, served: &Arc<AtomicUsize>) -> Router
where
    F: Fn(&Request) -> Option<String> + Send + Sync + 'static,
{
    let served = served.clone();
    Router::new()
        .route(
            "/",
            get(move || async move {
                served.fetch_add(1, Ordering::SeqCst);
                "ok"
            }),
        )
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(rejected))
                .layer(layer),
        )
}

/// Sends `req` through a clone of `app` (every clone shares the limit).
async fn send(app: &Router, req: Request) -> Response {
    app.clone().oneshot(req).await.unwrap()
}

/// A bare service behind the layer that counts its calls and answers with the request.
fn counting(
    layer: &RateLimitLayer<fn(&String) -> Option<String>>,
    calls: &Arc<AtomicUsize>,
) -> impl Service<
    String,
    Response = String,
    Error = RateLimitError<Infallible>,
    Future = ResponseFuture<String, Infallible>,
> + Clone {
    let calls = calls.clone();
    layer.layer(service_fn(move |req: String| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, Infallible>(req) }
    }))
}

/// The whole request is its key.
#[allow(clippy::ptr_arg)] // A key function takes `&Request`, and the request is a `String`.
fn whole(req: &String) -> Option<String> {
    Some(req.clone())
}

fn retry_after_header(response: &Response) -> &str {
    response
        .headers()
        .get("retry-after")
        .expect("a 429 has a Retry-After")
        .to_str()
        .unwrap()
}

#[test]
fn the_service_is_clone_send_sync_and_its_future_send() {
    fn clone_send_sync<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    clone_send_sync::<RateLimitLayer<fn(&Request) -> Option<String>>>();
    clone_send_sync::<RateLimitService<Router, fn(&Request) -> Option<String>>>();
    send::<ResponseFuture<Response, Infallible>>();
    send::<RateLimitError<Infallible>>();
    fn sync<T: Sync>() {}
    sync::<RateLimitError<Infallible>>();
}

#[tokio::test]
async fn each_key_gets_its_burst_then_a_429_with_retry_after_rounded_up() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    // 3 an hour, bursts of 3: one every 1200 s.
    let limiter = client.gcra_limiter("api", Quota::new(3, HOUR));
    let served = Arc::new(AtomicUsize::new(0));
    let app = router(limiter.layer(api_key), &served);

    for _ in 0..3 {
        assert_eq!(
            send(&app, request(Some("a"))).await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(served.load(Ordering::SeqCst), 3);
    for _ in 0..2 {
        let refused = send(&app, request(Some("a"))).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let limited = refused.extensions().get::<RateLimited>().unwrap();
        assert_eq!(limited.key(), "a");
        let after = limited.retry_after();
        // One emission interval after the first of the burst, less the time since.
        assert!(
            after > HOUR / 3 - Duration::from_secs(60) && after <= HOUR / 3,
            "{after:?}"
        );
        let rounded_up = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        assert_eq!(retry_after_header(&refused), rounded_up.to_string());
        assert_eq!(retry_after_header(&refused), "1200");
    }
    // The refused requests never reached the route.
    assert_eq!(served.load(Ordering::SeqCst), 3);

    // Key b has its own bucket, whole.
    for _ in 0..3 {
        assert_eq!(
            send(&app, request(Some("b"))).await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(served.load(Ordering::SeqCst), 6);
    assert_eq!(
        send(&app, request(Some("b"))).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let mut conn = server.conn().await;
    let mut keys = data_keys(&mut conn).await;
    keys.sort();
    assert_eq!(keys, ["latchkey_gcra:3:api:a", "latchkey_gcra:3:api:b"]);
}

#[tokio::test]
async fn a_request_after_retry_after_is_admitted() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    // 2 a second, bursts of 2: one every 500 ms.
    let limiter = client.gcra_limiter("api", Quota::per_second(2));
    let served = Arc::new(AtomicUsize::new(0));
    let app = router(limiter.layer(api_key), &served);

    for _ in 0..2 {
        assert_eq!(
            send(&app, request(Some("a"))).await.status(),
            StatusCode::OK
        );
    }
    let refused = send(&app, request(Some("a"))).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let after = refused
        .extensions()
        .get::<RateLimited>()
        .unwrap()
        .retry_after();
    assert!(
        after > Duration::ZERO && after <= Duration::from_millis(500),
        "{after:?}"
    );
    assert_eq!(retry_after_header(&refused), "1");

    // The server said when; a client that waits that long (and a little) is let in.
    tokio::time::sleep(after + Duration::from_millis(20)).await;
    assert_eq!(
        send(&app, request(Some("a"))).await.status(),
        StatusCode::OK
    );
    assert_eq!(served.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn requests_without_a_key_are_not_limited() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.gcra_limiter("api", Quota::per_hour(2));
    let served = Arc::new(AtomicUsize::new(0));
    let app = router(limiter.layer(api_key), &served);
    let mut conn = server.conn().await;
    let scripts = crate::helpers::evalsha_calls(&mut conn).await;

    for _ in 0..10 {
        assert_eq!(send(&app, request(None)).await.status(), StatusCode::OK);
    }
    assert_eq!(served.load(Ordering::SeqCst), 10);
    // Redis was not asked: no script ran, no key was made.
    assert_eq!(crate::helpers::evalsha_calls(&mut conn).await, scripts);
    assert!(data_keys(&mut conn).await.is_empty());

    // The same router limits the requests that have a key.
    for _ in 0..2 {
        assert_eq!(
            send(&app, request(Some("a"))).await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        send(&app, request(Some("a"))).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(send(&app, request(None)).await.status(), StatusCode::OK);
    assert_eq!(served.load(Ordering::SeqCst), 13);
}

/// A client that gives up on a dead server quickly.
async fn impatient_client(server: &RedisServer) -> Client {
    crate::helpers::builder(server)
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn redis_unreachable_fails_closed_by_default_and_open_when_asked() {
    let mut server = RedisServer::spawn();
    let client = impatient_client(&server).await;
    let limiter = client.gcra_limiter("api", Quota::per_hour(10));
    let closed_layer: RateLimitLayer<fn(&String) -> Option<String>> =
        RateLimitLayer::new(limiter.clone(), whole);
    assert_eq!(closed_layer.fail_policy(), FailPolicy::Closed);
    let open_layer = closed_layer.clone().with_fail_policy(FailPolicy::Open);
    let calls = Arc::new(AtomicUsize::new(0));
    let closed = counting(&closed_layer, &calls);
    let open = counting(&open_layer, &calls);
    let served = Arc::new(AtomicUsize::new(0));
    let app = router(limiter.layer(api_key), &served);

    // Both work while Redis is there.
    assert_eq!(closed.clone().oneshot("a".into()).await.unwrap(), "a");
    assert_eq!(open.clone().oneshot("a".into()).await.unwrap(), "a");
    assert_eq!(
        send(&app, request(Some("a"))).await.status(),
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    server.kill();

    // Closed: refused with the limiter's connection error; the inner service is not called.
    for _ in 0..2 {
        match closed.clone().oneshot("a".into()).await {
            Err(RateLimitError::Redis(err)) => assert!(err.is_connection(), "{err}"),
            other => panic!("expected a connection error, got {other:?}"),
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let unavailable = send(&app, request(Some("a"))).await;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    let err = unavailable.extensions().get::<Arc<Error>>().unwrap();
    assert!(err.is_connection(), "{err}");
    assert_eq!(served.load(Ordering::SeqCst), 1);

    // Open: let through.
    for i in 1..=3 {
        assert_eq!(open.clone().oneshot("a".into()).await.unwrap(), "a");
        assert_eq!(calls.load(Ordering::SeqCst), 2 + i);
    }

    // A key the limiter refuses is refused under either policy: an over-long key is no way
    // around the limit.
    let long = "k".repeat(MAX_NAME_LEN + 1);
    for service in [&closed, &open] {
        match service.clone().oneshot(long.clone()).await {
            Err(RateLimitError::Redis(err)) => assert!(err.is_invalid_argument(), "{err}"),
            other => panic!("expected an invalid argument, got {other:?}"),
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn the_refusal_is_what_check_reports() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    // 2 an hour, bursts of 2: one every 1800 s.
    let limiter: GcraLimiter = client.gcra_limiter("api", Quota::per_hour(2));
    let layer: RateLimitLayer<fn(&String) -> Option<String>> = limiter.layer(whole);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = counting(&layer, &calls);
    let key = "user-7f3a";
    for _ in 0..2 {
        assert_eq!(service.clone().oneshot(key.into()).await.unwrap(), key);
    }

    // A refusal takes nothing, so checks just before and just after bracket the layer's.
    let before = limiter.check(key, 1).await.unwrap();
    let refused = service.clone().oneshot(key.into()).await;
    let after = limiter.check(key, 1).await.unwrap();
    let Err(RateLimitError::Limited(limited)) = refused else {
        panic!("expected a refusal, got {refused:?}");
    };
    let decision = limited.decision();
    assert!(!decision.is_admitted());
    assert_eq!(decision.retry_after(), Some(limited.retry_after()));
    assert!(
        before.retry_after().unwrap() >= limited.retry_after()
            && limited.retry_after() >= after.retry_after().unwrap(),
        "{before:?} {limited:?} {after:?}"
    );
    assert!(
        before.reset_after() >= decision.reset_after()
            && decision.reset_after() >= after.reset_after()
    );
    assert_eq!(
        (decision.limit(), decision.remaining()),
        (before.limit(), before.remaining())
    );
    assert_eq!((decision.limit(), decision.remaining()), (2, 0));
    assert_eq!(limited.key(), key);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // The message leaves the key out (it may be a credential).
    assert!(limited.to_string().starts_with("rate limited"));
    assert!(!RateLimitError::<Infallible>::Limited(limited)
        .to_string()
        .contains(key));
}

/// What the [`Gate`]s answer from `poll_ready`.
const PENDING: u8 = 0;
const READY: u8 = 1;
const FAILING: u8 = 2;

/// An inner service whose readiness the test sets, and which may only be called once made
/// ready (a clone is not: readiness belongs to the instance, as with a buffer's slot).
struct Gate {
    state: Arc<AtomicU8>,
    ready: bool,
}

impl Clone for Gate {
    fn clone(&self) -> Gate {
        Gate {
            state: self.state.clone(),
            ready: false,
        }
    }
}

impl Service<String> for Gate {
    type Response = String;
    type Error = &'static str;
    type Future = Pin<Box<dyn Future<Output = Result<String, &'static str>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        match self.state.load(Ordering::SeqCst) {
            PENDING => Poll::Pending,
            READY => {
                self.ready = true;
                Poll::Ready(Ok(()))
            }
            _ => Poll::Ready(Err("the gate is broken")),
        }
    }

    fn call(&mut self, req: String) -> Self::Future {
        let was_ready = std::mem::replace(&mut self.ready, false);
        Box::pin(async move {
            if was_ready {
                Ok(req)
            } else {
                Err("called without poll_ready")
            }
        })
    }
}

#[tokio::test]
async fn poll_ready_is_the_inner_services_and_the_ready_one_serves() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let layer: RateLimitLayer<fn(&String) -> Option<String>> =
        client.gcra_limiter("api", Quota::per_hour(10)).layer(whole);
    let state = Arc::new(AtomicU8::new(PENDING));
    let mut service = layer.layer(Gate {
        state: state.clone(),
        ready: false,
    });
    let mut cx = Context::from_waker(Waker::noop());
    assert!(service.poll_ready(&mut cx).is_pending());
    state.store(READY, Ordering::SeqCst);
    assert!(matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    // The instance made ready answers after the limiter's decision (a clone would not).
    let answered = service.call("a".into()).await;
    assert_eq!(answered.unwrap(), "a");
    // Calling without `poll_ready` reaches an inner service that was not made ready.
    match service.call("a".into()).await {
        Err(RateLimitError::Inner(err)) => assert_eq!(err, "called without poll_ready"),
        other => panic!("{other:?}"),
    }
    state.store(FAILING, Ordering::SeqCst);
    match service.poll_ready(&mut cx) {
        Poll::Ready(Err(RateLimitError::Inner(err))) => assert_eq!(err, "the gate is broken"),
        other => panic!("{other:?}"),
    }
    assert_eq!(service.get_ref().state.load(Ordering::SeqCst), FAILING);
    // `poll_ready` sent nothing to Redis: two calls, two permits of `a` taken.
    let a = layer.limiter().check("a", 1).await.unwrap().remaining();
    assert_eq!(a, 7);
}

#[tokio::test]
async fn a_dropped_response_takes_no_permit_unless_admitted() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.gcra_limiter("dropped", Quota::per_hour(1));
    let key = "latchkey_gcra:7:dropped:k";
    let calls = Arc::new(AtomicUsize::new(0));
    // An inner service that never answers: once called, the request is in.
    let service = limiter.layer(whole).layer(service_fn({
        let calls = calls.clone();
        move |_: String| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<String, Infallible>>()
        }
    }));
    let mut conn = server.conn().await;
    let (mut dropped_deciding, mut dropped_admitted) = (0, 0);
    // Dropped after 0, 1, 2, … polls (more sparsely further on) until one was admitted.
    let mut polls = 0;
    while polls < 1_000_000 {
        let before = calls.load(Ordering::SeqCst);
        let answered = poll_then_drop(service.clone().oneshot("k".to_owned()), polls).await;
        assert!(answered.is_none(), "the inner service never answers");
        if calls.load(Ordering::SeqCst) > before {
            // Admitted: the permit stays taken.
            dropped_admitted += 1;
            assert!(conn.exists::<_, bool>(key).await.unwrap());
            assert!(!limiter.check("k", 1).await.unwrap().is_admitted());
            break;
        }
        dropped_deciding += 1;
        let clear = eventually(PATIENCE, || async {
            !server.conn().await.exists::<_, bool>(key).await.unwrap()
        })
        .await;
        assert!(
            clear,
            "dropped at poll {polls} before admission, a permit stayed taken"
        );
        polls += 1 + polls / 16;
    }
    // Dropped unpolled, then at least once with its script sent (the first poll cannot see
    // the answer), then once admitted.
    assert!(
        dropped_deciding >= 2 && dropped_admitted == 1,
        "{dropped_deciding} {dropped_admitted}"
    );
}
