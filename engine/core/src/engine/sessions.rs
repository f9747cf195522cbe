//! The sessions' commands: what changes a session goes through its actor.

use std::sync::Arc;

use subs_protocol::{ClientInput, WorkerIdentity};
use tokio::sync::oneshot;

use super::checked_key;
use crate::model::Money;
use crate::session::actor::Msg;
use crate::session::apply::{Accepted, InputError, Sender};
use crate::session::directory::Directory;
use crate::session::env::Env;

/// The sessions' commands ([`Engine::sessions`](crate::Engine::sessions)):
/// each is sent to the session's actor, which stores it before it answers.
/// Cheap to clone.
#[derive(Clone)]
pub struct Sessions {
    pub(super) env: Arc<Env>,
    pub(super) directory: Arc<Directory>,
}

impl Sessions {
    /// Takes a client input for session `session` of `tenant`; the input
    /// is stored when this returns `Ok`.
    pub async fn input(
        &self,
        tenant: &str,
        session: &str,
        input: ClientInput,
        identity: WorkerIdentity,
    ) -> Result<Accepted, InputError> {
        // The default identity is no owner at all: it reaches any session.
        let identity = Some(identity).filter(|i| *i != WorkerIdentity::default());
        self.input_from(tenant, session, input, Sender::Tenant { key: None, identity }).await
    }

    /// Sends an input for `sender`, whose right to the session the
    /// session's actor checks against the session's owner in the same
    /// step that accepts the input (so two inputs creating the same
    /// session at once cannot both pass a check made before).
    pub async fn input_from(
        &self,
        tenant: &str,
        session: &str,
        input: ClientInput,
        sender: Sender,
    ) -> Result<Accepted, InputError> {
        self.input_traced(tenant, session, input, sender, None).await
    }

    /// [`input_from`](Self::input_from) an input that came with a W3C
    /// `traceparent` (read with [`telemetry::parse_traceparent`](crate::telemetry::parse_traceparent)):
    /// the turn it starts is traced as a child of `trace`, and the
    /// decisions and calls of that turn pass the trace on to HTTP workers
    /// and LLM providers.
    pub async fn input_traced(
        &self,
        tenant: &str,
        session: &str,
        input: ClientInput,
        sender: Sender,
        trace: Option<crate::telemetry::SpanRef>,
    ) -> Result<Accepted, InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        self.env.metrics.input_sent();
        if !self.directory.send(&key, Msg::Input { input: Box::new((input, sender, trace)), reply }) {
            self.env.metrics.input_taken();
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// Stops the session's open turn: calls in flight are cancelled, the
    /// turn ends with `turn.failed` (code `cancelled`). Returns whether a
    /// turn was open.
    pub async fn cancel(&self, tenant: &str, session: &str) -> Result<bool, InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        if !self.directory.send(&key, Msg::Cancel { reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// Sets (or removes) a session's budget. Raising a spent budget makes
    /// the session usable again: its next turn's calls are sent.
    pub async fn set_budget(&self, tenant: &str, session: &str, budget: Option<Money>) -> Result<(), InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        if !self.directory.send(&key, Msg::SetBudget { budget, reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }
}
