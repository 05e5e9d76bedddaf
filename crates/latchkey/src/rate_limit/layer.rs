//! A tower layer that holds each request's key (an API key, a user, a client address) to a
//! [`GcraLimiter`]'s quota: admitted requests go on to the inner service, refused ones come
//! back at once as a typed [`RateLimitError::Limited`] the application turns into its `429`.
//!
//! Generic over the request type: it serves axum, tonic, hyper and any other tower stack; the
//! axum wiring (`HandleErrorLayer`) is shown on [`RateLimitLayer`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

use crate::error::Error;

use super::gcra::{GcraLimiter, RateDecision};

/// What a [`RateLimitService`] does with a request when the limiter cannot decide: Redis
/// cannot be reached, does not answer in time, or fails the call.
///
/// The default is [`FailPolicy::Closed`]. A rate limit often guards something that must not be
/// flooded (a login form against password guessing, a paid partner API, an expensive query);
/// letting every request through while Redis is away is a choice the application should make
/// knowingly, so it is the longer spelling.
///
/// Whatever the policy, an error that Redis being away did not cause is returned as
/// [`RateLimitError::Redis`]: a key the limiter refuses (longer than
/// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)), a quota that cannot be used, a permission the ACL
/// user lacks, an entity key holding another type, a client that was shut down. Letting
/// requests through on those would hide a mistake that does not go away by itself (and a
/// client could skip its limit by sending an over-long key).
///
/// # Examples
///
/// ```
/// use latchkey_redis::FailPolicy;
///
/// assert_eq!(FailPolicy::default(), FailPolicy::Closed);
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailPolicy {
    /// The request is refused with [`RateLimitError::Redis`] (the inner service is not
    /// called); the application answers it, typically with `503 Service Unavailable`.
    #[default]
    Closed,
    /// The request goes on to the inner service as if admitted, and a `warn` event is logged
    /// (`latchkey_redis::rate_limit::layer`) for each request let through so. Applies only when
    /// Redis cannot be reached or fails the call ([`Error::is_connection`] or
    /// [`Error::is_redis`]).
    Open,
}

impl FailPolicy {
    /// Whether `err` lets the request through under this policy.
    fn lets_through(self, err: &Error) -> bool {
        self == FailPolicy::Open && (err.is_connection() || err.is_redis())
    }
}

