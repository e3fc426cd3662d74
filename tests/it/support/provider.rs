//! A scripted model provider on 127.0.0.1 (docs/reference/capsules.md#model-capsules, Testing): it
//! speaks the OpenAI Chat Completions and Anthropic Messages APIs well enough for the agent loop,
//! answering request *n* with step *n* of its script (a fixed reply, or a function of the request),
//! and records every request so a test can assert what was sent (headers, bodies, tool lists). A
//! reply may be a real streamed body (server-sent events, chunked), written piece by piece with
//! pauses, and held at a [`Gate`] until the test opens it: chunks then arrive over time, and a test
//! can check what a client saw before the stream's end was even sent.
//!
//! Plain `std` threads and sockets, so it serves synchronous integration tests and async unit
//! tests alike; `src/model/tests.rs` includes this very file. One connection per request
//! (`connection: close`). A request after the script's end gets a 500.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request as the provider received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (`null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The text of the last user message that is plain text (both APIs): the task, or a
    /// continuation with member answers.
    pub fn last_user_text(&self) -> Option<String> {
        let v = self.json();
        v["messages"]
            .as_array()?
            .iter()
            .rev()
            .filter(|m| m["role"] == "user")
            .find_map(|m| m["content"].as_str().map(str::to_string))
    }

    /// The names of the tools offered (both APIs), in order.
    pub fn tool_names(&self) -> Vec<String> {
        let v = self.json();
        v["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    /// Held back this long before answering (the connection is watched meanwhile, so a client
    /// that gives up is noticed at once).
    pub delay: Duration,
    /// Extra response headers, e.g. `retry-after`.
    pub headers: Vec<(String, String)>,
    /// A streamed body (`text/event-stream`, chunked) in place of `body`.
    pub stream: Option<Vec<Piece>>,
    /// Resets the connection (RST) instead of answering: not a byte of a reply is sent.
    pub reset: bool,
}

/// A piece of a streamed reply.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Bytes written and flushed as one chunk.
    Bytes(String),
    /// A pause before the next piece.
    Pause(Duration),
    /// Holds the rest until the test opens the gate; cuts the connection if 10 s pass first.
    Wait(Gate),
    /// Cuts the connection here, mid-body: no end chunk.
    Drop,
}

/// A gate a streamed reply waits at until the test opens it.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    pub fn open(&self) {
        *lock(&self.0.0) = true;
        self.0.1.notify_all();
    }

    /// Waits until open; `false` when `limit` passed first.
    pub fn wait(&self, limit: Duration) -> bool {
        let open = lock(&self.0.0);
        let (open, _) = self
            .0
            .1
            .wait_timeout_while(open, limit, |o| !*o)
            .unwrap_or_else(|p| p.into_inner());
        *open
    }
}

impl Reply {
    /// `200` with a JSON body.
    pub fn json(v: Value) -> Reply {
        Reply {
            status: 200,
            body: v.to_string(),
            delay: Duration::ZERO,
            headers: Vec::new(),
            stream: None,
            reset: false,
        }
    }

    /// `200` streamed as server-sent events: each event written on its own, 20 ms apart.
    pub fn sse(events: &[String]) -> Reply {
        let mut pieces = Vec::new();
        for e in events {
            pieces.push(Piece::Bytes(e.clone()));
            pieces.push(Piece::Pause(Duration::from_millis(20)));
        }
        Reply::pieces(pieces)
    }

    /// `200` streamed: these pieces, in order.
    pub fn pieces(pieces: Vec<Piece>) -> Reply {
        Reply {
            status: 200,
            body: String::new(),
            delay: Duration::ZERO,
            headers: Vec::new(),
            stream: Some(pieces),
            reset: false,
        }
    }

    /// Any status with a raw body.
    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.to_string(),
            delay: Duration::ZERO,
            headers: Vec::new(),
            stream: None,
            reset: false,
        }
    }

    /// A connection reset before any reply: the request was read, then the connection is
    /// closed with an RST.
    pub fn reset() -> Reply {
        Reply {
            reset: true,
            ..Reply::status(500, "")
        }
    }

    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// A step of the script.
