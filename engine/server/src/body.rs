//! Request bodies: read with a bound, counted against the bytes of bodies
//! in flight, parsed as JSON with bounded memory, and refused with the
//! documented errors (see `docs/api.md`): 413 `payload_too_large` over the
//! route's size (as soon as a `Content-Length` says so) or over a JSON
//! bound, 429 `limit_exceeded` past the tenant's bytes in flight, 503
//! `unavailable` past the server's, 408 `request_timeout` for a body that
//! stalls, 400 `invalid_json` for what is not JSON, 400 `invalid_input`
//! naming the field for JSON that is not what the route takes. Every
//! handler that takes a body takes it as [`Incoming`] and reads it
//! through here.
//!
//! # Bytes in flight
//!
//! A body is counted from when it starts to arrive (all of its
//! `Content-Length` at once when it declares one, else chunk by chunk)
//! until its request is answered: the handler holds what it read (and
//! what it parsed) until then. A JSON body also counts its parsed values,
//! [`BYTES_PER_VALUE`] each, from when it is parsed: the values a body
//! becomes take far more memory than its text (a `0,` of two bytes is a
//! value of dozens), and counting them keeps what parsing may take under
//! the same budgets. The budgets are [`crate::Limits`]'
//! `max_body_bytes_in_flight` per tenant and `[http]
//! max_body_bytes_in_flight` server-wide ([`crate::edge::HttpConfig`]).
//!
//! # JSON
//!
//! Before serde builds any value, one pass over the bytes counts array
//! elements and object members and follows the nesting, allocating
//! nothing that grows with the body; a body past `[http] max_json_values`
//! or `max_json_depth` is refused naming the bound. The values parsed
//! afterwards are at most those counted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use bytes::BytesMut;
use http_body_util::BodyExt as _;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use subs_protocol::ProtocolError;

use crate::AppState;
use crate::auth::Caller;
use crate::edge::Throttle;
use crate::error::ApiError;

/// What one parsed JSON value is counted as, in bytes, against the
/// budgets of bytes in flight: about what parsing takes at its peak per
/// element of a large array of small values (145 to 195 bytes measured on
/// a session input of 90,000 to 2,000,000 zeros: a `Value` is 72 bytes,
/// the protocol's tagged unions read a `Value` tree and then their fields
/// out of it, two trees at once for a moment, and an array's buffer may
/// be twice its length).
pub const BYTES_PER_VALUE: usize = 192;

/// A request's body, with what reading it is bounded by: the budgets of
/// bytes in flight (its tenant's and the server's), the time it may stall
/// and the bounds of JSON. Handlers take it in place of axum's `Body`.
pub struct Incoming {
    body: Body,
    reader: Reader,
}

/// How a body is read and counted.
#[derive(Debug, Clone)]
struct Reader {
    hold: Hold,
    /// The tenant whose budget the body counts against; none for the
    /// operator's requests, which count only against the server's.
    tenant: Option<String>,
    tenant_cap: usize,
    server_cap: usize,
    timeout: Duration,
    json: JsonBounds,
}

impl FromRequest<Arc<AppState>> for Incoming {
    type Rejection = Infallible;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, Infallible> {
        let (mut parts, body) = request.into_parts();
        let hold = parts.extensions.get::<Hold>().cloned().unwrap_or_else(|| Hold::new(Arc::default()));
        // The handler's own extractor has authenticated the request
        // already (it is refused before its body is read otherwise); this
        // only learns whose budget the body counts against.
        let tenant = Caller::from_request_parts(&mut parts, state).await.ok().map(|caller| caller.tenant);
        let http = &state.config.file().http;
        let tenant_cap = tenant.as_deref().map_or(usize::MAX, |t| state.config.limits(t).max_body_bytes_in_flight);
        let reader = Reader {
            hold,
            tenant,
            tenant_cap,
            server_cap: http.max_body_bytes_in_flight,
            timeout: http.body_read_timeout,
            json: http.json_bounds(),
        };
        Ok(Self { body, reader })
    }
}

