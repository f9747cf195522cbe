//! Session events on a terminal: for people (streamed text inline, tool
//! calls as arrows) or for machines (one JSON object per line). `subs run`
//! and `subs sessions tail` print the same way.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::{Value, json};
use subs_protocol::event::{ClientToolCall, InterruptRaised, MessageRecorded, TokenDelta, TurnDone, TurnFailed};
use subs_protocol::{Message, Role, SessionEvent};

/// One event as `--json` prints it: `{"id":…,"event":…,"data":…}`, `id`
/// being the event's sequence number (`null` for live-only token deltas).
pub fn json_line(id: Option<u64>, event: &str, data: &Value) -> String {
    json!({ "id": id, "event": event, "data": data }).to_string()
}

/// What the reader already knows, and so is not printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The person who ran `subs run`: they typed the message and watch one
    /// turn, so user messages and turn boundaries are left out.
    Runner,
    /// Someone watching a session (`subs sessions tail`): everything.
    Watcher,
}

/// Prints events for people.
///
/// Token deltas are printed as they come; when the assistant message they
/// add up to is recorded, only what was not streamed is printed, so no
/// text appears twice. A tool call is printed when the message asking for
/// it is recorded (`→ add {"a":1}`), its result when the tool message is
/// (`← add: {"sum":3}`).
pub struct Human<W: Write> {
    out: W,
    audience: Audience,
    /// Text streamed since the last assistant message was recorded.
    streamed: String,
    /// Whether the cursor is at the start of a line.
    at_line_start: bool,
    /// Tool names by call id, to name the tool a result answers.
    tools: HashMap<String, String>,
}

impl<W: Write> Human<W> {
    /// A printer writing to `out`.
    pub fn new(out: W, audience: Audience) -> Self {
        Self { out, audience, streamed: String::new(), at_line_start: true, tools: HashMap::new() }
    }

    /// Prints one event, given by its name and data.
    pub fn event(&mut self, name: &str, data: &Value) -> io::Result<()> {
        self.parsed(name, data, SessionEvent::from_parts(name, data.clone()).ok().as_ref())
    }

    /// Prints one event: `event` when its name and data read as one, or
    /// else (an event this command does not know, from a newer server)
    /// as they are, for watchers.
    fn parsed(&mut self, name: &str, data: &Value, event: Option<&SessionEvent>) -> io::Result<()> {
        let watcher = self.audience == Audience::Watcher;
        match event {
            Some(SessionEvent::TokenDelta(TokenDelta { delta, .. })) => {
                if let Some(text) = delta.text.as_deref().filter(|t| !t.is_empty()) {
                    self.write(text)?;
                    self.streamed.push_str(text);
                }
            }
            Some(SessionEvent::Message(MessageRecorded { message, .. })) => self.message(message)?,
            Some(SessionEvent::TurnStarted(started)) if watcher => {
                self.line(&format!("── {} ──", started.turn_id))?;
            }
            Some(SessionEvent::TurnDone(TurnDone { turn_id, data })) => {
                if let Some(done) = data.as_ref().filter(|d| !d.is_null()) {
                    self.line(&format!("done: {done}"))?;
                }
                if watcher {
                    self.line(&format!("── {turn_id} done ──"))?;
                }
            }
            Some(SessionEvent::TurnFailed(TurnFailed { turn_id, error, code })) if watcher => {
                self.line(&format!("── {turn_id} failed ({code}): {error} ──"))?;
            }
            // `subs run` reports a failed turn itself, on stderr.
            Some(SessionEvent::TurnFailed(_) | SessionEvent::TurnStarted(_)) => {}
            Some(SessionEvent::ToolCall(ClientToolCall { name, arguments, .. })) => {
                self.line(&format!("→ {name} {arguments} (a client tool: waiting for its result)"))?;
            }
            Some(SessionEvent::Interrupt(InterruptRaised { interrupt_id, reason, .. })) => {
                self.line(&format!("‖ interrupt {interrupt_id}: {reason}"))?;
            }
            Some(SessionEvent::State(state)) if watcher => self.line(&format!("state: {}", state.state))?,
            // The state is the agent's business; `subs run` shows the conversation.
            Some(SessionEvent::State(_)) => {}
            // Events this printer has no words for, from a newer protocol:
            // as they are, for watchers.
            #[allow(unreachable_patterns)]
            Some(_) | None if watcher => self.line(&format!("{name} {data}"))?,
            #[allow(unreachable_patterns)]
            Some(_) | None => {}
        }
        self.out.flush()
    }

