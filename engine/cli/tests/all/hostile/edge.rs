//! Attacks on the HTTP edge: strangers without a key holding connections
//! with unfinished heads or with nothing at all, and a tenant stalling
//! bodies one byte short of their length or sending JSON that parses into
//! far more memory than its text. Each runs beside the neighbour, with
//! the `[http]` bounds made small so that it takes seconds.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use subs_tests::wait::pace;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::{Arena, HOSTILE, NEIGHBOUR, connect_from};

/// Small bounds: heads within 2 s and 16 KiB, bodies stalling at most
/// 2 s, 300 connections (40 per address), 64 MiB of bodies in flight
/// (24 MiB per tenant).
const EDGE: &str = "[http]\n\
    header_read_timeout_secs = 2\n\
    max_connections = 300\n\
    max_connections_per_address = 40\n\
    healthz_connections = 8\n\
    max_head_bytes = 16384\n\
    body_read_timeout_secs = 2\n\
    max_body_bytes_in_flight = 67108864\n\
    [limits]\n\
    max_body_bytes_in_flight = 25165824\n";

/// The neighbour's bounds under every attack here.
const TURN: Duration = Duration::from_secs(5);
const HEALTHZ: Duration = Duration::from_secs(2);

/// How long after its bound a connection or body may take to be cut off
/// or answered: scheduling on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(1500);

/// The `n`th attacker's address (`127.0.0.2` on).
fn attacker(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + u8::try_from(n).expect("a few attackers"))
}

/// The test's own open-file limit, raised: hundreds of connections.
fn room_for_connections() {
    let files = subs_server::edge::raise_fd_limit().unwrap_or(u64::MAX);
    assert!(files >= 2048, "the tests need 2048 open files, the limit is {files}");
}

/// The server's peak memory, plus `extra`: the ceiling an attack must
/// stay under.
fn ceiling(arena: &Arena, extra: u64) -> u64 {
    let ceiling = arena.peak_rss().max(arena.rss()) + extra;
    eprintln!("the server's peak before the attack: {} MiB", arena.peak_rss() >> 20);
    ceiling
}

/// Panics past the ceiling; says where the peak was.
fn assert_peak(arena: &Arena, ceiling: u64) {
    eprintln!("the server's peak after the attack: {} MiB (ceiling {} MiB)", arena.peak_rss() >> 20, ceiling >> 20);
    arena.assert_peak_below(ceiling);
}

/// How one attacking connection ended.
#[derive(Debug, Clone, Copy)]
struct Ended {
    /// How long the connect took.
    connect: Duration,
    /// From the connect to the server's answer or close.
    after: Duration,
    /// The status the server answered, if it answered.
    status: Option<u16>,
}

/// Reads until the server answers or closes, at most `patience`; `None`
/// when it did neither (the connection is still held).
async fn until_closed(stream: &mut tokio::net::tcp::OwnedReadHalf, patience: Duration) -> Option<Option<u16>> {
    let mut head = Vec::new();
    let read = tokio::time::timeout(patience, async {
        let mut chunk = [0u8; 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    head.extend_from_slice(&chunk[..n]);
                    if head.len() >= 12 {
                        return;
                    }
                }
            }
        }
    })
    .await;
    read.ok()?;
    Some(std::str::from_utf8(head.get(9..12).unwrap_or_default()).ok().and_then(|s| s.parse().ok()))
}

