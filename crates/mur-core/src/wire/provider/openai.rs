//! OpenAI's Chat Completions API, in the two dialects `inference.provider` names: [`OPENAI`], the
//! fields OpenAI's API takes today, and [`COMPATIBLE`], the older ones local servers (llama.cpp,
//! vLLM, Ollama) know.
//!
//! A streamed reply is `data: {"choices":[{"delta":{…},"finish_reason":…}],"usage":…}` chunks,
//! then `data: [DONE]`. `delta.content` is answer text; `delta.tool_calls[]` fragments are joined
//! by `index` (`function.arguments` arrives in pieces); `delta.refusal` is kept for the stop
//! reason; reasoning text some compatible servers add is dropped, as unstreamed.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Dialect, Event, StreamEvents, count, word};
use crate::wire::model::{Msg, Reply, Request, Stop, ToolCall, Usage};
use crate::wire::model_stream::{self as stream, Held};

/// One dialect of Chat Completions: where the two differ, the request's field names.
#[derive(Debug)]
pub struct ChatCompletions {
    /// The key of the output bound.
    bound: &'static str,
    /// The role of the instructions message.
    instructions: &'static str,
    api_name: &'static str,
}

/// `openai`: the output bound as `max_completion_tokens` (`max_tokens` is deprecated there and
/// refused by reasoning models) and the instructions as a `developer` message.
pub static OPENAI: ChatCompletions = ChatCompletions {
    bound: "max_completion_tokens",
    instructions: "developer",
    api_name: "OpenAI's Chat Completions API",
};

/// `openai-compatible`: the older `max_tokens` and `system`.
pub static COMPATIBLE: ChatCompletions = ChatCompletions {
    bound: "max_tokens",
    instructions: "system",
    api_name: "the Chat Completions API",
};

impl Dialect for ChatCompletions {
    fn default_endpoint(&self) -> &'static str {
        "https://api.openai.com"
    }

    fn takes_reasoning_effort(&self) -> bool {
        true
    }

    fn api_name(&self) -> &'static str {
        self.api_name
    }

    /// From `openai` 3.57.0's `ChatModel`, with no shutdown date announced: a reasoning model,
    /// which the request shape suits.
    fn default_model(&self) -> &'static str {
        "gpt-5.5"
    }

    fn key_var(&self) -> &'static str {
        "OPENAI_API_KEY"
    }

    fn path(&self) -> &'static str {
        "chat/completions"
    }

    fn credential(&self, key: &str) -> (&'static str, String) {
        ("authorization", format!("Bearer {key}"))
    }

    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn request_body(&self, req: &Request<'_>, messages: &[Msg]) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert(self.bound.into(), json!(req.max_tokens));
        if req.stream {
            body.insert("stream".into(), json!(true));
            // So that the last event carries the usage.
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if let Some(effort) = req.reasoning_effort {
            body.insert("reasoning_effort".into(), json!(effort));
        }
        let mut out = vec![json!({"role": self.instructions, "content": req.system})];
        for m in messages {
            match m {
                Msg::User(text) => out.push(json!({"role": "user", "content": text})),
                Msg::Assistant(echo) => out.push(echo.clone()),
                // One `tool` message per call; OpenAI has no error flag, the text says it.
                Msg::ToolResults(results) => out.extend(
                    results
                        .iter()
                        .map(|r| json!({"role": "tool", "tool_call_id": r.id, "content": r.text})),
                ),
            }
        }
        body.insert("messages".into(), Value::Array(out));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.schema,
                    }})
                })
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
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or("it has no choices[0]")?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or("choices[0] has no message")?;
    let content = message.get("content").cloned().unwrap_or(Value::Null);
    let text = match &content {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        // Some compatible servers send content parts.
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => return Err("choices[0].message.content is neither text nor null".into()),
    };
    let raw_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls.clone(),
        Some(_) => return Err("choices[0].message.tool_calls is not a list".into()),
    };
    let mut tool_calls = Vec::new();
    for (i, c) in raw_calls.iter().enumerate() {
        let id = c.get("id").and_then(Value::as_str).unwrap_or_default();
        let function = c.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let (Some(name), false) = (name, id.is_empty()) else {
            return Err(format!("choices[0].message.tool_calls[{i}] has no id or function name"));
        };
        let input = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) if s.trim().is_empty() => Ok(json!({})),
            Some(Value::String(s)) => {
                serde_json::from_str::<Value>(s).map_err(|e| format!("its arguments are not JSON ({e})"))
            }
            // Lenient: some compatible servers send the object itself.
            Some(obj @ Value::Object(_)) => Ok(obj.clone()),
            _ => Err("it has no arguments".to_string()),
        };
        tool_calls.push(ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            input,
        });
    }
    // A refusal comes as `refusal` text in place of content. Reasoning text some compatible
    // servers add (`reasoning_content`, `reasoning`) is neither the answer nor sent back.
    let refusal = message.get("refusal").and_then(Value::as_str).filter(|r| !r.is_empty());
    let stop = match (choice.get("finish_reason").and_then(Value::as_str), refusal) {
        (Some("length"), _) => Stop::Truncated,
        (_, Some(r)) if text.is_empty() && raw_calls.is_empty() => Stop::Refused(r.to_string()),
        (Some("content_filter"), _) => Stop::Refused(String::new()),
        _ => Stop::Done,
    };
    // `prompt_tokens` already counts cached tokens and `completion_tokens` reasoning tokens.
    let usage = v.get("usage").map_or(Usage::default(), |u| Usage {
        input_tokens: count(u, "prompt_tokens"),
        output_tokens: count(u, "completion_tokens"),
    });
    let finish_reason = word(choice.get("finish_reason"));
    let mut echo = Map::new();
    echo.insert("role".into(), json!("assistant"));
    echo.insert("content".into(), if content.is_array() { json!(text) } else { content });
    if !raw_calls.is_empty() {
        echo.insert("tool_calls".into(), Value::Array(raw_calls));
    }
    Ok(Reply {
        text,
        tool_calls,
        stop,
        usage,
        finish_reason,
        model: word(v.get("model")),
        echo: Some(Value::Object(echo)),
    })
}

