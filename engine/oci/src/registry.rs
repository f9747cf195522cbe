//! The distribution API's client: manifests and blobs, pulled and pushed,
//! with the registry's authentication.
//!
//! Every request goes through [`Registry::send`]: sent with what proved
//! us last time, and on a `401` answered with what the registry's
//! challenge asks for (basic auth, or a bearer token from its token
//! service, the flow of `distribution`), then sent once more. The
//! credentials go to the registry's own host only: not to a token service
//! elsewhere (it is asked anonymously), not across a redirect, not to an
//! upload location on another host.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use tokio::sync::Mutex;

use crate::artifact::{self, Descriptor, Document};
use crate::auth::{Credentials, challenges};
use crate::{OciError, Reference, sha256};

/// The largest answer of a token service, or error body, read.
const SMALL_BODY: u64 = 64 << 10;

/// How a registry is reached.
#[derive(Debug, Clone)]
pub struct Options {
    /// Plain HTTP instead of HTTPS.
    pub plain_http: bool,
    /// What proves who we are, if anything.
    pub credentials: Option<Credentials>,
    /// The largest manifest and the largest layer, in bytes.
    pub max_bytes: u64,
    /// How long a whole pull or push may take.
    pub deadline: Duration,
}

/// A pulled artifact.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The WebAssembly bytes (the layer), checked against its digest.
    pub wasm: Vec<u8>,
    /// The digest of the image manifest the layer came from.
    pub manifest_digest: String,
    /// The layer's digest.
    pub layer_digest: String,
}

/// A pushed artifact.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The digest of the manifest pushed.
    pub manifest_digest: String,
    /// The layer's digest.
    pub layer_digest: String,
}

/// A client of one registry.
pub struct Registry {
    http: reqwest::Client,
    base: Url,
    host: String,
    options: Options,
    /// The `Authorization` value that worked last (basic or bearer).
    auth: Mutex<Option<HeaderValue>>,
}