/// A [`tower::Layer`](tower_layer::Layer) that limits each request by its key: one
/// [`GcraLimiter::check`] of one permit per request, for the key that `key_fn` reads from the
/// request.
///
/// `key_fn` is any `Fn(&Request) -> Option<K>` with `K: Into<String>` (a header, the peer's
/// address, the user an authentication layer put in the extensions). Each key has its own
/// bucket in Redis, shared by every clone of the service and every process using a limiter of
/// the same name.
///
/// * `Some(key)`: the request is admitted (the inner service is called) or refused with
///   [`RateLimitError::Limited`] at once: the service never waits for room.
/// * `None`: the request is **not limited**: it goes on to the inner service without a call to
///   Redis. This is how health checks or internal callers are let through. To hold keyless
///   requests to one shared budget instead, return a fixed key (`Some("anonymous")`); to turn
///   them away, do it in an authentication layer in front of this one. A `key_fn` that never
///   finds its key limits nothing: with axum, a key from `ConnectInfo` needs the router to be
///   served with `into_make_service_with_connect_info`.
///
/// The key is stored in the name of a Redis key (see [`GcraLimiter`]): anyone who can read
/// the server sees it. Hash a key that is a secret (an API key) first if that matters. Keys
/// longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes are refused with
/// [`RateLimitError::Redis`] holding [`Error::InvalidArgument`], whatever the
/// [`FailPolicy`].
///
/// When Redis cannot be reached, the [`FailPolicy`] decides: by default
/// ([`FailPolicy::Closed`]) the request is refused with [`RateLimitError::Redis`].
///
/// # Readiness
///
/// The limiter decides in `call`, not in `poll_ready`: the limit is per key, and the key is in
/// the request, which `poll_ready` does not see. (tower's own `RateLimit`, one limit for every
/// request, waits for room in `poll_ready`, as `ConcurrencyLimit` waits for a permit there.)
/// `poll_ready` is the inner service's, its error wrapped in [`RateLimitError::Inner`]; the
/// service that was made ready is the one that serves the request.
///
/// # Cancel safety
///
/// Dropping a request's [`ResponseFuture`] leaves nothing behind. Dropped before or while the
/// limiter decides, it takes no permit (a decision is one script call; one that arrives after
/// the drop is given back in the background, see [`GcraLimiter`]). Dropped after the limiter
/// admitted it, while the inner service runs, the permit stays taken: the request was let in.
///
/// # Examples
///
/// With axum, whose router needs services that never fail, a `HandleErrorLayer` in front
/// turns the error into a response:
///
/// ```no_run
/// use std::convert::Infallible;
///
/// use axum::error_handling::HandleErrorLayer;
/// use axum::extract::Request;
/// use axum::http::StatusCode;
/// use axum::response::{IntoResponse, Response};
/// use axum::routing::get;
/// use axum::Router;
/// use latchkey_redis::{Quota, RateLimitError, RateLimitLayer};
/// use tower::ServiceBuilder;
///
/// async fn rejected(err: RateLimitError<Infallible>) -> Response {
///     match err {
///         RateLimitError::Limited(limited) => {
///             let retry_after = limited.retry_after_secs().to_string();
///             (StatusCode::TOO_MANY_REQUESTS, [("retry-after", retry_after)]).into_response()
///         }
///         RateLimitError::Redis(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
///         RateLimitError::Inner(never) => match never {},
///         _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// // Each API key: 600 requests a minute, bursts of 50.
/// let limiter = client.gcra_limiter("api", Quota::per_minute(600).with_burst(50));
/// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(
///     ServiceBuilder::new()
///         .layer(HandleErrorLayer::new(rejected))
///         .layer(RateLimitLayer::new(limiter, |req: &Request| {
///             let key = req.headers().get("x-api-key")?.to_str().ok()?;
///             Some(key.to_owned())
///         })),
/// );
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub struct RateLimitLayer<F> {
    limiter: GcraLimiter,
    key_fn: Arc<F>,
    fail: FailPolicy,
}

impl<F> RateLimitLayer<F> {
    /// A layer holding the key `key_fn` reads from each request to `limiter`'s quota, with
    /// [`FailPolicy::Closed`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::{Quota, RateLimitLayer};
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// // A request type of the application's: here, a (user, body) pair.
    /// let limiter = client.gcra_limiter("uploads", Quota::per_hour(100));
    /// let layer = RateLimitLayer::new(limiter, |req: &(String, Vec<u8>)| Some(req.0.clone()));
    /// # }
    /// ```
    pub fn new(limiter: GcraLimiter, key_fn: F) -> RateLimitLayer<F> {
        RateLimitLayer {
            limiter,
            key_fn: Arc::new(key_fn),
            fail: FailPolicy::Closed,
        }
    }

    /// This layer with `policy` for the requests the limiter cannot decide (see
    /// [`FailPolicy`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::{FailPolicy, Quota};
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// // A limit that protects nothing critical: keep serving while Redis is away.
    /// let layer = client
    ///     .gcra_limiter("search", Quota::per_second(20))
    ///     .layer(|user: &String| Some(user.clone()))
    ///     .with_fail_policy(FailPolicy::Open);
    /// assert_eq!(layer.fail_policy(), FailPolicy::Open);
    /// # }
    /// ```
    pub fn with_fail_policy(self, policy: FailPolicy) -> RateLimitLayer<F> {
        RateLimitLayer {
            fail: policy,
            ..self
        }
    }

    /// What the services of this layer do when the limiter cannot decide.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::{FailPolicy, Quota};
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// let layer = client
    ///     .gcra_limiter("search", Quota::per_second(20))
    ///     .layer(|user: &String| Some(user.clone()));
    /// assert_eq!(layer.fail_policy(), FailPolicy::Closed);
    /// # }
    /// ```
    pub fn fail_policy(&self) -> FailPolicy {
        self.fail
    }