/// One attacker: from `from`, connections one after another until
/// `until`, each sending `send` (its head, its body or nothing) and then
/// holding the connection. Answers how each one ended; one still held
/// after `patience` counts as held for that long.
async fn hold_connections(
    server: SocketAddr,
    from: Ipv4Addr,
    until: Instant,
    patience: Duration,
    send: fn(usize) -> Vec<Vec<u8>>,
) -> Vec<Ended> {
    let mut ended = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        let started = Instant::now();
        let Ok(stream) = connect_from(server, from).await else {
            // Refused: an attacker tries again, not in a busy loop.
            pace(Duration::from_millis(50)).await;
            continue;
        };
        let (connect, started) = (started.elapsed(), Instant::now());
        let (mut read, mut write) = stream.into_split();
        let chunks = send(n);
        n += 1;
        let writing = tokio::spawn(async move {
            for chunk in chunks {
                if write.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            // Hold the write side open: the attack is never finishing.
            std::future::pending::<()>().await;
        });
        let status = until_closed(&mut read, patience).await;
        writing.abort();
        match status {
            Some(status) => ended.push(Ended { connect, after: started.elapsed(), status }),
            None => {
                ended.push(Ended { connect, after: patience, status: None });
                break;
            }
        }
        // Not a busy loop: the neighbour shares the machine's two cores
        // with the attackers as well as with the server.
        pace(Duration::from_millis(200)).await;
    }
    ended
}

/// Every connect took less than a second, every connection ended within
/// `within` of its connect, and those answered `503` (refused at a cap)
/// within `refused`.
fn assert_cut_off(all: &[Ended], within: Duration, refused: Duration) {
    assert!(!all.is_empty(), "no attacking connection was made");
    // Never left in the accept backlog: a connect is accepted (and then
    // served or refused) at once.
    let slowest = all.iter().map(|e| e.connect).max().unwrap_or_default();
    assert!(slowest < Duration::from_secs(1), "a connect took {slowest:?}");
    let held: Vec<&Ended> = all.iter().filter(|e| e.after >= within).collect();
    assert!(
        held.is_empty(),
        "{} of {} connections were held {within:?} or more: {:?}",
        held.len(),
        all.len(),
        &held[..held.len().min(5)]
    );
    let slow: Vec<&Ended> = all.iter().filter(|e| e.status == Some(503) && e.after >= refused).collect();
    assert!(slow.is_empty(), "{} refusals took {refused:?} or more: {:?}", slow.len(), &slow[..slow.len().min(5)]);
}

/// Attack 1, without a key: connections sending `GET /healthz` with a
/// header that never ends, half of them 400,000 bytes at once (held by
/// hyper's default buffer, about 400 KiB a connection), half a byte every
/// 200 ms (under any size bound). 6 addresses × 60 connections at a time
/// for 6 s: the heads are cut at 16 KiB (431) or 2 s, the connections
/// past 40 per address refused at once; the server's peak stays within
/// 64 MiB of where it was, the neighbour's turns under 5 s and `/healthz`
/// under 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unfinished_headers_without_a_key_are_cut_off() {
    room_for_connections();
    let arena = Arena::start(EDGE).await;
    let limit = ceiling(&arena, 64 << 20);
    let neighbour = arena.neighbour();
    let until = Instant::now() + Duration::from_secs(6);
    let mut attackers = JoinSet::new();
    for a in 0..6 {
        for c in 0..60 {
            let server = arena.addr;
            if c % 2 == 0 {
                attackers.spawn(hold_connections(server, attacker(a), until, Duration::from_secs(8), |_| {
                    vec![b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".to_vec(), vec![b'a'; 400_000]]
                }));
            } else {
                attackers.spawn(trickled(server, attacker(a), until));
            }
        }
    }
    let ended: Vec<Ended> = attackers.join_all().await.into_iter().flatten().collect();
    let watched = neighbour.stop().await;
    assert_peak(&arena, limit);
    // 2 s for a head, and the slack.
    assert_cut_off(&ended, Duration::from_secs(2) + SLACK, Duration::from_secs(1));
    assert!(ended.iter().any(|e| e.status == Some(431)), "a head past 16 KiB is answered 431");
    assert!(ended.iter().any(|e| e.status == Some(503)), "connections past the per-address cap are refused");
    watched.assert_within(TURN, HEALTHZ);
}