impl Registry {
    /// A client of `registry` (`host[:port]`).
    ///
    /// # Errors
    /// [`OciError::Unreachable`] when the HTTP client cannot be built.
    pub fn new(registry: &str, options: Options) -> Result<Self, OciError> {
        let scheme = if options.plain_http { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{registry}/")).map_err(|e| OciError::Reference {
            reference: registry.to_owned(),
            message: format!("not a registry address: {e}"),
        })?;
        let https = !options.plain_http;
        let http = reqwest::Client::builder()
            .user_agent(concat!("subs/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(options.deadline.min(Duration::from_secs(10)))
            // Blob downloads are redirected to storage (S3 and the like);
            // reqwest drops `Authorization` when the host changes. An
            // HTTPS registry is never followed down to plain HTTP.
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= 5 {
                    attempt.error("more than 5 redirects")
                } else if https && attempt.url().scheme() != "https" {
                    attempt.error("a redirect from HTTPS to plain HTTP")
                } else {
                    attempt.follow()
                }
            }))
            .build()
            .map_err(|e| OciError::Unreachable { reference: registry.to_owned(), message: e.to_string() })?;
        let auth = match &options.credentials {
            Some(Credentials::Token(token)) => bearer(token),
            _ => None,
        };
        Ok(Self { http, base, host: registry.to_owned(), options, auth: Mutex::new(auth) })
    }

    /// Pulls the Wasm artifact `reference` names: its manifest (through
    /// an image index's wasm entry when the reference names an index),
    /// then its one `application/wasm` layer, each held to
    /// [`Options::max_bytes`] and checked against its digest, all within
    /// [`Options::deadline`].
    ///
    /// # Errors
    /// An [`OciError`] naming the reference and what was wrong.
    pub async fn pull(&self, reference: &Reference) -> Result<Pulled, OciError> {
        let deadline = self.options.deadline;
        tokio::time::timeout(deadline, self.pull_within(reference))
            .await
            .unwrap_or_else(|_| Err(OciError::Deadline { reference: reference.to_string(), secs: deadline.as_secs() }))
    }

    async fn pull_within(&self, reference: &Reference) -> Result<Pulled, OciError> {
        let name = reference.to_string();
        let (mut manifest, mut manifest_digest, index) = self.manifest(reference, reference.manifest_ref()).await?;
        if index {
            let entry = wasm_entry(&name, manifest)?;
            let (inner, digest, nested) = self.manifest(reference, &entry.digest).await?;
            if nested {
                return Err(OciError::Invalid {
                    reference: name,
                    message: format!("the index's wasm entry {} is another index, not an image manifest", entry.digest),
                });
            }
            manifest = inner;
            manifest_digest = digest;
        }
        let layer = wasm_layer(&name, &manifest)?;
        if layer.size > self.options.max_bytes {
            return Err(OciError::TooLarge {
                reference: name,
                what: "the wasm layer".to_owned(),
                bytes: layer.size,
                limit: self.options.max_bytes,
            });
        }
        let path = format!("v2/{}/blobs/{}", reference.repository, layer.digest);
        let response = self.send(reference, "pull", || self.http.get(self.url(&path))).await?;
        let response = self.ok(reference, response).await?;
        let wasm = read_bounded(&name, "the wasm layer", response, layer.size).await?;
        let actual = sha256(&wasm);
        if actual != layer.digest || wasm.len() as u64 != layer.size {
            return Err(OciError::Digest {
                reference: name,
                what: "the wasm layer".to_owned(),
                expected: format!("{} ({} bytes)", layer.digest, layer.size),
                actual: format!("{actual} ({} bytes)", wasm.len()),
            });
        }
        Ok(Pulled { wasm, manifest_digest, layer_digest: layer.digest })
    }

    /// The manifest or index `reference`'s repository has at `at` (a tag
    /// or a digest), its digest, and whether it is an index.
    async fn manifest(&self, reference: &Reference, at: &str) -> Result<(Document, String, bool), OciError> {
        let name = reference.to_string();
        let path = format!("v2/{}/manifests/{at}", reference.repository);
        let response =
            self.send(reference, "pull", || self.http.get(self.url(&path)).header("accept", artifact::ACCEPT)).await?;
        let response = self.ok(reference, response).await?;
        let content_type = header(&response, CONTENT_TYPE);
        let body = read_bounded(&name, "the manifest", response, self.options.max_bytes).await?;
        let digest = sha256(&body);
        if at.starts_with("sha256:") && digest != at {
            return Err(OciError::Digest {
                reference: name,
                what: "the manifest".to_owned(),
                expected: at.to_owned(),
                actual: digest,
            });
        }
        let document: Document = serde_json::from_slice(&body).map_err(|e| OciError::Invalid {
            reference: name.clone(),
            message: format!("the manifest is not an OCI manifest or index: {e}"),
        })?;
        let index = document.is_index(&content_type);
        Ok((document, digest, index))
    }

    /// Pushes `wasm` as a Wasm artifact to `reference` (its tag, or its
    /// digest when it is pinned): the config and the layer blobs (unless
    /// the registry has them), then the manifest.
    ///
    /// # Errors
    /// An [`OciError`] naming the reference and what was wrong.
    pub async fn push(&self, reference: &Reference, wasm: &[u8]) -> Result<Pushed, OciError> {
        let deadline = self.options.deadline;
        tokio::time::timeout(deadline, self.push_within(reference, wasm))
            .await
            .unwrap_or_else(|_| Err(OciError::Deadline { reference: reference.to_string(), secs: deadline.as_secs() }))
    }

    async fn push_within(&self, reference: &Reference, wasm: &[u8]) -> Result<Pushed, OciError> {
        let created = artifact::now_rfc3339();
        let layer_digest = sha256(wasm);
        let config = serde_json::to_vec(&artifact::config(wasm, &layer_digest, &created)).unwrap_or_default();
        let config_desc = Descriptor {
            media_type: artifact::WASM_CONFIG.to_owned(),
            digest: sha256(&config),
            size: config.len() as u64,
            platform: None,
        };
        let layer_desc = Descriptor {
            media_type: artifact::WASM_LAYER.to_owned(),
            digest: layer_digest.clone(),
            size: wasm.len() as u64,
            platform: None,
        };
        self.put_blob(reference, &config_desc.digest, config.clone()).await?;
        self.put_blob(reference, &layer_digest, wasm.to_vec()).await?;
        let manifest = serde_json::to_vec(&artifact::manifest(&config_desc, &layer_desc, &created)).unwrap_or_default();
        let manifest_digest = sha256(&manifest);
        let at = reference.tag.as_deref().unwrap_or(&manifest_digest);
        if reference.tag.is_none() && reference.digest.as_deref() != Some(&manifest_digest) {
            return Err(OciError::Invalid {
                reference: reference.to_string(),
                message: format!(
                    "a push names a tag; the manifest made is {manifest_digest}, not the digest the reference pins"
                ),
            });
        }
        let path = format!("v2/{}/manifests/{at}", reference.repository);
        let response = self
            .send(reference, "push", || {
                self.http.put(self.url(&path)).header(CONTENT_TYPE, artifact::MANIFEST).body(manifest.clone())
            })
            .await?;
        let response = self.ok(reference, response).await?;
        let answered = header(&response, "docker-content-digest");
        if !answered.is_empty() && answered != manifest_digest {
            return Err(OciError::Digest {
                reference: reference.to_string(),
                what: "the pushed manifest".to_owned(),
                expected: manifest_digest,
                actual: answered,
            });
        }
        Ok(Pushed { manifest_digest, layer_digest })
    }

    /// Uploads a blob unless the repository has it: one `POST` to open the
    /// upload, one `PUT` with the bytes (a monolithic upload).
    async fn put_blob(&self, reference: &Reference, digest: &str, bytes: Vec<u8>) -> Result<(), OciError> {
        let repo = &reference.repository;
        let head = format!("v2/{repo}/blobs/{digest}");
        let response = self.send(reference, "push", || self.http.head(self.url(&head))).await?;
        if response.status().is_success() {
            return Ok(());
        }
        let start = format!("v2/{repo}/blobs/uploads/");
        let response =
            self.send(reference, "push", || self.http.post(self.url(&start)).header(CONTENT_LENGTH, "0")).await?;
        let response = self.ok(reference, response).await?;
        let location = header(&response, reqwest::header::LOCATION);
        let mut url = self.base.join(&location).map_err(|e| OciError::Registry {
            reference: reference.to_string(),
            status: response.status().as_u16(),
            message: format!("the upload location `{}` is not a URL: {e}", location.escape_debug()),
        })?;
        url.query_pairs_mut().append_pair("digest", digest);
        let response = self
            .send(reference, "push", || {
                self.http.put(url.clone()).header(CONTENT_TYPE, "application/octet-stream").body(bytes.clone())
            })
            .await?;
        self.ok(reference, response).await.map(drop)
    }

    fn url(&self, path: &str) -> Url {
        // The path is made of a checked repository name and a digest or
        // tag, all URL-safe; a join that failed would be a bug here.
        self.base.join(path).unwrap_or_else(|_| self.base.clone())
    }

    /// Sends the request `build` makes, authenticating on a `401` as the
    /// registry's challenge asks (once), for `action` (`pull`, `push`).
    async fn send(
        &self,
        reference: &Reference,
        action: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, OciError> {
        let first = self.auth.lock().await.clone();
        let response = self.attempt(reference, &build, first.as_ref()).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let challenge = header(&response, WWW_AUTHENTICATE);
        let Some(next) = self.authenticate(reference, action, &challenge).await? else {
            return Err(self.unauthorized(
                reference,
                response.status(),
                "the registry asks for credentials; none are configured for it",
            ));
        };
        if first.as_ref() == Some(&next)
            && !matches!(self.options.credentials, None | Some(Credentials::IdentityToken(_)))
        {
            return Err(self.unauthorized(reference, response.status(), "the credentials were refused"));
        }
        *self.auth.lock().await = Some(next.clone());
        let response = self.attempt(reference, &build, Some(&next)).await?;
        if matches!(response.status(), StatusCode::UNAUTHORIZED) {
            let detail = if self.options.credentials.is_some() {
                "the credentials were refused"
            } else {
                "the registry asks for credentials; none are configured for it"
            };
            return Err(self.unauthorized(reference, response.status(), detail));
        }
        Ok(response)
    }

    async fn attempt(
        &self,
        reference: &Reference,
        build: &impl Fn() -> reqwest::RequestBuilder,
        auth: Option<&HeaderValue>,
    ) -> Result<reqwest::Response, OciError> {
        let mut request = build().build().map_err(|e| self.unreachable(reference, &e))?;
        // Credentials for the registry's host only: an upload location or
        // anything else elsewhere is sent without them.
        if let Some(auth) = auth
            && same_host(request.url(), &self.base)
        {
            request.headers_mut().insert(AUTHORIZATION, auth.clone());
        }
        self.http.execute(request).await.map_err(|e| self.unreachable(reference, &e))
    }

    /// The `Authorization` value answering `challenge`: basic auth with our
    /// credentials, or a token from the token service it names. `None`
    /// when we have nothing to answer with.
    async fn authenticate(
        &self,
        reference: &Reference,
        action: &str,
        challenge: &str,
    ) -> Result<Option<HeaderValue>, OciError> {
        let parsed = challenges(challenge);
        if let Some(bearer_challenge) = parsed.iter().find(|c| c.scheme == "bearer") {
            return self.token(reference, action, &bearer_challenge.params).await.map(Some);
        }
        if parsed.iter().any(|c| c.scheme == "basic") {
            return Ok(match &self.options.credentials {
                Some(Credentials::Basic { username, password }) => basic(username, password),
                _ => None,
            });
        }
        Err(self.unauthorized(
            reference,
            StatusCode::UNAUTHORIZED,
            &format!("the registry's challenge `{}` is neither basic nor bearer", truncated(challenge)),
        ))
    }

    /// A bearer token from the token service `params` name (`realm`,
    /// `service`, `scope`): `GET realm?service=…&scope=…`, with basic auth
    /// when we have a user name and password and the service is on the
    /// registry's host; a refresh token is exchanged with a `POST`
    /// (OAuth2) instead.
    async fn token(
        &self,
        reference: &Reference,
        action: &str,
        params: &std::collections::HashMap<String, String>,
    ) -> Result<HeaderValue, OciError> {
        let name = reference.to_string();
        let realm = params.get("realm").ok_or_else(|| {
            self.unauthorized(reference, StatusCode::UNAUTHORIZED, "the registry's bearer challenge names no realm")
        })?;
        let mut url = Url::parse(realm).map_err(|e| {
            self.unauthorized(
                reference,
                StatusCode::UNAUTHORIZED,
                &format!("the token realm `{}` is not a URL: {e}", truncated(realm)),
            )
        })?;
        let own_host = same_host(&url, &self.base);
        if url.scheme() != "https" && !(own_host && self.options.plain_http) {
            return Err(self.unauthorized(
                reference,
                StatusCode::UNAUTHORIZED,
                &format!("the token realm `{}` is not HTTPS", truncated(realm)),
            ));
        }
        let scope = params.get("scope").cloned().unwrap_or_else(|| {
            let actions = if action == "push" { "pull,push" } else { "pull" };
            format!("repository:{}:{actions}", reference.repository)
        });
        let service = params.get("service").cloned().unwrap_or_default();
        let credentials = if own_host { self.options.credentials.as_ref() } else { None };
        let request = match credentials {
            Some(Credentials::IdentityToken(refresh)) => {
                let mut form = Url::parse("form:").unwrap_or_else(|_| url.clone());
                form.query_pairs_mut()
                    .append_pair("grant_type", "refresh_token")
                    .append_pair("refresh_token", refresh)
                    .append_pair("service", &service)
                    .append_pair("scope", &scope)
                    .append_pair("client_id", "subs");
                self.http
                    .post(url)
                    .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(form.query().unwrap_or_default().to_owned())
            }
            other => {
                {
                    let mut query = url.query_pairs_mut();
                    if !service.is_empty() {
                        query.append_pair("service", &service);
                    }
                    query.append_pair("scope", &scope);
                }
                let request = self.http.get(url);
                match other {
                    Some(Credentials::Basic { username, password }) => request.basic_auth(username, Some(password)),
                    _ => request,
                }
            }
        };
        let response = request.send().await.map_err(|e| self.unreachable(reference, &e))?;
        let status = response.status();
        if !status.is_success() {
            let detail = if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                "the token service refused the credentials".to_owned()
            } else {
                format!("the token service answered {status}")
            };
            return Err(self.unauthorized(reference, status, &detail));
        }
        let body = read_bounded(&name, "the token service's answer", response, SMALL_BODY).await?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|e| {
            self.unauthorized(reference, status, &format!("the token service's answer is not a token: {e}"))
        })?;
        answer
            .token
            .or(answer.access_token)
            .and_then(|t| bearer(&t))
            .ok_or_else(|| self.unauthorized(reference, status, "the token service answered no usable token"))
    }

    /// `response` when it is a success; else the error it tells.
    async fn ok(&self, reference: &Reference, response: reqwest::Response) -> Result<reqwest::Response, OciError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let name = reference.to_string();
        let body = read_bounded(&name, "the registry's error", response, SMALL_BODY).await.unwrap_or_default();
        let message = registry_message(&body);
        Err(match status {
            StatusCode::NOT_FOUND => OciError::NotFound { reference: name, message },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => self.unauthorized(reference, status, &message),
            _ => OciError::Registry { reference: name, status: status.as_u16(), message },
        })
    }

    fn unauthorized(&self, reference: &Reference, status: StatusCode, detail: &str) -> OciError {
        OciError::Unauthorized {
            registry: self.host.clone(),
            reference: reference.to_string(),
            status: status.as_u16(),
            detail: detail.to_owned(),
        }
    }

    fn unreachable(&self, reference: &Reference, error: &reqwest::Error) -> OciError {
        // The source chain says why (refused, DNS, TLS); the top says only
        // "error sending request".
        let mut message = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            message = format!("{message}: {inner}");
            source = inner.source();
        }
        OciError::Unreachable { reference: reference.to_string(), message: format!("{}: {message}", self.host) }
    }
}