/// A streamed Chat Completions reply so far.
#[derive(Debug, Default)]
struct Events {
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

impl StreamEvents for Events {
    fn event(&mut self, data: &str, held: &mut Held) -> Result<Event, String> {
        if data.trim() == "[DONE]" {
            return Ok(Event::End);
        }
        let v = stream::event_object(data)?;
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            return Err(stream::sent_error(e));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if self.model.is_none()
            && let Some(m) = v.get("model").filter(|m| m.is_string())
        {
            self.model = Some(m.clone());
        }
        let choice = match v.get("choices") {
            None | Some(Value::Null) => return Ok(Event::Skip),
            Some(Value::Array(c)) => match c
                .iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            {
                Some(c) => c,
                // The usage chunk has no choices.
                None => return Ok(Event::Skip),
            },
            Some(_) => return Err("an event's choices is not a list".into()),
        };
        if let Some(r) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(r.clone());
        }
        let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
            return Ok(Event::Skip);
        };
        if let Some(Value::String(r)) = delta.get("refusal") {
            held.hold(r.len())?;
            self.refusal.get_or_insert_with(String::new).push_str(r);
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => self.tool_call_pieces(calls, held)?,
            Some(_) => return Err("an event's delta.tool_calls is not a list".into()),
        }
        match delta.get("content") {
            None | Some(Value::Null) => Ok(Event::Skip),
            Some(Value::String(t)) => {
                held.hold(t.len())?;
                self.content.get_or_insert_with(String::new).push_str(t);
                Ok(Event::Text(t.clone()))
            }
            Some(_) => Err("an event's delta.content is not text".into()),
        }
    }

    fn end_marker(&self) -> &'static str {
        "[DONE]"
    }

    fn finish(&self) -> Result<Reply, String> {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert(
            "content".into(),
            self.content.clone().map_or(Value::Null, Value::String),
        );
        if let Some(r) = &self.refusal {
            message.insert("refusal".into(), json!(r));
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
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
            "finish_reason": self.finish_reason.clone().unwrap_or(Value::Null),
            "message": message,
        }]});
        if let Some(u) = &self.usage {
            reply["usage"] = u.clone();
        }
        if let Some(m) = &self.model {
            reply["model"] = m.clone();
        }
        parse(&reply)
    }
}

impl Events {
    /// Joins one delta's `tool_calls[]` fragments into the calls so far, by `index`.
    fn tool_call_pieces(&mut self, calls: &[Value], held: &mut Held) -> Result<(), String> {
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
            held.hold(id.len() + name.len() + args.len())?;
            let slot = self.tool_calls.entry(index).or_default();
            // The id and name come whole in the first fragment; arguments in pieces.
            if slot.0.is_empty() {
                slot.0.push_str(id);
            }
            if slot.1.is_empty() {
                slot.1.push_str(name);
            }
            slot.2.push_str(args);
        }
        Ok(())
    }
}