/// A slow loris: a head that gets one byte every 200 ms, never ending.
async fn trickled(server: SocketAddr, from: Ipv4Addr, until: Instant) -> Vec<Ended> {
    let mut ended = Vec::new();
    while Instant::now() < until {
        let started = Instant::now();
        let Ok(stream) = connect_from(server, from).await else {
            // Refused: an attacker tries again, not in a busy loop.
            pace(Duration::from_millis(50)).await;
            continue;
        };
        let (connect, started) = (started.elapsed(), Instant::now());
        let (mut read, mut write) = stream.into_split();
        let writing = tokio::spawn(async move {
            if write.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.is_err() {
                return;
            }
            loop {
                // A byte every 200 ms: the slow loris.
                pace(Duration::from_millis(200)).await;
                if write.write_all(b"a").await.is_err() {
                    return;
                }
            }
        });
        let status = until_closed(&mut read, Duration::from_secs(8)).await;
        writing.abort();
        match status {
            Some(status) => ended.push(Ended { connect, after: started.elapsed(), status }),
            None => {
                ended.push(Ended { connect, after: Duration::from_secs(8), status: None });
                break;
            }
        }
        // As in `hold_connections`: not a busy loop.
        pace(Duration::from_millis(200)).await;
    }
    ended
}

/// Attack 2, without a key: more idle connections than the caps, sending
/// nothing. First 6 addresses × 60 at a time for 5 s beside the
/// neighbour: 40 per address are served and closed after the 2 s
/// header-read timeout, the rest refused with `503` within a second; the
/// neighbour's turns under 5 s, `/healthz` under 2 s, the server within
/// 64 MiB of its peak. Then 8 more addresses fill the server's 300:
/// another client is refused within a second, never left hanging, and
/// `/healthz` is still answered 200; once the idle ones are closed the
/// server serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_without_a_key_are_closed_and_the_rest_refused() {
    room_for_connections();
    let arena = Arena::start(EDGE).await;
    let limit = ceiling(&arena, 64 << 20);
    let neighbour = arena.neighbour();
    let until = Instant::now() + Duration::from_secs(5);
    let mut attackers = JoinSet::new();
    for a in 0..6 {
        for _ in 0..60 {
            let server = arena.addr;
            attackers.spawn(hold_connections(server, attacker(a), until, Duration::from_secs(8), |_| Vec::new()));
        }
    }
    let ended: Vec<Ended> = attackers.join_all().await.into_iter().flatten().collect();
    let watched = neighbour.stop().await;
    assert_peak(&arena, limit);
    assert_cut_off(&ended, Duration::from_secs(2) + SLACK, Duration::from_secs(1));
    assert!(ended.iter().any(|e| e.status.is_none()), "idle connections are closed without an answer");
    assert!(ended.iter().any(|e| e.status == Some(503)), "connections past the per-address cap are refused");
    watched.assert_within(TURN, HEALTHZ);

    // The whole server: 8 addresses × 40 idle connections, 300 served.
    let mut idle = Vec::new();
    for a in 10..18 {
        for _ in 0..40 {
            if let Ok(stream) = connect_from(arena.addr, attacker(a)).await {
                idle.push(stream);
            }
        }
    }
    // Once the server has taken them all, a client past its cap is refused…
    subs_tests::wait::eventually(Duration::from_secs(5), "the server is full", || async {
        let (status, body) = raw(arena.addr, "GET /v1/agents HTTP/1.1\r\nHost: x\r\n\r\n").await;
        if status == Some(503) { Ok(()) } else { Err(format!("{status:?} {body}")) }
    })
    .await;
    // …at once.
    let started = Instant::now();
    let (status, _) = raw(arena.addr, "GET /v1/agents HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, Some(503), "a client past the server's cap is refused");
    assert!(started.elapsed() < Duration::from_secs(1), "and at once: {:?}", started.elapsed());
    let started = Instant::now();
    let (status, body) = raw(arena.addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, Some(200), "/healthz is answered past the caps: {body}");
    assert!(body.contains("\"ok\""), "{body}");
    assert!(started.elapsed() < HEALTHZ, "{:?}", started.elapsed());
    // The idle ones are closed after 2 s; the server serves again.
    let agents = format!("GET /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n", NEIGHBOUR.1);
    subs_tests::wait::eventually(Duration::from_secs(2) + SLACK, "the server serves again", || async {
        let (status, body) = raw(arena.addr, &agents).await;
        if status == Some(200) { Ok(()) } else { Err(format!("{status:?} {body}")) }
    })
    .await;
    drop(idle);
}

