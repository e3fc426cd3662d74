//! Reading a streamed provider reply (server-sent events), pure: bytes in, answer-text deltas out
//! as they arrive, and at the end the same [`Reply`] the whole reply would have given. No actix or
//! HTTP code: `mur`'s `model::client` moves the bytes.
//!
//! The events are assembled into the provider's non-streamed reply shape and read by
//! [`wire::parse_openai`] / [`wire::parse_anthropic`], so a streamed turn means exactly what the
//! same turn unstreamed means (tool calls, stop reasons, usage, the echo sent back).
//!
//! - OpenAI Chat Completions: `data: {"choices":[{"delta":{…},"finish_reason":…}],"usage":…}`
//!   chunks, then `data: [DONE]`. `delta.content` is answer text; `delta.tool_calls[]` fragments
//!   are joined by `index` (`function.arguments` arrives in pieces); `delta.refusal` is kept for
//!   the stop reason; reasoning text some compatible servers add is dropped, as unstreamed.
//! - Anthropic Messages: `message_start`, `content_block_start` / `_delta` / `_stop` per block,
//!   `message_delta` (stop reason, output tokens), `message_stop`; `ping` and unknown events are
//!   skipped, `error` ends the stream. `text_delta` is answer text; `thinking_delta` and
//!   `signature_delta` rebuild thinking blocks (sent back with tool calls, never answer text);
//!   `input_json_delta` pieces make a tool call's input.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::model::{self as wire, Reply};
use super::sse::SseReader;
use crate::manifest::Provider;

/// Longest single provider event kept while waiting for its end. A delta is a few tokens; a
/// `message_start` or a last chunk carries usage. Far below this.
pub const MAX_EVENT: usize = 1 << 20;

/// Most bytes one streamed reply may accumulate: answer text, reasoning, tool-call inputs. The
/// same order as the largest unstreamed reply read.
pub const MAX_REPLY: usize = 16 << 20;

/// One streamed reply being read.
#[derive(Debug)]
pub struct StreamReader {
    provider: Provider,
    sse: SseReader,
    /// The end marker (`[DONE]`, `message_stop`) has arrived.
    done: bool,
    /// Bytes accumulated so far, against [`MAX_REPLY`].
    held: usize,
    /// The answer text so far.
    text: String,
    openai: OpenAiAcc,
    anthropic: AnthropicAcc,
}

#[derive(Debug, Default)]
struct OpenAiAcc {
    /// `None` until a content delta arrives: the message's `content` stays `null` then.
    content: Option<String>,
    refusal: Option<String>,
    /// By `index`: id, name, arguments so far.
    tool_calls: BTreeMap<u64, (String, String, String)>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    /// The answering model, from the first chunk that names it.
    model: Option<Value>,
}

#[derive(Debug, Default)]
struct AnthropicAcc {
    started: bool,
    /// Content blocks by `index`, as the unstreamed reply would hold them.
    blocks: BTreeMap<u64, Value>,
    /// `input_json_delta` pieces of tool_use blocks not yet stopped.
    inputs: BTreeMap<u64, String>,
    stop_reason: Option<Value>,
    usage: Map<String, Value>,
    model: Option<Value>,
}

impl StreamReader {
    pub fn new(provider: Provider) -> StreamReader {
        StreamReader {
            provider,
            sse: SseReader::new(MAX_EVENT),
            done: false,
            held: 0,
            text: String::new(),
            openai: OpenAiAcc::default(),
            anthropic: AnthropicAcc::default(),
        }
    }

    /// Adds bytes as they arrive; returns the answer-text deltas they completed, in order, and
    /// `Err` when the stream cannot be read on (malformed event, error event, over a bound): the
    /// deltas before the bad event are still handed out.
    pub fn push(&mut self, bytes: &[u8]) -> (Vec<String>, Result<(), String>) {
        let mut out = Vec::new();
        let Ok(events) = self.sse.push_data(bytes) else {
            return (
                out,
                Err(format!("one event of the stream is longer than {MAX_EVENT} bytes")),
            );
        };
        for data in events {
            if self.done {
                // Nothing belongs after the end marker.
                continue;
            }
            match self.event(&data) {
                Ok(Some(delta)) if !delta.is_empty() => {
                    self.text.push_str(&delta);
                    out.push(delta);
                }
                Ok(_) => {}
                Err(why) => return (out, Err(why)),
            }
        }
        (out, Ok(()))
    }

