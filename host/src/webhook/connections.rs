//! What a client may hold of the server: connections (a cap, an idle deadline) and request
//! bodies (a deadline, and one budget of buffered bytes shared by every connection).
//!
//! Anyone who reaches the Service can open connections and send bodies slowly; without these
//! bounds 100 connections each sending 3 MiB less one byte and stalling take the webhook past
//! its pod's memory limit, and an OOM-killed webhook denies every VCDMachine change. The
//! bounds keep the server's memory under
//! `maxBufferedBytes + maxConnections × (HTTP buffer + small body + TLS buffers)`
//! (docs/deploy.md). The budget is handed out first come, first served; bodies up to
//! [`BODY_ALLOWANCE_BYTES`] take their room from a pool of their own without waiting, so a
//! review of ordinary size is read and answered at once however many stalled large bodies
//! wait for room.

use std::collections::HashMap;
use std::future::{ready, Future, Ready};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use super::metrics::Metrics;

/// The largest HTTP/1 read buffer per connection (hyper's default is about 400 KiB): what a
/// stalled connection holds before its body reaches the budget. Headers must fit in it.
pub const HTTP1_BUFFER_BYTES: usize = 64 << 10;

/// The largest body served from the small-body pool of the [`BodyBudget`] (which holds
/// `connections.max` of them): an AdmissionReview of a VCDMachine is a few KiB, so reviews of
/// ordinary size do not wait for room behind stalled large bodies.
pub const BODY_ALLOWANCE_BYTES: usize = 64 << 10;

/// HTTP/2 flow-control windows: what a client may send on a connection (and on one stream)
/// before the server has read it. The connection window bounds what an HTTP/2 connection holds
/// outside the budget, whatever its number of streams.
pub const HTTP2_CONNECTION_WINDOW: u32 = 256 << 10;
/// See [`HTTP2_CONNECTION_WINDOW`].
pub const HTTP2_STREAM_WINDOW: u32 = 128 << 10;
/// Reviews one HTTP/2 connection may have open at once.
pub const HTTP2_MAX_STREAMS: u32 = 32;

/// Accepts a connection while fewer than the cap are open, and fewer than the per-client cap
/// from its address, and closes it at once otherwise (counted in
/// `nicpolicy_connections_refused_total`). An accepted connection is closed after `idle`
/// without a byte from the client.
#[derive(Clone)]
pub struct ConnectionLimit {
    open: Arc<Semaphore>,
    /// Connections open per client address, against `per_client`.
    clients: Clients,
    per_client: usize,
    idle: Duration,
    open_gauge: Gauge,
    refused: Counter,
}

impl ConnectionLimit {
    /// At most `max` connections open at once, `per_client` of them from one address.
    pub fn new(
        max: usize,
        per_client: usize,
        idle: Duration,
        metrics: &Metrics,
    ) -> ConnectionLimit {
        ConnectionLimit {
            open: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            clients: Arc::new(Mutex::new(HashMap::new())),
            per_client,
            idle,
            open_gauge: metrics.connections_open.clone(),
            refused: metrics.connections_refused.clone(),
        }
    }

    /// Takes a place for a connection from `client`, or `None` when it holds its share.
    fn take_client_place(&self, client: Option<IpAddr>) -> Option<ClientPlace> {
        let Some(address) = client else {
            // No peer address (not TCP/IP): only the global cap applies.
            return Some(ClientPlace { held: None });
        };
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let count = clients.entry(address).or_insert(0);
        if *count >= self.per_client {
            return None;
        }
        *count += 1;
        Some(ClientPlace {
            held: Some((address, self.clients.clone())),
        })
    }
}

/// Connections open per client address.
type Clients = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A connection's place in its client's share, given back when the connection is gone.
struct ClientPlace {
    held: Option<(IpAddr, Clients)>,
}

impl Drop for ClientPlace {
    fn drop(&mut self) {
        if let Some((address, clients)) = self.held.take() {
            let mut clients = clients.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(count) = clients.get_mut(&address) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    clients.remove(&address);
                }
            }
        }
    }
}

