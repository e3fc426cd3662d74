//! A model capsule's answer streams to the client as the provider generates it: through a real
//! door, from a scripted provider that streams its reply and holds the last piece back until the
//! test has seen the first ones arrive at the client (a handshake, not timing), with our own SSE
//! client and with the official A2A Python SDK's.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::door::{AUTH, Door, Sse, serve};
use crate::support::provider::{Gate, Piece, Provider, Reply, Step, anthropic, openai};
use crate::support::{Sandbox, repo_root};

const KEY_VAR: &str = "MUR_IT_STREAM_KEY";
const KEY: &str = "sk-it-stream-0123456789";

const PIECES: [&str; 3] = ["Alpha, ", "beta, ", "gamma."];
const ANSWER: &str = "Alpha, beta, gamma.";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    OpenAi,
    Anthropic,
}

impl Api {
    fn word(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    fn events(self, pieces: &[&str]) -> Vec<String> {
        match self {
            Api::OpenAi => openai::stream_text(pieces),
            Api::Anthropic => anthropic::stream_text(pieces),
        }
    }
}

/// The events of `texts` streamed, each its own write; before the event of `texts[k + 1]` the
/// reply waits at `gates[k]`, and right after that of the last text at the gate after it, if
/// there is one. With `cut`, the connection is cut once the last gate opens.
fn gated(api: Api, texts: &[&str], gates: &[Gate], cut: bool) -> Reply {
    let mut pieces = gated_pieces(api, texts, gates);
    // Cut right after the last gate's wait, when the pieces have one.
    let waits = pieces.iter().filter(|p| matches!(p, Piece::Wait(_))).count();
    if cut
        && waits == gates.len()
        && let Some(at) = pieces.iter().rposition(|p| matches!(p, Piece::Wait(_)))
    {
        pieces.truncate(at + 1);
        pieces.push(Piece::Drop);
    }
    Reply::pieces(pieces)
}

/// [`gated`]'s pieces, uncut.
fn gated_pieces(api: Api, texts: &[&str], gates: &[Gate]) -> Vec<Piece> {
    let events = api.events(texts);
    let at = |t: &str| {
        events
            .iter()
            .position(|e| e.contains(&json!(t).to_string()))
            .expect("a piece's event")
    };
    let holds: Vec<usize> = (0..gates.len())
        .map(|k| match texts.get(k + 1) {
            Some(t) => at(t),
            None => at(texts[k]) + 1,
        })
        .collect();
    let mut pieces = Vec::new();
    for (i, e) in events.into_iter().enumerate() {
        if let Some(k) = holds.iter().position(|h| *h == i) {
            pieces.push(Piece::Wait(gates[k].clone()));
        }
        pieces.push(Piece::Bytes(e));
    }
    pieces
}

/// The answer [`PIECES`], held before the second piece until `gates[0]` opens and before the
/// third until `gates[1]` does.
fn gated_answer(api: Api, gates: &[Gate; 2]) -> Reply {
    gated(api, &PIECES, gates, false)
}

/// [`gated_answer`], with nothing sent before `start` opens either: a stream opened first sees
/// the task as created before any of its events.
fn gated_answer_after(api: Api, start: &Gate, gates: &[Gate; 2]) -> Reply {
    let mut pieces = vec![Piece::Wait(start.clone())];
    pieces.extend(gated_pieces(api, &PIECES, gates));
    Reply::pieces(pieces)
}

/// A serving model capsule `local/<name>` (a door with an operator token) pointed at `provider`.
fn start_model(sb: &Sandbox, name: &str, api: Api, provider: &Provider) -> Door {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: {}\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You answer.\n{}{AUTH}",
        api.word(),
        provider.url(),
        serve(2),
    );
    sb.install_manifest(name, &manifest);
    Door::start(sb, name, &[(KEY_VAR, KEY)])
}

fn message(text: &str) -> Value {
    json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}})
}

/// Applies one `artifactUpdate` to the artifact text assembled so far, as a client does.
fn apply(assembled: &mut String, update: &Value) {
    let text = update["artifact"]["parts"][0]["text"].as_str().expect("chunk text");
    if update["append"] != json!(true) {
        assembled.clear();
    }
    assembled.push_str(text);
}

