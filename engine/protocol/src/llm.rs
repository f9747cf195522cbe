//! LLM requests and responses in the engine's own provider-neutral shape,
//! the deltas of a streamed reply, and the error codes of failed calls.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::json::opt_number;
use crate::{Content, DraftMessage, Message, Role, SharedMessage, ToolCall, ToolSchema, UrlRef};

/// A provider-neutral LLM request: what the engine sends a provider, or a
/// worker in `llm.execute` when no `format` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmRequest {
    /// The model, as `provider/model`.
    pub model: String,
    /// The conversation, system prompt included.
    pub messages: LlmMessages,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<LlmTool>>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "opt_number")]
    pub temperature: Option<f64>,
    /// The most tokens the reply may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// How much the model should reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningConfig>,
}

/// An [`LlmRequest`]'s conversation, system prompt included, oldest
/// first: on the wire, a JSON array of messages.
///
/// The engine builds each call's conversation from the branch it keeps in
/// memory and shares those messages rather than copying them (the path is
/// one [`Arc`] it already holds), so a call costs the same to build at the
/// thousandth turn as at the first. Read it with [`iter`](Self::iter),
/// [`len`](Self::len), [`get`](Self::get) and [`last`](Self::last), each
/// message as an [`LlmMessage`]; [`to_vec`](Self::to_vec) copies it out as
/// drafts. A `Vec<DraftMessage>` converts into one (`vec.into()`).
#[derive(Clone, Default)]
pub struct LlmMessages {
    /// The messages before the shared ones (the system prompt), or all of
    /// them.
    own: Vec<DraftMessage>,
    /// A shared path, after `own`.
    shared: Option<Arc<Vec<SharedMessage>>>,
}

impl LlmMessages {
    /// `own`, then the messages of `path`, shared with whatever else holds
    /// `path`.
    pub fn shared(own: Vec<DraftMessage>, path: Arc<Vec<SharedMessage>>) -> Self {
        Self { own, shared: Some(path) }
    }

