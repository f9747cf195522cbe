//! The HTTP edge: accepting connections and holding them to their bounds
//! before any route sees a request.
//!
//! [`serve_on`] runs its own accept loop over hyper's HTTP/1 connections
//! (what `axum::serve` would do, plus the bounds it lacks):
//!
//! - **open connections**, server-wide and per client address: a
//!   connection past either cap is not served. A few of those past the
//!   server-wide cap (the [`HttpConfig::healthz_connections`] budget, one
//!   per address) get a minimal responder that reads a small head under a short timeout and
//!   answers `GET /healthz`, so a load balancer still sees the server's
//!   health; every other one is answered `503` with `Retry-After` and
//!   `Connection: close` and closed at once. None waits in the accept
//!   backlog.
//! - **the request head**: it must arrive whole within
//!   [`HttpConfig::header_read_timeout`] of the connection opening, or of
//!   the previous response ending on a kept-alive connection (hyper starts
//!   the same timer whenever the connection waits for a head, so this is
//!   also the idle keep-alive timeout; a response being streamed is not
//!   waiting for a head and is never cut by it), and be at most
//!   [`HttpConfig::max_head_bytes`] long with at most
//!   [`HttpConfig::max_headers`] headers (hyper answers `431` past either).
//! - **accept errors**: out of file descriptors, the loop backs off
//!   (doubling up to a second) instead of spinning, and answers the
//!   connection waiting in the backlog with a `503` through a descriptor
//!   kept in reserve for that.
//!
//! Request bodies are bounded where they are read ([`crate::body`]).
//!
//! The soft limit on open files is raised to the hard limit at start
//! ([`raise_fd_limit`]), and the connection cap is kept below it, leaving
//! room for the store, compiled components and outgoing HTTP.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::AppState;

/// The server-wide bounds of the HTTP edge: the config file's `[http]`
/// table (see docs/configuration.md and docs/security.md). The per-tenant
/// ones are fields of [`crate::Limits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The longest a connection may take to send a request's head,
    /// counted from when it opens or from the end of its previous
    /// response: also how long an idle kept-alive connection is kept.
    pub header_read_timeout: Duration,
    /// Connections open at once, server-wide.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6 client
    /// by its /64).
    pub max_connections_per_address: usize,
    /// Connections past the caps that may still ask for `/healthz`, at
    /// most one per address.
    pub healthz_connections: usize,
    /// The largest request head (request line and headers), in bytes.
    pub max_head_bytes: usize,
    /// The most headers a request may have.
    pub max_headers: usize,
    /// The longest a request body may go without a byte arriving.
    pub body_read_timeout: Duration,
    /// Bytes of request bodies in flight, server-wide (JSON bodies count
    /// their parsed values too, see [`crate::body`]).
    pub max_body_bytes_in_flight: usize,
    /// The deepest nesting of arrays and objects in a JSON body.
    pub max_json_depth: usize,
    /// Array elements and object members in a JSON body, in all.
    pub max_json_values: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 2048,
            max_connections_per_address: 256,
            healthz_connections: 16,
            // An end-user token may be about 70 KB, in a header or the
            // query; the rest leaves room for the other headers.
            max_head_bytes: 96 << 10,
            max_headers: 100,
            body_read_timeout: Duration::from_secs(10),
            max_body_bytes_in_flight: 256 << 20,
            max_json_depth: 64,
            max_json_values: 100_000,
        }
    }
}

impl HttpConfig {
    /// The bounds of a JSON body.
    pub fn json_bounds(&self) -> crate::body::JsonBounds {
        crate::body::JsonBounds { max_depth: self.max_json_depth, max_values: self.max_json_values }
    }
}

/// The smallest [`HttpConfig::max_head_bytes`]: hyper's read buffer
/// cannot be smaller.
pub const MIN_HEAD_BYTES: usize = 8192;

/// The deepest [`HttpConfig::max_json_depth`]: serde_json refuses deeper
/// nesting itself, with a less helpful message.
pub const MAX_JSON_DEPTH: usize = 128;

/// How long the `/healthz` responder of an overflow connection waits for
/// its head, and for its answer to be taken: a health check sends a few
/// dozen bytes at once.
const SPARE_TIMEOUT: Duration = Duration::from_secs(1);

/// The largest head the overflow responder reads.
const SPARE_HEAD_BYTES: usize = 1024;