/// Reads events until the chunks assembled make `want`; panics on a terminal status first.
fn read_chunks(sse: &mut Sse, want: &str, assembled: &mut String) -> Vec<Value> {
    let mut chunks = Vec::new();
    while assembled != want {
        let e = sse.next().expect("the stream ended before the chunks came");
        let r = &e["result"];
        if let Some(state) = r["statusUpdate"]["status"]["state"].as_str() {
            assert!(
                matches!(state, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"),
                "the task ended before its answer streamed: {e}"
            );
        }
        if r["artifactUpdate"].is_object() {
            apply(assembled, &r["artifactUpdate"]);
            chunks.push(r["artifactUpdate"].clone());
        }
    }
    chunks
}

fn records_dir(d: &Door) -> PathBuf {
    PathBuf::from(d.ready["records_dir"].as_str().expect("records_dir"))
}

fn trace_text(d: &Door) -> String {
    std::fs::read_to_string(records_dir(d).join("trace.jsonl")).unwrap_or_default()
}

#[test]
fn a_model_answer_reaches_a_streaming_client_chunk_by_chunk_before_the_task_ends() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let sb = Sandbox::new();
        let gates = [Gate::new(), Gate::new()];
        let provider = Provider::start(vec![
            gated_answer(api, &gates).into(),
            Reply::sse(&api.events(&["One ", "more."])).into(),
        ]);
        let d = start_model(&sb, "streamer", api, &provider);
        let op = d.op();

        let mut sse = d.stream(Some(&op), "SendStreamingMessage", message("Name three letters."));
        let opening = sse.next().expect("the task");
        let task = opening["result"]["task"].clone();
        let id = task["id"].as_str().expect("task id").to_string();
        let mut assembled = String::new();
        // Each piece reaches the client before the provider sends the next: two chunks before
        // the answer is even over.
        let mut early = read_chunks(&mut sse, "Alpha, ", &mut assembled);
        gates[0].open();
        early.extend(read_chunks(&mut sse, "Alpha, beta, ", &mut assembled));
        assert_eq!(early.len(), 2, "{api:?}: {early:?}");
        for (i, c) in early.iter().enumerate() {
            assert_eq!(c["append"], json!(i > 0), "{api:?}: {c}");
            assert_eq!(c["lastChunk"], json!(false), "{api:?}: {c}");
            assert_eq!(c["artifact"]["artifactId"], "response", "{api:?}");
            assert_eq!((&c["taskId"], &c["contextId"]), (&task["id"], &task["contextId"]));
        }

        // A subscriber joining now gets the task, then the text so far as one chunk.
        let mut sub = d.stream(Some(&op), "SubscribeToTask", json!({"id": id}));
        assert_eq!(sub.next().expect("the task")["result"]["task"]["id"], json!(id));
        let mut sub_assembled = String::new();
        let joined = read_chunks(&mut sub, "Alpha, beta, ", &mut sub_assembled);
        assert_eq!((joined.len(), &joined[0]["append"]), (1, &json!(false)), "{joined:?}");

        gates[1].open();
        for (stream, text) in [(sse, &mut assembled), (sub, &mut sub_assembled)] {
            let rest = stream.rest();
            let (last, chunks) = rest.split_last().expect("the end");
            let chunks: Vec<&Value> = chunks
                .iter()
                .filter_map(|e| e["result"].get("artifactUpdate"))
                .collect();
            for c in &chunks {
                apply(text, c);
            }
            assert_eq!(
                chunks.last().map(|c| c["lastChunk"].clone()),
                Some(json!(true)),
                "{api:?}: {rest:?}"
            );
            assert_eq!(*text, ANSWER, "{api:?}: the chunks make the whole answer");
            assert_eq!(
                last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{api:?}: {last}"
            );
        }

        // Afterwards the task holds the whole answer, as an unstreamed one would.
        let got = d.task(Some(&op), &id);
        assert_eq!(
            got["artifacts"],
            json!([{"artifactId": "response", "name": "response", "parts": [{"text": ANSWER}]}]),
            "{api:?}"
        );
        let sent = provider.requests()[0].json();
        assert_eq!(sent["stream"], json!(true), "{api:?}");
        // A caller that does not stream (a member's SendMessage) gets the whole answer.
        let whole = d.send(Some(&op), "And one more.", false);
        assert_eq!(whole["status"]["state"], "TASK_STATE_COMPLETED", "{api:?}: {whole}");
        assert_eq!(whole["artifacts"][0]["parts"][0]["text"], "One more.", "{api:?}");
        assert!(!trace_text(&d).contains(KEY), "{api:?}: the key is never traced");
    }
}

