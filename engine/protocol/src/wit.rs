//! The mapping between protocol types and the WIT types of `subs:agent`.
//!
//! Both sides of the component boundary need it: the guest SDK converts
//! between its wit-bindgen types and these, the engine between its wasmtime
//! types and these. The two generators produce types of the same shape
//! (records as structs with snake_case fields, variants and enums as Rust
//! enums, `option`/`list`/`string` as `Option`/`Vec`/`String`), so the
//! mapping is written once, as [`wit_conversions!`](crate::wit_conversions),
//! and instantiated on each side against its own bindings.
//!
//! The mapping is lossless in both directions; property tests in both
//! crates check that. `unknown` values cross as JSON text ([`json`]);
//! an `llm.execute` request or `llm.result` response crosses in the typed
//! form only when that form holds it exactly, and as JSON text otherwise.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ProtocolError;

/// The decision request of `subs:agent@0.2.0`, which crosses without its
/// branch (the agent reads that through a `messages` resource), and the
/// message tree that resource gives.
pub trait BranchRequest: Sized {
    /// The WIT message tree (active nodes refer to the path by index).
    type Tree;
    /// The request without its branch, and the branch.
    fn split(request: crate::DecisionRequest) -> (Self, crate::Messages);
    /// The request with `messages` as its branch. Fails where a field's
    /// JSON text does not parse; the error names the field.
    fn join(self, messages: crate::Messages) -> Result<crate::DecisionRequest, ProtocolError>;
    /// A tree as WIT has it.
    fn tree_to_wit(tree: crate::RequestTree) -> Self::Tree;
    /// A tree read from WIT, against a path of `path_len` messages; an
    /// index that points nowhere is an error.
    fn tree_from_wit(tree: Self::Tree, path_len: usize) -> Result<crate::RequestTree, ProtocolError>;
}

/// Converts a WIT value into a protocol value. Fails only where the WIT
/// value carries JSON text that does not parse; the error names the field.
pub trait FromWit<W>: Sized {
    /// Converts `wit`.
    fn from_wit(wit: W) -> Result<Self, ProtocolError>;
}

/// How many schema texts [`schema`] keeps per thread at most.
const SCHEMAS_KEPT: usize = 256;
/// The longest text [`schema`] keeps.
const SCHEMAS_KEPT_BYTES: usize = 4 << 10;
/// How many bytes of text [`schema`] keeps per thread in all: a parsed
/// value takes up to some tens of times its text, so this is what bounds
/// the memory a thread gives to schemas (a few MiB at worst), on a node
/// with a thread per core.
const SCHEMAS_KEPT_TOTAL: usize = 64 << 10;

/// Reads the JSON text of an optional tool schema.
///
/// In a guest the schema is [lazy](crate::ToolSchema::lazy): an agent is
/// handed its config, every tool's schemas with it, in each decision's
/// request, and most decisions never look at one.
///
/// In the engine the schema is read now and shared with every schema of
/// the same text this thread read lately. An agent hands its config (its
/// tools' schemas) at the start of each session, so a node running many
/// sessions of one agent would otherwise parse and keep the same schemas
/// once per session; the texts kept for finding them again are bounded in
/// count, length and total bytes, so what a thread keeps is bounded
/// whatever schemas tenants' agents send.
#[doc(hidden)]
pub fn schema(text: Option<String>, field: &str) -> Result<Option<crate::ToolSchema>, ProtocolError> {
    use std::collections::{HashMap, VecDeque};
    use std::sync::Arc;

    use crate::ToolSchema;
    #[derive(Default)]
    struct Kept {
        by_text: HashMap<Arc<str>, ToolSchema>,
        /// The texts in the order they were kept: the first goes first.
        order: VecDeque<Arc<str>>,
        /// The bytes of the texts kept.
        bytes: usize,
    }
    std::thread_local! {
        static READ: std::cell::RefCell<Kept> = std::cell::RefCell::default();
    }
    let invalid = |e: serde_json::Error| ProtocolError::new(format!("invalid JSON text: {e}")).in_field(field);
    let Some(text) = text else { return Ok(None) };
    // A component's instance (and so its one thread) lives for one
    // decision: in a guest nothing kept would be read again.
    if cfg!(target_family = "wasm") {
        return ToolSchema::lazy(text).map(Some).map_err(invalid);
    }
    if text.len() > SCHEMAS_KEPT_BYTES {
        return ToolSchema::read(text).map(Some).map_err(invalid);
    }
    if let Some(kept) = READ.with_borrow(|kept| kept.by_text.get(text.as_str()).cloned()) {
        return Ok(Some(kept));
    }
    // The key is a copy: the schema keeps its text as a `Box<str>`, which
    // a guest's lazy schema gets from its `String` without one.
    let key: Arc<str> = text.as_str().into();
    let schema = ToolSchema::read(text).map_err(invalid)?;
    READ.with_borrow_mut(|kept| {
        while kept.order.len() == SCHEMAS_KEPT || kept.bytes + key.len() > SCHEMAS_KEPT_TOTAL {
            let Some(oldest) = kept.order.pop_front() else { break };
            kept.bytes -= oldest.len();
            kept.by_text.remove(&oldest);
        }
        kept.bytes += key.len();
        kept.order.push_back(key.clone());
        kept.by_text.insert(key, schema.clone());
    });
    Ok(Some(schema))
}

/// What was made from the last few shared values, found by the address of
/// their allocation: a ring of at most `capacity` entries, the oldest
/// replaced first. Each entry holds its `Arc`, so no other value can come
/// to live at its address while the entry lives, and a value behind an
/// `Arc` does not change: an address found is the same value. A lookup
/// reads only the addresses, neither hashing nor comparing values.
///
/// Meant for a thread-local cache of something costly to make from a value
/// many callers share, such as an agent config's text.
#[doc(hidden)]
pub struct ByAddress<K, V> {
    /// Each entry's address, apart, so a lookup reads only these.
    at: Vec<*const K>,
    entries: Vec<(std::sync::Arc<K>, V)>,
    /// The entry a new one replaces once all are used.
    oldest: usize,
    capacity: usize,
}