impl Incoming {
    /// `body` read with `config`'s bounds against `inflight`, for
    /// `tenant`'s budget of `tenant_cap` bytes (none: the server's only).
    pub fn new(
        body: Body,
        inflight: Arc<InFlight>,
        tenant: Option<(&str, usize)>,
        config: &crate::edge::HttpConfig,
    ) -> Self {
        let reader = Reader {
            hold: Hold::new(inflight),
            tenant: tenant.map(|(t, _)| t.to_owned()),
            tenant_cap: tenant.map_or(usize::MAX, |(_, cap)| cap),
            server_cap: config.max_body_bytes_in_flight,
            timeout: config.body_read_timeout,
            json: config.json_bounds(),
        };
        Self { body, reader }
    }

    /// Reads the whole body, at most `limit` bytes, counting it as it
    /// arrives.
    async fn read(self, limit: usize) -> Result<(Bytes, Reservation, Reader), ApiError> {
        let Self { mut body, reader } = self;
        let hint = HttpBody::size_hint(&body);
        if usize::try_from(hint.lower()).map_or(true, |declared| declared > limit) {
            return Err(ApiError::too_large(limit));
        }
        let declared = hint.exact().and_then(|n| usize::try_from(n).ok());
        let mut reservation = reader.reservation();
        if let Some(declared) = declared {
            reader.grow(&mut reservation, declared)?;
        }
        let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0));
        loop {
            let frame = match tokio::time::timeout(reader.timeout, body.frame()).await {
                Err(_) => return Err(reader.stalled(buffer.len())),
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(unreadable(&error)),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else { continue };
            let needed = buffer.len() + data.len();
            if needed > limit {
                return Err(ApiError::too_large(limit));
            }
            if needed > reservation.bytes {
                // Without a declared length: count what the buffer will
                // hold, doubling as it grows, never past the route's limit.
                let grown = needed.max(buffer.capacity().saturating_mul(2)).min(limit);
                let more = grown - reservation.bytes;
                reader.grow(&mut reservation, more)?;
                buffer.reserve(grown - buffer.len());
            }
            buffer.extend_from_slice(&data);
        }
        Ok((buffer.freeze(), reservation, reader))
    }
}

/// 400 for a body the connection failed to deliver (the client went away
/// mid-body, a malformed chunk).
fn unreadable(error: &axum::Error) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("the request body could not be read: {error}"))
}

impl Reader {
    fn reservation(&self) -> Reservation {
        Reservation { inflight: self.hold.inflight.clone(), tenant: self.tenant.clone(), bytes: 0 }
    }

    /// Counts `bytes` more; 429 past the tenant's budget, 503 past the
    /// server's, logged at most once a second.
    fn grow(&self, reservation: &mut Reservation, bytes: usize) -> Result<(), ApiError> {
        static TENANTS: Throttle = Throttle::new();
        static SERVER: Throttle = Throttle::new();
        match reservation.grow(bytes, self.tenant_cap, self.server_cap) {
            Ok(()) => Ok(()),
            Err(Over::Tenant) => {
                let tenant = self.tenant.as_deref().unwrap_or_default();
                TENANTS.warn(|suppressed| {
                    tracing::warn!(%tenant, cap = self.tenant_cap, suppressed, "a request body was refused: the tenant's bytes in flight are at their limit");
                });
                Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "limit_exceeded",
                    format!(
                        "the tenant's request bodies in flight would pass its limit of {} bytes \
                         (`max_body_bytes_in_flight`); retry when its other requests are answered",
                        self.tenant_cap
                    ),
                ))
            }
            Err(Over::Server) => {
                let tenant = self.tenant.as_deref().unwrap_or_default();
                SERVER.warn(|suppressed| {
                    tracing::warn!(%tenant, cap = self.server_cap, suppressed, "a request body was refused: the server's bytes in flight are at their limit");
                });
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    format!(
                        "the server's request bodies in flight are at their limit of {} bytes \
                         ([http] max_body_bytes_in_flight); retry shortly",
                        self.server_cap
                    ),
                ))
            }
        }
    }

    /// 408 for a body that sent nothing for the timeout.
    fn stalled(&self, received: usize) -> ApiError {
        static LOG: Throttle = Throttle::new();
        let tenant = self.tenant.as_deref().unwrap_or_default();
        LOG.warn(|suppressed| {
            tracing::warn!(%tenant, received, suppressed, "a request body stalled and was refused");
        });
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body stalled: nothing arrived for {} s ([http] body_read_timeout_secs) after {received} \
                 bytes",
                self.timeout.as_secs_f64()
            ),
        )
    }

    /// `bytes` parsed as `T` within the JSON bounds, its values counted
    /// into `reservation` first.
    fn parse<T: DeserializeOwned>(
        &self,
        bytes: &[u8],
        reservation: &mut Reservation,
        refusal: impl FnOnce(&ProtocolError) -> ApiError,
    ) -> Result<T, ApiError> {
        let values = measure(bytes, self.json)?;
        self.grow(reservation, values.saturating_mul(BYTES_PER_VALUE))?;
        subs_protocol::from_json_slice(bytes).map_err(|e| refusal(&e))
    }

    /// Keeps `reservation` until the request is answered.
    fn keep(&self, reservation: Reservation) {
        self.hold.keep(reservation);
    }
}