pub enum Step {
    Fixed(Reply),
    /// Computes the reply from the request (e.g. echo the member answers it was sent).
    Func(Box<dyn Fn(&Request) -> Reply + Send + Sync>),
}

impl From<Reply> for Step {
    fn from(r: Reply) -> Step {
        Step::Fixed(r)
    }
}

impl Step {
    pub fn func(f: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Step {
        Step::Func(Box::new(f))
    }
}

struct State {
    script: Vec<Step>,
    next: AtomicUsize,
    requests: Mutex<Vec<Request>>,
    /// Requests whose client closed the connection before the reply was sent.
    dropped: AtomicUsize,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running scripted provider; stops when dropped.
pub struct Provider {
    url: String,
    addr: std::net::SocketAddr,
    state: Arc<State>,
}

impl Provider {
    /// Serves `script` on a free port of 127.0.0.1.
    pub fn start(script: Vec<Step>) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the scripted provider");
        let addr = listener.local_addr().expect("provider address");
        let state = Arc::new(State {
            script,
            next: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            dropped: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        Provider {
            url: format!("http://127.0.0.1:{}", addr.port()),
            addr,
            state,
        }
    }

    /// `http://127.0.0.1:<port>`: what `inference.endpoint` names.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.state.requests).clone()
    }

    /// How many clients closed their connection while their reply was held back.
    pub fn dropped(&self) -> usize {
        self.state.dropped.load(Ordering::SeqCst)
    }