#[test]
fn a_stream_that_breaks_mid_answer_fails_the_task_keeps_the_text_and_the_member_serves_on() {
    let api = Api::Anthropic;
    // The cut comes once the client has the first pieces.
    let gates = [Gate::new(), Gate::new()];
    let provider = Provider::start(vec![
        gated(api, &["Half ", "an answer"], &gates, true).into(),
        Step::from(Reply::sse(&api.events(&["Whole ", "again."]))),
    ]);
    let sb = Sandbox::new();
    let d = start_model(&sb, "breaker", api, &provider);
    let op = d.op();

    let mut sse = d.stream(Some(&op), "SendStreamingMessage", message("Start an answer."));
    let opening = sse.next().expect("the task");
    let mut assembled = String::new();
    read_chunks(&mut sse, "Half ", &mut assembled);
    gates[0].open();
    read_chunks(&mut sse, "Half an answer", &mut assembled);
    gates[1].open();
    let events = sse.rest();
    assert!(
        events.iter().all(|e| e["result"].get("artifactUpdate").is_none()),
        "no chunk after the break: {events:?}"
    );
    let end = &events.last().expect("an end")["result"]["statusUpdate"]["status"];
    assert_eq!(end["state"], "TASK_STATE_FAILED", "{events:?}");
    let why = end["message"]["parts"][0]["text"].as_str().expect("failure text");
    assert_eq!(
        why,
        "inference failed: the provider's reply stream broke off (the stream ended before message_stop); \
         the answer so far (14 bytes): Half an answer"
    );
    let id = opening["result"]["task"]["id"].as_str().expect("id").to_string();
    let got = d.task(Some(&op), &id);
    assert_eq!(got["status"]["state"], "TASK_STATE_FAILED");
    assert!(got.get("artifacts").is_none(), "a failed task has no answer: {got}");

    // The record that ends the task keeps the partial answer; never the key, never the prompt.
    let trace = trace_text(&d);
    let ended = trace
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["task_id"] == json!(id) && r["reason"].as_str().is_some_and(|t| t.contains("Half an answer")));
    assert!(
        ended.is_some(),
        "no record ends the task with the partial text:\n{trace}"
    );
    assert!(!trace.contains(KEY));
    assert!(!trace.contains("Start an answer."), "the prompt is not traced");

    // The member is healthy: the next task streams and completes.
    let next = d.stream(Some(&op), "SendStreamingMessage", message("Again.")).rest();
    let end = &next.last().expect("an end")["result"]["statusUpdate"]["status"];
    assert_eq!(end["state"], "TASK_STATE_COMPLETED", "{next:?}");
    let nid = next[0]["result"]["task"]["id"].as_str().expect("id");
    assert_eq!(
        d.task(Some(&op), nid)["artifacts"][0]["parts"][0]["text"],
        "Whole again."
    );
}

use crate::support::pins::A2A_PY as A2A_SDK;

#[test]
fn the_official_a2a_sdk_client_sees_the_answer_stream_before_the_task_ends() {
    let py = crate::support::python::python_with(A2A_SDK, "a2a.client, a2a.types.a2a_pb2, httpx");
    let sb = Sandbox::new();
    let gates = [Gate::new(), Gate::new()];
    let provider = Provider::start(vec![gated_answer(Api::OpenAi, &gates).into()]);
    let d = start_model(&sb, "sdkstream", Api::OpenAi, &provider);
    let token = d.op().trim_start_matches("Bearer ").to_string();
    let mut child = Command::new(&py)
        .arg(repo_root().join("tests/interop/a2a_stream_check.py"))
        .args([format!("http://{}", d.local_url()), token, ANSWER.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the SDK stream check");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = String::new();
    // The handshake: the script says what it has assembled after each chunk, and only then is
    // the next piece of the answer sent.
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
        match line.trim_end() {
            "SEEN 'Alpha, '" => gates[0].open(),
            "SEEN 'Alpha, beta, '" => gates[1].open(),
            _ => {}
        }
    }
    let status = child.wait().expect("wait for the check");
    let err = child
        .stderr
        .take()
        .map(|mut e| {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
            s
        })
        .unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(0),
        "a2a_stream_check.py failed\n--- stdout\n{seen}\n--- stderr\n{err}\n--- door\n{}",
        d.stderr()
    );
    assert!(seen.contains("SEEN 'Alpha, beta, '"), "{seen}");
    assert!(seen.contains("stream checks passed"), "{seen}");
}