    /// Ends the output with a newline if it does not end with one.
    pub fn finish(&mut self) -> io::Result<()> {
        self.end_line()?;
        self.out.flush()
    }

    fn message(&mut self, message: &Message) -> io::Result<()> {
        let text = message.content.as_ref().map(|c| c.text()).unwrap_or_default();
        match message.role {
            Role::Assistant => {
                let streamed = std::mem::take(&mut self.streamed);
                // What the deltas did not show: all of it when nothing was
                // streamed, the rest when some deltas were missed.
                let rest = if streamed.is_empty() {
                    text
                } else if let Some(rest) = text.strip_prefix(streamed.as_str()) {
                    rest.to_owned()
                } else {
                    self.end_line()?;
                    text
                };
                self.write(&rest)?;
                self.end_line()?;
                for call in message.tool_calls.iter().flatten() {
                    let name = &call.function.name;
                    self.tools.insert(call.id.clone(), name.clone());
                    self.line(&format!("→ {name} {}", call.function.arguments))?;
                }
            }
            Role::Tool => {
                let call = message.tool_call_id.as_deref().unwrap_or("");
                let name = self.tools.get(call).cloned().unwrap_or_else(|| call.to_owned());
                self.line(&format!("← {name}: {text}"))?;
            }
            role @ (Role::User | Role::System) if self.audience == Audience::Watcher => {
                self.line(&format!("{}: {text}", role_name(role)))?;
            }
            Role::User | Role::System => {}
        }
        Ok(())
    }

    fn write(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.out.write_all(text.as_bytes())?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    fn end_line(&mut self) -> io::Result<()> {
        if !self.at_line_start {
            self.write("\n")?;
        }
        Ok(())
    }

    fn line(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        self.write(text)?;
        self.write("\n")
    }
}

/// How a turn that a command follows ended, as far as it can follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// `turn.done`.
    Done,
    /// `turn.failed`, with its code and error.
    Failed {
        /// The error code (`provider_error`, `cancelled`, …).
        code: String,
        /// What went wrong.
        error: String,
    },
    /// The turn opened an interrupt: the `interrupt` event's data. The
    /// turn goes on once it is resumed.
    Interrupted(Value),
    /// The turn waits for someone outside (a client tool's result), which
    /// the command cannot give.
    Waiting(&'static str),
}

impl TurnEnd {
    /// The command's result: `Ok` for a done turn.
    pub fn result(self) -> crate::error::CliResult {
        use anyhow::anyhow;
        match self {
            TurnEnd::Done => Ok(()),
            TurnEnd::Failed { code, error } => {
                Err(crate::error::CliError::failed(anyhow!("the turn failed ({code}): {error}")))
            }
            TurnEnd::Interrupted(_) => Err(crate::error::CliError::failed(anyhow!(
                "the turn waits for an interrupt to be resumed, which this command cannot give: answer through the API"
            ))),
            TurnEnd::Waiting(what) => Err(crate::error::CliError::failed(anyhow!(
                "the turn waits for {what}, which this command cannot give: answer through the API"
            ))),
        }
    }
}

/// Prints the events of one turn (`subs run`, `subs sessions send`) as
/// they come, as JSON lines or for the person who sent the message, and
/// says when the turn has ended.
pub struct TurnView {
    json: bool,
    human: Human<io::Stdout>,
    turn_id: Option<String>,
    in_turn: bool,
}

impl TurnView {
    /// A view of the turn `turn_id`; `None` when the stream holds only
    /// that turn's events and the first `turn.started` is its start.
    pub fn new(json: bool, turn_id: Option<String>) -> Self {
        Self { json, human: Human::new(io::stdout(), Audience::Runner), turn_id, in_turn: false }
    }

    /// A view of the turn `turn_id`, already started: the stream holds
    /// what it does after now.
    pub fn continuing(json: bool, turn_id: String) -> Self {
        Self { json, human: Human::new(io::stdout(), Audience::Runner), turn_id: Some(turn_id), in_turn: true }
    }

    /// Shows people an interrupt opened before the view began (as its
    /// `interrupt` event would be); machines read the events only.
    pub fn show_interrupt(&mut self, data: &Value) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        self.human.event("interrupt", data)
    }

