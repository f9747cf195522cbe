//! The integration tests: one binary, one module per area. Guest
//! components are built once by `build.rs`; see `subs_tests::guests`.

mod bad_guests;
mod examples;
mod llm_retries;
mod loop_scenarios;
mod recovery;
mod storage_growth;
mod streaming;
mod wit_boundary;