#[test]
fn text_of_a_tool_call_turn_is_replaced_by_the_final_answer() {
    let api = Api::Anthropic;
    // A turn with text, then a tool call (to a tool this member does not have: a tool error, and
    // another turn), then the answer.
    let tool_turn = anthropic::tool_use(&[("t1", "call-member", json!({"member": "x", "task": "y"}))]);
    // The answer waits until the client holds the tool turn's text.
    let gate = Gate::new();
    let mut answer = vec![Piece::Wait(gate.clone())];
    answer.extend(api.events(&["The ", "answer."]).into_iter().map(Piece::Bytes));
    let provider = Provider::start(vec![
        Reply::sse(&anthropic::stream_of(&tool_turn)).into(),
        Reply::pieces(answer).into(),
    ]);
    let sb = Sandbox::new();
    let d = start_model(&sb, "toolturn", api, &provider);
    let op = d.op();
    let mut sse = d.stream(Some(&op), "SendStreamingMessage", message("Go."));
    let opening = sse.next().expect("the task");
    let mut assembled = String::new();
    read_chunks(&mut sse, "Handing out the work.", &mut assembled);
    gate.open();
    let events = sse.rest();
    let chunks: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["result"].get("artifactUpdate"))
        .collect();
    for c in &chunks {
        apply(&mut assembled, c);
    }
    assert_eq!(assembled, "The answer.", "{events:?}");
    assert_eq!(
        chunks[0]["append"],
        json!(false),
        "the answer's first chunk replaces: {events:?}"
    );
    assert_eq!(chunks.last().map(|c| &c["lastChunk"]), Some(&json!(true)), "{events:?}");
    let end = &events.last().expect("an end")["result"]["statusUpdate"]["status"]["state"];
    assert_eq!(end, "TASK_STATE_COMPLETED");
    let id = opening["result"]["task"]["id"].as_str().expect("id");
    assert_eq!(d.task(Some(&op), id)["artifacts"][0]["parts"][0]["text"], "The answer.");
    assert_eq!(provider.requests().len(), 2);
}

/// `mur send` in the background, its stdout collected byte by byte (an answer's pieces end in
/// no newline) and its stderr.
struct Sent {
    child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    err: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// Each ends once its pipe is read to its end.
    readers: [std::thread::JoinHandle<()>; 2],
}

impl Sent {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    fn wait(mut self, limit: std::time::Duration) -> (i32, String, String) {
        let until = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                crate::support::wait_until(crate::support::DRAIN, || {
                    self.readers.iter().all(std::thread::JoinHandle::is_finished)
                });
                return (status.code().unwrap_or(-1), self.stdout(), self.stderr());
            }
            assert!(
                std::time::Instant::now() < until,
                "mur send still running: {}",
                self.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn collect(
    mut r: impl std::io::Read + Send + 'static,
) -> (std::sync::Arc<std::sync::Mutex<Vec<u8>>>, std::thread::JoinHandle<()>) {
    let into = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&into);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(&buf[..n]);
        }
    });
    (into, reader)
}

fn send(sb: &Sandbox, d: &Door, text: &str) -> Sent {
    let ses = d.ready["session_id"].as_str().expect("session id");
    let mut cmd = sb.mur(&sb.path("work"));
    cmd.args(["send", ses, text])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn mur send");
    let (out, out_reader) = collect(child.stdout.take().expect("stdout"));
    let (err, err_reader) = collect(child.stderr.take().expect("stderr"));
    Sent {
        child,
        out,
        err,
        readers: [out_reader, err_reader],
    }
}