/// The body's bytes, at most `limit` of them.
pub async fn bytes(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    let (bytes, reservation, reader) = body.read(limit).await?;
    reader.keep(reservation);
    Ok(bytes)
}

/// The body parsed as `T`.
pub async fn json<T: DeserializeOwned>(body: Incoming, limit: usize) -> Result<T, ApiError> {
    json_with(body, limit, refusal).await
}

/// The body parsed as `T`, a parse error turned into the answer by
/// `refusal` (a route that names fields its own way).
pub async fn json_with<T: DeserializeOwned>(
    body: Incoming,
    limit: usize,
    refusal: impl FnOnce(&ProtocolError) -> ApiError,
) -> Result<T, ApiError> {
    let (bytes, mut reservation, reader) = body.read(limit).await?;
    let parsed = reader.parse(&bytes, &mut reservation, refusal);
    reader.keep(reservation);
    parsed
}

/// The body parsed as `T`; `None` when it is empty (or only whitespace).
pub async fn optional_json<T: DeserializeOwned>(body: Incoming, limit: usize) -> Result<Option<T>, ApiError> {
    let (bytes, mut reservation, reader) = body.read(limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        reader.keep(reservation);
        return Ok(None);
    }
    let parsed = reader.parse(&bytes, &mut reservation, refusal);
    reader.keep(reservation);
    parsed.map(Some)
}

/// JSON text that a body carried inside a string (a tool's result as
/// text) as the value it is, within `bounds`; `None` when it is not JSON
/// or passes them, for the caller to keep it as text.
pub fn embedded_json(text: &str, bounds: JsonBounds) -> Option<serde_json::Value> {
    measure(text.as_bytes(), bounds).ok()?;
    serde_json::from_str(text).ok()
}

/// 400 for a body that is not JSON, or not what the route takes, naming
/// the field also where serde's path names none (a missing or unknown
/// field).
pub fn refusal(error: &ProtocolError) -> ApiError {
    let mut refusal = ApiError::body(error);
    if refusal.field.is_none() {
        let named = ["missing field `", "unknown field `"]
            .iter()
            .find_map(|start| error.message().strip_prefix(start))
            .and_then(|rest| rest.split('`').next());
        if let Some(field) = named {
            refusal.field = Some(field.to_owned());
            refusal.code = "invalid_input";
        }
    }
    refusal
}

/// The bounds of a JSON body (`[http] max_json_depth`,
/// `max_json_values`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonBounds {
    /// The deepest nesting of arrays and objects.
    pub max_depth: usize,
    /// Array elements and object members, in all.
    pub max_values: usize,
}

/// Counts the array elements and object members of the JSON text `bytes`
/// and checks its nesting, in one pass that allocates nothing growing
/// with the text (serde_json reads strings into one reused buffer, at
/// most the longest string). 413 naming the bound a body passes; text
/// that is not JSON is counted as far as it goes and left to the parser
/// to refuse with its own message.
pub fn measure(bytes: &[u8], bounds: JsonBounds) -> Result<usize, ApiError> {
    let mut walked = Walked { values: 0, bounds, over: None };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let _ = Walk { walked: &mut walked, depth: 0 }.deserialize(&mut de);
    match walked.over {
        None => Ok(walked.values),
        Some(JsonOver::Depth) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the JSON body nests arrays and objects deeper than {} levels ([http] max_json_depth)",
                bounds.max_depth
            ),
        )),
        Some(JsonOver::Values) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the JSON body has more than {} values, counting array elements and object members \
                 ([http] max_json_values)",
                bounds.max_values
            ),
        )),
    }
}