impl<S> Accept<TcpStream, S> for ConnectionLimit {
    type Stream = LimitedStream<TcpStream>;
    type Service = Requests<S>;
    type Future = Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        // A client past its share is refused before it can take a place of the global cap:
        // one address cannot hold every connection and lock kube-apiserver out.
        let Some(client) = self.take_client_place(stream.peer_addr().ok().map(|a| a.ip())) else {
            self.refused.inc();
            return ready(Err(io::Error::other(
                "connection refused: the client holds connections.maxPerClient connections",
            )));
        };
        match self.open.clone().try_acquire_owned() {
            Ok(permit) => {
                // No Nagle: a response's last small TLS segment would otherwise wait for the
                // client's ACK, which kube-apiserver delays until it sends its next request
                // (one create in 19 took the gap to the next one: +20 ms at 50/s). A socket
                // that refuses the option is served as it is.
                let _ = stream.set_nodelay(true);
                self.open_gauge.inc();
                let activity = Arc::new(Activity::new());
                ready(Ok((
                    LimitedStream {
                        inner: stream,
                        idle: self.idle,
                        deadline: Box::pin(tokio::time::sleep(self.idle)),
                        activity: activity.clone(),
                        _open: OpenConnection {
                            _permit: permit,
                            _client: client,
                            gauge: self.open_gauge.clone(),
                        },
                    },
                    Requests {
                        inner: service,
                        activity,
                    },
                )))
            }
            Err(_) => {
                // Dropping the stream closes it before the TLS handshake: no buffer is spent.
                self.refused.inc();
                ready(Err(io::Error::other(
                    "connection refused: connections.max connections are open",
                )))
            }
        }
    }
}

/// Holds a connection's place under the cap until the connection is gone.
struct OpenConnection {
    _permit: OwnedSemaphorePermit,
    _client: ClientPlace,
    gauge: Gauge,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// A connection under the cap: reads fail with `TimedOut` once the connection has had no
/// request in flight for the idle deadline. Requests count, bytes do not: an HTTP/2 PING every
/// few seconds (or any other frame that carries no request) keeps no connection open.
pub struct LimitedStream<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    activity: Arc<Activity>,
    _open: OpenConnection,
}

/// A connection's requests: how many are in flight, and when the last one started. Shared by
/// the connection's stream (its idle deadline) and its service ([`Requests`]).
pub struct Activity {
    in_flight: AtomicUsize,
    last_start: Mutex<Instant>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            last_start: Mutex::new(Instant::now()),
        }
    }

    /// When the connection is idle until, or `None` while a request is in flight.
    fn idle_until(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(
            *self
                .last_start
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                + idle,
        )
    }
}

/// A request in flight on its connection, until dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        *activity
            .last_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self
            .0
            .last_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's service, counting its requests in the connection's [`Activity`].
#[derive(Clone)]
pub struct Requests<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S, R> tower_service::Service<R> for Requests<S>
where
    S: tower_service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let in_flight = InFlight::start(self.activity.clone());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answered = answer.await;
            drop(in_flight);
            answered
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for LimitedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Poll::Ready(result) = Pin::new(&mut self.inner).poll_read(cx, buf) {
            return Poll::Ready(result);
        }
        // Pending: is the connection idle past its deadline? Moved on while a request is in
        // flight or started since, until it truly is.
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let idle = self.idle;
            match self.activity.idle_until(idle) {
                Some(until) if until <= Instant::now() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request for connections.idleTimeout",
                    )))
                }
                Some(until) => self.deadline.as_mut().reset(until),
                None => self.deadline.as_mut().reset(Instant::now() + idle),
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LimitedStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The bytes every request body being read or reviewed may hold together
/// (`connections.maxBufferedBytes`), handed out first come, first served, and beside it a pool
/// of small bodies (`connections.max` × [`BODY_ALLOWANCE_BYTES`]) that is never waited for: a
/// body that fits in the allowance takes its room there at once when there is some, so an
/// ordinary review is not queued behind stalled large bodies.
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    small: Arc<Semaphore>,
    gauge: Gauge,
}