/// One request from `127.0.0.1` on a new connection: its status (none if
/// the connection closed without one, or nothing came within 5 s) and
/// what it read.
async fn raw(server: SocketAddr, request: &str) -> (Option<u16>, String) {
    let Ok(mut stream) = TcpStream::connect(server).await else { return (None, String::new()) };
    if stream.write_all(request.as_bytes()).await.is_err() {
        return (None, String::new());
    }
    let mut bytes = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    bytes.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&bytes);
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                            .and_then(|n| n.trim().parse::<usize>().ok());
                        if length.is_some_and(|n| body.len() >= n) {
                            return;
                        }
                    }
                }
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (text.get(9..12).and_then(|s| s.parse().ok()), text)
}

/// A request whose body declares `length` bytes and sends one fewer.
fn short_by_one(method: &str, path: &str, content_type: &str, length: usize) -> Vec<Vec<u8>> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {length}\r\n\r\n",
        HOSTILE.1
    );
    let mut body = vec![b' '; length - 1];
    if content_type == "application/json" {
        body[0] = b'{';
    }
    vec![head.into_bytes(), body]
}

/// Attack 3, the hostile tenant: request bodies one byte short of their
/// `Content-Length`, stalled. 3 addresses × 30 JSON inputs of 4 MiB and
/// 4 uploads of 20 MiB at once: the tenant's 24 MiB in flight admit a few
/// (answered 408 after the 2 s stall), the rest are refused with 429 at
/// once, before their bytes are read; nothing waits past 2 s and the
/// slack. The server within 128 MiB of its peak; the neighbour's turns
/// under 5 s, `/healthz` under 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_bodies_of_a_tenant_are_bounded_refused_and_timed_out() {
    room_for_connections();
    let arena = Arena::start(EDGE).await;
    let limit = ceiling(&arena, 128 << 20);
    let neighbour = arena.neighbour();
    let until = Instant::now() + Duration::from_millis(100);
    let patience = Duration::from_secs(8);
    let mut attackers = JoinSet::new();
    for a in 0..3 {
        for _ in 0..30 {
            attackers.spawn(hold_connections(arena.addr, attacker(a), until, patience, |n| {
                short_by_one("POST", &format!("/v1/sessions/stall-{n}/input"), "application/json", 4 << 20)
            }));
        }
    }
    for _ in 0..4 {
        attackers.spawn(hold_connections(arena.addr, attacker(3), until, patience, |n| {
            short_by_one("PUT", &format!("/v1/agents/stall-{n}"), "application/wasm", 20 << 20)
        }));
    }
    let ended: Vec<Ended> = attackers.join_all().await.into_iter().flatten().collect();
    let watched = neighbour.stop().await;
    assert_peak(&arena, limit);
    assert_cut_off(&ended, Duration::from_secs(2) + SLACK, Duration::from_secs(1));
    let statuses: Vec<Option<u16>> = ended.iter().map(|e| e.status).collect();
    assert!(statuses.iter().all(|s| matches!(s, Some(408 | 429))), "{statuses:?}");
    assert!(statuses.contains(&Some(408)), "a stalled body is answered 408: {statuses:?}");
    let refused = ended.iter().filter(|e| e.status == Some(429)).collect::<Vec<_>>();
    assert!(refused.len() > ended.len() / 2, "most are refused at the tenant's budget: {statuses:?}");
    assert!(refused.iter().all(|e| e.after < Duration::from_secs(1)), "and at once: {refused:?}");
    watched.assert_within(TURN, HEALTHZ);
}