/// Which JSON bound a body passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonOver {
    Depth,
    Values,
}

/// What the walk has counted so far.
struct Walked {
    values: usize,
    bounds: JsonBounds,
    over: Option<JsonOver>,
}

impl Walked {
    fn stop<E: serde::de::Error>(&mut self, over: JsonOver) -> E {
        self.over = Some(over);
        E::custom("a bound of the JSON body was passed")
    }

    fn count<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.values += 1;
        if self.values > self.bounds.max_values { Err(self.stop(JsonOver::Values)) } else { Ok(()) }
    }
}

/// One value of the walk, at `depth` arrays and objects deep.
struct Walk<'a> {
    walked: &'a mut Walked,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Walk<'_> {
    /// The depth of a container opened here, or the error past the bound.
    fn open<E: serde::de::Error>(&mut self) -> Result<usize, E> {
        let depth = self.depth + 1;
        if depth > self.walked.bounds.max_depth { Err(self.walked.stop(JsonOver::Depth)) } else { Ok(depth) }
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }

    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let depth = self.open()?;
        while seq.next_element_seed(Walk { walked: &mut *self.walked, depth })?.is_some() {
            self.walked.count()?;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let depth = self.open()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(Walk { walked: &mut *self.walked, depth })?;
            self.walked.count()?;
        }
        Ok(())
    }
}

/// Bytes of request bodies in flight, in all and by tenant.
#[derive(Debug, Default)]
pub struct InFlight {
    used: Mutex<Used>,
}

#[derive(Debug, Default)]
struct Used {
    server: usize,
    tenants: HashMap<String, usize>,
}

impl InFlight {
    fn used(&self) -> MutexGuard<'_, Used> {
        // Counting cannot panic half-way: a poisoned lock still holds
        // consistent numbers.
        self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes in flight, in all.
    pub fn server(&self) -> usize {
        self.used().server
    }

    /// Bytes in flight of `tenant`.
    pub fn tenant(&self, tenant: &str) -> usize {
        self.used().tenants.get(tenant).copied().unwrap_or(0)
    }
}

/// Which budget a reservation would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    Tenant,
    Server,
}

/// Bytes counted in flight for one body, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    inflight: Arc<InFlight>,
    tenant: Option<String>,
    bytes: usize,
}

impl Reservation {
    /// Counts `bytes` more, both budgets or neither.
    fn grow(&mut self, bytes: usize, tenant_cap: usize, server_cap: usize) -> Result<(), Over> {
        let mut used = self.inflight.used();
        let tenant_used = self.tenant.as_ref().and_then(|t| used.tenants.get(t)).copied().unwrap_or(0);
        if tenant_used.saturating_add(bytes) > tenant_cap {
            return Err(Over::Tenant);
        }
        if used.server.saturating_add(bytes) > server_cap {
            return Err(Over::Server);
        }
        used.server += bytes;
        if let Some(tenant) = &self.tenant {
            *used.tenants.entry(tenant.clone()).or_default() += bytes;
        }
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut used = self.inflight.used();
        used.server = used.server.saturating_sub(self.bytes);
        if let Some(tenant) = &self.tenant
            && let Some(n) = used.tenants.get_mut(tenant)
        {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                used.tenants.remove(tenant);
            }
        }
    }
}

/// What one request holds of the bytes in flight, given back when its
/// answer is ready ([`hold`]).
#[derive(Debug, Clone)]
pub struct Hold {
    inflight: Arc<InFlight>,
    kept: Arc<Mutex<Vec<Reservation>>>,
}

impl Hold {
    fn new(inflight: Arc<InFlight>) -> Self {
        Self { inflight, kept: Arc::default() }
    }

    fn keep(&self, reservation: Reservation) {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(reservation);
    }
}