/// The entry of an index that is the Wasm artifact: the one whose platform
/// is `wasm` (a component's `wasip2` first).
fn wasm_entry(reference: &str, index: Document) -> Result<Descriptor, OciError> {
    let entries = index.manifests.unwrap_or_default();
    let mut wasm: Vec<&Descriptor> =
        entries.iter().filter(|d| d.platform.as_ref().is_some_and(|p| p.architecture == "wasm")).collect();
    wasm.sort_by_key(|d| d.platform.as_ref().is_none_or(|p| p.os != "wasip2"));
    match wasm.first() {
        Some(entry) => {
            crate::reference::checked_digest(&entry.digest)
                .map_err(|message| OciError::Invalid { reference: reference.to_owned(), message })?;
            Ok((*entry).clone())
        }
        None => {
            let platforms: Vec<String> = entries
                .iter()
                .map(|d| {
                    d.platform.as_ref().map_or("(no platform)".to_owned(), |p| format!("{}/{}", p.os, p.architecture))
                })
                .take(8)
                .collect();
            Err(OciError::Invalid {
                reference: reference.to_owned(),
                message: format!(
                    "an image index with no wasm platform entry (it lists {}); push the wasm artifact itself, or \
                     an index with a `wasm` architecture entry",
                    if platforms.is_empty() { "nothing".to_owned() } else { platforms.join(", ") }
                ),
            })
        }
    }
}