    /// The limiter the requests are held to.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::Quota;
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// let layer = client
    ///     .gcra_limiter("search", Quota::per_second(20))
    ///     .layer(|user: &String| Some(user.clone()));
    /// assert_eq!(layer.limiter().name(), "search");
    /// # }
    /// ```
    pub fn limiter(&self) -> &GcraLimiter {
        &self.limiter
    }
}

impl<F> Clone for RateLimitLayer<F> {
    fn clone(&self) -> RateLimitLayer<F> {
        RateLimitLayer {
            limiter: self.limiter.clone(),
            key_fn: Arc::clone(&self.key_fn),
            fail: self.fail,
        }
    }
}

impl<F> fmt::Debug for RateLimitLayer<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("fail", &self.fail)
            .finish_non_exhaustive()
    }
}

impl<S, F> Layer<S> for RateLimitLayer<F> {
    type Service = RateLimitService<S, F>;

    fn layer(&self, inner: S) -> RateLimitService<S, F> {
        RateLimitService {
            inner,
            limiter: self.limiter.clone(),
            key_fn: Arc::clone(&self.key_fn),
            fail: self.fail,
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
impl GcraLimiter {
    /// A [`RateLimitLayer`] holding the key `key_fn` reads from each request to this limiter's
    /// quota: `RateLimitLayer::new(limiter.clone(), key_fn)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::net::SocketAddr;
    ///
    /// use axum::extract::{ConnectInfo, Request};
    /// use latchkey_redis::Quota;
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// // Per client address (the router served with `into_make_service_with_connect_info`).
    /// let layer = client
    ///     .gcra_limiter("per-ip", Quota::per_second(10))
    ///     .layer(|req: &Request| {
    ///         let ConnectInfo(peer) = req.extensions().get::<ConnectInfo<SocketAddr>>()?;
    ///         Some(peer.ip().to_string())
    ///     });
    /// # }
    /// ```
    pub fn layer<F>(&self, key_fn: F) -> RateLimitLayer<F> {
        RateLimitLayer::new(self.clone(), key_fn)
    }
}

/// The service a [`RateLimitLayer`] wraps around an inner service: see the layer for what it
/// does with each request, its readiness and its cancel safety.
///
/// Cloning it is cheap when the inner service's clone is; every clone holds the same keys to
/// the same limit.
///
/// # Examples
///
/// ```no_run
/// use std::convert::Infallible;
///
/// use latchkey_redis::{Quota, RateLimitError, RateLimitLayer};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # async fn f(client: latchkey_redis::Client) {
/// let echo = service_fn(|user: String| async move { Ok::<_, Infallible>(user) });
/// let service = client.gcra_limiter("echo", Quota::per_second(1)).layer(|user: &String| {
///     Some(user.clone())
/// }).layer(echo);
/// match service.clone().oneshot("alice".to_owned()).await {
///     Ok(reply) => println!("{reply}"),
///     Err(RateLimitError::Limited(limited)) => println!("retry in {:?}", limited.retry_after()),
///     Err(other) => println!("{other}"),
/// }
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub struct RateLimitService<S, F> {
    inner: S,
    limiter: GcraLimiter,
    key_fn: Arc<F>,
    fail: FailPolicy,
}

impl<S, F> RateLimitService<S, F> {
    /// The inner service.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::Quota;
    /// use tower::Layer;
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// let layer = client.gcra_limiter("a", Quota::per_second(1)).layer(|s: &String| Some(s.clone()));
    /// let service = layer.layer(42);
    /// assert_eq!(*service.get_ref(), 42);
    /// # }
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, to change.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::Quota;
    /// use tower::Layer;
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// let layer = client.gcra_limiter("a", Quota::per_second(1)).layer(|s: &String| Some(s.clone()));
    /// let mut service = layer.layer(42);
    /// *service.get_mut() += 1;
    /// assert_eq!(*service.get_ref(), 43);
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, without the limit.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::Quota;
    /// use tower::Layer;
    ///
    /// # fn f(client: latchkey_redis::Client) {
    /// let layer = client.gcra_limiter("a", Quota::per_second(1)).layer(|s: &String| Some(s.clone()));
    /// assert_eq!(layer.layer(42).into_inner(), 42);
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, F> Clone for RateLimitService<S, F> {
    fn clone(&self) -> RateLimitService<S, F> {
        RateLimitService {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            key_fn: Arc::clone(&self.key_fn),
            fail: self.fail,
        }
    }
}

impl<S: fmt::Debug, F> fmt::Debug for RateLimitService<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("fail", &self.fail)
            .finish_non_exhaustive()
    }
}

impl<S, F, K, Req> Service<Req> for RateLimitService<S, F>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    F: Fn(&Req) -> Option<K>,
    K: Into<String>,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = RateLimitError<S::Error>;
    type Future = ResponseFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(RateLimitError::Inner)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let Some(key) = (self.key_fn)(&req).map(Into::into) else {
            // Not limited: straight on, with the service that was made ready.
            let called = self.inner.call(req);
            return ResponseFuture::new(async move { called.await.map_err(RateLimitError::Inner) });
        };
        // The service made ready by `poll_ready` serves this request, after the decision; a
        // fresh clone (not known to be ready) stays for the next `poll_ready`.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        let limiter = self.limiter.clone();
        let fail = self.fail;
        ResponseFuture::new(async move {
            match limiter.check(&key, 1).await {
                Ok(decision) if decision.is_admitted() => {}
                Ok(decision) => {
                    return Err(RateLimitError::Limited(RateLimited { key, decision }));
                }
                Err(err) if fail.lets_through(&err) => {
                    tracing::warn!(
                        limiter = %limiter.name(),
                        error = %err.chain(),
                        "rate limit not decided; request let through (FailPolicy::Open)"
                    );
                }
                Err(err) => return Err(RateLimitError::Redis(err)),
            }
            ready.call(req).await.map_err(RateLimitError::Inner)
        })
    }
}