/// Connections the kernel may queue for the accept loop: a burst larger
/// than the queue would have its connections retried by their clients a
/// second later. The kernel caps it (`net.core.somaxconn` on Linux).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with a backlog of [`LISTEN_BACKLOG`] (the
/// standard library's and tokio's take 128).
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // As the standard library does on Unix: a restarted server rebinds at
    // once, without waiting for its old connections' TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The longest the accept loop backs off after an accept error.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` with `state`'s `[http]` bounds until
/// `shutdown` resolves, then lets the connections finish their requests.
pub async fn serve_on(
    listener: TcpListener,
    app: Router,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let config = state.config.file().http.clone();
    let gate = Arc::new(Gate::new(fitted(&config, raise_fd_limit())));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .max_header_size(config.max_head_bytes)
        // The read buffer holds at most one head (or a body's chunk), and
        // the write buffer a response's queued frames.
        .max_buf_size(config.max_head_bytes.max(MIN_HEAD_BYTES))
        .max_headers(config.max_headers)
        .keep_alive(true);
    let (stopping, stop_signal) = watch::channel(false);
    // Each connection's task holds a clone; when all are gone, every
    // connection has finished.
    let (closed, open) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    let mut backoff = Backoff::default();
    let mut reserve = Reserve::open();
    let log = Throttle::default();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_error(&listener, error, &mut reserve, &mut backoff, &gate).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        backoff.reset();
        no_delay(&stream);
        match gate.admit(peer.ip()) {
            Admission::Serve(slot) => {
                let io = TokioIo::new(stream);
                let service = TowerToHyperService::new(app.clone());
                let connection = builder.serve_connection(io, service).with_upgrades();
                let (mut stop_signal, open) = (stop_signal.clone(), open.clone());
                tokio::spawn(async move {
                    let mut connection = pin!(connection);
                    let mut stopping = pin!(stop_signal.wait_for(|stop| *stop));
                    let mut shutting_down = false;
                    loop {
                        tokio::select! {
                            result = connection.as_mut() => {
                                if let Err(error) = result {
                                    tracing::debug!(%error, %peer, "a connection ended with an error");
                                }
                                break;
                            }
                            _ = &mut stopping, if !shutting_down => {
                                // It finishes the request under way, then
                                // closes.
                                shutting_down = true;
                                connection.as_mut().graceful_shutdown();
                            }
                        }
                    }
                    drop((slot, open));
                });
            }
            Admission::Spare(slot, why) => {
                log.warn(|suppressed| tracing::warn!(%peer, why = why.message(&gate.config), suppressed, "a connection past the caps may ask only for /healthz"));
                let (state, config) = (state.clone(), gate.config.clone());
                tokio::spawn(async move { spare(stream, slot, &state, &config, why).await });
            }
            Admission::Refuse(why) => {
                log.warn(|suppressed| tracing::warn!(%peer, why = why.message(&gate.config), suppressed, "a connection was refused"));
                refuse_now(&stream, &why.message(&gate.config));
            }
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    drop(open);
    closed.closed().await;
    Ok(())
}

/// Turns Nagle's algorithm off on an accepted connection: a response's
/// last segment otherwise waits for the client's delayed ACK (about 40 ms
/// on Linux) whenever an earlier one is unacknowledged, which is every
/// streamed turn on a keep-alive connection.
fn no_delay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted connection");
    }
}

/// What one client address is counted as: an IPv4 address (also when
/// mapped into IPv6), or an IPv6 address's /64, which one host or one
/// customer usually holds whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Peer {
    V4([u8; 4]),
    V6([u8; 8]),
}

impl From<IpAddr> for Peer {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Peer::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer::V4(v4.octets()),
                None => {
                    let octets = v6.octets();
                    let mut prefix = [0; 8];
                    prefix.copy_from_slice(&octets[..8]);
                    Peer::V6(prefix)
                }
            },
        }
    }
}

/// Why a connection is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    /// The server has `max_connections` open.
    Server,
    /// Its address has `max_connections_per_address` open.
    Address,
}

impl Over {
    fn message(self, config: &HttpConfig) -> String {
        match self {
            Over::Server => format!(
                "the server has {} connections open, its limit ([http] max_connections); retry shortly",
                config.max_connections
            ),
            Over::Address => format!(
                "this address has {} connections open, its limit ([http] max_connections_per_address); close some \
                 or retry shortly",
                config.max_connections_per_address
            ),
        }
    }
}

