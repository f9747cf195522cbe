//! The integration tests: one binary, one module per area. Guest
//! components are built once by `build.rs`; see `subs_tests::guests`.

mod admin;
mod agui;
mod aisdk;
mod api;
mod approval;
mod approval_js;
mod architecture;
mod bad_guests;
mod delegation;
mod examples;
mod http_worker;
mod identity;
mod ids;
mod interrupts;
mod json_world;
mod llm_retries;
mod load;
mod loop_rules;
mod loop_scenarios;
mod nodes;
mod paused_time;
mod protocol_rules;
mod providers;
mod pyjs;
mod recovery;
mod replay;
mod sandbox;
mod sdk_types;
mod security;
mod storage_growth;
mod streaming;
mod telemetry;
mod tenants;
mod versions;
mod wit_boundary;