/// The future of a [`RateLimitService`]'s response: the decision, then the inner service's
/// response.
///
/// # Cancel safety
///
/// Dropping it takes no permit unless the limiter already admitted the request: dropped
/// before or while the limiter decides, nothing is taken (a late admission is given back in
/// the background); dropped while the inner service runs, the permit stays taken.
///
/// # Examples
///
/// ```no_run
/// use std::convert::Infallible;
///
/// use latchkey_redis::{Quota, ResponseFuture};
/// use tower::{service_fn, Layer, Service};
///
/// # async fn f(client: latchkey_redis::Client) {
/// let echo = service_fn(|user: String| async move { Ok::<_, Infallible>(user) });
/// let mut service = client.gcra_limiter("echo", Quota::per_second(1)).layer(|user: &String| {
///     Some(user.clone())
/// }).layer(echo);
/// std::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
/// let response: ResponseFuture<String, Infallible> = service.call("alice".to_owned());
/// println!("{:?}", response.await);
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture<T, E> {
    inner: Pin<Box<dyn Future<Output = Result<T, RateLimitError<E>>> + Send>>,
}

impl<T, E> ResponseFuture<T, E> {
    fn new(
        future: impl Future<Output = Result<T, RateLimitError<E>>> + Send + 'static,
    ) -> ResponseFuture<T, E> {
        ResponseFuture {
            inner: Box::pin(future),
        }
    }
}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, RateLimitError<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<T, E> fmt::Debug for ResponseFuture<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// The error of a [`RateLimitService`]: the request was refused, the limiter could not
/// decide, or the inner service failed.
///
/// With axum, a `HandleErrorLayer` in front of the [`RateLimitLayer`] turns it into a
/// response (see the layer's example): [`RateLimitError::Limited`] into `429 Too Many
/// Requests` with [`RateLimited::retry_after_secs`] as `Retry-After`,
/// [`RateLimitError::Redis`] into `503 Service Unavailable` (or `500` for
/// [`Error::is_invalid_argument`]), and `Inner` is axum's `Infallible`.
///
/// The message of [`Limited`](RateLimitError::Limited) leaves the key out (it may be a
/// credential); that of [`Redis`](RateLimitError::Redis) returns the limiter's error from
/// `source()`; [`Inner`](RateLimitError::Inner) is the inner error's message and source.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use latchkey_redis::RateLimitError;
///
/// fn status(err: &RateLimitError<Infallible>) -> u16 {
///     match err {
///         RateLimitError::Limited(_) => 429,
///         RateLimitError::Redis(e) if e.is_invalid_argument() => 500,
///         RateLimitError::Redis(_) => 503,
///         RateLimitError::Inner(never) => match *never {},
///         _ => 500,
///     }
/// }
/// let err = RateLimitError::<Infallible>::Redis(latchkey_redis::Error::Closed);
/// assert_eq!(status(&err), 503);
/// assert_eq!(err.to_string(), "the rate limit could not be decided");
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
#[derive(Debug)]
#[non_exhaustive]
pub enum RateLimitError<E> {
    /// The key has used its quota: the inner service was not called.
    Limited(RateLimited),
    /// The limiter could not decide (Redis unreachable or failing, a key or quota it refuses):
    /// the inner service was not called, unless [`FailPolicy::Open`] let the request through
    /// (then this error is not returned). See [`FailPolicy`] for which errors those are.
    Redis(Error),
    /// The inner service's own error (from its `poll_ready` or its response), as it returned
    /// it.
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for RateLimitError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateLimitError::Limited(limited) => limited.fmt(f),
            RateLimitError::Redis(_) => f.write_str("the rate limit could not be decided"),
            RateLimitError::Inner(inner) => inner.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RateLimitError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RateLimitError::Limited(_) => None,
            RateLimitError::Redis(err) => Some(err),
            RateLimitError::Inner(inner) => inner.source(),
        }
    }
}