/// Middleware: gives each request a [`Hold`] on `inflight`, and the
/// bytes it counted back once the handler has answered (a streamed
/// answer's handler is done when its stream starts).
pub async fn hold(State(inflight): State<Arc<InFlight>>, mut request: Request, next: Next) -> Response {
    let hold = Hold::new(inflight);
    request.extensions_mut().insert(hold.clone());
    let response = next.run(request).await;
    hold.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    response
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::Value;

    use super::*;
    use crate::edge::HttpConfig;

    const BOUNDS: JsonBounds = JsonBounds { max_depth: 4, max_values: 10 };

    #[test]
    fn measuring_counts_elements_and_members_and_follows_nesting() {
        assert_eq!(measure(b"0", BOUNDS).unwrap(), 0);
        assert_eq!(measure(br#"{"a": [1, 2, {"b": null}], "c": "x"}"#, BOUNDS).unwrap(), 6);
        assert_eq!(measure(b"[[[[1]]]]", BOUNDS).unwrap(), 4, "four deep is the bound");
        let deep = measure(b"[[[[[1]]]]]", BOUNDS).unwrap_err();
        assert_eq!((deep.status, deep.code), (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"));
        assert!(deep.message.contains("max_json_depth") && deep.message.contains('4'), "{}", deep.message);
        let many = measure(b"[0,0,0,0,0,0,0,0,0,0,0]", BOUNDS).unwrap_err();
        assert!(many.message.contains("max_json_values") && many.message.contains("10"), "{}", many.message);
        let members = measure(br#"{"a":{"b":1,"c":2,"d":3,"e":4,"f":5,"g":6,"h":7,"i":8,"j":9,"k":0}}"#, BOUNDS);
        assert!(members.is_err(), "object members count as values");
    }

    #[test]
    fn text_that_is_not_json_is_left_to_the_parser() {
        assert!(measure(b"[1, 2", BOUNDS).is_ok());
        assert!(measure(b"{\"a\" 1}", BOUNDS).is_ok());
        assert!(measure(b"\xff", BOUNDS).is_ok());
        // The parser's own message, unchanged.
        let reader = reader(Arc::default(), None, usize::MAX);
        let mut reservation = reader.reservation();
        let error = reader.parse::<Value>(b"[1, 2", &mut reservation, refusal).unwrap_err();
        assert_eq!(error.code, "invalid_json");
    }

    #[test]
    fn an_amplifying_body_is_refused_in_a_single_pass_without_building_values() {
        // 4 MiB of `0,`: two million values once parsed.
        let mut body = br#"{"type":"client.action","name":"x","args":["#.to_vec();
        while body.len() < 4 << 20 {
            body.extend_from_slice(b"0,");
        }
        body.extend_from_slice(b"0]}");
        let started = Instant::now();
        let error = measure(&body, HttpConfig::default().json_bounds()).unwrap_err();
        assert!(error.message.contains("100000 values"), "{}", error.message);
        assert!(started.elapsed() < Duration::from_secs(5));
        // Strings, however long, are one value.
        let long = format!("[\"{}\"]", "x".repeat(1 << 20));
        assert_eq!(measure(long.as_bytes(), BOUNDS).unwrap(), 1);
    }

    #[test]
    fn embedded_json_is_bounded_too() {
        assert_eq!(embedded_json("[1,2]", BOUNDS), Some(serde_json::json!([1, 2])));
        assert_eq!(embedded_json("[0,0,0,0,0,0,0,0,0,0,0]", BOUNDS), None);
        assert_eq!(embedded_json("not json", BOUNDS), None);
    }

    fn reader(inflight: Arc<InFlight>, tenant: Option<&str>, tenant_cap: usize) -> Reader {
        Reader {
            hold: Hold::new(inflight),
            tenant: tenant.map(str::to_owned),
            tenant_cap,
            server_cap: 1000,
            timeout: Duration::from_millis(200),
            json: BOUNDS,
        }
    }

    #[test]
    fn reservations_count_both_budgets_and_give_back_on_drop() {
        let inflight = Arc::new(InFlight::default());
        let acme = reader(inflight.clone(), Some("acme"), 600);
        let other = reader(inflight.clone(), Some("other"), 600);
        let mut a = acme.reservation();
        acme.grow(&mut a, 500).unwrap();
        let mut b = acme.reservation();
        let refused = acme.grow(&mut b, 200).unwrap_err();
        assert_eq!((refused.status, refused.code), (StatusCode::TOO_MANY_REQUESTS, "limit_exceeded"));
        assert!(refused.message.contains("600") && refused.message.contains("max_body_bytes_in_flight"));
        assert_eq!(inflight.tenant("acme"), 500, "a refusal counts nothing");
        let mut c = other.reservation();
        other.grow(&mut c, 450).unwrap();
        let mut d = other.reservation();
        let full = other.grow(&mut d, 100).unwrap_err();
        assert_eq!((full.status, full.code), (StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
        assert!(full.message.contains("[http] max_body_bytes_in_flight"), "{}", full.message);
        assert_eq!(inflight.server(), 950);
        drop(a);
        assert_eq!((inflight.server(), inflight.tenant("acme")), (450, 0));
        assert!(!inflight.used().tenants.contains_key("acme"), "no empty entries are kept");
        other.grow(&mut d, 100).unwrap();
        drop((b, c, d));
        assert_eq!(inflight.server(), 0);
    }

    fn incoming(body: Body, inflight: &Arc<InFlight>, tenant_cap: usize) -> Incoming {
        let config = HttpConfig {
            body_read_timeout: Duration::from_millis(200),
            max_body_bytes_in_flight: 1 << 20,
            ..HttpConfig::default()
        };
        Incoming::new(body, inflight.clone(), Some(("acme", tenant_cap)), &config)
    }

    #[tokio::test]
    async fn a_declared_length_is_refused_or_counted_before_a_byte_is_read() {
        let inflight = Arc::new(InFlight::default());
        // A body that never sends: only its declared length can decide.
        let error = bytes(incoming(stalled_body(5000), &inflight, 1 << 20), 4096).await.unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
        let read = tokio::spawn(bytes(incoming(stalled_body(5000), &inflight, 1 << 20), 8192));
        // The read runs until it waits for the body's first byte.
        tokio::task::yield_now().await;
        assert_eq!(inflight.tenant("acme"), 5000, "the declared length is counted at once");
        let error = read.await.unwrap().unwrap_err();
        assert_eq!((error.status, error.code), (StatusCode::REQUEST_TIMEOUT, "request_timeout"));
        assert!(error.message.contains("body_read_timeout_secs"), "{}", error.message);
        assert_eq!(inflight.server(), 0, "given back on the refusal");
    }

    #[tokio::test]
    async fn a_body_without_a_length_is_counted_as_it_arrives() {
        let inflight = Arc::new(InFlight::default());
        let chunks = futures::stream::iter((0..10).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 1000]))));
        let refused = bytes(incoming(Body::from_stream(chunks), &inflight, 4000), 1 << 20).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        let chunks = futures::stream::iter((0..10).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 1000]))));
        let read = bytes(incoming(Body::from_stream(chunks), &inflight, 1 << 20), 1 << 20).await.unwrap();
        assert_eq!(read.len(), 10_000);
        let chunks = futures::stream::iter((0..10).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 1000]))));
        let too_large = bytes(incoming(Body::from_stream(chunks), &inflight, 1 << 20), 5000).await.unwrap_err();
        assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(inflight.server(), 0, "nothing is held without a hold of a request");
    }

    #[tokio::test]
    async fn parsed_values_are_counted_against_the_tenant() {
        let inflight = Arc::new(InFlight::default());
        let body = format!("[{}0]", "0,".repeat(9));
        // Ten values of 192 bytes and the 20 bytes of text: past 600.
        let refused = json::<Value>(incoming(Body::from(body.clone()), &inflight, 600), 1 << 20).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        let parsed = json::<Value>(incoming(Body::from(body), &inflight, 2000), 1 << 20).await.unwrap();
        assert_eq!(parsed.as_array().map(Vec::len), Some(10));
    }

    /// A body declaring `length` bytes that never sends one.
    fn stalled_body(length: usize) -> Body {
        let never = futures::stream::pending::<Result<Bytes, Infallible>>();
        Body::new(Sized { length, inner: Body::from_stream(never) })
    }

    /// A body with an exact size hint of `length`.
    struct Sized {
        length: usize,
        inner: Body,
    }

    impl HttpBody for Sized {
        type Data = Bytes;
        type Error = axum::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
            std::pin::Pin::new(&mut self.inner).poll_frame(cx)
        }

        fn size_hint(&self) -> hyper::body::SizeHint {
            hyper::body::SizeHint::with_exact(self.length as u64)
        }
    }
}