    /// Whether the stream's end marker has arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The answer text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The whole reply, once the end marker has arrived. `Err` when it has not (the stream
    /// stopped short) or the assembled reply cannot be read.
    pub fn finish(&self) -> Result<Reply, String> {
        if !self.done {
            return Err(match self.provider {
                Provider::Anthropic => "the stream ended before message_stop".into(),
                _ => "the stream ended before [DONE]".into(),
            });
        }
        match self.provider {
            Provider::OpenAi | Provider::OpenAiCompatible => {
                let a = &self.openai;
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                message.insert("content".into(), a.content.clone().map_or(Value::Null, Value::String));
                if let Some(r) = &a.refusal {
                    message.insert("refusal".into(), json!(r));
                }
                if !a.tool_calls.is_empty() {
                    let calls: Vec<Value> = a
                        .tool_calls
                        .values()
                        .map(|(id, name, args)| {
                            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
                        })
                        .collect();
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                let mut reply = json!({"choices": [{
                    "index": 0,
                    "finish_reason": a.finish_reason.clone().unwrap_or(Value::Null),
                    "message": message,
                }]});
                if let Some(u) = &a.usage {
                    reply["usage"] = u.clone();
                }
                if let Some(m) = &a.model {
                    reply["model"] = m.clone();
                }
                wire::parse_openai(&reply)
            }
            Provider::Anthropic => {
                let a = &self.anthropic;
                let reply = json!({
                    "content": a.blocks.values().cloned().collect::<Vec<_>>(),
                    "stop_reason": a.stop_reason.clone().unwrap_or(Value::Null),
                    "usage": a.usage,
                    "model": a.model.clone().unwrap_or(Value::Null),
                });
                wire::parse_anthropic(&reply)
            }
        }
    }

    /// Counts `n` more accumulated bytes against the bound.
    fn hold(&mut self, n: usize) -> Result<(), String> {
        self.held = self.held.saturating_add(n);
        if self.held > MAX_REPLY {
            return Err(format!("the streamed reply grew past {MAX_REPLY} bytes"));
        }
        Ok(())
    }

    /// One event's data; returns its answer text, if any.
    fn event(&mut self, data: &str) -> Result<Option<String>, String> {
        if self.provider != Provider::Anthropic && data.trim() == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let v: Value = serde_json::from_str(data).map_err(|_| format!("an event is not JSON: {}", quote(data)))?;
        if !v.is_object() {
            return Err(format!("an event is not a JSON object: {}", quote(data)));
        }
        match self.provider {
            Provider::OpenAi | Provider::OpenAiCompatible => self.openai_event(&v),
            Provider::Anthropic => self.anthropic_event(&v),
        }
    }

    fn openai_event(&mut self, v: &Value) -> Result<Option<String>, String> {
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            return Err(format!("the provider sent an error: {}", error_text(e)));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.openai.usage = Some(u.clone());
        }
        if self.openai.model.is_none()
            && let Some(m) = v.get("model").filter(|m| m.is_string())
        {
            self.openai.model = Some(m.clone());
        }
        let choice = match v.get("choices") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(c)) => match c
                .iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            {
                Some(c) => c,
                // The usage chunk has no choices.
                None => return Ok(None),
            },
            Some(_) => return Err("an event's choices is not a list".into()),
        };
        if let Some(r) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.openai.finish_reason = Some(r.clone());
        }
        let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
            return Ok(None);
        };
        if let Some(Value::String(r)) = delta.get("refusal") {
            self.hold(r.len())?;
            self.openai.refusal.get_or_insert_with(String::new).push_str(r);
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for (pos, c) in calls.iter().enumerate() {
                    let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                    let piece = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
                    let function = c.get("function");
                    let fpiece = |k: &str| {
                        function
                            .and_then(|f| f.get(k))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    };
                    let (id, name, args) = (piece("id"), fpiece("name"), fpiece("arguments"));
                    self.hold(id.len() + name.len() + args.len())?;
                    let slot = self.openai.tool_calls.entry(index).or_default();
                    // The id and name come whole in the first fragment; arguments in pieces.
                    if slot.0.is_empty() {
                        slot.0.push_str(id);
                    }
                    if slot.1.is_empty() {
                        slot.1.push_str(name);
                    }
                    slot.2.push_str(args);
                }
            }
            Some(_) => return Err("an event's delta.tool_calls is not a list".into()),
        }
        match delta.get("content") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(t)) => {
                self.hold(t.len())?;
                self.openai.content.get_or_insert_with(String::new).push_str(t);
                Ok(Some(t.clone()))
            }
            Some(_) => Err("an event's delta.content is not text".into()),
        }
    }

    fn anthropic_event(&mut self, v: &Value) -> Result<Option<String>, String> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let index = || {
            v.get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("a {kind} event has no index"))
        };
        let a = &mut self.anthropic;
        match kind {
            "message_start" => {
                a.started = true;
                if let Some(Value::Object(u)) = v.pointer("/message/usage") {
                    a.usage = u.clone();
                }
                a.model = v.pointer("/message/model").filter(|m| m.is_string()).cloned();
                Ok(None)
            }
            "content_block_start" => {
                let i = index()?;
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
                self.hold(block.to_string().len())?;
                self.anthropic.blocks.insert(i, block);
                Ok(text)
            }
            "content_block_delta" => {
                let i = index()?;
                let delta = v.get("delta").ok_or("a content_block_delta event has no delta")?;
                let s = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let dkind = delta.get("type").and_then(Value::as_str).unwrap_or_default();
                let piece = match dkind {
                    "text_delta" => s("text"),
                    "thinking_delta" => s("thinking"),
                    "signature_delta" => s("signature"),
                    "input_json_delta" => s("partial_json"),
                    "citations_delta" => delta.get("citation").map(Value::to_string).unwrap_or_default(),
                    // A delta kind this runtime does not know changes nothing it reads.
                    _ => return Ok(None),
                };
                self.hold(piece.len())?;
                let a = &mut self.anthropic;
                let block = a
                    .blocks
                    .get_mut(&i)
                    .ok_or_else(|| format!("a content_block_delta names block {i}, which was never started"))?;
                let append = |block: &mut Value, key: &str, piece: &str| {
                    let mut now = block.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
                    now.push_str(piece);
                    block[key] = Value::String(now);
                };
                match dkind {
                    "text_delta" => {
                        append(block, "text", &piece);
                        Ok(Some(piece))
                    }
                    "thinking_delta" => {
                        append(block, "thinking", &piece);
                        Ok(None)
                    }
                    "signature_delta" => {
                        append(block, "signature", &piece);
                        Ok(None)
                    }
                    "input_json_delta" => {
                        a.inputs.entry(i).or_default().push_str(&piece);
                        Ok(None)
                    }
                    _ => {
                        if let Some(c) = delta.get("citation") {
                            match block.get_mut("citations").and_then(Value::as_array_mut) {
                                Some(list) => list.push(c.clone()),
                                None => block["citations"] = json!([c]),
                            }
                        }
                        Ok(None)
                    }
                }
            }
            "content_block_stop" => {
                let i = index()?;
                if let Some(raw) = a.inputs.remove(&i) {
                    let input: Value = if raw.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&raw).map_err(|_| format!("tool-call input of block {i} is not JSON"))?
                    };
                    if let Some(b) = a.blocks.get_mut(&i) {
                        b["input"] = input;
                    }
                }
                Ok(None)
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").filter(|r| !r.is_null()) {
                    a.stop_reason = Some(r.clone());
                }
                // Its counts are cumulative: they replace those of message_start.
                if let Some(Value::Object(u)) = v.get("usage") {
                    for (k, x) in u {
                        if !x.is_null() {
                            a.usage.insert(k.clone(), x.clone());
                        }
                    }
                }
                Ok(None)
            }
            "message_stop" => {
                if !a.started {
                    return Err("the stream ended a message it never started".into());
                }
                self.done = true;
                Ok(None)
            }
            "error" => Err(format!(
                "the provider sent an error: {}",
                error_text(v.get("error").unwrap_or(&Value::Null))
            )),
            // `ping`, and event kinds added later.
            _ => Ok(None),
        }
    }
}