/// A request refused by a [`RateLimitService`]: its key and the limiter's decision, for the
/// `429` and its headers.
///
/// # Examples
///
/// ```
/// use latchkey_redis::RateLimited;
///
/// /// The rate limit headers of a `429`: `Retry-After` (seconds, rounded up, so a client that
/// /// waits that long is admitted) and the `RateLimit-*` fields.
/// fn headers(limited: &RateLimited) -> [(&'static str, String); 4] {
///     let decision = limited.decision();
///     [
///         ("retry-after", limited.retry_after_secs().to_string()),
///         ("ratelimit-limit", decision.limit().to_string()),
///         ("ratelimit-remaining", decision.remaining().to_string()),
///         ("ratelimit-reset", decision.reset_after().as_secs_f64().ceil().to_string()),
///     ]
/// }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimited {
    key: String,
    decision: RateDecision,
}

impl RateLimited {
    /// The key the request was limited by, as the key function returned it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f(limited: &latchkey_redis::RateLimited) {
    /// eprintln!("limited {}", limited.key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The limiter's refusal, as [`GcraLimiter::check`] returned it: its
    /// [`limit`](RateDecision::limit), [`remaining`](RateDecision::remaining) (0 or more,
    /// fewer than a request needs) and [`reset_after`](RateDecision::reset_after).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f(limited: &latchkey_redis::RateLimited) {
    /// assert!(!limited.decision().is_admitted());
    /// # }
    /// ```
    pub fn decision(&self) -> RateDecision {
        self.decision
    }

    /// How long until the same request would be admitted (by the Redis server's clock, if
    /// nobody else uses the key meanwhile).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn f(limited: &latchkey_redis::RateLimited) {
    /// tokio::time::sleep(limited.retry_after()).await; // then try again
    /// # }
    /// ```
    pub fn retry_after(&self) -> Duration {
        self.decision.retry_after().unwrap_or_default()
    }

    /// [`RateLimited::retry_after`] in whole seconds, rounded up: the value of a
    /// `Retry-After` header (a client that waits that long is admitted; rounded down, it
    /// would come back too early and be refused again).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f(limited: &latchkey_redis::RateLimited) {
    /// let header = ("retry-after", limited.retry_after_secs().to_string());
    /// assert!(limited.retry_after_secs() as f64 >= limited.retry_after().as_secs_f64());
    /// # }
    /// ```
    pub fn retry_after_secs(&self) -> u64 {
        let after = self.retry_after();
        after.as_secs() + u64::from(after.subsec_nanos() > 0)
    }
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limited: the key's quota is used up; retry in {:?}",
            self.retry_after()
        )
    }
}

impl std::error::Error for RateLimited {}