    /// Waits until `n` requests have arrived or `limit` passes.
    pub fn wait_requests(&self, n: usize, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if lock(&self.state.requests).len() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        lock(&self.state.requests).len() >= n
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn serve(mut conn: TcpStream, state: &State) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Some(req) = read_request(&conn) else { return };
    if state.stop.load(Ordering::SeqCst) {
        return;
    }
    lock(&state.requests).push(req.clone());
    let n = state.next.fetch_add(1, Ordering::SeqCst);
    let reply = match state.script.get(n) {
        Some(Step::Fixed(r)) => r.clone(),
        Some(Step::Func(f)) => f(&req),
        None => Reply::status(500, r#"{"error":"the scripted provider's script is exhausted"}"#),
    };
    if !reply.delay.is_zero() && !hold(&conn, reply.delay, state) {
        state.dropped.fetch_add(1, Ordering::SeqCst);
        return;
    }
    if reply.reset {
        // SO_LINGER 0: the close sends an RST, as a crashed or overloaded server's would.
        let off = nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        let _ = nix::sys::socket::setsockopt(&conn, nix::sys::socket::sockopt::Linger, &off);
        return;
    }
    let extra: String = reply.headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    if let Some(pieces) = &reply.stream {
        stream(&mut conn, reply.status, &extra, pieces);
        return;
    }
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(reply.body.as_bytes());
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Write);
}

/// Writes a streamed reply: chunked, each `Bytes` piece one chunk, flushed at once.
fn stream(conn: &mut TcpStream, status: u16, extra: &str, pieces: &[Piece]) {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
         transfer-encoding: chunked\r\n{extra}connection: close\r\n\r\n",
        reason(status)
    );
    if conn.write_all(head.as_bytes()).and_then(|()| conn.flush()).is_err() {
        return;
    }
    for piece in pieces {
        match piece {
            Piece::Bytes(b) if b.is_empty() => {}
            Piece::Bytes(b) => {
                let chunk = format!("{:x}\r\n{b}\r\n", b.len());
                if conn.write_all(chunk.as_bytes()).and_then(|()| conn.flush()).is_err() {
                    return;
                }
            }
            Piece::Pause(d) => std::thread::sleep(*d),
            // A gate never opened cuts the reply: a test whose client never saw the first pieces
            // fails rather than passing late.
            Piece::Wait(gate) => {
                if !gate.wait(Duration::from_secs(10)) {
                    let _ = conn.shutdown(Shutdown::Both);
                    return;
                }
            }
            Piece::Drop => {
                let _ = conn.shutdown(Shutdown::Both);
                return;
            }
        }
    }
    let _ = conn.write_all(b"0\r\n\r\n");
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Write);
}

/// Waits `delay`; `false` when the client closed the connection first.
fn hold(conn: &TcpStream, delay: Duration, state: &State) -> bool {
    let until = Instant::now() + delay;
    let _ = conn.set_nonblocking(true);
    let mut buf = [0u8; 1];
    while Instant::now() < until && !state.stop.load(Ordering::SeqCst) {
        match conn.peek(&mut buf) {
            Ok(0) => return false,
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => return false,
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let _ = conn.set_nonblocking(false);
    true
}

/// One HTTP/1.1 request read from `conn`: its head, then `content-length` bytes of body.
pub fn read_request(conn: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// `s` cut in two near its middle, at a character boundary.
fn halves(s: &str) -> (&str, &str) {
    let mut m = s.len() / 2;
    while !s.is_char_boundary(m) {
        m -= 1;
    }
    s.split_at(m)
}

/// Reply bodies in the OpenAI Chat Completions shape.
pub mod openai {
    use serde_json::{Value, json};

    /// The server-sent events of a streamed final answer made of `pieces`: a role chunk, a chunk
    /// per piece, the finish chunk, the usage chunk, `[DONE]`.
    pub fn stream_text(pieces: &[&str]) -> Vec<String> {
        let chunk = |delta: Value, finish: Value| {
            let v = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "scripted",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            format!("data: {v}\n\n")
        };
        let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
        out.extend(pieces.iter().map(|p| chunk(json!({"content": p}), Value::Null)));
        out.push(chunk(json!({}), json!("stop")));
        let usage = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "scripted", "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
        out.push(format!("data: {usage}\n\n"));
        out.push("data: [DONE]\n\n".to_string());
        out
    }

    /// A whole reply (as [`text`] or [`tool_calls`] make) as the events that stream it: the
    /// content in two pieces, each tool call's arguments in two fragments after its id and name,
    /// the finish reason, the usage, `[DONE]`.
    pub fn stream_of(reply: &Value) -> Vec<String> {
        let choice = &reply["choices"][0];
        let message = &choice["message"];
        let chunk = |delta: Value, finish: Value| {
            let v = json!({"id": reply["id"], "object": "chat.completion.chunk", "model": reply["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            format!("data: {v}\n\n")
        };
        let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
        if let Some(text) = message["content"].as_str() {
            let (a, b) = super::halves(text);
            out.extend([a, b].iter().map(|p| chunk(json!({"content": p}), Value::Null)));
        }
        for (i, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
            let args = call["function"]["arguments"].as_str().unwrap_or_default();
            let (a, b) = super::halves(args);
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": a}}]}),
                Value::Null,
            ));
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}),
                Value::Null,
            ));
        }
        out.push(chunk(json!({}), choice["finish_reason"].clone()));
        let usage = json!({"id": reply["id"], "object": "chat.completion.chunk", "model": reply["model"],
            "choices": [], "usage": reply["usage"]});
        out.push(format!("data: {usage}\n\n"));
        out.push("data: [DONE]\n\n".to_string());
        out
    }

    /// A final answer: `finish_reason: stop`.
    pub fn text(text: &str) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
    }

    /// Tool calls `(id, name, input)`; `arguments` goes as a JSON string, as OpenAI sends it.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Value {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, input)| {
                json!({"id": id, "type": "function",
                       "function": {"name": name, "arguments": input.to_string()}})
            })
            .collect();
        json!({
            "id": "chatcmpl-2", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
        })
    }
}

/// Reply bodies in the Anthropic Messages shape.
pub mod anthropic {
    use serde_json::{Value, json};