/// A provider error object as one short line.
fn error_text(e: &Value) -> String {
    let kind = e.get("type").and_then(Value::as_str);
    let message = e.get("message").and_then(Value::as_str);
    let text = match (kind, message) {
        (Some(k), Some(m)) => format!("{k}: {m}"),
        (None, Some(m)) => m.to_string(),
        _ => e.to_string(),
    };
    quote(&text)
}

/// The first bytes of `s`, cut at a character boundary.
fn quote(s: &str) -> String {
    let shown = crate::text::head(s, wire::FAILURE_BODY_BYTES);
    if shown.len() < s.len() {
        format!("{shown}…")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::model::{Stop, Usage};

    /// The SSE text of events, each `data:` one (Anthropic's `event:` lines added).
    fn sse(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| match e.get("type").and_then(Value::as_str) {
                Some(t) if !t.is_empty() && e.get("choices").is_none() => format!("event: {t}\ndata: {e}\n\n"),
                _ => format!("data: {e}\n\n"),
            })
            .collect()
    }

    /// Feeds `stream` in chunks of `size`: the deltas, then the reply or the first error.
    fn read(provider: Provider, stream: &str, size: usize) -> (Vec<String>, Result<Reply, String>) {
        let mut r = StreamReader::new(provider);
        let mut deltas = Vec::new();
        for chunk in stream.as_bytes().chunks(size.max(1)) {
            let (d, r) = r.push(chunk);
            deltas.extend(d);
            if let Err(e) = r {
                return (deltas, Err(e));
            }
        }
        let reply = r.finish();
        if reply.is_ok() {
            assert_eq!(deltas.concat(), r.text(), "the deltas are the text");
        }
        (deltas, reply)
    }

    fn oa(delta: Value) -> Value {
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    }

    fn oa_finish(reason: &str) -> Value {
        json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    }

    fn oa_usage() -> Value {
        json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    }

    const DONE: &str = "data: [DONE]\n\n";

    fn an_start() -> Value {
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
               "model": "x", "stop_reason": null,
               "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4}}})
    }

    fn an_block(i: u64, block: Value) -> Value {
        json!({"type": "content_block_start", "index": i, "content_block": block})
    }

    fn an_delta(i: u64, delta: Value) -> Value {
        json!({"type": "content_block_delta", "index": i, "delta": delta})
    }

    fn an_text(i: u64, t: &str) -> Value {
        an_delta(i, json!({"type": "text_delta", "text": t}))
    }

    fn an_stop(i: u64) -> Value {
        json!({"type": "content_block_stop", "index": i})
    }

    fn an_end(reason: &str) -> Vec<Value> {
        vec![
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                   "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ]
    }

    /// What a good stream comes to: deltas, text, tool calls `(id, name, input)`, stop, usage.
    struct Want {
        deltas: &'static [&'static str],
        text: &'static str,
        calls: Vec<(&'static str, &'static str, Value)>,
        stop: Stop,
        usage: (u64, u64),
    }

    fn good_streams() -> Vec<(&'static str, Provider, String, Want)> {
        let openai_text = [
            sse(&[
                oa(json!({"role": "assistant", "content": ""})),
                oa(json!({"content": "Hel"})),
                // Reasoning text of a compatible server: never answer text.
                oa(json!({"reasoning_content": "thinking…"})),
                oa(json!({"content": "lo"})),
                oa_finish("stop"),
                oa_usage(),
            ]),
            DONE.into(),
        ]
        .concat();
        let openai_tools = [
            sse(&[
                oa(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"index": 0, "id": "c1", "type": "function", "function": {"name": "call-member", "arguments": ""}}]})),
                oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"member\":\"co"}}]})),
                oa(json!({"tool_calls": [
                    {"index": 1, "id": "c2", "type": "function", "function": {"name": "end-without-answer", "arguments": "{}"}}]})),
                oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": "der\",\"task\":\"t\"}"}}]})),
                oa_finish("tool_calls"),
                oa_usage(),
            ]),
            DONE.into(),
        ]
        .concat();
        let openai_cut = [sse(&[oa(json!({"content": "Par"})), oa_finish("length")]), DONE.into()].concat();
        let openai_refused = [
            sse(&[
                oa(json!({"refusal": "I can"})),
                oa(json!({"refusal": "not."})),
                oa_finish("stop"),
            ]),
            // A comment line, as some servers send for keep-alive.
            ": keep-alive\n\n".into(),
            DONE.into(),
        ]
        .concat();
        let mut anthropic_text = vec![
            an_start(),
            json!({"type": "ping"}),
            an_block(0, json!({"type": "text", "text": ""})),
            an_text(0, "Hel"),
            an_text(0, "lo"),
            an_stop(0),
            // An event kind added later, and a delta kind added later: skipped.
            json!({"type": "future_event", "x": 1}),
        ];
        anthropic_text.extend(an_end("end_turn"));
        let mut anthropic_tools = vec![
            an_start(),
            an_block(0, json!({"type": "thinking", "thinking": ""})),
            an_delta(0, json!({"type": "thinking_delta", "thinking": "Split the "})),
            an_delta(0, json!({"type": "thinking_delta", "thinking": "work."})),
            an_delta(0, json!({"type": "signature_delta", "signature": "c2ln"})),
            an_stop(0),
            an_block(1, json!({"type": "text", "text": ""})),
            an_text(1, "Asking."),
            an_delta(1, json!({"type": "some_new_delta", "x": 1})),
            an_stop(1),
            an_block(
                2,
                json!({"type": "tool_use", "id": "t1", "name": "call-member", "input": {}}),
            ),
            an_delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
            an_delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"member\": \"co"}),
            ),
            an_delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "der\", \"task\": \"t\"}"}),
            ),
            an_stop(2),
            an_block(
                3,
                json!({"type": "tool_use", "id": "t2", "name": "end-without-answer", "input": {}}),
            ),
            an_stop(3),
        ];
        anthropic_tools.extend(an_end("tool_use"));
        let mut anthropic_cut = vec![
            an_start(),
            an_block(0, json!({"type": "text", "text": ""})),
            an_text(0, "Par"),
        ];
        anthropic_cut.extend(an_end("max_tokens"));
        vec![
            (
                "openai text",
                Provider::OpenAi,
                openai_text.clone(),
                Want {
                    deltas: &["Hel", "lo"],
                    text: "Hello",
                    calls: vec![],
                    stop: Stop::Done,
                    usage: (10, 5),
                },
            ),
            (
                "openai-compatible text, CRLF framing",
                Provider::OpenAiCompatible,
                openai_text.replace("\n\n", "\r\n\r\n"),
                Want {
                    deltas: &["Hel", "lo"],
                    text: "Hello",
                    calls: vec![],
                    stop: Stop::Done,
                    usage: (10, 5),
                },
            ),
            (
                "openai tool calls by index",
                Provider::OpenAi,
                openai_tools,
                Want {
                    deltas: &[],
                    text: "",
                    calls: vec![
                        ("c1", "call-member", json!({"member": "coder", "task": "t"})),
                        ("c2", "end-without-answer", json!({})),
                    ],
                    stop: Stop::Done,
                    usage: (10, 5),
                },
            ),
            (
                "openai cut at max tokens",
                Provider::OpenAi,
                openai_cut,
                Want {
                    deltas: &["Par"],
                    text: "Par",
                    calls: vec![],
                    stop: Stop::Truncated,
                    usage: (0, 0),
                },
            ),
            (
                "openai refusal",
                Provider::OpenAi,
                openai_refused,
                Want {
                    deltas: &[],
                    text: "",
                    calls: vec![],
                    stop: Stop::Refused("I cannot.".into()),
                    usage: (0, 0),
                },
            ),
            (
                "anthropic text, ping and unknown events",
                Provider::Anthropic,
                sse(&anthropic_text),
                Want {
                    deltas: &["Hel", "lo"],
                    text: "Hello",
                    calls: vec![],
                    stop: Stop::Done,
                    usage: (14, 7),
                },
            ),
            (
                "anthropic thinking, text and tool calls",
                Provider::Anthropic,
                sse(&anthropic_tools),
                Want {
                    deltas: &["Asking."],
                    text: "Asking.",
                    calls: vec![
                        ("t1", "call-member", json!({"member": "coder", "task": "t"})),
                        ("t2", "end-without-answer", json!({})),
                    ],
                    stop: Stop::Done,
                    usage: (14, 7),
                },
            ),
            (
                "anthropic cut at max tokens",
                Provider::Anthropic,
                sse(&anthropic_cut),
                Want {
                    deltas: &["Par"],
                    text: "Par",
                    calls: vec![],
                    stop: Stop::Truncated,
                    usage: (14, 7),
                },
            ),
        ]
    }

    #[test]
    fn streams_are_read_into_deltas_and_a_reply_however_they_are_chunked() {
        for (name, provider, stream, want) in good_streams() {
            for size in [stream.len(), 1, 2, 3, 7, 64] {
                let (deltas, reply) = read(provider, &stream, size);
                let reply = reply.unwrap_or_else(|e| panic!("{name} in chunks of {size}: {e}"));
                if size == stream.len() {
                    assert_eq!(deltas, want.deltas, "{name}");
                }
                assert_eq!(deltas.concat(), want.deltas.concat(), "{name} in chunks of {size}");
                assert_eq!(reply.text, want.text, "{name}");
                let calls: Vec<(&str, &str, Value)> = reply
                    .tool_calls
                    .iter()
                    .map(|c| (c.id.as_str(), c.name.as_str(), c.input.clone().unwrap_or(Value::Null)))
                    .collect();
                assert_eq!(calls, want.calls, "{name}");
                assert_eq!(reply.stop, want.stop, "{name}");
                // (0, 0): the stream carried no usage, which stays unreported.
                let reported = |n: u64| (n > 0).then_some(n);
                assert_eq!(
                    reply.usage,
                    Usage {
                        input_tokens: reported(want.usage.0),
                        output_tokens: reported(want.usage.1)
                    },
                    "{name}"
                );
            }
        }
    }

    /// The echo sent back is what the unstreamed reply's would be: thinking kept in place with
    /// its signature, tool inputs as objects (Anthropic) or argument strings (OpenAI).
    #[test]
    fn a_streamed_turn_is_echoed_as_the_whole_reply_would_be() {
        let streams = good_streams();
        let echo = |name: &str| {
            let (_, provider, stream, _) = streams.iter().find(|s| s.0 == name).unwrap();
            read(*provider, stream, 5).1.unwrap().echo.unwrap()
        };
        assert_eq!(
            echo("anthropic thinking, text and tool calls"),
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Split the work.", "signature": "c2ln"},
                {"type": "text", "text": "Asking."},
                {"type": "tool_use", "id": "t1", "name": "call-member", "input": {"member": "coder", "task": "t"}},
                {"type": "tool_use", "id": "t2", "name": "end-without-answer", "input": {}},
            ]})
        );
        assert_eq!(
            echo("openai tool calls by index"),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "call-member",
                    "arguments": "{\"member\":\"coder\",\"task\":\"t\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "end-without-answer", "arguments": "{}"}},
            ]})
        );
        assert_eq!(echo("openai text"), json!({"role": "assistant", "content": "Hello"}));
    }

    #[test]
    fn broken_streams_are_refused_with_the_text_so_far() {
        let anthropic_head = sse(&[
            an_start(),
            an_block(0, json!({"type": "text", "text": ""})),
            an_text(0, "Half an"),
        ]);
        let openai_head = sse(&[oa(json!({"content": "Half an"}))]);
        // (name, provider, stream, what the failure says)
        let table: Vec<(&str, Provider, String, &str)> = vec![
            (
                "openai without [DONE]",
                Provider::OpenAi,
                openai_head.clone(),
                "before [DONE]",
            ),
            (
                "openai malformed event",
                Provider::OpenAi,
                format!("{openai_head}data: {{\"choices\": [\n\n"),
                "not JSON",
            ),
            (
                "openai error event",
                Provider::OpenAi,
                format!("{openai_head}data: {{\"error\": {{\"type\": \"server_error\", \"message\": \"boom\"}}}}\n\n"),
                "server_error: boom",
            ),
            (
                "openai content not text",
                Provider::OpenAi,
                format!("{openai_head}{}", sse(&[oa(json!({"content": 5}))])),
                "not text",
            ),
            (
                "openai event not an object",
                Provider::OpenAiCompatible,
                format!("{openai_head}data: [1]\n\n"),
                "not a JSON object",
            ),
            (
                "anthropic without message_stop",
                Provider::Anthropic,
                anthropic_head.clone(),
                "before message_stop",
            ),
            (
                "anthropic error event",
                Provider::Anthropic,
                format!(
                    "{anthropic_head}{}",
                    sse(&[json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})])
                ),
                "overloaded_error: Overloaded",
            ),
            (
                "anthropic delta to a block never started",
                Provider::Anthropic,
                format!("{anthropic_head}{}", sse(&[an_text(4, "x")])),
                "never started",
            ),
            (
                "anthropic tool input not JSON",
                Provider::Anthropic,
                format!(
                    "{anthropic_head}{}",
                    sse(&[
                        an_block(
                            1,
                            json!({"type": "tool_use", "id": "t", "name": "call-member", "input": {}})
                        ),
                        an_delta(1, json!({"type": "input_json_delta", "partial_json": "{\"mem"})),
                        an_stop(1),
                    ])
                ),
                "not JSON",
            ),
            (
                "anthropic malformed event",
                Provider::Anthropic,
                format!("{anthropic_head}event: content_block_delta\ndata: {{\"type\": \"content_block_delta\"\n\n"),
                "not JSON",
            ),
            (
                "anthropic stop without start",
                Provider::Anthropic,
                sse(&[json!({"type": "message_stop"})]),
                "never started",
            ),
        ];
        for (name, provider, stream, says) in table {
            for size in [stream.len(), 3] {
                let (deltas, reply) = read(provider, &stream, size);
                let err = reply.expect_err(name);
                assert!(err.contains(says), "{name}: {err}");
                if name != "anthropic stop without start" {
                    assert_eq!(deltas.concat(), "Half an", "{name}: the text so far was handed out");
                }
            }
        }
    }

    #[test]
    fn an_event_or_a_reply_over_its_bound_is_refused() {
        let mut r = StreamReader::new(Provider::OpenAi);
        let long = format!(
            "data: {{\"choices\": [{{\"delta\": {{\"content\": \"{}\"}}}}]}}",
            "x".repeat(MAX_EVENT)
        );
        assert!(r.push(long.as_bytes()).1.unwrap_err().contains("longer than"));
        // Many events within the event bound, adding up past the reply bound.
        let mut r = StreamReader::new(Provider::OpenAi);
        let piece = sse(&[oa(json!({"content": "y".repeat(MAX_EVENT / 2)}))]);
        let mut refused = None;
        for _ in 0..(MAX_REPLY / (MAX_EVENT / 2) + 2) {
            if let Err(e) = r.push(piece.as_bytes()).1 {
                refused = Some(e);
                break;
            }
        }
        assert!(refused.is_some_and(|e| e.contains("grew past")));
        assert!(r.text().len() <= MAX_REPLY);
    }

    #[test]
    fn nothing_after_the_end_marker_is_read() {
        let stream = [
            sse(&[oa(json!({"content": "A"}))]),
            DONE.into(),
            sse(&[oa(json!({"content": "B"}))]),
        ]
        .concat();
        let (deltas, reply) = read(Provider::OpenAi, &stream, stream.len());
        assert_eq!(deltas, ["A"]);
        assert_eq!(reply.unwrap().text, "A");
    }
}