/// `mur send` prints each piece of a streamed answer before the provider sends the next.
#[test]
fn mur_send_prints_the_answer_as_it_streams() {
    let api = Api::OpenAi;
    let sb = Sandbox::new();
    let gates = [Gate::new(), Gate::new()];
    let provider = Provider::start(vec![gated_answer(api, &gates).into()]);
    let d = start_model(&sb, "sender", api, &provider);
    let sent = send(&sb, &d, "Name three letters.");
    let limit = std::time::Duration::from_secs(30);
    crate::support::wait_until(limit, || sent.stdout().contains("Alpha, "))
        .unwrap_or_else(|| panic!("the first piece was not printed: {}", sent.stderr()));
    assert!(!sent.stdout().contains("beta"), "{}", sent.stdout());
    gates[0].open();
    crate::support::wait_until(limit, || sent.stdout().contains("Alpha, beta, "))
        .unwrap_or_else(|| panic!("the second piece was not printed: {}", sent.stderr()));
    gates[1].open();
    let (code, out, err) = sent.wait(limit);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{ANSWER}\n"));
    let token = d.ready["tokens"]["operator"].as_str().expect("operator token");
    assert!(!out.contains(token) && !err.contains(token), "the token is never shown");
}

/// A turn's text that the next turn replaces stays above; the answer follows on a line of its own.
#[test]
fn mur_send_prints_a_replaced_turn_and_then_the_answer() {
    let api = Api::Anthropic;
    let tool_turn = anthropic::tool_use(&[("t1", "call-member", json!({"member": "x", "task": "y"}))]);
    // The answer waits until `mur send` printed the tool turn's text.
    let gate = Gate::new();
    let mut answer = vec![Piece::Wait(gate.clone())];
    answer.extend(api.events(&["The ", "answer."]).into_iter().map(Piece::Bytes));
    let provider = Provider::start(vec![
        Reply::sse(&anthropic::stream_of(&tool_turn)).into(),
        Reply::pieces(answer).into(),
    ]);
    let sb = Sandbox::new();
    let d = start_model(&sb, "replacer", api, &provider);
    let sent = send(&sb, &d, "Go.");
    let limit = std::time::Duration::from_secs(30);
    crate::support::wait_until(limit, || sent.stdout().contains("Handing out the work."))
        .unwrap_or_else(|| panic!("the turn's text was not printed: {}", sent.stderr()));
    gate.open();
    let (code, out, err) = sent.wait(limit);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "Handing out the work.\nThe answer.\n");
}

/// An event stream read with each event's id (docs/a2a.md, "Resuming a stream").
struct IdSse(Box<dyn BufRead + Send>);

impl IdSse {
    /// `method` as a raw HTTP client, with `Last-Event-ID` when given.
    fn open(d: &Door, op: &str, method: &str, params: Value, last: Option<&str>) -> IdSse {
        let body = json!({"id": "s1", "jsonrpc": "2.0", "method": method, "params": params}).to_string();
        let mut r = ureq::AgentBuilder::new()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .post(&d.url("/"))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0")
            .set("authorization", op);
        if let Some(last) = last {
            r = r.set("Last-Event-ID", last);
        }
        let resp = r.send_string(&body).unwrap_or_else(|e| panic!("{method}: {e}"));
        assert_eq!(resp.header("content-type"), Some("text/event-stream"), "{method}");
        IdSse(Box::new(BufReader::new(resp.into_reader())))
    }

    /// The next event's id and data; `None` at the end of the stream.
    fn next(&mut self) -> Option<(u64, Value)> {
        let (mut id, mut data) = (None, None);
        loop {
            let mut line = String::new();
            if self.0.read_line(&mut line).expect("sse line") == 0 {
                return None;
            }
            let line = line.trim_end_matches('\n');
            if line.is_empty() {
                if let Some(data) = data.take() {
                    return Some((id.expect("every event carries an id"), data));
                }
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().expect("a numeric event id"));
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(v).expect("event json"));
            }
        }
    }

    /// Events until one satisfies `until` (included).
    fn until(&mut self, until: impl Fn(&Value) -> bool) -> Vec<(u64, Value)> {
        let mut out = Vec::new();
        loop {
            let e = self.next().expect("the stream ended early");
            let stop = until(&e.1);
            out.push(e);
            if stop {
                return out;
            }
        }
    }

    fn rest(mut self) -> Vec<(u64, Value)> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