/// What the gate does with a new connection.
#[derive(Debug)]
enum Admission {
    /// Served, holding this slot.
    Serve(Slot),
    /// Past a cap, but within the `/healthz` budget.
    Spare(Slot, Over),
    /// Answered `503` at once.
    Refuse(Over),
}

/// Connections open, in all and by address; served ones and the
/// `/healthz` responder's apart.
#[derive(Debug)]
struct Gate {
    config: HttpConfig,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    served: usize,
    served_by: HashMap<Peer, usize>,
    spare: usize,
    spare_by: HashMap<Peer, usize>,
}

impl Gate {
    fn new(config: HttpConfig) -> Self {
        Self { config, counts: Mutex::default() }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        // Counting cannot panic half-way: a poisoned lock still holds
        // consistent numbers.
        self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn admit(self: &Arc<Self>, ip: IpAddr) -> Admission {
        let peer = Peer::from(ip);
        let mut counts = self.counts();
        let by_peer = counts.served_by.get(&peer).copied().unwrap_or(0);
        let over = if counts.served >= self.config.max_connections {
            Over::Server
        } else if by_peer >= self.config.max_connections_per_address {
            Over::Address
        } else {
            counts.served += 1;
            *counts.served_by.entry(peer).or_default() += 1;
            return Admission::Serve(Slot { gate: self.clone(), peer, spare: false });
        };
        // An address at its own cap is the one using the server: only a
        // full server leaves the others a way to its health.
        let spare_by_peer = counts.spare_by.get(&peer).copied().unwrap_or(0);
        if over == Over::Server && counts.spare < self.config.healthz_connections && spare_by_peer == 0 {
            counts.spare += 1;
            *counts.spare_by.entry(peer).or_default() += 1;
            return Admission::Spare(Slot { gate: self.clone(), peer, spare: true }, over);
        }
        Admission::Refuse(over)
    }
}

/// A connection's place in the gate, given back when dropped.
#[derive(Debug)]
struct Slot {
    gate: Arc<Gate>,
    peer: Peer,
    spare: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.gate.counts();
        let counts = &mut *counts;
        let (total, by) = if self.spare {
            (&mut counts.spare, &mut counts.spare_by)
        } else {
            (&mut counts.served, &mut counts.served_by)
        };
        *total = total.saturating_sub(1);
        if let Some(n) = by.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.peer);
            }
        }
    }
}

