//! The OpenAPI 3.1 document, generated from the handlers: each route is
//! registered together with its description in the route table
//! ([`crate::router`]); this module holds what the document says beside
//! them (title, licence, the bearer and operator security schemes).

use utoipa::OpenApi;

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

/// The document's own part: its title, licence and security schemes. The
/// routes' descriptions are added as [`crate::router::api`] registers them.
pub fn base() -> utoipa::openapi::OpenApi {
    Doc::openapi()
}

/// The OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    crate::router::api().into_openapi()
}
