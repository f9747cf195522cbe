//! The OpenAPI 3.1 document, generated from the handlers: each route is
//! registered together with its description, so the document cannot list a
//! route the server does not serve, nor miss one it does.

use std::sync::Arc;

use axum::Json;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AppState, admin, agents, agui, aisdk, auth, budgets, decisions, metrics, replay, sessions, stream};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "subs",
        description = "The subs agent engine's HTTP API. Protocol types (ClientInput, Message, AgentConfig, Call, …) are described in docs/protocol.md.",
        license(name = "Apache-2.0")
    ),
    components(schemas(crate::error::ErrorBody)),
    security(("bearer" = [])),
    modifiers(&Bearer)
)]
struct Doc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // The admin routes take the operator key, never a tenant's.
        components.add_security_scheme(
            "operator",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The operator key (`[admin]` in the config file, or SUBS_ADMIN_KEY)"))
                    .build(),
            ),
        );
    }
}

/// Every route of the API, with the document describing them.
pub fn router() -> OpenApiRouter<Arc<AppState>> {
    let router = OpenApiRouter::with_openapi(Doc::openapi())
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
        .routes(routes!(agents::delete_version))
        .routes(routes!(replay::replay))
        .routes(routes!(agui::run))
        .routes(routes!(aisdk::chat))
        .routes(routes!(aisdk::reconnect))
        .routes(routes!(auth::mint_token))
        .routes(routes!(admin::list_tenants))
        .routes(routes!(admin::put_tenant, admin::get_tenant, admin::delete_tenant))
        .routes(routes!(admin::get_limits, admin::put_limits))
        .routes(routes!(admin::list_keys, admin::create_key))
        .routes(routes!(admin::revoke_key))
        .routes(routes!(metrics::healthz))
        .routes(routes!(metrics::metrics));
    // Shared, not owned, by the route: axum clones every route's handler
    // for each connection it accepts, and a copy of the whole document per
    // connection cost about half a millisecond of CPU.
    let document = std::sync::Arc::new(router.get_openapi().clone());
    router.route(
        "/v1/openapi.json",
        axum::routing::get(move || {
            let document = document.clone();
            async move { Json(document) }
        }),
    )
}

/// The OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    router().into_openapi()
}