impl BodyBudget {
    /// A budget of `bytes`, and a small-body pool for `connections` connections.
    pub fn new(bytes: usize, connections: usize, metrics: &Metrics) -> BodyBudget {
        let small = connections.saturating_mul(BODY_ALLOWANCE_BYTES);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))),
            small: Arc::new(Semaphore::new(small.min(Semaphore::MAX_PERMITS))),
            gauge: metrics.request_bytes_buffered.clone(),
        }
    }

    /// Nothing taken yet, for one body.
    pub fn empty(&self) -> Taken {
        Taken {
            budget: None,
            budget_bytes: 0,
            small: None,
            small_bytes: 0,
            gauge: self.gauge.clone(),
        }
    }

    /// Makes `taken` cover `capacity` bytes: from the small-body pool without waiting when the
    /// body fits the allowance and the pool has room, else from the budget, waiting while other
    /// bodies hold it (what the pool held is then given back).
    pub async fn reserve(&self, taken: &mut Taken, capacity: usize) {
        if capacity <= taken.bytes() {
            return;
        }
        if taken.budget.is_none() && capacity <= BODY_ALLOWANCE_BYTES {
            let more = permits(capacity - taken.small_bytes);
            if let Ok(permit) = self.small.clone().try_acquire_many_owned(more) {
                merge(&mut taken.small, permit);
                taken.small_bytes += more as usize;
                return;
            }
        }
        let more = permits(capacity.saturating_sub(taken.budget_bytes));
        // The semaphore is never closed, so acquiring fails only if it were.
        let Ok(permit) = self.bytes.clone().acquire_many_owned(more).await else {
            return;
        };
        merge(&mut taken.budget, permit);
        taken.budget_bytes += more as usize;
        self.gauge.inc_by(i64::from(more));
        taken.small = None;
        taken.small_bytes = 0;
    }
}

