//! Test component: fetches a URL with `wasi:http` when a `client.action`
//! named `fetch` asks, `{"authority": "host:port", "host": "..."}`, and
//! answers with the status and body as an assistant message. `host`, when
//! given, is sent as the `Host` header, trying to pass a refused
//! destination off as an allowed one. A refused or failed request declines
//! the decision with the `wasi:http` error code.

use subs_sdk::bindings::wasi::http::outgoing_handler;
use subs_sdk::bindings::wasi::http::types::{Fields, IncomingBody, OutgoingRequest, Scheme};
use subs_sdk::bindings::wasi::io::streams::StreamError;
use subs_sdk::prelude::*;

struct Fetch;

fn fetch(authority: &str, host: Option<&str>) -> Result<(u16, String), String> {
    let headers = Fields::new();
    if let Some(host) = host {
        // `host` is forbidden in wasi:http; the refusal is the point.
        let _ = headers.append("host", host.as_bytes());
    }
    let request = OutgoingRequest::new(headers);
    request.set_scheme(Some(&Scheme::Http)).map_err(|()| "bad scheme".to_owned())?;
    request.set_authority(Some(authority)).map_err(|()| format!("bad authority {authority}"))?;
    request.set_path_with_query(Some("/")).map_err(|()| "bad path".to_owned())?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(format!("{code:?}")),
        Some(Err(())) | None => return Err("no response".to_owned()),
    };
    let status = response.status();
    let body = response.consume().map_err(|()| "no body".to_owned())?;
    let mut text = Vec::new();
    {
        let stream = body.stream().map_err(|()| "no body stream".to_owned())?;
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(chunk) => text.extend(chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => return Err(e.to_debug_string()),
            }
        }
    }
    let _ = IncomingBody::finish(body);
    Ok((status, String::from_utf8_lossy(&text).into_owned()))
}

impl Agent for Fetch {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let Trigger::ClientAction(action) = &request.trigger else {
            return Ok(DecisionResponse::new());
        };
        let args = action.args.clone().unwrap_or_default();
        let authority = args["authority"].as_str().unwrap_or("example.com");
        let (status, body) = fetch(authority, args["host"].as_str())
            .map_err(|e| DecideError::terminal(format!("fetching http://{authority}/ failed: {e}")))?;
        Ok(DecisionResponse::new().with_message(DraftMessage::assistant(format!("{status} {body}"))))
    }
}

subs_sdk::export!(Fetch);