/// A complete input whose `args` is `values` zeros.
fn amplifying(values: usize) -> String {
    let mut body = String::from(r#"{"type":"client.action","agent_id":"tools","name":"flood","args":["#);
    body.push_str(&"0,".repeat(values - 1));
    body.push_str("0]}");
    body
}

/// Sends the input `body` as the hostile tenant from `from`; its status
/// and how long it took.
async fn send_input(server: SocketAddr, from: Ipv4Addr, session: &str, body: String) -> (Option<u16>, Duration) {
    let started = Instant::now();
    let Ok(stream) = connect_from(server, from).await else { return (None, started.elapsed()) };
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /v1/sessions/{session}/input HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        HOSTILE.1,
        body.len()
    );
    let writing = tokio::spawn(async move {
        let _ = write.write_all(head.as_bytes()).await;
        let _ = write.write_all(body.as_bytes()).await;
        std::future::pending::<()>().await;
    });
    let status = until_closed(&mut read, Duration::from_secs(20)).await.flatten();
    writing.abort();
    (status, started.elapsed())
}

/// Attack 4, the hostile tenant: complete JSON bodies that parse into far
/// more memory than their text, several at once. 10 bodies of 4 MiB of
/// `0,` (two million values each, about 290 MB each at the peak of
/// parsing) are refused with 413 naming `max_json_values` before a value
/// is built, or with 429 while the others hold the tenant's 24 MiB in
/// flight; then 12 of 90,000 values (under the bound, about 17 MB each
/// counted in flight) are parsed one at a time within the tenant's 24
/// MiB, the others refused with 429. The server within 160 MiB of its peak; the
/// neighbour's turns under 5 s, `/healthz` under 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn amplifying_json_of_a_tenant_is_refused_before_it_is_built() {
    room_for_connections();
    let arena = Arena::start(EDGE).await;
    let limit = ceiling(&arena, 160 << 20);
    let neighbour = arena.neighbour();
    // As many as fit in the 4 MiB `max_body_bytes`.
    let over = ((4 << 20) - 100) / 2;
    let mut sent = Vec::new();
    for (bodies, values) in [(10, over), (12, 90_000)] {
        let mut senders = JoinSet::new();
        for n in 0..bodies {
            let (server, body) = (arena.addr, amplifying(values));
            senders.spawn(async move { send_input(server, attacker(n % 4), &format!("amp-{values}-{n}"), body).await });
        }
        sent.push(senders.join_all().await);
    }
    let watched = neighbour.stop().await;
    assert_peak(&arena, limit);
    let all = sent.iter().flatten();
    assert!(all.clone().all(|(_, took)| *took < Duration::from_secs(10)), "{sent:?}");
    let (past, under) = (&sent[0], &sent[1]);
    assert!(past.iter().all(|(status, _)| matches!(status, Some(413 | 429))), "{past:?}");
    assert!(past.iter().any(|(status, _)| *status == Some(413)), "two million values are refused: {past:?}");
    // Under the bound: parsed, then answered for what they are (the
    // tenant has no such agent), or refused at the tenant's budget.
    assert!(under.iter().all(|(status, _)| status.is_some_and(|s| s != 413 && s < 500)), "{under:?}");
    assert!(under.iter().any(|(status, _)| *status != Some(429)), "some are parsed: {under:?}");
    assert!(under.iter().any(|(status, _)| *status == Some(429)), "not all at once: {under:?}");
    watched.assert_within(TURN, HEALTHZ);
    // The refusal names the bound.
    let (status, body) = arena
        .call(
            reqwest::Method::POST,
            "/v1/sessions/amp-x/input",
            Some(HOSTILE.1),
            Some(serde_json::from_str(&amplifying(100_001)).unwrap()),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("max_json_values")), "{body}");
}
