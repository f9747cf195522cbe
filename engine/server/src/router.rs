//! Every route the server answers, in one table: the API's routes, each
//! registered with its OpenAPI description ([`openapi`]), so the document
//! cannot list a route the server does not serve, nor miss one it does;
//! then the document itself and the web inspector's pages, which are no
//! API routes.

use std::sync::Arc;

use axum::{Json, Router};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::frontends::{agui, aisdk};
use crate::{
    AppState, admin, agents, auth, budgets, decisions, mcp, mcp_servers, metrics, openapi, replay, sessions, stream, ui,
};

/// The API's routes, with the OpenAPI document describing them.
pub fn api() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(sessions::list))
        .routes(routes!(sessions::snapshot))
        .routes(routes!(sessions::input))
        .routes(routes!(sessions::cancel))
        .routes(routes!(decisions::list))
        .routes(routes!(budgets::session_budget))
        .routes(routes!(budgets::usage))
        .routes(routes!(stream::events))
        .routes(routes!(agents::list))
        .routes(routes!(agents::put, agents::get, agents::delete))
        .routes(routes!(agents::activate))
        .routes(routes!(agents::delete_version, agents::component))
        .routes(routes!(replay::replay))
        .routes(routes!(agui::run))
        .routes(routes!(aisdk::chat))
        .routes(routes!(aisdk::reconnect))
        .routes(routes!(mcp::post, mcp::get, mcp::delete))
        .routes(routes!(mcp_servers::list))
        .routes(routes!(mcp_servers::put, mcp_servers::get, mcp_servers::delete))
        .routes(routes!(auth::mint_token))
        .routes(routes!(admin::list_tenants))
        .routes(routes!(admin::put_tenant, admin::get_tenant, admin::delete_tenant))
        .routes(routes!(admin::get_limits, admin::put_limits))
        .routes(routes!(admin::list_keys, admin::create_key))
        .routes(routes!(admin::revoke_key))
        .routes(routes!(metrics::healthz))
        .routes(routes!(metrics::metrics))
}

/// Every route: the API's, `GET /v1/openapi.json` (the document), and the
/// inspector's (`/`, `/ui`, `/ui/{file}`: [`ui::router`]), which take no
/// key.
pub fn router() -> Router<Arc<AppState>> {
    let (router, _) = api().split_for_parts();
    // The MCP endpoint's sessions live as long as the routes that serve
    // them.
    let router = router.layer(axum::Extension(Arc::new(mcp::McpSessions::default())));
    let document = openapi::document();
    // Shared, not owned, by the route: axum clones every route's handler
    // for each connection it accepts, and a copy of the whole document per
    // connection cost about half a millisecond of CPU.
    let document = Arc::new(document);
    router
        .route(
            "/v1/openapi.json",
            axum::routing::get(move || {
                let document = document.clone();
                async move { Json(document) }
            }),
        )
        .merge(ui::router())
}
