//! What sessions and tenants spend on LLM calls, and the budgets that stop
//! them. The engine checks a budget before it sends a call: a call that
//! would start once the session's or the tenant's budget is spent fails
//! with `budget_exceeded`, and the turn fails with it. Raising the budget
//! makes the session usable again; nothing recorded is lost.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use subs_engine::model::Money;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Tenant;
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};
use crate::sessions::SessionPath;

/// The body of `PUT …/budget`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetBody {
    /// Dollars, as a decimal string (`"0.25"`) or a number; `null` removes
    /// the session's own budget.
    #[schema(value_type = Option<String>)]
    pub budget: Option<Money>,
}

/// A session's spending against its budget.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionBudget {
    /// The session.
    pub session_id: String,
    /// Its budget in dollars, `null` for none.
    pub budget: Option<String>,
    /// What its LLM calls cost so far, in dollars.
    pub cost: String,
}

/// A tenant's spending against its budget.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantUsage {
    /// What all the tenant's sessions' LLM calls cost, in dollars.
    pub cost: String,
    /// The tenant's budget in dollars, `null` for none.
    pub budget: Option<String>,
}

/// Sets (or, with `null`, removes) a session's budget. A session whose
/// budget is spent fails its next LLM call with `budget_exceeded`; raising
/// the budget lets its next turn run.
#[utoipa::path(
    put,
    path = "/v1/sessions/{session_id}/budget",
    params(("session_id" = String, Path)),
    request_body(content = BudgetBody, content_type = "application/json"),
    responses(
        (status = 200, body = SessionBudget),
        (status = 400, description = "Not an amount of dollars", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    tag = "sessions"
)]
pub async fn session_budget(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    SessionPath(session_id): SessionPath,
    body: Incoming,
) -> Result<Json<SessionBudget>, ApiError> {
    let limit = state.config.limits(&tenant).max_body_bytes;
    let body: BudgetBody = body::json(body, limit).await?;
    if body.budget.is_some_and(|b| b < Money::ZERO) {
        return Err(ApiError {
            field: Some("budget".to_owned()),
            ..ApiError::new(axum::http::StatusCode::BAD_REQUEST, "invalid_input", "a budget cannot be negative")
        });
    }
    let not_found = || ApiError::no_session(&session_id);
    if !state.engine.reads().session_exists(&tenant, &session_id).await? {
        return Err(not_found());
    }
    state.engine.sessions().set_budget(&tenant, &session_id, body.budget).await?;
    let record = state.engine.reads().session_record(&tenant, &session_id).await?.ok_or_else(not_found)?;
    Ok(Json(SessionBudget {
        session_id,
        budget: record.budget,
        cost: record.cost.unwrap_or_else(|| Money::ZERO.to_string()),
    }))
}

/// What the tenant's sessions spent on LLM calls, and its budget.
#[utoipa::path(
    get,
    path = "/v1/usage",
    responses((status = 200, body = TenantUsage), (status = 401, body = ErrorBody)),
    tag = "sessions"
)]
pub async fn usage(State(state): State<Arc<AppState>>, Tenant(tenant): Tenant) -> Result<Json<TenantUsage>, ApiError> {
    Ok(Json(TenantUsage {
        cost: state.engine.reads().tenant_spent(&tenant).await?.to_string(),
        budget: state.engine.admin().tenant_budget(&tenant).map(|b| b.to_string()),
    }))
}