    /// How many messages the conversation has.
    pub fn len(&self) -> usize {
        self.own.len() + self.shared_part().len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Message `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<LlmMessage<'_>> {
        match self.own.get(i) {
            Some(own) => Some(LlmMessage::Draft(own)),
            None => self.shared_part().get(i - self.own.len()).map(|m| LlmMessage::Recorded(m)),
        }
    }

    /// The last message, if there is one.
    pub fn last(&self) -> Option<LlmMessage<'_>> {
        match self.shared_part().last() {
            Some(m) => Some(LlmMessage::Recorded(m)),
            None => self.own.last().map(LlmMessage::Draft),
        }
    }

    /// The messages, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = LlmMessage<'_>> + ExactSizeIterator {
        let own = self.own.iter().map(LlmMessage::Draft);
        let shared = self.shared_part().iter().map(|m| LlmMessage::Recorded(m));
        // `Chain` is not an `ExactSizeIterator`; one iterator over both is.
        Messages { own, shared }
    }

    /// The messages copied out as drafts (a recorded message keeps its id).
    pub fn to_vec(&self) -> Vec<DraftMessage> {
        self.iter().map(|m| m.to_draft()).collect()
    }

    /// Adds `message` at the end (copying a shared path first).
    pub fn push(&mut self, message: DraftMessage) {
        if self.shared.is_some() {
            self.own = self.to_vec();
            self.shared = None;
        }
        self.own.push(message);
    }

    fn shared_part(&self) -> &[SharedMessage] {
        self.shared.as_deref().map_or(&[], Vec::as_slice)
    }
}

/// [`LlmMessages::iter`]'s iterator: the own messages, then the shared.
struct Messages<A, B> {
    own: A,
    shared: B,
}

impl<'a, A, B> Iterator for Messages<A, B>
where
    A: Iterator<Item = LlmMessage<'a>>,
    B: Iterator<Item = LlmMessage<'a>>,
{
    type Item = LlmMessage<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.own.next().or_else(|| self.shared.next())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (a, b) = (self.own.size_hint(), self.shared.size_hint());
        (a.0 + b.0, a.1.zip(b.1).map(|(a, b)| a + b))
    }
}

impl<'a, A, B> DoubleEndedIterator for Messages<A, B>
where
    A: DoubleEndedIterator<Item = LlmMessage<'a>>,
    B: DoubleEndedIterator<Item = LlmMessage<'a>>,
{
    fn next_back(&mut self) -> Option<Self::Item> {
        self.shared.next_back().or_else(|| self.own.next_back())
    }
}

impl<'a, A, B> ExactSizeIterator for Messages<A, B>
where
    A: ExactSizeIterator<Item = LlmMessage<'a>>,
    B: ExactSizeIterator<Item = LlmMessage<'a>>,
{
}

impl From<Vec<DraftMessage>> for LlmMessages {
    fn from(own: Vec<DraftMessage>) -> Self {
        Self { own, shared: None }
    }
}

/// The messages as drafts: moved out when the request holds them, copied
/// from a shared path.
impl IntoIterator for LlmMessages {
    type Item = DraftMessage;
    type IntoIter = std::vec::IntoIter<DraftMessage>;

    fn into_iter(self) -> Self::IntoIter {
        match self.shared {
            None => self.own.into_iter(),
            Some(_) => self.to_vec().into_iter(),
        }
    }
}

impl FromIterator<DraftMessage> for LlmMessages {
    fn from_iter<I: IntoIterator<Item = DraftMessage>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

/// Equal when the messages are, message by message, however each is held.
impl PartialEq for LlmMessages {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl std::fmt::Debug for LlmMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for LlmMessages {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for LlmMessages {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<DraftMessage>::deserialize(deserializer).map(Self::from)
    }
}

/// A list of messages on the wire.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for LlmMessages {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        Vec::<DraftMessage>::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<Vec<DraftMessage>>()
    }
}

/// One message of an [`LlmMessages`]: a draft the request holds, or a
/// message recorded in the session, read in place. A recorded message
/// reads as the draft of it, its id included.
#[derive(Debug, Clone, Copy)]
pub enum LlmMessage<'a> {
    /// A message the request holds (the system prompt, explicit messages).
    Draft(&'a DraftMessage),
    /// A message of the session's branch.
    Recorded(&'a Message),
}

impl<'a> LlmMessage<'a> {
    /// Who wrote it.
    pub fn role(self) -> Role {
        match self {
            Self::Draft(m) => m.role,
            Self::Recorded(m) => m.role,
        }
    }

    /// Its body.
    pub fn content(self) -> Option<&'a Content> {
        match self {
            Self::Draft(m) => m.content.as_ref(),
            Self::Recorded(m) => m.content.as_ref(),
        }
    }

    /// The text of its content (see [`Content::text`]).
    pub fn text(self) -> String {
        self.content().map(Content::text).unwrap_or_default()
    }

    /// The tools it calls.
    pub fn tool_calls(self) -> Option<&'a [ToolCall]> {
        match self {
            Self::Draft(m) => m.tool_calls.as_deref(),
            Self::Recorded(m) => m.tool_calls.as_deref(),
        }
    }

    /// On a `tool` message, the call it answers.
    pub fn tool_call_id(self) -> Option<&'a str> {
        match self {
            Self::Draft(m) => m.tool_call_id.as_deref(),
            Self::Recorded(m) => m.tool_call_id.as_deref(),
        }
    }

    /// Its author name.
    pub fn name(self) -> Option<&'a str> {
        match self {
            Self::Draft(m) => m.name.as_deref(),
            Self::Recorded(m) => m.name.as_deref(),
        }
    }

    /// Its id, when it has one (a recorded message always does).
    pub fn id(self) -> Option<&'a str> {
        match self {
            Self::Draft(m) => m.id.as_deref(),
            Self::Recorded(m) => Some(&m.id),
        }
    }

    /// The message as a draft of its own.
    pub fn to_draft(self) -> DraftMessage {
        match self {
            Self::Draft(m) => m.clone(),
            Self::Recorded(m) => m.clone().into(),
        }
    }
}

/// Written as the draft or the message it reads.
impl Serialize for LlmMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Draft(m) => m.serialize(serializer),
            Self::Recorded(m) => m.serialize(serializer),
        }
    }
}

/// Equal when every field is, a recorded message reading as its draft.
impl PartialEq for LlmMessage<'_> {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (*self, *other);
        a.id() == b.id()
            && a.role() == b.role()
            && a.content() == b.content()
            && a.tool_calls() == b.tool_calls()
            && a.tool_call_id() == b.tool_call_id()
            && a.name() == b.name()
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmTool {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema for the arguments; omitted: no arguments.
    // Shared with the agent's config the tool came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<ToolSchema>,
    /// JSON Schema of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ToolSchema>,
}

/// How much effort a reasoning model spends thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// The most.
    Xhigh,
    /// A lot.
    High,
    /// Some.
    Medium,
    /// A little.
    Low,
    /// Barely.
    Minimal,
    /// None at all.
    None,
}

/// Reasoning settings for models that think before answering.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReasoningConfig {
    /// How hard to think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<ReasoningEffort>,
    /// A token budget for thinking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Think, but leave the reasoning out of the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<bool>,
    /// Turn reasoning on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// A provider-neutral LLM reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmResponse {
    /// The model that answered.
    pub model: String,
    /// The reply text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The tools the model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Why the reply ended (`stop`, `tool_calls`, `length`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Token usage as the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// Cost in dollars, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// Generated images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<UrlRef>>,
}

/// A piece of a streamed LLM reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StreamDelta {
    /// More reply text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// More reasoning text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Pieces of tool calls, joined by `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    /// Why the reply ended, on the last delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

impl StreamDelta {
    /// A delta carrying only text.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()), ..Self::default() }
    }
}

/// A piece of a streamed tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolCallDelta {
    /// The tool call this piece belongs to.
    pub id: String,
    /// The tool's name, on the first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More argument text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// Why an LLM or tool call failed, for callers that handle failures by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The provider failed (5xx, overloaded, a broken stream).
    ProviderError,
    /// The provider said to slow down (429).
    RateLimited,
    /// The model refused to answer.
    Refused,
    /// The session's or tenant's budget is spent.
    BudgetExceeded,
    /// The call ran past its deadline.
    DeadlineExceeded,
}