/// The manifest's one wasm layer.
fn wasm_layer(reference: &str, manifest: &Document) -> Result<Descriptor, OciError> {
    let invalid = |message: String| OciError::Invalid { reference: reference.to_owned(), message };
    let layers = manifest.layers.as_deref().unwrap_or_default();
    let [layer] = layers else {
        return Err(invalid(format!(
            "the manifest has {} layers; a wasm artifact has exactly one, of type {}",
            layers.len(),
            artifact::WASM_LAYER
        )));
    };
    if layer.media_type != artifact::WASM_LAYER && layer.media_type != artifact::LEGACY_WASM_LAYER {
        return Err(invalid(format!(
            "the layer's media type is `{}`, not {}: this is not a wasm artifact",
            truncated(&layer.media_type),
            artifact::WASM_LAYER
        )));
    }
    crate::reference::checked_digest(&layer.digest).map_err(invalid)?;
    Ok(layer.clone())
}

/// At most `limit` bytes of `response`'s body: refused as soon as its
/// `Content-Length`, or what came, says more.
async fn read_bounded(
    reference: &str,
    what: &str,
    mut response: reqwest::Response,
    limit: u64,
) -> Result<Vec<u8>, OciError> {
    let too_large =
        |bytes: u64| OciError::TooLarge { reference: reference.to_owned(), what: what.to_owned(), bytes, limit };
    if let Some(length) = response.content_length()
        && length > limit
    {
        return Err(too_large(length));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| OciError::Unreachable {
        reference: reference.to_owned(),
        message: format!("reading {what}: {e}"),
    })? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(too_large((body.len() + chunk.len()) as u64));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The first message of a distribution error body
/// (`{"errors":[{"code","message"}]}`), else the start of the body.
fn registry_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Errors>(body) {
        Ok(Errors { errors }) if !errors.is_empty() => {
            truncated(&format!("{}: {}", errors[0].code, errors[0].message)).to_owned()
        }
        _ => truncated(&String::from_utf8_lossy(body)).to_owned(),
    }
}

/// At most 200 characters of what a registry said, for an error message.
fn truncated(text: &str) -> &str {
    match text.char_indices().nth(200) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn header(response: &reqwest::Response, name: impl reqwest::header::AsHeaderName) -> String {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

fn same_host(a: &Url, b: &Url) -> bool {
    a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

fn bearer(token: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

fn basic(username: &str, password: &str) -> Option<HeaderValue> {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}