/// `503` with `Retry-After` and `Connection: close`, in the API's error
/// shape.
fn unavailable(message: &str) -> Vec<u8> {
    let body = serde_json::json!({"error": message, "code": "unavailable"}).to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers `503` without reading or waiting: a new socket's send buffer
/// takes the few hundred bytes at once, and the connection is closed when
/// `stream` is dropped.
fn refuse_now(stream: &TcpStream, message: &str) {
    let _ = stream.try_write(&unavailable(message));
}

/// The overflow responder: reads one small head within
/// [`SPARE_TIMEOUT`] and answers `GET /healthz` as the route does, `503`
/// to anything else, then closes. Its `slot` in the `/healthz` budget is
/// given back before the answer is written: a client that reads the
/// answer and asks again at once then finds the slot free (the write is
/// a few hundred bytes, bounded by the same timeout).
async fn spare(mut stream: TcpStream, slot: Slot, state: &AppState, config: &HttpConfig, why: Over) {
    let timeout = SPARE_TIMEOUT.min(config.header_read_timeout);
    let mut head = Vec::with_capacity(SPARE_HEAD_BYTES);
    let read = tokio::time::timeout(timeout, async {
        let mut chunk = [0u8; 256];
        while head.len() < SPARE_HEAD_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&chunk[..n.min(SPARE_HEAD_BYTES - head.len())]);
        }
        io::Result::Ok(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return;
    }
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    let answer = if method == b"GET" && path == b"/healthz" {
        match crate::metrics::health(state).await {
            Ok(health) => {
                let body = serde_json::to_string(&health).unwrap_or_default();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            }
            Err(error) => unavailable(&error.message),
        }
    } else {
        unavailable(&why.message(config))
    };
    drop(slot);
    let _ = tokio::time::timeout(timeout, async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// How long the accept loop waits after an accept error: doubling from
/// 5 ms up to [`MAX_BACKOFF`], back to nothing after an accept.
#[derive(Debug, Default)]
struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    fn reset(&mut self) {
        self.next = None;
    }

    fn step(&mut self) -> Duration {
        let wait = self.next.unwrap_or(Duration::from_millis(5));
        self.next = Some((wait * 2).min(MAX_BACKOFF));
        wait
    }
}

/// A file descriptor kept open so that, out of descriptors, the loop can
/// give it up to accept the connection waiting in the backlog and tell it
/// `503` rather than leave it hanging.
struct Reserve(Option<std::fs::File>);

impl Reserve {
    fn open() -> Self {
        Self(Self::file())
    }

    fn file() -> Option<std::fs::File> {
        std::fs::File::open(if cfg!(windows) { "NUL" } else { "/dev/null" }).ok()
    }
}

/// Handles an accept error: a connection that failed before it was
/// accepted is skipped; running out of file descriptors (or anything
/// else) is logged at most once a second and backed off from, answering
/// one waiting connection through the reserve descriptor first.
async fn accept_error(
    listener: &TcpListener,
    error: io::Error,
    reserve: &mut Reserve,
    backoff: &mut Backoff,
    gate: &Gate,
) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    static LOG: Throttle = Throttle::new();
    // EMFILE (24) and ENFILE (23): out of descriptors.
    let out_of_files = matches!(error.raw_os_error(), Some(23 | 24));
    if out_of_files && reserve.0.take().is_some() {
        if let Ok(Ok((stream, _))) = tokio::time::timeout(Duration::from_millis(10), listener.accept()).await {
            refuse_now(&stream, "the server is out of file descriptors; retry shortly");
        }
        reserve.0 = Reserve::file();
    }
    let open = gate.counts().served;
    LOG.warn(|suppressed| tracing::error!(%error, open, suppressed, "accepting a connection failed; backing off"));
    // Out of descriptors or memory: accepting again at once would spin
    // on the same error; connections being served free what it lacks.
    tokio::time::sleep(backoff.step()).await;
}

/// Logs at most once a second, counting what it left out.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// Milliseconds since [`Throttle::epoch`] of the last line, plus one.
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    /// A throttle that has logged nothing.
    pub(crate) const fn new() -> Self {
        Self { last: AtomicU64::new(0), suppressed: AtomicU64::new(0) }
    }

    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    /// Calls `log` with the number of lines left out since the last one,
    /// unless a line was logged less than a second ago.
    pub(crate) fn warn(&self, log: impl FnOnce(u64)) {
        let now = u64::try_from(Self::epoch().elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < 1000
            || self.last.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        log(self.suppressed.swap(0, Ordering::Relaxed));
    }
}

/// Raises the soft limit on open files to the hard limit; answers the
/// soft limit in force afterwards (`None` where there is none, or it
/// cannot be read).
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        if limit.current != limit.maximum {
            let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
            if let Err(error) = setrlimit(Resource::Nofile, raised) {
                tracing::warn!(%error, "the limit on open files could not be raised to its hard limit");
            }
        }
        getrlimit(Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `config` with its connection caps below the open-file limit `files`:
/// the server keeps an eighth of it (at least 128) for the store,
/// compiled components and outgoing connections.
fn fitted(config: &HttpConfig, files: Option<u64>) -> HttpConfig {
    let mut fitted = config.clone();
    let Some(files) = files.and_then(|f| usize::try_from(f).ok()) else { return fitted };
    let room = files.saturating_sub((files / 8).max(128));
    fitted.healthz_connections = config.healthz_connections.min(room / 8);
    let connections = room.saturating_sub(fitted.healthz_connections).max(1);
    if config.max_connections > connections {
        tracing::warn!(
            configured = config.max_connections,
            serving = connections,
            open_files = files,
            "[http] max_connections is more than the open-file limit leaves room for; lowered"
        );
        fitted.max_connections = connections;
    }
    fitted.max_connections_per_address = fitted.max_connections_per_address.min(fitted.max_connections);
    fitted
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use axum::routing::get;
    use subs_engine::agents::AgentRegistry;
    use subs_engine::store::MemStore;
    use subs_engine::worker::component::ComponentHost;

    use super::*;
    use crate::{Keys, ServerConfig};

    /// Serves `app` under `config` on a loopback port; its address.
    async fn serve(app: Router, config: HttpConfig, dir: &tempfile::TempDir) -> std::net::SocketAddr {
        let store: Arc<dyn subs_engine::Store> = Arc::new(MemStore::new());
        let engine = subs_engine::Engine::open(
            store,
            subs_engine::model::Models::with_offline(),
            subs_engine::EngineConfig::default(),
        );
        let host = ComponentHost::new().expect("a component host");
        let agents = AgentRegistry::new(engine.clone(), host, dir.path().to_path_buf());
        let config = ServerConfig { http: config, ..ServerConfig::default() };
        let state = Arc::new(AppState {
            engine,
            agents,
            keys: Keys::new([]),
            config: config.into(),
            metrics: Default::default(),
            scans: Default::default(),
        });
        let listener = bind("127.0.0.1:0".parse().unwrap()).expect("a port");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(serve_on(listener, app, state, std::future::pending()));
        addr
    }

    /// A route answering at once, and one streaming a chunk every 200 ms
    /// for 1.2 s.
    fn app() -> Router {
        Router::new().route("/", get(|| async { "hello" })).route(
            "/stream",
            get(|| async {
                // A slow response on purpose: the connection stays busy.
                let every = Duration::from_millis(200);
                let ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                let chunks = futures::stream::unfold((0, ticks), |(n, mut ticks)| async move {
                    if n == 6 {
                        return None;
                    }
                    ticks.tick().await;
                    Some((Ok::<_, std::convert::Infallible>(format!("chunk {n}\n")), (n + 1, ticks)))
                });
                axum::body::Body::from_stream(chunks)
            }),
        )
    }

    /// Reads until the server closes the connection (or 5 s pass); what
    /// came and when the close came.
    async fn read_to_close(stream: &mut TcpStream) -> (String, Duration) {
        let started = Instant::now();
        let mut bytes = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut bytes)).await;
        (String::from_utf8_lossy(&bytes).into_owned(), started.elapsed())
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_header_timeout_and_streams_are_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        let config = HttpConfig { header_read_timeout: Duration::from_millis(500), ..HttpConfig::default() };
        let addr = serve(app(), config, &dir).await;
        // A connection that sends nothing.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let (text, after) = read_to_close(&mut idle).await;
        assert!(text.is_empty() && after < Duration::from_secs(2), "{text:?} after {after:?}");
        // A kept-alive connection after its response: idle again.
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let (text, after) = read_to_close(&mut kept).await;
        assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("hello"), "{text}");
        assert!(after < Duration::from_secs(2), "the idle kept-alive connection was closed after {after:?}");
        // A response streamed for longer than the timeout is not cut.
        let mut streaming = TcpStream::connect(addr).await.unwrap();
        streaming.write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let (text, after) = read_to_close(&mut streaming).await;
        assert!(text.contains("chunk 5"), "the whole stream: {text}");
        assert!(after >= Duration::from_millis(1200), "{after:?}");
    }

    #[tokio::test]
    async fn a_head_past_the_bound_is_answered_431_and_a_slow_one_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let config = HttpConfig {
            header_read_timeout: Duration::from_millis(500),
            max_head_bytes: 8192,
            ..HttpConfig::default()
        };
        let addr = serve(app(), config, &dir).await;
        let mut long = TcpStream::connect(addr).await.unwrap();
        long.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: ").await.unwrap();
        let _ = long.write_all(&[b'a'; 9000]).await;
        let (text, after) = read_to_close(&mut long).await;
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");
        assert!(after < Duration::from_secs(1), "{after:?}");
        // Under the bound, but never finished.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: a").await.unwrap();
        let (text, after) = read_to_close(&mut slow).await;
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(after < Duration::from_secs(2), "{after:?}");
    }

    #[tokio::test]
    async fn past_the_caps_connections_are_refused_at_once_and_healthz_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let config = HttpConfig { max_connections: 1, healthz_connections: 1, ..HttpConfig::default() };
        let addr = serve(app(), config, &dir).await;
        // Held once served: its answer shows the server took it.
        let mut held = TcpStream::connect(addr).await.unwrap();
        held.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"hello") {
            let mut chunk = [0; 512];
            let n = held.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the held connection is answered: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&chunk[..n]);
        }
        // The server is full: this one may ask for /healthz only.
        let mut health = TcpStream::connect(addr).await.unwrap();
        // And while it is held, another is refused without waiting.
        let mut refused = TcpStream::connect(addr).await.unwrap();
        let (text, after) = read_to_close(&mut refused).await;
        assert!(text.starts_with("HTTP/1.1 503") && text.contains("retry-after: 1"), "{text}");
        assert!(text.contains("max_connections") && text.contains("\"code\":\"unavailable\""), "{text}");
        assert!(after < Duration::from_millis(500), "{after:?}");
        health.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let (text, _) = read_to_close(&mut health).await;
        assert!(text.starts_with("HTTP/1.1 200") && text.ends_with(r#"{"status":"ok"}"#), "{text}");
        // Anything else past the cap is answered 503.
        let mut other = TcpStream::connect(addr).await.unwrap();
        other.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let (text, _) = read_to_close(&mut other).await;
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    }

    fn gate(max: usize, per_address: usize, healthz: usize) -> Arc<Gate> {
        Arc::new(Gate::new(HttpConfig {
            max_connections: max,
            max_connections_per_address: per_address,
            healthz_connections: healthz,
            ..HttpConfig::default()
        }))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_gate_caps_per_address_then_server_wide_and_gives_slots_back() {
        let gate = gate(3, 2, 2);
        let a = [gate.admit(ip("10.0.0.1")), gate.admit(ip("10.0.0.1"))];
        assert!(a.iter().all(|a| matches!(a, Admission::Serve(_))));
        // The third from the same address is refused: no /healthz slot
        // for the address that holds its share.
        assert!(matches!(gate.admit(ip("10.0.0.1")), Admission::Refuse(Over::Address)));
        let b = gate.admit(ip("10.0.0.2"));
        assert!(matches!(b, Admission::Serve(_)));
        // The server is full: other addresses get the /healthz slots, one
        // each, then nothing.
        let spare = gate.admit(ip("10.0.0.3"));
        assert!(matches!(spare, Admission::Spare(_, Over::Server)), "{spare:?}");
        assert!(matches!(gate.admit(ip("10.0.0.3")), Admission::Refuse(Over::Server)), "one per address");
        let _other = gate.admit(ip("10.0.0.4"));
        assert!(matches!(gate.admit(ip("10.0.0.5")), Admission::Refuse(Over::Server)), "the budget is spent");
        drop(a);
        let c = gate.admit(ip("10.0.0.5"));
        assert!(matches!(c, Admission::Serve(_)));
        drop((spare, b, c));
        let counts = gate.counts();
        assert_eq!((counts.served, counts.spare), (0, 1), "only the one held above");
        assert_eq!(counts.served_by.len() + counts.spare_by.len(), 1, "no empty entries are kept");
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let gate = gate(10, 1, 0);
        let _first = gate.admit(ip("2001:db8:1:2::1"));
        assert!(matches!(gate.admit(ip("2001:db8:1:2::ffff")), Admission::Refuse(Over::Address)));
        assert!(matches!(gate.admit(ip("2001:db8:1:3::1")), Admission::Serve(_)));
        let _v4 = gate.admit(ip("192.0.2.7"));
        assert!(matches!(gate.admit(ip("::ffff:192.0.2.7")), Admission::Refuse(Over::Address)));
        assert_eq!(Peer::from(IpAddr::V6(Ipv6Addr::LOCALHOST)), Peer::V6([0; 8]));
    }

    #[test]
    fn caps_stay_below_the_open_file_limit() {
        let config = HttpConfig::default();
        assert_eq!(fitted(&config, None), config);
        assert_eq!(fitted(&config, Some(1 << 20)), config, "room enough");
        let small = fitted(&config, Some(1024));
        assert_eq!(small.healthz_connections, 16);
        assert_eq!(small.max_connections, 1024 - 128 - 16);
        assert!(small.max_connections_per_address <= small.max_connections);
    }

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let mut backoff = Backoff::default();
        let waits: Vec<Duration> = (0..10).map(|_| backoff.step()).collect();
        assert_eq!(waits[0], Duration::from_millis(5));
        assert_eq!(waits[1], Duration::from_millis(10));
        assert_eq!(*waits.last().unwrap(), MAX_BACKOFF);
        backoff.reset();
        assert_eq!(backoff.step(), Duration::from_millis(5));
    }

    #[test]
    fn the_throttle_logs_once_a_second_and_counts_the_rest() {
        let throttle = Throttle::new();
        let mut logged = Vec::new();
        for _ in 0..5 {
            throttle.warn(|suppressed| logged.push(suppressed));
        }
        assert_eq!(logged, [0]);
        assert_eq!(throttle.suppressed.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn the_refusal_is_a_complete_503_in_the_error_shape() {
        let text = String::from_utf8(unavailable("full")).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains("retry-after: 1") && head.contains("connection: close"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body, serde_json::json!({"error": "full", "code": "unavailable"}));
    }
}