    /// The server-sent events of a streamed final answer made of `pieces`: `message_start`, a
    /// `ping`, one text block with a delta per piece, `message_delta`, `message_stop`.
    pub fn stream_text(pieces: &[&str]) -> Vec<String> {
        let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or_default());
        let mut out = vec![
            ev(
                json!({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant",
                "model": "scripted", "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            ev(json!({"type": "ping"})),
            ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ];
        out.extend(pieces.iter().map(|p| {
            ev(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}))
        }));
        out.push(ev(json!({"type": "content_block_stop", "index": 0})));
        out.push(ev(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 5}}),
        ));
        out.push(ev(json!({"type": "message_stop"})));
        out
    }

    /// A whole reply (as [`text`] or [`tool_use`] make) as the events that stream it: each block
    /// started empty, then its text, thinking and signature, or tool input, in two pieces.
    pub fn stream_of(reply: &Value) -> Vec<String> {
        let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or_default());
        let halves = |s: &str| {
            let (a, b) = super::halves(s);
            [a.to_string(), b.to_string()]
        };
        let mut start = reply.clone();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        let mut out = vec![ev(json!({"type": "message_start", "message": start}))];
        for (i, block) in reply["content"].as_array().into_iter().flatten().enumerate() {
            let mut empty = block.clone();
            let mut deltas = Vec::new();
            match block["type"].as_str() {
                Some("text") => {
                    empty["text"] = json!("");
                    for p in halves(block["text"].as_str().unwrap_or_default()) {
                        deltas.push(json!({"type": "text_delta", "text": p}));
                    }
                }
                Some("thinking") => {
                    empty["thinking"] = json!("");
                    empty["signature"] = json!("");
                    for p in halves(block["thinking"].as_str().unwrap_or_default()) {
                        deltas.push(json!({"type": "thinking_delta", "thinking": p}));
                    }
                    deltas.push(json!({"type": "signature_delta", "signature": block["signature"]}));
                }
                Some("tool_use") => {
                    empty["input"] = json!({});
                    for p in halves(&block["input"].to_string()) {
                        deltas.push(json!({"type": "input_json_delta", "partial_json": p}));
                    }
                }
                _ => {}
            }
            out.push(ev(
                json!({"type": "content_block_start", "index": i, "content_block": empty}),
            ));
            out.extend(
                deltas
                    .into_iter()
                    .map(|d| ev(json!({"type": "content_block_delta", "index": i, "delta": d}))),
            );
            out.push(ev(json!({"type": "content_block_stop", "index": i})));
        }
        out.push(ev(json!({"type": "message_delta",
            "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": null},
            "usage": {"output_tokens": reply["usage"]["output_tokens"]}})));
        out.push(ev(json!({"type": "message_stop"})));
        out
    }

    /// A final answer: `stop_reason: end_turn`.
    pub fn text(text: &str) -> Value {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "scripted",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        })
    }

    /// `tool_use` blocks `(id, name, input)` after a short text.
    pub fn tool_use(calls: &[(&str, &str, Value)]) -> Value {
        let mut content = vec![json!({"type": "text", "text": "Handing out the work."})];
        content.extend(
            calls
                .iter()
                .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})),
        );
        json!({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "scripted",
            "content": content,
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 20, "output_tokens": 7},
        })
    }
}

/// The fenced answers of a continuation message, `(member, output)` of each completed call, in
/// order (docs/reference/capsules.md#calls-between-members): what a scripted planner builds its
/// final answer from.
pub fn fenced_answers(continuation: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = continuation;
    while let Some(i) = rest.find("<untrusted-content source=member:") {
        let after = &rest[i + "<untrusted-content source=member:".len()..];
        let Some(close) = after.find(">\n") else { break };
        let member = after[..close].to_string();
        let body = &after[close + 2..];
        let Some(end) = body.find("\n</untrusted-content>") else {
            break;
        };
        out.push((member, body[..end].to_string()));
        rest = &body[end..];
    }
    out
}