/// docs/a2a.md "Resuming a stream": every event a door streams carries the task's sequence number
/// as its SSE `id`; a SubscribeToTask that reconnects with `Last-Event-ID` gets exactly the events
/// it missed, then the live stream, so a subscriber that drops mid-answer and comes back sees each
/// event of the task once, in order, the same events a client that never dropped saw. Through a
/// raw HTTP client (the A2A SDKs' clients send no `Last-Event-ID`), with the provider holding the
/// answer at gates (a handshake, not timing).
#[test]
fn a_subscriber_that_reconnects_with_last_event_id_sees_every_event_once() {
    let api = Api::OpenAi;
    let sb = Sandbox::new();
    let gates = [Gate::new(), Gate::new()];
    let start = Gate::new();
    let provider = Provider::start(vec![gated_answer_after(api, &start, &gates).into()]);
    let d = start_model(&sb, "resumer", api, &provider);
    let op = d.op();
    let chunk_text = |v: &Value| v["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].clone();
    let is_chunk = |piece: &'static str| move |v: &Value| chunk_text(v) == json!(piece);

    // A client that never drops: the task as created is event 0.
    let mut whole = IdSse::open(&d, &op, "SendStreamingMessage", message("Name three letters."), None);
    let (zero, opening) = whole.next().expect("the task");
    assert_eq!(zero, 0, "{opening}");
    let id = opening["result"]["task"]["id"].as_str().expect("task id").to_string();
    start.open();
    let mut seen_whole = whole.until(is_chunk(PIECES[0]));

    // A subscriber from the start (Last-Event-ID 0: it has seen nothing) reads as far, then drops.
    let mut sub = IdSse::open(&d, &op, "SubscribeToTask", json!({"id": id}), Some("0"));
    let mut seen_sub = sub.until(is_chunk(PIECES[0]));
    drop(sub);
    let dropped_at = seen_sub.last().expect("an event").0;

    // While it is away, the answer goes on.
    gates[0].open();
    seen_whole.extend(whole.until(is_chunk(PIECES[1])));
    let mut back = IdSse::open(
        &d,
        &op,
        "SubscribeToTask",
        json!({"id": id}),
        Some(&dropped_at.to_string()),
    );
    // First what it missed (up to the second piece, sent before it came back) ...
    let missed = back.until(is_chunk(PIECES[1]));
    assert_eq!(missed[0].0, dropped_at + 1, "{missed:?}");
    seen_sub.extend(missed);
    // ... then the live stream, to the end.
    gates[1].open();
    seen_whole.extend(whole.rest());
    seen_sub.extend(back.rest());

    let ids: Vec<u64> = seen_sub.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "each event once, in order"
    );
    assert_eq!(seen_sub, seen_whole, "the same events as the client that never dropped");
    let (last, end) = seen_sub.last().expect("the end");
    assert_eq!(
        end["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{end}"
    );
    let mut assembled = String::new();
    for (_, e) in &seen_sub {
        if e["result"]["artifactUpdate"].is_object() {
            apply(&mut assembled, &e["result"]["artifactUpdate"]);
        }
    }
    assert_eq!(assembled, ANSWER);

    // Once the task is over: a reconnect that missed nothing is refused as for any ended task,
    // one that missed the end gets it, and an id this door did not send is refused, all as
    // plain JSON-RPC errors before any stream.
    let resume = |last: &str| {
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {"id": id}}).to_string();
        d.post(Some(&op), &[("Last-Event-ID", last)], &body)
    };
    let code = |last: &str| {
        let h = resume(last);
        assert_eq!(
            h.content_type.as_deref(),
            Some("application/json"),
            "{last}: {}",
            h.body
        );
        h.json()["error"]["code"].clone()
    };
    assert_eq!(code(&last.to_string()), json!(-32004));
    for bad in [(last + 1).to_string(), "x".into(), "-1".into(), "9".repeat(21)] {
        let h = resume(&bad);
        let v = h.json();
        assert_eq!(v["error"]["code"], json!(-32602), "{bad}: {v}");
        assert_eq!(
            v["error"]["data"][0]["fieldViolations"][0]["field"], "Last-Event-ID",
            "{bad}: {v}"
        );
    }
    let tail = IdSse::open(
        &d,
        &op,
        "SubscribeToTask",
        json!({"id": id}),
        Some(&(last - 1).to_string()),
    )
    .rest();
    assert_eq!(
        tail,
        seen_whole[seen_whole.len() - 1..],
        "the missed end, then the stream closes"
    );
}
