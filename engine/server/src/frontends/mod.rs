//! The chat frontends: AG-UI ([`agui`]) and the Vercel AI SDK
//! ([`aisdk`]), each a translation of its protocol's requests into session
//! inputs and of a turn's events into its protocol's stream.

pub mod agui;
pub mod aisdk;
