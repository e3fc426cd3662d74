//! Anthropic's Messages API (`inference.provider: anthropic`).
//!
//! A streamed reply is `message_start`, `content_block_start` / `_delta` / `_stop` per block,
//! `message_delta` (stop reason, output tokens), `message_stop`; `ping` and unknown events are
//! skipped, `error` ends the stream. `text_delta` is answer text; `thinking_delta` and
//! `signature_delta` rebuild thinking blocks (sent back with tool calls, never answer text);
//! `input_json_delta` pieces make a tool call's input.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Dialect, Event, StreamEvents, count, word};
use crate::wire::model::{Msg, Reply, Request, Stop, ToolCall, Usage};
use crate::wire::model_stream::{self as stream, Held};

/// The `anthropic-version` header value: the API version the official `anthropic` SDK sends
/// (2.14.0), whose request and reply shapes the interop test checks our bodies against.
pub const ANTHROPIC_VERSION: &str = "2026-10-21";

/// The Messages API.
#[derive(Debug)]
pub struct Messages;

/// `anthropic`.
pub static ANTHROPIC: Messages = Messages;

impl Dialect for Messages {
    fn default_endpoint(&self) -> &'static str {
        "https://api.anthropic.com"
    }

    fn takes_reasoning_effort(&self) -> bool {
        false
    }

    fn api_name(&self) -> &'static str {
        "the Anthropic Messages API"
    }

    /// From `anthropic` 2.14.0's `ModelParam`.
    fn default_model(&self) -> &'static str {
        "claude-sonnet-5-5"
    }

    fn key_var(&self) -> &'static str {
        "ANTHROPIC_API_KEY"
    }

    fn path(&self) -> &'static str {
        "messages"
    }

    fn credential(&self, key: &str) -> (&'static str, String) {
        ("x-api-key", key.to_string())
    }

    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", ANTHROPIC_VERSION)]
    }

    fn request_body(&self, req: &Request<'_>, messages: &[Msg]) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert("max_tokens".into(), json!(req.max_tokens));
        if req.stream {
            body.insert("stream".into(), json!(true));
        }
        body.insert("system".into(), json!(req.system));
        let out: Vec<Value> = messages
            .iter()
            .map(|m| match m {
                Msg::User(text) => json!({"role": "user", "content": text}),
                Msg::Assistant(echo) => echo.clone(),
                Msg::ToolResults(results) => {
                    let blocks: Vec<Value> = results
                        .iter()
                        .map(|r| {
                            let mut b = json!({"type": "tool_result", "tool_use_id": r.id, "content": r.text});
                            if r.is_error {
                                b["is_error"] = Value::Bool(true);
                            }
                            b
                        })
                        .collect();
                    json!({"role": "user", "content": blocks})
                }
            })
            .collect();
        body.insert("messages".into(), Value::Array(out));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}))
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        body
    }

    fn parse_reply(&self, reply: &Value) -> Result<Reply, String> {
        parse(reply)
    }

    fn stream(&self) -> Box<dyn StreamEvents> {
        Box::<Events>::default()
    }
}

fn parse(v: &Value) -> Result<Reply, String> {
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or("it has no content list")?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("tool_use") => {
                let id = b.get("id").and_then(Value::as_str).unwrap_or_default();
                let name = b.get("name").and_then(Value::as_str);
                let (Some(name), false) = (name, id.is_empty()) else {
                    return Err(format!("content[{i}] is a tool_use without an id or a name"));
                };
                let input = match b.get("input") {
                    Some(obj @ Value::Object(_)) => Ok(obj.clone()),
                    _ => Err("its input is not an object".to_string()),
                };
                tool_calls.push(ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    input,
                });
            }
            // thinking, redacted_thinking, …: never part of the answer, but kept in the echo,
            // unmodified and in place: the API requires an assistant turn's thinking blocks to come
            // back with its tool_use blocks when the tool results are sent.
            _ => {}
        }
    }
    let stop = match v.get("stop_reason").and_then(Value::as_str) {
        Some("max_tokens") => Stop::Truncated,
        Some("model_context_window_exceeded") => Stop::ContextFull,
        Some("refusal") => Stop::Refused(text.clone()),
        _ => Stop::Done,
    };
    // `input_tokens` leaves out what was written to or read from the prompt cache: counted here,
    // so the totals mean the same for both APIs.
    let usage = v.get("usage").map_or(Usage::default(), |u| Usage {
        input_tokens: count(u, "input_tokens").map(|n| {
            n.saturating_add(count(u, "cache_creation_input_tokens").unwrap_or(0))
                .saturating_add(count(u, "cache_read_input_tokens").unwrap_or(0))
        }),
        output_tokens: count(u, "output_tokens"),
    });
    let echo = (!blocks.is_empty()).then(|| json!({"role": "assistant", "content": blocks}));
    Ok(Reply {
        text,
        tool_calls,
        stop,
        usage,
        finish_reason: word(v.get("stop_reason")),
        model: word(v.get("model")),
        echo,
    })
}

/// A streamed Messages reply so far.
#[derive(Debug, Default)]
struct Events {
    started: bool,
    /// Content blocks by `index`, as the unstreamed reply would hold them.
    blocks: BTreeMap<u64, Value>,
    /// `input_json_delta` pieces of tool_use blocks not yet stopped.
    inputs: BTreeMap<u64, String>,
    stop_reason: Option<Value>,
    usage: Map<String, Value>,
    model: Option<Value>,
}