    /// Prints an event of the session; returns how the turn ended when it
    /// has, or when it opened an interrupt.
    pub fn event(&mut self, id: Option<u64>, name: &str, data: &Value) -> io::Result<Option<TurnEnd>> {
        let event = SessionEvent::from_parts(name, data.clone()).ok();
        let turn_of_event = event.as_ref().and_then(SessionEvent::turn_id);
        if matches!(event, Some(SessionEvent::TurnStarted(_))) && !self.in_turn {
            match &self.turn_id {
                Some(turn) if turn_of_event != Some(turn.as_str()) => {}
                _ => {
                    self.turn_id = turn_of_event.map(str::to_owned);
                    self.in_turn = true;
                }
            }
        }
        // Events of a turn queued before this one are not this command's.
        if !self.in_turn {
            return Ok(None);
        }
        if self.json {
            let mut out = io::stdout().lock();
            writeln!(out, "{}", json_line(id, name, data))?;
            out.flush()?;
        } else {
            self.human.parsed(name, data, event.as_ref())?;
        }
        let ours = turn_of_event.is_some() && turn_of_event == self.turn_id.as_deref();
        let end = match event {
            Some(SessionEvent::TurnDone(_)) if ours => TurnEnd::Done,
            Some(SessionEvent::TurnFailed(TurnFailed { code, error, .. })) if ours => TurnEnd::Failed { code, error },
            Some(SessionEvent::Interrupt(_)) => TurnEnd::Interrupted(data.clone()),
            Some(SessionEvent::ToolCall(_)) => TurnEnd::Waiting("a client tool's result"),
            _ => return Ok(None),
        };
        self.human.finish()?;
        Ok(Some(end))
    }

    /// Ends the output's last line.
    pub fn finish(&mut self) -> io::Result<()> {
        self.human.finish()
    }
}

/// A role as the wire writes it (`user`).
fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(audience: Audience, events: &[(&str, Value)]) -> String {
        let mut out = Vec::new();
        let mut human = Human::new(&mut out, audience);
        for (name, data) in events {
            human.event(name, data).unwrap();
        }
        human.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    fn tool_turn(streamed: &[&str]) -> Vec<(&'static str, Value)> {
        let mut events = vec![
            ("turn.started", json!({"turn_id": "turn_1"})),
            ("message", json!({"message": {"id": "msg_1", "role": "user", "content": "use tool add"}})),
            (
                "message",
                json!({"message": {"id": "msg_2", "role": "assistant", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}
                ]}}),
            ),
            (
                "message",
                json!({"message": {"id": "msg_3", "role": "tool", "tool_call_id": "call_1", "content": "{\"sum\":3}"}}),
            ),
        ];
        for piece in streamed {
            events.push(("llm.token.delta", json!({"call_id": "llm_2", "text": piece})));
        }
        events.push((
            "message",
            json!({"message": {"id": "msg_4", "role": "assistant", "content": "add returned {\"sum\":3}."}}),
        ));
        events.push(("turn.done", json!({"turn_id": "turn_1", "data": null})));
        events
    }

    #[test]
    fn a_streamed_answer_is_printed_once() {
        let expected = "→ add {\"a\":1,\"b\":2}\n← add: {\"sum\":3}\nadd returned {\"sum\":3}.\n";
        assert_eq!(render(Audience::Runner, &tool_turn(&["add ", "returned ", "{\"sum\":3}."])), expected);
        assert_eq!(render(Audience::Runner, &tool_turn(&[])), expected, "not streamed: printed whole");
        assert_eq!(render(Audience::Runner, &tool_turn(&["add "])), expected, "deltas missed: the rest printed");
    }

    #[test]
    fn watchers_see_users_and_turns() {
        let text = render(Audience::Watcher, &tool_turn(&["add ", "returned ", "{\"sum\":3}."]));
        assert_eq!(
            text,
            "── turn_1 ──\nuser: use tool add\n→ add {\"a\":1,\"b\":2}\n← add: {\"sum\":3}\nadd returned {\"sum\":3}.\n── turn_1 done ──\n"
        );
        let failed = render(
            Audience::Watcher,
            &[("turn.failed", json!({"turn_id": "turn_2", "error": "boom", "code": "decision_failed"}))],
        );
        assert_eq!(failed, "── turn_2 failed (decision_failed): boom ──\n");
    }

    #[test]
    fn json_lines_carry_id_event_and_data() {
        let line = json_line(Some(4), "message", &json!({"a": 1}));
        assert_eq!(line, r#"{"id":4,"event":"message","data":{"a":1}}"#);
        assert_eq!(
            json_line(None, "llm.token.delta", &json!({})),
            r#"{"id":null,"event":"llm.token.delta","data":{}}"#
        );
    }
}