fn permits(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

fn merge(held: &mut Option<OwnedSemaphorePermit>, permit: OwnedSemaphorePermit) {
    match held {
        Some(held) => held.merge(permit),
        None => *held = Some(permit),
    }
}

/// What one body holds of the [`BodyBudget`]; given back when dropped (after its review is
/// answered: the body stays in memory until then).
pub struct Taken {
    budget: Option<OwnedSemaphorePermit>,
    budget_bytes: usize,
    small: Option<OwnedSemaphorePermit>,
    small_bytes: usize,
    gauge: Gauge,
}

impl Taken {
    /// Bytes held, in the budget or the small-body pool.
    pub fn bytes(&self) -> usize {
        self.budget_bytes + self.small_bytes
    }

    /// Bytes held in the shared budget (`nicpolicy_request_bytes_buffered` counts these).
    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.gauge
            .dec_by(i64::try_from(self.budget_bytes).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_send_without_delay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener");
        let address = listener.local_addr().expect("its address");
        let _client = tokio::net::TcpStream::connect(address)
            .await
            .expect("connected");
        let (stream, _) = listener.accept().await.expect("accepted");
        assert!(
            !stream.nodelay().expect("readable option"),
            "Nagle is the default"
        );
        let limit = ConnectionLimit::new(4, 4, Duration::from_secs(30), &Metrics::new());
        let (limited, _) = limit.accept(stream, ()).await.expect("under the cap");
        assert!(limited.inner.nodelay().expect("readable option"));
    }

    #[tokio::test]
    async fn one_client_holds_at_most_its_share_and_others_still_get_in() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener");
        let address = listener.local_addr().expect("its address");
        let metrics = Metrics::new();
        // Four in all, two per client.
        let limit = ConnectionLimit::new(4, 2, Duration::from_secs(30), &metrics);
        let mut accepted = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(
                tokio::net::TcpStream::connect(address)
                    .await
                    .expect("connected"),
            );
            let (stream, _) = listener.accept().await.expect("accepted");
            accepted.push(limit.accept(stream, ()).await);
        }
        assert!(accepted[0].is_ok() && accepted[1].is_ok());
        let third = accepted
            .pop()
            .expect("three")
            .err()
            .expect("over its share");
        assert!(
            third.to_string().contains("connections.maxPerClient"),
            "{third}"
        );
        assert_eq!(metrics.connections_refused.get(), 1);
        // Another address (127.0.0.2 is loopback too) still gets in.
        let other = tokio::net::TcpSocket::new_v4().expect("a socket");
        other
            .bind("127.0.0.2:0".parse().expect("an address"))
            .expect("bound to another loopback address");
        let _other = other.connect(address).await.expect("connected");
        let (stream, _) = listener.accept().await.expect("accepted");
        assert!(limit.accept(stream, ()).await.is_ok(), "another client");
        // A closed connection gives its place back.
        accepted.pop();
        clients.push(
            tokio::net::TcpStream::connect(address)
                .await
                .expect("connected"),
        );
        let (stream, _) = listener.accept().await.expect("accepted");
        assert!(limit.accept(stream, ()).await.is_ok(), "a place given back");
    }

    /// A service whose answers never come: a request in flight for as long as it is held.
    #[derive(Clone)]
    struct NeverAnswers;

    impl tower_service::Service<()> for NeverAnswers {
        type Response = ();
        type Error = ();
        type Future = Pin<Box<dyn Future<Output = Result<(), ()>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            Box::pin(std::future::pending())
        }
    }

    /// A connection accepted under a 200 ms idle deadline, and the client's end.
    async fn idle_connection() -> (
        LimitedStream<TcpStream>,
        Requests<NeverAnswers>,
        tokio::net::TcpStream,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener");
        let client = tokio::net::TcpStream::connect(listener.local_addr().expect("address"))
            .await
            .expect("connected");
        let (stream, _) = listener.accept().await.expect("accepted");
        let limit = ConnectionLimit::new(4, 4, Duration::from_millis(200), &Metrics::new());
        let (limited, service) = limit.accept(stream, NeverAnswers).await.expect("accepted");
        (limited, service, client)
    }

    #[tokio::test]
    async fn bytes_without_requests_do_not_keep_a_connection_open() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (mut limited, _service, mut client) = idle_connection().await;
        // A byte every 50 ms, as HTTP/2 PINGs would come, and no request.
        let pinging = tokio::spawn(async move {
            for _ in 0..100 {
                if client.write_all(b"p").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let started = std::time::Instant::now();
        let mut buf = [0u8; 16];
        let error = loop {
            match limited.read(&mut buf).await {
                Ok(0) => panic!("the client closed"),
                Ok(_) => continue,
                Err(error) => break error,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        pinging.abort();
    }

    #[tokio::test]
    async fn a_request_in_flight_keeps_its_connection() {
        use tokio::io::AsyncReadExt as _;
        let (mut limited, mut service, _client) = idle_connection().await;
        let in_flight = tower_service::Service::call(&mut service, ());
        let mut buf = [0u8; 16];
        // Four idle deadlines with the request in flight: no timeout, nothing read.
        let read = tokio::time::timeout(Duration::from_millis(800), limited.read(&mut buf)).await;
        assert!(read.is_err(), "still waiting, not timed out: {read:?}");
        // Answered (here: dropped): idle from then on.
        drop(in_flight);
        let read = tokio::time::timeout(Duration::from_secs(2), limited.read(&mut buf))
            .await
            .expect("the idle deadline ends the read");
        assert_eq!(read.expect_err("timed out").kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn the_budget_is_given_back_when_a_body_is_dropped() {
        let metrics = Metrics::new();
        let budget = BodyBudget::new(1 << 20, 0, &metrics);
        let mut first = budget.empty();
        budget.reserve(&mut first, 600 << 10).await;
        budget.reserve(&mut first, 1 << 20).await;
        assert_eq!(first.budget_bytes(), 1 << 20);
        assert_eq!(metrics.request_bytes_buffered.get(), 1 << 20);
        let mut second = budget.empty();
        let waiting =
            tokio::time::timeout(Duration::from_millis(50), budget.reserve(&mut second, 1));
        assert!(waiting.await.is_err(), "the budget is spent");
        drop(first);
        assert_eq!(metrics.request_bytes_buffered.get(), 0);
        let mut third = budget.empty();
        tokio::time::timeout(Duration::from_secs(5), budget.reserve(&mut third, 1 << 20))
            .await
            .expect("given back");
    }

    #[tokio::test]
    async fn small_bodies_do_not_wait_behind_a_spent_budget() {
        let metrics = Metrics::new();
        let budget = BodyBudget::new(1 << 20, 2, &metrics);
        let mut large = budget.empty();
        budget.reserve(&mut large, 1 << 20).await;
        // The budget is spent; two small bodies still get room from the pool, at once.
        let mut small = [budget.empty(), budget.empty()];
        for taken in &mut small {
            tokio::time::timeout(Duration::from_millis(50), budget.reserve(taken, 40 << 10))
                .await
                .expect("from the small-body pool");
            assert_eq!(taken.budget_bytes(), 0);
        }
        // The pool (2 × 64 KiB) is now short: a third waits for the budget like a large one.
        let mut third = budget.empty();
        let waiting = tokio::time::timeout(
            Duration::from_millis(50),
            budget.reserve(&mut third, 60 << 10),
        );
        assert!(waiting.await.is_err(), "the pool and the budget are spent");
        // A small body that grows past the allowance moves to the budget and frees the pool.
        drop(large);
        let [mut grows, _] = small;
        budget.reserve(&mut grows, 100 << 10).await;
        assert_eq!(grows.budget_bytes(), 100 << 10);
        assert_eq!(grows.bytes(), 100 << 10);
    }
}