impl StreamEvents for Events {
    fn event(&mut self, data: &str, held: &mut Held) -> Result<Event, String> {
        let v = stream::event_object(data)?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let index = || {
            v.get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("a {kind} event has no index"))
        };
        match kind {
            "message_start" => Ok(self.message_start(&v)),
            "content_block_start" => self.block_start(index()?, &v, held),
            "content_block_delta" => self.block_delta(index()?, &v, held),
            "content_block_stop" => self.block_stop(index()?),
            "message_delta" => Ok(self.message_delta(&v)),
            "message_stop" => self.message_stop(),
            "error" => Err(stream::sent_error(v.get("error").unwrap_or(&Value::Null))),
            // `ping`, and event kinds added later.
            _ => Ok(Event::Skip),
        }
    }

    fn end_marker(&self) -> &'static str {
        "message_stop"
    }

    fn finish(&self) -> Result<Reply, String> {
        let reply = json!({
            "content": self.blocks.values().cloned().collect::<Vec<_>>(),
            "stop_reason": self.stop_reason.clone().unwrap_or(Value::Null),
            "usage": self.usage,
            "model": self.model.clone().unwrap_or(Value::Null),
        });
        parse(&reply)
    }
}

/// What a `content_block_delta` adds to its block.
enum Delta {
    /// Answer text, appended to the block's `text`.
    Text,
    /// Appended to the block's field of this name (`thinking`, `signature`): never answer text.
    Append(&'static str),
    /// A piece of a tool_use block's input, read whole at the block's end.
    InputJson,
    /// A citation, added to the block's `citations`.
    Citation,
}

impl Delta {
    /// The kind of `delta` and the piece it carries; `None` for a kind this runtime does not
    /// know, which changes nothing it reads.
    fn of(delta: &Value) -> Option<(Delta, String)> {
        let s = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        Some(match delta.get("type").and_then(Value::as_str).unwrap_or_default() {
            "text_delta" => (Delta::Text, s("text")),
            "thinking_delta" => (Delta::Append("thinking"), s("thinking")),
            "signature_delta" => (Delta::Append("signature"), s("signature")),
            "input_json_delta" => (Delta::InputJson, s("partial_json")),
            "citations_delta" => (
                Delta::Citation,
                delta.get("citation").map(Value::to_string).unwrap_or_default(),
            ),
            _ => return None,
        })
    }
}

/// Appends `piece` to the text field `key` of `block` (an object).
fn append(block: &mut Value, key: &str, piece: &str) {
    let mut now = block.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    now.push_str(piece);
    block[key] = Value::String(now);
}

impl Events {
    /// `message_start`: the input usage and the answering model.
    fn message_start(&mut self, v: &Value) -> Event {
        self.started = true;
        if let Some(Value::Object(u)) = v.pointer("/message/usage") {
            self.usage = u.clone();
        }
        self.model = v.pointer("/message/model").filter(|m| m.is_string()).cloned();
        Event::Skip
    }

    /// `content_block_start`: block `i` as it begins; a text block's opening text is answer text.
    fn block_start(&mut self, i: u64, v: &Value, held: &mut Held) -> Result<Event, String> {
        let block = v
            .get("content_block")
            .filter(|b| b.is_object())
            .ok_or("a content_block_start event has no content_block")?
            .clone();
        let text = (block.get("type").and_then(Value::as_str) == Some("text")).then(|| {
            block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        });
        held.hold(block.to_string().len())?;
        self.blocks.insert(i, block);
        Ok(text.map_or(Event::Skip, Event::Text))
    }

    /// `content_block_delta`: a piece of block `i`, which must have started.
    fn block_delta(&mut self, i: u64, v: &Value, held: &mut Held) -> Result<Event, String> {
        let delta = v.get("delta").ok_or("a content_block_delta event has no delta")?;
        let Some((kind, piece)) = Delta::of(delta) else {
            return Ok(Event::Skip);
        };
        held.hold(piece.len())?;
        let block = self
            .blocks
            .get_mut(&i)
            .ok_or_else(|| format!("a content_block_delta names block {i}, which was never started"))?;
        match kind {
            Delta::Text => {
                append(block, "text", &piece);
                return Ok(Event::Text(piece));
            }
            Delta::Append(key) => append(block, key, &piece),
            Delta::InputJson => self.inputs.entry(i).or_default().push_str(&piece),
            Delta::Citation => {
                if let Some(c) = delta.get("citation") {
                    match block.get_mut("citations").and_then(Value::as_array_mut) {
                        Some(list) => list.push(c.clone()),
                        None => block["citations"] = json!([c]),
                    }
                }
            }
        }
        Ok(Event::Skip)
    }

    /// `content_block_stop`: a tool_use block's input pieces, joined, become its input.
    fn block_stop(&mut self, i: u64) -> Result<Event, String> {
        if let Some(raw) = self.inputs.remove(&i) {
            let input: Value = if raw.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&raw).map_err(|_| format!("tool-call input of block {i} is not JSON"))?
            };
            if let Some(b) = self.blocks.get_mut(&i) {
                b["input"] = input;
            }
        }
        Ok(Event::Skip)
    }

    /// `message_delta`: the stop reason and the usage so far.
    fn message_delta(&mut self, v: &Value) -> Event {
        if let Some(r) = v.pointer("/delta/stop_reason").filter(|r| !r.is_null()) {
            self.stop_reason = Some(r.clone());
        }
        // Its counts are cumulative: they replace those of message_start.
        if let Some(Value::Object(u)) = v.get("usage") {
            for (k, x) in u {
                if !x.is_null() {
                    self.usage.insert(k.clone(), x.clone());
                }
            }
        }
        Event::Skip
    }

    /// `message_stop`: the end marker, of a message that started.
    fn message_stop(&self) -> Result<Event, String> {
        if !self.started {
            return Err("the stream ended a message it never started".into());
        }
        Ok(Event::End)
    }
}