impl<K, V> ByAddress<K, V> {
    /// An empty ring of at most `capacity` entries.
    pub const fn new(capacity: usize) -> Self {
        Self { at: Vec::new(), entries: Vec::new(), oldest: 0, capacity }
    }

    /// What was kept for `key`'s allocation.
    pub fn get(&self, key: &std::sync::Arc<K>) -> Option<&V> {
        let address = std::sync::Arc::as_ptr(key);
        self.at.iter().position(|&at| at == address).map(|i| &self.entries[i].1)
    }

    /// Keeps `value` for `key`'s allocation, in place of the oldest entry
    /// when the ring is full.
    pub fn insert(&mut self, key: &std::sync::Arc<K>, value: V) {
        let address = std::sync::Arc::as_ptr(key);
        let entry = (key.clone(), value);
        if let Some(i) = self.at.iter().position(|&at| at == address) {
            self.entries[i] = entry;
        } else if self.entries.len() < self.capacity {
            self.at.push(address);
            self.entries.push(entry);
        } else if self.capacity > 0 {
            let i = self.oldest;
            self.at[i] = address;
            self.entries[i] = entry;
            self.oldest = (i + 1) % self.capacity;
        }
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Parses the JSON text of an `unknown` field.
#[doc(hidden)]
pub fn json(text: &str, field: &str) -> Result<Value, ProtocolError> {
    serde_json::from_str(text).map_err(|e| ProtocolError::new(format!("invalid JSON text: {e}")).in_field(field))
}

/// [`json`] for an optional field.
#[doc(hidden)]
pub fn opt_json(text: Option<String>, field: &str) -> Result<Option<Value>, ProtocolError> {
    text.map(|t| json(&t, field)).transpose()
}

/// [`json`] for a list field.
#[doc(hidden)]
pub fn json_list(texts: Vec<String>, field: &str) -> Result<Vec<Value>, ProtocolError> {
    let mut values = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        values.push(json(t, "").map_err(|e| e.in_index(i).in_field(field))?);
    }
    Ok(values)
}

/// Writes an `unknown` value as JSON text.
#[doc(hidden)]
pub fn json_text(value: &Value) -> String {
    crate::to_json(value)
}

/// Converts an optional WIT field.
#[doc(hidden)]
pub fn opt<W, P: FromWit<W>>(wit: Option<W>, field: &str) -> Result<Option<P>, ProtocolError> {
    wit.map(|w| P::from_wit(w).map_err(|e| e.in_field(field))).transpose()
}

/// Converts a WIT list field.
#[doc(hidden)]
pub fn list<W, P: FromWit<W>>(wit: Vec<W>, field: &str) -> Result<Vec<P>, ProtocolError> {
    // Collecting into a `Result` loses the length; allocating it up front
    // spares the growing copies (a guest converts 20-message requests).
    let mut items = Vec::with_capacity(wit.len());
    for (i, w) in wit.into_iter().enumerate() {
        items.push(P::from_wit(w).map_err(|e| e.in_index(i).in_field(field))?);
    }
    Ok(items)
}

/// Converts an optional WIT list field.
#[doc(hidden)]
pub fn opt_list<W, P: FromWit<W>>(wit: Option<Vec<W>>, field: &str) -> Result<Option<Vec<P>>, ProtocolError> {
    wit.map(|w| list(w, field)).transpose()
}

/// Converts a required WIT field.
#[doc(hidden)]
pub fn field<W, P: FromWit<W>>(wit: W, field: &str) -> Result<P, ProtocolError> {
    P::from_wit(wit).map_err(|e| e.in_field(field))
}

/// The typed form of `value`, when that form holds it exactly: parsing
/// drops unknown fields and may change how numbers are written, and either
/// would lose something the worker or provider sent.
#[doc(hidden)]
pub fn exact_typed<T: DeserializeOwned + Serialize>(value: &Value) -> Option<T> {
    let typed: T = serde_json::from_value(value.clone()).ok()?;
    (crate::to_value(&typed) == *value).then_some(typed)
}

/// The error for an index of a request's message tree (WIT or
/// [`RequestTree`](crate::RequestTree)) that points nowhere.
#[doc(hidden)]
pub fn bad_tree_index(node: usize, field: &str, what: &str, index: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::new(format!("refers to {what} {index}, which does not exist"))
        .in_field(field)
        .in_index(node)
        .in_field("nodes")
}

/// Maps a C-like protocol enum to its WIT enum and back; the variant names
/// are the same on both sides.
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_enum {
    ($p:ty, $w:ty, [$($variant:ident),+ $(,)?]) => {
        impl From<$p> for $w {
            fn from(value: $p) -> Self {
                match value { $(<$p>::$variant => <$w>::$variant,)+ }
            }
        }
        impl $crate::wit::FromWit<$w> for $p {
            fn from_wit(wit: $w) -> Result<Self, $crate::ProtocolError> {
                Ok(match wit { $(<$w>::$variant => <$p>::$variant,)+ })
            }
        }
    };
}

/// A protocol value's field written as its WIT field, by the field's kind
/// (see [`__wit_record!`](crate::__wit_record)).
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_to {
    (; $v:expr) => {
        $v
    };
    (into; $v:expr) => {
        ::core::convert::Into::into($v)
    };
    (opt; $v:expr) => {
        $v.map(::core::convert::Into::into)
    };
    (list; $v:expr) => {
        $v.into_iter().map(::core::convert::Into::into).collect()
    };
    (drafts; $v:expr) => {
        $v.into_iter().map(::core::convert::Into::into).collect()
    };
    (opt_list; $v:expr) => {
        $v.map(|l| l.into_iter().map(::core::convert::Into::into).collect())
    };
    (json; $v:expr) => {
        $crate::wit::json_text(&$v)
    };
    (opt_json; $v:expr) => {
        $v.as_ref().map($crate::wit::json_text)
    };
    (schema; $v:expr) => {
        $v.as_ref().map(|schema| schema.text().into_owned())
    };
    (opt_json_list; $v:expr) => {
        $v.map(|l| l.iter().map($crate::wit::json_text).collect())
    };
}

/// [`__wit_to!`] for a field read through a reference: what the field
/// holds is copied, its own records by their by-reference mappings, its
/// JSON written from where it lies.
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_to_ref {
    (; $v:expr) => {
        ::core::clone::Clone::clone(&$v)
    };
    (opt; $v:expr) => {
        ::core::clone::Clone::clone(&$v).map(::core::convert::Into::into)
    };
    (opt_list; $v:expr) => {
        $v.as_ref().map(|l| l.iter().map(::core::convert::Into::into).collect())
    };
    (opt_json; $v:expr) => {
        $v.as_ref().map($crate::wit::json_text)
    };
    (schema; $v:expr) => {
        $v.as_ref().map(|schema| schema.text().into_owned())
    };
}

/// A WIT value's field read back as its protocol field, by the field's
/// kind; an error names the field (see [`__wit_record!`](crate::__wit_record)).
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_from {
    (; $v:expr, $name:expr) => {
        $v
    };
    (into; $v:expr, $name:expr) => {
        $crate::wit::field($v, $name)?
    };
    (opt; $v:expr, $name:expr) => {
        $crate::wit::opt($v, $name)?
    };
    (list; $v:expr, $name:expr) => {
        $crate::wit::list($v, $name)?
    };
    (drafts; $v:expr, $name:expr) => {
        ::core::convert::From::from($crate::wit::list::<_, $crate::DraftMessage>($v, $name)?)
    };
    (opt_list; $v:expr, $name:expr) => {
        $crate::wit::opt_list($v, $name)?
    };
    (json; $v:expr, $name:expr) => {
        $crate::wit::json(&$v, $name)?
    };
    (opt_json; $v:expr, $name:expr) => {
        $crate::wit::opt_json($v, $name)?
    };
    (schema; $v:expr, $name:expr) => {
        $crate::wit::schema($v, $name)?
    };
    (opt_json_list; $v:expr, $name:expr) => {
        $v.map(|l| $crate::wit::json_list(l, $name)).transpose()?
    };
}

/// Maps a protocol struct to its WIT record and back, field by field.
/// Each field is named once, with how it crosses:
///
/// - nothing: as it is (strings, numbers, booleans and lists of them);
/// - `into`: a protocol type of its own, converted;
/// - `opt`, `list`, `opt_list`: an optional one, a list or an optional
///   list of them;
/// - `drafts`: [`LlmMessages`](crate::LlmMessages) or
///   [`ClientView`](crate::ClientView), a list of draft messages;
/// - `json`, `opt_json`, `opt_json_list`: any JSON, as JSON text;
/// - `schema`: an optional JSON Schema, shared, as JSON text (see
///   [`schema`]).
///
/// Several pairs of types with the same fields share one list:
/// `[p::A => w::A, p::B => w::B] { … }`. `ref p::A => w::A { … }` also
/// maps `&p::A`, for a record the engine hands out shared (the agent
/// config is in every request): its fields then take only the kinds a
/// reference can be read by (nothing, `opt`, `opt_list`, `opt_json`,
/// `schema`).
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_record {
    ([$($p:path => $w:path),+ $(,)?] $fields:tt) => {
        $($crate::__wit_record!($p => $w $fields);)+
    };
    (ref $p:path => $w:path { $($f:ident $(: $kind:ident)?),* $(,)? }) => {
        $crate::__wit_record!($p => $w { $($f $(: $kind)?),* });
        impl ::core::convert::From<&$p> for $w {
            fn from(v: &$p) -> Self {
                Self { $($f: $crate::__wit_to_ref!($($kind)?; v.$f),)* }
            }
        }
    };
    ($p:path => $w:path { $($f:ident $(: $kind:ident)?),* $(,)? }) => {
        impl ::core::convert::From<$p> for $w {
            fn from(v: $p) -> Self {
                Self { $($f: $crate::__wit_to!($($kind)?; v.$f),)* }
            }
        }
        impl $crate::wit::FromWit<$w> for $p {
            fn from_wit(v: $w) -> ::core::result::Result<Self, $crate::ProtocolError> {
                Ok(Self { $($f: $crate::__wit_from!($($kind)?; v.$f, stringify!($f)),)* })
            }
        }
    };
}

/// Maps a protocol enum whose variants each hold one value (or none) to
/// the WIT variant of the same names and back; the held values convert by
/// their own mappings.
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_variant {
    ($p:path => $w:path { $($v:ident $(($x:ident))?),+ $(,)? }) => {
        impl ::core::convert::From<$p> for $w {
            fn from(v: $p) -> Self {
                type Protocol = $p;
                match v { $(Protocol::$v $(($x))? => Self::$v $((::core::convert::Into::into($x)))?,)+ }
            }
        }
        impl $crate::wit::FromWit<$w> for $p {
            fn from_wit(v: $w) -> ::core::result::Result<Self, $crate::ProtocolError> {
                type Wit = $w;
                Ok(match v { $(Wit::$v $(($x))? => Self::$v $(($crate::wit::FromWit::from_wit($x)?))?,)+ })
            }
        }
    };
}

/// A decision request's fields but its branch and trigger, from the
/// protocol to WIT (`to Type, v, trigger, { branch fields }`) or back
/// (`from v, trigger, { messages }`, inside a function returning
/// `Result<_, ProtocolError>`): what the request records of `0.1.0` and
/// `0.2.0` share.
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_request {
    (to $($t:ident)::+, $v:ident, $trigger:expr, { $($branch:tt)* }) => {
        $($t)::+ {
            session_id: $v.session_id,
            decision_id: $v.decision_id,
            agent_id: $v.agent_id,
            identity: $v.identity.into(),
            trigger: $trigger,
            proposed: $v.proposed.into(),
            state: $crate::wit::json_text(&$v.state),
            agent: $v.agent.as_ref().map(agent_to_wit),
            calls: $v.calls.into_iter().map(Into::into).collect(),
            pending_calls: $v.pending_calls,
            ancestry: $v.ancestry,
            attempts: $v.attempts,
            deadline: $v.deadline,
            turn_id: $v.turn_id,
            $($branch)*
        }
    };
    (from $v:ident, $trigger:expr, { $($branch:tt)* }) => {
        $crate::DecisionRequest {
            session_id: $v.session_id,
            decision_id: $v.decision_id,
            agent_id: $v.agent_id,
            identity: $crate::wit::field($v.identity, "identity")?,
            trigger: $trigger,
            proposed: $crate::wit::field($v.proposed, "proposed")?,
            state: $crate::wit::json(&$v.state, "state")?,
            agent: $crate::wit::opt::<_, $crate::AgentConfig>($v.agent, "agent")?.map(::std::sync::Arc::new),
            calls: $crate::wit::list($v.calls, "calls")?,
            pending_calls: $v.pending_calls,
            ancestry: $v.ancestry,
            attempts: $v.attempts,
            deadline: $v.deadline,
            turn_id: $v.turn_id,
            $($branch)*
        }
    };
}

/// Implements the protocol ↔ WIT mapping against a module of generated WIT
/// types (the `subs:agent/types` interface): `From<protocol> for wit` and
/// [`FromWit<wit>`](FromWit) for protocol.
///
/// Call it with the name of the module (an identifier in scope):
///
/// ```ignore
/// use crate::bindings::subs::agent::types as wit;
/// subs_protocol::wit_conversions!(wit);
/// ```
///
/// Given a second module, `subs:agent@0.2.0`'s `branch` interface, it also
/// implements [`BranchRequest`] for that version's request.
#[macro_export]
macro_rules! wit_conversions {
    ($w:ident $(, $b:ident)?) => {
        const _: () = {
            use $crate as p;
            use $crate::__wit_record as record;
            use $crate::__wit_variant as variant;
            use $crate::wit::{FromWit, exact_typed, field, json, json_text, list, opt};
            use $w as w;

            type R<T> = Result<T, p::ProtocolError>;

            $crate::__wit_enum!(p::Role, w::Role, [System, User, Assistant, Tool]);
            $crate::__wit_enum!(p::Handler, w::Handler, [Server, Worker, Client]);
            $crate::__wit_enum!(p::LlmHandler, w::LlmHandler, [Server, Worker]);
            $crate::__wit_enum!(p::ToolHandler, w::ToolHandler, [Worker, Client]);
            $crate::__wit_enum!(p::LlmFormat, w::LlmFormat, [Openai, Anthropic]);
            $crate::__wit_enum!(p::ReasoningEffort, w::ReasoningEffort, [Xhigh, High, Medium, Low, Minimal, None]);
            $crate::__wit_enum!(
                p::ErrorCode,
                w::ErrorCode,
                [ProviderError, RateLimited, Refused, BudgetExceeded, DeadlineExceeded]
            );
            $crate::__wit_enum!(p::CallKind, w::CallKind, [ToolCall, LlmCall, SubAgent]);
            $crate::__wit_enum!(p::CallStatus, w::CallStatus, [Pending, Completed, Failed, RetryScheduled, Queued]);

            // ---- messages ----------------------------------------------

            record!(p::UrlRef => w::UrlRef { url });
            record!(p::FileData => w::FileData { filename, file_data });
            record!(p::AudioData => w::AudioData { data, format });
            record!(p::FunctionCall => w::FunctionCall { name, arguments });
            record!(p::ToolCall => w::ToolCall { id, kind, function: into });
            record!([p::Message => w::Message, p::DraftMessage => w::DraftMessage] {
                id,
                role: into,
                content: opt,
                tool_calls: opt_list,
                tool_call_id,
                name,
            });

            // A content part's variants hold their fields in JSON's shape
            // (`{"type": "text", "text": …}`), not one value each.
            impl From<p::ContentPart> for w::ContentPart {
                fn from(v: p::ContentPart) -> Self {
                    match v {
                        p::ContentPart::Text { text } => Self::Text(text),
                        p::ContentPart::ImageUrl { image_url } => Self::ImageUrl(image_url.into()),
                        p::ContentPart::File { file } => Self::File(file.into()),
                        p::ContentPart::InputAudio { input_audio } => Self::InputAudio(input_audio.into()),
                        p::ContentPart::VideoUrl { video_url } => Self::VideoUrl(video_url.into()),
                    }
                }
            }
            impl FromWit<w::ContentPart> for p::ContentPart {
                fn from_wit(v: w::ContentPart) -> R<Self> {
                    Ok(match v {
                        w::ContentPart::Text(text) => Self::Text { text },
                        w::ContentPart::ImageUrl(u) => Self::ImageUrl { image_url: field(u, "image_url")? },
                        w::ContentPart::File(f) => Self::File { file: field(f, "file")? },
                        w::ContentPart::InputAudio(a) => Self::InputAudio { input_audio: field(a, "input_audio")? },
                        w::ContentPart::VideoUrl(u) => Self::VideoUrl { video_url: field(u, "video_url")? },
                    })
                }
            }

            impl From<p::Content> for w::Content {
                fn from(v: p::Content) -> Self {
                    match v {
                        p::Content::Text(text) => Self::Text(text),
                        p::Content::Parts(parts) => Self::Parts(parts.into_iter().map(Into::into).collect()),
                    }
                }
            }
            impl FromWit<w::Content> for p::Content {
                fn from_wit(v: w::Content) -> R<Self> {
                    Ok(match v {
                        w::Content::Text(text) => Self::Text(text),
                        w::Content::Parts(parts) => Self::Parts(list(parts, "")?),
                    })
                }
            }

            // A shared message is copied field by field, its handle then
            // let go: no attempt to take it over, which would only
            // succeed for a message nothing else holds.
            impl From<p::SharedMessage> for w::Message {
                fn from(v: p::SharedMessage) -> Self {
                    match v {
                        p::SharedMessage::Own(m) => (*m).into(),
                        p::SharedMessage::Shared(m) => p::Message::clone(&m).into(),
                    }
                }
            }
            impl FromWit<w::Message> for p::SharedMessage {
                fn from_wit(v: w::Message) -> R<Self> {
                    p::Message::from_wit(v).map(Self::from)
                }
            }

            // A tree crosses as the request holds it (`p::RequestTree`):
            // active-path nodes refer to `messages`, parents to earlier
            // nodes, so no message crosses twice. A shared message is
            // copied into the record unless nothing else holds it; one read
            // from the record is the request's own.
            fn tree_to_wit(tree: p::RequestTree) -> w::MessageTree {
                let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
                let nodes = tree
                    .nodes
                    .into_iter()
                    .map(|node| w::TreeNode {
                        message: match node.message {
                            p::NodeMessage::Active(i) => w::TreeMessage::Active(index(i)),
                            p::NodeMessage::Other(m) => w::TreeMessage::Other(m.into()),
                        },
                        parent: match node.parent {
                            p::NodeParent::Root => w::TreeParent::Root,
                            p::NodeParent::Node(j) => w::TreeParent::Node(index(j)),
                            p::NodeParent::Id(id) => w::TreeParent::Id(id),
                        },
                    })
                    .collect();
                w::MessageTree { nodes, head_id: tree.head_id }
            }
            fn tree_from_wit(tree: w::MessageTree, path_len: usize) -> R<p::RequestTree> {
                use $crate::wit::bad_tree_index;
                let mut nodes = Vec::with_capacity(tree.nodes.len());
                for (k, node) in tree.nodes.into_iter().enumerate() {
                    let message = match node.message {
                        w::TreeMessage::Active(i) if (i as usize) < path_len => p::NodeMessage::Active(i as usize),
                        w::TreeMessage::Active(i) => return Err(bad_tree_index(k, "message", "message", i)),
                        w::TreeMessage::Other(m) => p::NodeMessage::Other(p::SharedMessage::from(
                            p::Message::from_wit(m).map_err(|e| e.in_field("message").in_index(k).in_field("nodes"))?,
                        )),
                    };
                    let parent = match node.parent {
                        w::TreeParent::Root => p::NodeParent::Root,
                        w::TreeParent::Id(id) => p::NodeParent::Id(id),
                        w::TreeParent::Node(j) if (j as usize) < k => p::NodeParent::Node(j as usize),
                        w::TreeParent::Node(j) => return Err(bad_tree_index(k, "parent", "an earlier node", j)),
                    };
                    nodes.push(p::RequestNode { message, parent });
                }
                Ok(p::RequestTree { nodes, head_id: tree.head_id })
            }

            // ---- agent config ------------------------------------------

            record!(p::RetryPolicy => w::RetryPolicy { timeout_secs, max_retries, backoff_base_secs, backoff_max_secs });
            record!(ref p::AgentTool => w::AgentTool {
                name,
                description,
                input: schema,
                output: schema,
                handler: opt,
            });
            record!(ref p::SubAgent => w::SubAgent { id, description });
            record!(ref p::McpServerUse => w::McpServerUse { server, tools });
            record!(ref p::AgentConfig => w::AgentConfig {
                model,
                system,
                stream,
                handler: opt,
                format: opt,
                retry: opt,
                tools: opt_list,
                sub_agents: opt_list,
                mcp: opt_list,
            });

            // ---- LLM -------------------------------------------------------

            record!(p::LlmTool => w::LlmTool { name, description, input: schema, output: schema });
            record!(p::ReasoningConfig => w::ReasoningConfig { effort: opt, max_tokens, exclude, enabled });
            record!(p::LlmRequest => w::LlmRequest {
                model,
                messages: drafts,
                tools: opt_list,
                temperature,
                max_completion_tokens,
                reasoning: opt,
            });
            record!(p::LlmResponse => w::LlmResponse {
                model,
                content,
                tool_calls: opt_list,
                finish_reason,
                usage: opt_json,
                cost,
                images: opt_list,
            });
            record!(p::ToolCallDelta => w::ToolCallDelta { id, name, arguments });
            record!(p::StreamDelta => w::StreamDelta { text, reasoning, tool_calls: opt_list, finish_reason });

            /// An `llm.execute` request: typed when it is a standard
            /// request the typed form holds exactly.
            fn request_to_wit(request: serde_json::Value, format: Option<p::LlmFormat>) -> w::LlmRequestBody {
                if format.is_none() {
                    if let Some(typed) = exact_typed::<p::LlmRequest>(&request) {
                        return w::LlmRequestBody::Standard(typed.into());
                    }
                }
                w::LlmRequestBody::Native(json_text(&request))
            }
            fn request_from_wit(body: w::LlmRequestBody) -> R<serde_json::Value> {
                match body {
                    w::LlmRequestBody::Standard(r) => Ok(p::to_value(&p::LlmRequest::from_wit(r)?)),
                    w::LlmRequestBody::Native(text) => json(&text, ""),
                }
            }
            fn response_to_wit(response: serde_json::Value) -> w::LlmResponseBody {
                match exact_typed::<p::LlmResponse>(&response) {
                    Some(typed) => w::LlmResponseBody::Standard(typed.into()),
                    None => w::LlmResponseBody::Native(json_text(&response)),
                }
            }
            fn response_from_wit(body: w::LlmResponseBody) -> R<serde_json::Value> {
                match body {
                    w::LlmResponseBody::Standard(r) => Ok(p::to_value(&p::LlmResponse::from_wit(r)?)),
                    w::LlmResponseBody::Native(text) => json(&text, ""),
                }
            }

            // ---- triggers ----------------------------------------------

            impl From<p::ToolInput> for w::ToolInput {
                fn from(v: p::ToolInput) -> Self {
                    match v {
                        p::ToolInput::Valid { value } => Self::Valid(json_text(&value)),
                        p::ToolInput::Invalid { value, error } => {
                            Self::Invalid(w::InvalidInput { value: json_text(&value), error })
                        }
                        p::ToolInput::Malformed { error } => Self::Malformed(error),
                    }
                }
            }
            impl FromWit<w::ToolInput> for p::ToolInput {
                fn from_wit(v: w::ToolInput) -> R<Self> {
                    Ok(match v {
                        w::ToolInput::Valid(value) => Self::Valid { value: json(&value, "value")? },
                        w::ToolInput::Invalid(i) => Self::Invalid { value: json(&i.value, "value")?, error: i.error },
                        w::ToolInput::Malformed(error) => Self::Malformed { error },
                    })
                }
            }

            record!(p::ClientContext => w::ClientContext {
                tools: opt_list,
                context: opt_json_list,
                state: opt_json,
                forwarded_props: opt_json,
            });
            record!(p::trigger::ClientMessages => w::ClientMessagesTrigger { messages: drafts, new_from, client: into });
            record!(p::trigger::ClientAction => w::ClientActionTrigger { name, args: opt_json });
            record!(p::trigger::ToolExecute => w::ToolExecute { id, name, arguments, input: into, attempt, deadline });
            record!(p::trigger::ToolFinished => w::ToolFinished { id, ok, name, result, error });
            record!(p::trigger::LlmFinished => w::LlmFinished {
                id,
                ok,
                message: opt,
                truncated,
                usage: opt_json,
                cost,
                error,
                code: opt,
                detail: opt_json,
            });
            record!(p::trigger::SubAgentFinished => w::SubAgentFinished {
                id,
                ok,
                session_id,
                agent_id,
                result,
                error,
            });
            record!(p::trigger::InterruptResumed => w::InterruptResumed { interrupt_id, payload: opt_json });

            // The request's typed form depends on the call's `format`.
            impl From<p::trigger::LlmExecute> for w::LlmExecute {
                fn from(e: p::trigger::LlmExecute) -> Self {
                    Self {
                        id: e.id,
                        request: request_to_wit(e.request, e.format),
                        format: e.format.map(Into::into),
                        stream: e.stream,
                        attempt: e.attempt,
                        deadline: e.deadline,
                    }
                }
            }
            impl FromWit<w::LlmExecute> for p::trigger::LlmExecute {
                fn from_wit(e: w::LlmExecute) -> R<Self> {
                    Ok(Self {
                        id: e.id,
                        request: request_from_wit(e.request).map_err(|e| e.in_field("request"))?,
                        format: opt(e.format, "format")?,
                        stream: e.stream,
                        attempt: e.attempt,
                        deadline: e.deadline,
                    })
                }
            }

            variant!(p::Trigger => w::Trigger {
                SessionStart,
                ClientMessages(m),
                ClientAction(a),
                ToolExecute(e),
                ToolFinished(f),
                LlmExecute(e),
                LlmFinished(f),
                SubAgentFinished(f),
                InterruptResumed(r),
            });

            // ---- actions -----------------------------------------------

            record!(p::action::CallError => w::CallError { id, attempt, error, retryable, code: opt, detail: opt_json });
            record!(p::action::LlmCall => w::LlmCall {
                id,
                model,
                messages: opt_list,
                tools: opt_list,
                temperature,
                max_completion_tokens,
                reasoning: opt,
                stream,
                retry: opt,
                handler: opt,
            });
            record!(p::action::ToolCall => w::ToolCallAction { id, name, arguments: json, handler: opt, retry: opt });
            record!(p::action::ToolResult => w::ToolResult { id, attempt, result: json });
            record!(p::action::SubAgentSpawn => w::SubAgentSpawn { session_id, agent_id, tool_call_id, retry: opt });
            record!(p::action::MessageSend => w::MessageSend { session_id, message: into });
            record!(p::action::Interrupt => w::Interrupt {
                interrupt_id,
                reason,
                payload: opt_json,
                resume_schema: opt_json,
            });
            record!(p::action::Done => w::Done { data: opt_json });

            // The response's typed form holds only what it holds exactly.
            impl From<p::action::LlmResult> for w::LlmResult {
                fn from(r: p::action::LlmResult) -> Self {
                    Self { id: r.id, attempt: r.attempt, response: response_to_wit(r.response) }
                }
            }
            impl FromWit<w::LlmResult> for p::action::LlmResult {
                fn from_wit(r: w::LlmResult) -> R<Self> {
                    Ok(Self {
                        id: r.id,
                        attempt: r.attempt,
                        response: response_from_wit(r.response).map_err(|e| e.in_field("response"))?,
                    })
                }
            }

            variant!(p::Action => w::Action {
                LlmCall(c),
                ToolCall(c),
                ToolResult(r),
                ToolError(e),
                LlmResult(r),
                LlmError(e),
                SubAgentSpawn(s),
                MessageSend(m),
                Interrupt(i),
                Done(d),
            });

            // ---- the decision exchange ---------------------------------

            // Metadata is a map in JSON and a list of pairs in WIT.
            impl From<p::WorkerIdentity> for w::WorkerIdentity {
                fn from(v: p::WorkerIdentity) -> Self {
                    Self { id: v.id, metadata: v.metadata.map(|m| m.into_iter().collect()) }
                }
            }
            impl FromWit<w::WorkerIdentity> for p::WorkerIdentity {
                fn from_wit(v: w::WorkerIdentity) -> R<Self> {
                    Ok(Self { id: v.id, metadata: v.metadata.map(|m| m.into_iter().collect()) })
                }
            }

            record!(p::Call => w::Call {
                id,
                kind: into,
                status: into,
                attempt,
                deadline,
                anchor,
                name,
                arguments,
                handler: opt,
                stream,
                agent_id,
                session_id,
            });
            record!(p::DecisionResponse => w::DecisionResponse {
                messages: opt_list,
                actions: opt_list,
                state: opt_json,
                agent: opt,
            });

            /// A session's agent config as WIT has it. Every decision of a
            /// session hands the same shared config (until a decision sets
            /// another), and converting it writes each tool's schemas out
            /// as JSON text; so the configs converted last on this thread
            /// are kept (a few sessions' worth per running session of a
            /// loaded node), found by the allocation they came from. Each
            /// entry holds that allocation, so its address cannot be
            /// reused by another config while the entry lives; the oldest
            /// entry makes room for a new one. Only a config of at most
            /// `KEPT_BYTES` of text is kept, so what a thread keeps is
            /// bounded whatever configs tenants' agents set.
            fn agent_to_wit(agent: &::std::sync::Arc<p::AgentConfig>) -> w::AgentConfig {
                const KEPT: usize = 128;
                const KEPT_BYTES: usize = 16 << 10;
                ::std::thread_local! {
                    static CONVERTED: ::std::cell::RefCell<$crate::wit::ByAddress<p::AgentConfig, w::AgentConfig>> =
                        const { ::std::cell::RefCell::new($crate::wit::ByAddress::new(KEPT)) };
                }
                CONVERTED.with_borrow_mut(|kept| {
                    if let Some(wit) = kept.get(agent) {
                        return wit.clone();
                    }
                    let wit = w::AgentConfig::from(&**agent);
                    if text_bytes(&wit) <= KEPT_BYTES {
                        kept.insert(agent, wit.clone());
                    }
                    wit
                })
            }

            /// The bytes of text a config holds (names, prompt, schemas).
            fn text_bytes(config: &w::AgentConfig) -> usize {
                let opt = |text: &Option<String>| text.as_ref().map_or(0, String::len);
                let tools = config.tools.iter().flatten();
                let sub_agents = config.sub_agents.iter().flatten();
                let mcp = config.mcp.iter().flatten();
                config.model.len()
                    + opt(&config.system)
                    + tools.map(|t| t.name.len() + opt(&t.description) + opt(&t.input) + opt(&t.output)).sum::<usize>()
                    + sub_agents.map(|a| a.id.len() + opt(&a.description)).sum::<usize>()
                    + mcp.map(|m| m.server.len() + m.tools.iter().flatten().map(String::len).sum::<usize>()).sum::<usize>()
            }

            // The tree refers to the active path by index.
            impl From<p::DecisionRequest> for w::DecisionRequest {
                fn from(v: p::DecisionRequest) -> Self {
                    let (messages, tree) = v.messages.into_parts();
                    $crate::__wit_request!(to w::DecisionRequest, v, v.trigger.into(), {
                        messages: messages.into_iter().map(Into::into).collect(),
                        message_tree: tree_to_wit(tree),
                    })
                }
            }
            impl FromWit<w::DecisionRequest> for p::DecisionRequest {
                fn from_wit(v: w::DecisionRequest) -> R<Self> {
                    let messages: Vec<p::SharedMessage> = list(v.messages, "messages")?;
                    let message_tree =
                        tree_from_wit(v.message_tree, messages.len()).map_err(|e| e.in_field("message_tree"))?;
                    let trigger = field(v.trigger, "trigger")?;
                    Ok($crate::__wit_request!(from v, trigger, { messages: p::Messages::new(messages, message_tree) }))
                }
            }

            $(
                use $b as b;

                impl $crate::wit::BranchRequest for b::DecisionRequest {
                    type Tree = w::MessageTree;

                    fn split(v: p::DecisionRequest) -> (Self, p::Messages) {
                        let messages = v.messages;
                        let trigger = branch_trigger(v.trigger, &messages);
                        ($crate::__wit_request!(to Self, v, trigger, {}), messages)
                    }

                    fn join(self, messages: p::Messages) -> R<p::DecisionRequest> {
                        let v = self;
                        let trigger = branch_trigger_from_wit(v.trigger, &messages).map_err(|e| e.in_field("trigger"))?;
                        Ok($crate::__wit_request!(from v, trigger, { messages }))
                    }

                    fn tree_to_wit(tree: p::RequestTree) -> w::MessageTree {
                        tree_to_wit(tree)
                    }

                    fn tree_from_wit(tree: w::MessageTree, path_len: usize) -> R<p::RequestTree> {
                        tree_from_wit(tree, path_len)
                    }
                }

                /// `0.2.0`'s trigger: a client view's leading messages that
                /// `branch` holds cross as their count.
                fn branch_trigger(trigger: p::Trigger, branch: &p::Messages) -> b::Trigger {
                    if let p::Trigger::ClientMessages(m) = trigger {
                        let (shared, rest) = m.messages.split_for(branch);
                        return b::Trigger::ClientMessages(b::ClientMessagesTrigger {
                            shared: u32::try_from(shared).unwrap_or(u32::MAX),
                            rest: rest.into_iter().map(Into::into).collect(),
                            new_from: m.new_from,
                            client: m.client.into(),
                        });
                    }
                    match w::Trigger::from(trigger) {
                        w::Trigger::ClientMessages(m) => b::Trigger::ClientMessages(b::ClientMessagesTrigger {
                            shared: 0,
                            rest: m.messages,
                            new_from: m.new_from,
                            client: m.client,
                        }),
                        w::Trigger::SessionStart => b::Trigger::SessionStart,
                        w::Trigger::ClientAction(t) => b::Trigger::ClientAction(t),
                        w::Trigger::ToolExecute(t) => b::Trigger::ToolExecute(t),
                        w::Trigger::ToolFinished(t) => b::Trigger::ToolFinished(t),
                        w::Trigger::LlmExecute(t) => b::Trigger::LlmExecute(t),
                        w::Trigger::LlmFinished(t) => b::Trigger::LlmFinished(t),
                        w::Trigger::SubAgentFinished(t) => b::Trigger::SubAgentFinished(t),
                        w::Trigger::InterruptResumed(t) => b::Trigger::InterruptResumed(t),
                    }
                }

                /// `0.2.0`'s trigger read back: a client view begins with
                /// the first `shared` messages of `branch`.
                fn branch_trigger_from_wit(trigger: b::Trigger, branch: &p::Messages) -> R<p::Trigger> {
                    let trigger = match trigger {
                        b::Trigger::ClientMessages(m) => {
                            let rest: Vec<p::DraftMessage> = list(m.rest, "rest")?;
                            let shared = usize::try_from(m.shared).unwrap_or(usize::MAX);
                            return Ok(p::Trigger::ClientMessages(p::trigger::ClientMessages {
                                messages: p::ClientView::sharing(branch.clone(), shared, rest),
                                new_from: m.new_from,
                                client: field(m.client, "client")?,
                            }));
                        }
                        b::Trigger::SessionStart => w::Trigger::SessionStart,
                        b::Trigger::ClientAction(t) => w::Trigger::ClientAction(t),
                        b::Trigger::ToolExecute(t) => w::Trigger::ToolExecute(t),
                        b::Trigger::ToolFinished(t) => w::Trigger::ToolFinished(t),
                        b::Trigger::LlmExecute(t) => w::Trigger::LlmExecute(t),
                        b::Trigger::LlmFinished(t) => w::Trigger::LlmFinished(t),
                        b::Trigger::SubAgentFinished(t) => w::Trigger::SubAgentFinished(t),
                        b::Trigger::InterruptResumed(t) => w::Trigger::InterruptResumed(t),
                    };
                    p::Trigger::from_wit(trigger)
                }
            )?

            // ---- client inputs -----------------------------------------

            record!(p::client::ClientMessage => w::ClientMessageInput { agent_id, turn_id, message: into, stream });
            record!(p::client::ClientMessages => w::ClientMessagesInput {
                agent_id,
                turn_id,
                messages: list,
                stream,
                client: opt,
            });
            record!(p::client::ClientAction => w::ClientActionInput { agent_id, turn_id, name, args: opt_json });
            record!(p::client::InterruptResume => w::InterruptResumeInput { interrupt_id, payload: opt_json });
            record!(p::client::ToolResult => w::ToolResultInput { id, attempt, result: opt_json });
            record!(p::client::ToolError => w::ToolErrorInput { id, error, retryable, attempt });

            variant!(p::ClientInput => w::ClientInput {
                ClientMessage(m),
                ClientMessages(m),
                ClientAction(a),
                InterruptResume(r),
                ToolResult(r),
                ToolError(e),
            });
        };
    };
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn read(text: &str) -> Arc<Value> {
        schema(Some(text.to_owned()), "input").expect("a schema").expect("present").shared().clone()
    }

    #[test]
    fn a_value_is_found_by_its_allocation_and_the_ring_stays_bounded() {
        use std::sync::Arc;
        let mut kept = ByAddress::new(2);
        let (a, b, c) = (Arc::new(1), Arc::new(1), Arc::new(2));
        kept.insert(&a, "a");
        kept.insert(&b, "b");
        // Equal values in two allocations are two entries.
        assert_eq!((kept.get(&a), kept.get(&b)), (Some(&"a"), Some(&"b")));
        kept.insert(&a, "a again");
        assert_eq!((kept.len(), kept.get(&a)), (2, Some(&"a again")));
        kept.insert(&c, "c");
        assert_eq!(kept.len(), 2);
        assert_eq!((kept.get(&a), kept.get(&b), kept.get(&c)), (None, Some(&"b"), Some(&"c")));
        // The entry holds its allocation: `a` is not its only owner.
        assert_eq!(Arc::strong_count(&b), 2);
    }

    #[test]
    fn a_schema_read_again_is_the_one_read_before() {
        let text = r#"{"type":"object","properties":{"a":{"type":"number"}}}"#;
        let first = read(text);
        assert!(Arc::ptr_eq(&first, &read(text)));
        assert_eq!(*first, serde_json::json!({"type": "object", "properties": {"a": {"type": "number"}}}));
        // Another text, even of the same value, is its own.
        let spaced = read(r#"{"type": "object", "properties": {"a": {"type": "number"}}}"#);
        assert!(!Arc::ptr_eq(&first, &spaced));
        assert_eq!(first, spaced);
        assert_eq!(schema(None, "input").unwrap(), None);
    }

    #[test]
    fn what_a_thread_keeps_of_schemas_is_bounded() {
        // A text longer than what is kept parses every time.
        let long = format!(r#"{{"description":"{}"}}"#, "x".repeat(SCHEMAS_KEPT_BYTES));
        assert!(!Arc::ptr_eq(&read(&long), &read(&long)));
        // The first of more texts than are kept has been let go; the
        // newest are still found.
        let text = |n: usize| format!(r#"{{"maxLength":{n}}}"#);
        let first = read(&text(0));
        let kept: Vec<_> = (1..=SCHEMAS_KEPT).map(|n| read(&text(n))).collect();
        assert!(!Arc::ptr_eq(&first, &read(&text(0))));
        assert!(Arc::ptr_eq(kept.last().unwrap(), &read(&text(SCHEMAS_KEPT))));
        // Long texts are let go by their bytes, before their count.
        let long = |n: usize| format!(r#"{{"description":"{n:0>4000}"}}"#);
        let first = read(&long(0));
        let more = 20;
        assert!(more * long(0).len() > SCHEMAS_KEPT_TOTAL && more < SCHEMAS_KEPT);
        let kept: Vec<_> = (1..=more).map(|n| read(&long(n))).collect();
        assert!(!Arc::ptr_eq(&first, &read(&long(0))));
        assert!(Arc::ptr_eq(kept.last().unwrap(), &read(&long(more))));
    }

    #[test]
    fn a_schema_that_is_not_json_names_its_field() {
        let error = schema(Some("{".to_owned()), "output").unwrap_err();
        assert!(error.to_string().contains("output"), "{error}");
        // Not kept: the same text fails again.
        assert!(schema(Some("{".to_owned()), "output").is_err());
    }
}