impl ErrorCode {
    /// The code as it appears on the wire (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ProviderError => "provider_error",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Refused => "refused",
            ErrorCode::BudgetExceeded => "budget_exceeded",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(id: &str, text: &str) -> SharedMessage {
        let draft = DraftMessage::assistant(text);
        SharedMessage::Shared(Arc::new(Message {
            id: id.to_owned(),
            role: draft.role,
            content: draft.content,
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }))
    }

    #[test]
    fn a_shared_conversation_reads_and_writes_as_its_drafts() {
        let path = Arc::new(vec![recorded("a", "one"), recorded("b", "two")]);
        let shared = LlmMessages::shared(vec![DraftMessage::system("be brief")], path.clone());
        let drafts: Vec<DraftMessage> = vec![
            DraftMessage::system("be brief"),
            DraftMessage::assistant("one").with_id("a"),
            DraftMessage::assistant("two").with_id("b"),
        ];
        let own = LlmMessages::from(drafts.clone());
        assert_eq!(shared, own);
        assert_eq!((shared.len(), shared.to_vec()), (3, drafts.clone()));
        assert_eq!(shared.last().map(LlmMessage::text), Some("two".to_owned()));
        assert_eq!(shared.get(0).and_then(LlmMessage::id), None);
        assert_eq!(shared.get(2).and_then(LlmMessage::id), Some("b"));
        assert!(shared.get(3).is_none());
        assert_eq!(shared.iter().rev().map(LlmMessage::text).collect::<Vec<_>>(), ["two", "one", "be brief"]);
        // The same JSON, and it reads back as the drafts.
        let json = serde_json::to_value(&shared).unwrap();
        assert_eq!(json, serde_json::to_value(&drafts).unwrap());
        assert_eq!(serde_json::from_value::<LlmMessages>(json).unwrap(), own);
        // Read in place: the path's messages, not copies.
        let Some(LlmMessage::Recorded(first)) = shared.get(1) else { panic!("{shared:?}") };
        assert!(std::ptr::eq(first, &*path[0]));
        // Adding a message copies the shared part out; the path is untouched.
        let mut longer = shared.clone();
        longer.push(DraftMessage::user("more"));
        assert_eq!(longer.len(), 4);
        assert_eq!(path.len(), 2);
        assert_eq!(longer.into_iter().collect::<Vec<_>>()[..3], drafts[..]);
    }
}
