//! Request bodies: read with a bound, parsed as JSON, and refused with the
//! documented errors (see `docs/api.md`): 413 `payload_too_large` over
//! the bound, 400 `invalid_json` for what is not JSON, 400
//! `invalid_input` naming the field for JSON that is not what the route
//! takes. Every handler that takes a body reads it through here.

use axum::body::{Body, Bytes};
use serde::de::DeserializeOwned;
use subs_protocol::ProtocolError;

use crate::error::ApiError;

/// The body's bytes, at most `limit` of them.
pub async fn bytes(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| ApiError::too_large(limit))
}

/// The body parsed as `T`.
pub async fn json<T: DeserializeOwned>(body: Body, limit: usize) -> Result<T, ApiError> {
    parse(&bytes(body, limit).await?)
}

/// The body parsed as `T`; `None` when it is empty (or only whitespace).
pub async fn optional_json<T: DeserializeOwned>(body: Body, limit: usize) -> Result<Option<T>, ApiError> {
    let bytes = bytes(body, limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    parse(&bytes).map(Some)
}

/// `bytes` parsed as `T`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    subs_protocol::from_json_slice(bytes).map_err(|e| refusal(&e))
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
