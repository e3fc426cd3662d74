//! Real-socket tests: a real door on 127.0.0.1 (its own thread and actix system) with a small
//! scripted executor, driven over HTTP with `ureq` and, for malformed requests, a raw socket.
//!
//! Executor script, by task text: `fail:<m>` fails with `<m>`; `noanswer:<r>` ends without
//! answer; `hold` waits for a release or its cancellation; `progress` posts a WORKING note, then
//! holds; `ask:<q>` asks `<q>` (as member `coder`, bounded by [`ASK_WAIT`]) and completes with
//! `told: <answer>`, fails E-ASK-001 when the bound passes, and ends canceled when the task does;
//! `ask-briefly:<q>` asks bounded by 50 ms; `ask-when-canceled:<q>` waits for its cancellation,
//! then asks; anything else completes with `echo: <text>`. What each question came to is kept in
//! [`TestDoor::asked`]. The asking cases are in `asking_tests.rs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use super::*;
use crate::tasks::{
    self, Board, BoardEvent, NoAnswerBelow, Origin, REJECT_BUSY, REJECT_CLOSING, TaskOutcome, TaskState, Trust,
};
use crate::token::SigningKey;

const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const OTHER_FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728395";
const SES: &str = "ses_0199c4e2f1b7712a9d3e4f5061728394";
const REALM: &str = "local/coder";

#[path = "asking_tests.rs"]
mod asking;

struct TestDoor {
    url: String,
    operator: Option<String>,
    board: Arc<Board>,
    release: Arc<Notify>,
    events: Arc<Mutex<Vec<BoardEvent>>>,
    /// Each question the executor asked (task id, how it ended), in order.
    asked: Arc<Mutex<Vec<(String, tasks::Asked)>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TestDoor {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config(acceptance: Acceptance, queue_depth: u32, authenticate: bool) -> DoorConfig {
    DoorConfig {
        capsule_name: REALM.into(),
        capsule_version: "1.2.0".into(),
        description: "writes code".into(),
        session_id: SES.into(),
        authenticate,
        peer_tasks_accept: true,
        acceptance,
        queue_depth,
        formation: None,
        network_allow: vec!["localhost".into()],
        tools: vec![],
        skills: vec![],
        input_modes: vec![],
        socket: None,
    }
}

fn member_config(sk: &SigningKey, peer_tasks_accept: bool) -> DoorConfig {
    DoorConfig {
        formation: Some(FormationTrust {
            formation_id: FRM.into(),
            member: "coder".into(),
            verify_key: sk.verify_key(),
            grant_key: None,
        }),
        peer_tasks_accept,
        ..config(Acceptance::Queue, 10, true)
    }
}

/// The bound of an `ask:` question: longer than any test.
const ASK_WAIT: Duration = Duration::from_secs(60);

async fn execute(board: Arc<Board>, release: Arc<Notify>, asked: Arc<Mutex<Vec<(String, tasks::Asked)>>>) {
    while let Some(w) = board.next_work().await {
        let ask = |question: &str, timeout: Duration| {
            let asker = tasks::Asker::new(Arc::clone(&board), &w.task_id, Some("coder".into()), timeout);
            let (question, asked, id) = (question.to_string(), Arc::clone(&asked), w.task_id.clone());
            async move {
                let got = asker.ask(&question, &[]).await;
                crate::sync::lock(&asked).push((id, got.clone()));
                match got {
                    tasks::Asked::Answered { text, .. } => TaskOutcome::Completed(format!("told: {text}")),
                    tasks::Asked::TimedOut => TaskOutcome::Failed(tasks::ask::no_answer_text(timeout)),
                    tasks::Asked::Ended => TaskOutcome::Canceled,
                }
            }
        };
        let outcome = if let Some(q) = w.text.strip_prefix("ask:") {
            ask(q, ASK_WAIT).await
        } else if let Some(q) = w.text.strip_prefix("ask-briefly:") {
            ask(q, Duration::from_millis(50)).await
        } else if let Some(q) = w.text.strip_prefix("ask-when-canceled:") {
            w.cancel.cancelled().await;
            ask(q, ASK_WAIT).await
        } else if let Some(m) = w.text.strip_prefix("fail:") {
            TaskOutcome::Failed(m.into())
        } else if let Some(r) = w.text.strip_prefix("noanswer:") {
            TaskOutcome::NoAnswer {
                reason: r.into(),
                below: vec![NoAnswerBelow {
                    member: "reviewer".into(),
                    status: "failed".into(),
                }],
            }
        } else if w.text == "hold" || w.text == "progress" {
            if w.text == "progress" {
                board.set_working(&w.task_id, Some("continuing with 1 member answer(s)"));
            }
            tokio::select! {
                _ = w.cancel.cancelled() => TaskOutcome::Canceled,
                _ = release.notified() => TaskOutcome::Completed("released".into()),
            }
        } else {
            TaskOutcome::Completed(format!("echo: {}", w.text))
        };
        board.finish(&w.task_id, outcome);
    }
}

fn start(cfg: DoorConfig) -> TestDoor {
    start_keeping(cfg, tasks::Retention::DEFAULT)
}

/// A door whose board keeps its ended tasks within `keep`.
fn start_keeping(cfg: DoorConfig, keep: tasks::Retention) -> TestDoor {
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let release = Arc::new(Notify::new());
    let events = Arc::new(Mutex::new(Vec::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (rel, ev, ask) = (Arc::clone(&release), Arc::clone(&events), Arc::clone(&asked));
    let thread = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let board = Board::with_retention(cfg.acceptance, cfg.queue_depth, Arc::new(chrono::Utc::now), keep);
            let door = match Door::start_with_board(cfg, "127.0.0.1", board) {
                Ok(d) => d,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            door.board()
                .set_observer(move |e| crate::sync::lock(&ev).push(e.clone()));
            let _ = tx.send(Ok((
                door.url().to_string(),
                door.operator_token().map(|t| t.reveal().to_string()),
                Arc::clone(door.board()),
            )));
            actix_rt::spawn(execute(Arc::clone(door.board()), rel, ask));
            let _ = stop_rx.await;
            door.board().close();
            door.stop().await;
        });
    });
    let (url, operator, board) = rx.recv().expect("door thread").expect("door starts");
    TestDoor {
        url,
        operator,
        board,
        release,
        events,
        asked,
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// A status, the headers we look at, and the body.
#[derive(Debug)]
struct Http {
    status: u16,
    content_type: Option<String>,
    content_length: Option<String>,
    www_authenticate: Option<String>,
    body: String,
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build()
}

fn response(r: Result<ureq::Response, ureq::Error>) -> Http {
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport: {e}"),
    };
    let h = |n: &str| resp.header(n).map(str::to_string);
    let (content_type, content_length, www_authenticate) =
        (h("content-type"), h("content-length"), h("www-authenticate"));
    let status = resp.status();
    let body = resp.into_string().expect("body");
    Http {
        status,
        content_type,
        content_length,
        www_authenticate,
        body,
    }
}

impl TestDoor {
    fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.url.replace("localhost", "127.0.0.1"))
    }

    fn op(&self) -> String {
        format!("Bearer {}", self.operator.clone().expect("authenticating door"))
    }

    /// POST / with the A2A headers and optional extra headers.
    fn post(&self, auth: Option<&str>, headers: &[(&str, &str)], body: &str) -> Http {
        let mut r = agent()
            .post(&self.http_url("/"))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0");
        if let Some(a) = auth {
            r = r.set("authorization", a);
        }
        for (k, v) in headers {
            r = r.set(k, v);
        }
        response(r.send_string(body))
    }

    /// A JSON-RPC call; asserts an HTTP 200 JSON reply with content-length and returns it parsed.
    /// A streaming method refused before its stream starts answers the same way (docs/a2a.md,
    /// "Streaming errors"): only a refusal reaches here for those.
    fn rpc(&self, auth: Option<&str>, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let h = self.post(auth, &[], &body);
        assert_eq!(h.status, 200, "{method}: {}", h.body);
        assert!(h.content_length.is_some(), "{method}: no content-length");
        assert_eq!(h.content_type.as_deref(), Some("application/json"));
        serde_json::from_str(&h.body).expect("json reply")
    }

    fn send(&self, auth: Option<&str>, text: &str, immediately: bool) -> Value {
        let params = json!({
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]},
            "configuration": {"returnImmediately": immediately},
        });
        self.rpc(auth, "SendMessage", params)["result"]["task"].clone()
    }

    fn wait_state(&self, task_id: &str, state: TaskState) {
        for _ in 0..400 {
            if self.board.get(task_id).map(|t| t.state) == Some(state) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{task_id} never reached {state:?}");
    }

    fn wait_status_text(&self, task_id: &str) {
        for _ in 0..400 {
            if self.board.get(task_id).is_some_and(|t| t.status_text.is_some()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{task_id} never noted its progress");
    }

    /// Raw bytes over a fresh connection, for requests ureq will not form.
    fn raw(&self, request: &[u8]) -> String {
        let addr = self.url.replace("localhost", "127.0.0.1");
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        // The door may answer (413) and close before it has read everything we send.
        let _ = s.write_all(request);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"].as_i64().unwrap_or(0)
}

/// An SSE response read event by event.
struct Sse(Box<dyn BufRead + Send>);

impl Sse {
    fn new(resp: ureq::Response) -> Sse {
        assert_eq!(resp.header("content-type"), Some("text/event-stream"));
        assert_eq!(resp.header("content-length"), None);
        Sse(Box::new(BufReader::new(resp.into_reader())))
    }

    /// The next `data:` event, `None` at the end of the stream.
    fn next(&mut self) -> Option<Value> {
        loop {
            let mut line = String::new();
            if self.0.read_line(&mut line).expect("sse line") == 0 {
                return None;
            }
            if let Some(data) = line.strip_suffix('\n').and_then(|l| l.strip_prefix("data: ")) {
                return Some(serde_json::from_str(data).expect("event json"));
            }
        }
    }

    fn rest(mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

fn sse_events(resp: ureq::Response) -> Vec<Value> {
    Sse::new(resp).rest()
}

/// A2A v1.0 §8.6.1: the card endpoint SHOULD send `Cache-Control` with `max-age` and an `ETag`,
/// MAY send `Last-Modified`; §8.6.2: clients SHOULD revalidate with conditional requests.
#[test]
fn the_public_card_carries_cache_headers_and_answers_a_conditional_get() {
    let d = start(config(Acceptance::Queue, 2, true));
    let get = |if_none_match: Option<&str>| {
        let mut r = agent().get(&d.http_url("/.well-known/agent-card.json"));
        if let Some(tag) = if_none_match {
            r = r.set("if-none-match", tag);
        }
        match r.call() {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("transport: {e}"),
        }
    };
    let first = get(None);
    assert_eq!(first.status(), 200);
    assert_eq!(
        first.header("cache-control"),
        Some(format!("max-age={}", card::CARD_MAX_AGE_SECS).as_str())
    );
    let etag = first.header("etag").expect("etag").to_string();
    assert!(
        etag.len() == 34 && etag.starts_with('"') && etag.ends_with('"'),
        "{etag}"
    );
    let modified = first.header("last-modified").expect("last-modified").to_string();
    assert!(modified.ends_with(" GMT"), "{modified}");
    let body = first.into_string().expect("body");
    // The same card, the same validators.
    let again = get(None);
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_eq!(again.header("last-modified"), Some(modified.as_str()));
    assert_eq!(again.into_string().expect("body"), body);
    // A client holding it is told so, without the body; a weak or listed tag matches too.
    for tag in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"other\", {etag}"),
        "*".into(),
    ] {
        let cached = get(Some(&tag));
        assert_eq!(cached.status(), 304, "{tag}");
        assert_eq!(cached.header("etag"), Some(etag.as_str()));
        assert_eq!(cached.header("cache-control"), Some("max-age=60"));
        assert_eq!(cached.into_string().expect("body"), "");
    }
    // Another tag gets the card.
    let stale = get(Some("\"other\""));
    assert_eq!(stale.status(), 200);
    assert_eq!(stale.into_string().expect("body"), body);
}

#[test]
fn card_is_public_and_extended_card_needs_a_token() {
    let d = start(config(Acceptance::Queue, 2, true));
    let card = response(agent().get(&d.http_url("/.well-known/agent-card.json")).call());
    assert_eq!(
        (card.status, card.content_type.as_deref()),
        (200, Some("application/json"))
    );
    assert_eq!(
        card.content_length.as_deref(),
        Some(card.body.len().to_string().as_str())
    );
    let port = d.url.trim_start_matches("localhost:");
    let want = format!(
        concat!(
            r#"{{"capabilities":{{"extendedAgentCard":true,"extensions":[{{"params":{{"methods":["SendMessage","SendStreamingMessage","GetTask","ListTasks","CancelTask","SubscribeToTask","GetExtendedAgentCard","CreateTaskPushNotificationConfig","GetTaskPushNotificationConfig","ListTaskPushNotificationConfigs","DeleteTaskPushNotificationConfig"],"peerTasks":true}},"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1"}},{{"description":"a task's deadline (Unix ms) and budget; they only narrow what the formation grants","required":false,"uri":"urn:mur:a2a:limits:v1"}}],"pushNotifications":true,"streaming":true}},"#,
            r#""defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain"],"description":"writes code","name":"local/coder","#,
            r#""securityRequirements":[{{"schemes":{{"bearer":{{"list":[]}}}}}}],"#,
            r#""securitySchemes":{{"bearer":{{"httpAuthSecurityScheme":{{"description":"minted by this door's runtime: for its operator, or for a formation member that may call it","scheme":"Bearer"}}}}}},"#,
            r#""skills":[{{"description":"writes code","id":"coder","name":"local/coder","tags":["coder"]}}],"#,
            r#""supportedInterfaces":[{{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"http://localhost:{}"}}],"version":"1.2.0"}}"#
        ),
        port
    );
    assert_eq!(strip_signatures(&card.body), want);
    let signed: Value = serde_json::from_str(&card.body).expect("card json");
    let key = crate::card_sig::named_key(&signed).expect("the card names its key");
    assert_eq!(crate::card_sig::verify(&signed, &key), Ok(()));
    // A bad token does not matter to the card.
    let card2 = response(
        agent()
            .get(&d.http_url("/.well-known/agent-card.json"))
            .set("authorization", "Bearer nope")
            .call(),
    );
    assert_eq!(card2.body, card.body);

    let ext = d.rpc(Some(&d.op()), "GetExtendedAgentCard", json!({}));
    let exts = &ext["result"]["capabilities"]["extensions"];
    assert_eq!(exts[1]["uri"], card::CAPSULE_EXTENSION);
    assert_eq!(
        exts[1]["params"],
        json!({"network": ["localhost"], "planes": [], "sessionId": SES, "shell": false, "tools": []})
    );
    let h = d.post(
        None,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard","params":{}}"#,
    );
    assert_eq!(h.status, 401);

    // A public door shows the capsule extension on its public card and has no extended card.
    let p = start(config(Acceptance::None, 0, false));
    let c: Value =
        serde_json::from_str(&response(agent().get(&p.http_url("/.well-known/agent-card.json")).call()).body)
            .expect("json");
    assert_eq!(c["capabilities"]["extendedAgentCard"], false);
    assert_eq!(
        c["capabilities"]["extensions"][0]["params"]["methods"],
        json!([
            "GetTask",
            "ListTasks",
            "CancelTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig"
        ])
    );
    assert_eq!(c["capabilities"]["extensions"][1]["params"]["sessionId"], SES);
    let r = p.rpc(None, "GetExtendedAgentCard", json!({}));
    assert_eq!(
        (code(&r), r["error"]["data"][0]["reason"].as_str()),
        (-32004, Some("UNSUPPORTED_OPERATION"))
    );
}

#[test]
fn authentication_cases_over_a_socket() {
    let sk = SigningKey::generate().expect("key");
    let other_key = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, true));
    let other_door = start(member_config(&sk, true));
    let good = sk.mint(FRM, "planner", "coder");
    let mut altered = good.clone();
    altered.pop();
    altered.push(if good.ends_with('A') { 'B' } else { 'A' });
    let get = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;

    let unauth = (
        401,
        r#"Bearer realm="local/coder""#,
        r#"{"error":"unauthenticated","message":"this door takes a token this capsule's runtime minted, as Authorization: Bearer <token>"}"#,
    );
    let invalid = (
        401,
        r#"Bearer realm="local/coder", error="invalid_token""#,
        r#"{"error":"invalid_token","message":"the Authorization header does not present a token this session minted"}"#,
    );
    let not_permitted = (
        403,
        r#"Bearer realm="local/coder", error="insufficient_scope""#,
        r#"{"error":"not_permitted","message":"member 'planner' may not call this capsule"}"#,
    );
    // (case, Authorization, (status, www-authenticate, body))
    type Expect<'a> = (u16, &'a str, &'a str);
    let cases: Vec<(&str, Option<String>, Expect)> = vec![
        ("no header", None, unauth),
        ("malformed", Some(format!("Token {good}")), invalid),
        ("no scheme", Some(good.clone()), invalid),
        (
            "forged",
            Some(format!("Bearer {}", other_key.mint(FRM, "planner", "coder"))),
            invalid,
        ),
        ("altered", Some(format!("Bearer {altered}")), invalid),
        (
            "another formation",
            Some(format!("Bearer {}", sk.mint(OTHER_FRM, "planner", "coder"))),
            invalid,
        ),
        ("garbage mft1", Some("Bearer mft1.x.y".into()), invalid),
        ("another door's operator token", Some(other_door.op()), invalid),
        (
            "for another member's door",
            Some(format!("Bearer {}", sk.mint(FRM, "planner", "reviewer"))),
            not_permitted,
        ),
    ];
    for (name, auth, (status, challenge, body)) in cases {
        let h = d.post(auth.as_deref(), &[], get);
        assert_eq!(h.status, status, "{name}: {}", h.body);
        assert_eq!(h.www_authenticate.as_deref(), Some(challenge), "{name}");
        assert_eq!(h.content_type.as_deref(), Some("application/json"), "{name}");
        assert_eq!(h.content_length, Some(body.len().to_string()), "{name}");
        assert_eq!(h.body, body, "{name}");
    }
    // Two Authorization headers are invalid.
    let two = d.raw(
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nAuthorization: Bearer {good}\r\nAuthorization: Bearer {good}\r\nContent-Length: {}\r\n\r\n{get}",
            get.len()
        )
        .as_bytes(),
    );
    assert!(two.starts_with("HTTP/1.1 401"), "{two}");
    assert!(two.contains("\"error\":\"invalid_token\""), "{two}");
    // A valid member token is served.
    assert_eq!(
        d.rpc(Some(&format!("Bearer {good}")), "ListTasks", json!({}))["result"]["totalSize"],
        0
    );

    // An mft1 at a door in no formation is invalid, even a genuine one.
    let lone = start(config(Acceptance::Queue, 1, true));
    let h = lone.post(Some(&format!("Bearer {good}")), &[], get);
    assert_eq!((h.status, h.body.as_str()), (401, invalid.2));
}

#[test]
fn formation_tokens_reach_only_their_five_scopes() {
    let sk = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, true));
    let member = format!("Bearer {}", sk.mint(FRM, "planner", "coder"));
    for (method, params) in [
        (
            "SendStreamingMessage",
            json!({"message": {"messageId": "m", "parts": [{"text": "x"}]}}),
        ),
        ("murmur.WatchSession", json!({})),
        ("murmur.StopSession", json!({})),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let h = d.post(Some(&member), &[], &body);
        assert_eq!(h.status, 403, "{method}");
        assert_eq!(
            h.www_authenticate.as_deref(),
            Some(format!(r#"Bearer realm="local/coder", error="insufficient_scope", scope="{method}""#).as_str())
        );
        assert_eq!(
            h.body,
            format!(
                r#"{{"error":"insufficient_scope","message":"credential 'member:planner' does not reach {method}"}}"#
            )
        );
    }
    let files = response(
        agent()
            .get(&d.http_url("/resources/files/a.txt"))
            .set("authorization", &member)
            .call(),
    );
    assert_eq!(files.status, 403);
    assert_eq!(
        files.body,
        r#"{"error":"insufficient_scope","message":"credential 'member:planner' does not reach resources/files"}"#
    );
    assert_eq!(
        files.www_authenticate.as_deref(),
        Some(r#"Bearer realm="local/coder", error="insufficient_scope", scope="resources/files""#)
    );
    // The operator reaches them: no resources plane (404), the murmur methods answer -32601.
    let op_files = response(
        agent()
            .get(&d.http_url("/resources/files/a.txt"))
            .set("authorization", &d.op())
            .call(),
    );
    assert_eq!((op_files.status, op_files.body.as_str()), (404, ""));
    assert_eq!(code(&d.rpc(Some(&d.op()), "murmur.WatchSession", json!({}))), -32601);
    // GetExtendedAgentCard needs only a valid token.
    assert!(d.rpc(Some(&member), "GetExtendedAgentCard", json!({}))["result"]["name"].is_string());
    // And the five scopes are served.
    let t = d.send(Some(&member), "hi", false);
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED");
    let id = t["id"].as_str().unwrap_or_default();
    assert_eq!(d.rpc(Some(&member), "GetTask", json!({"id": id}))["result"]["id"], id);
    assert_eq!(d.rpc(Some(&member), "ListTasks", json!({}))["result"]["totalSize"], 1);
    assert_eq!(code(&d.rpc(Some(&member), "CancelTask", json!({"id": id}))), -32002);
    assert_eq!(
        code(&d.rpc(Some(&member), "SubscribeToTask", json!({"id": id}))),
        -32004
    );
}

#[test]
fn peer_consent_comes_after_authentication() {
    let sk = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, false));
    let member = format!("Bearer {}", sk.mint(FRM, "planner", "coder"));
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}"#;
    let peer = [("x-murmur-task-origin", "peer"), ("x-murmur-task-trust", "trusted")];
    let h = d.post(None, &peer, body);
    assert_eq!(h.status, 401);
    let refused = r#"{"error":"peer_not_accepted","message":"this capsule does not accept tasks from peers"}"#;
    for auth in [&member, &d.op()] {
        let h = d.post(Some(auth), &peer, body);
        assert_eq!(
            (h.status, h.body.as_str(), h.www_authenticate.as_deref()),
            (403, refused, None)
        );
    }
    // Every peer request gets identical bytes, whatever it asks.
    let h = d.post(Some(&member), &peer, "not json");
    assert_eq!((h.status, h.body.as_str()), (403, refused));
    // Without the peer origin it is served.
    assert_eq!(
        d.send(Some(&member), "x", false)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[test]
fn json_rpc_errors_and_http_fallbacks() {
    let d = start(config(Acceptance::Queue, 5, false));
    let raw_post = |headers: &str, body: &str| {
        d.raw(
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
    };
    let reply = |h: Http| -> Value {
        assert_eq!(h.status, 200, "{}", h.body);
        serde_json::from_str(&h.body).expect("json")
    };
    let parse = d.post(None, &[], "{nope");
    assert_eq!(
        (parse.status, parse.body.as_str()),
        (
            200,
            r#"{"error":{"code":-32700,"message":"Parse error"},"id":null,"jsonrpc":"2.0"}"#
        )
    );
    assert_eq!(
        d.post(None, &[], r#"{"jsonrpc":"1.0","id":"a","method":"GetTask"}"#)
            .body,
        r#"{"error":{"code":-32600,"message":"Invalid Request"},"id":"a","jsonrpc":"2.0"}"#
    );
    // -32009: missing, wrong, twice.
    let no_version = response(
        agent()
            .post(&d.http_url("/"))
            .set("content-type", "application/json")
            .send_string(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}"#),
    );
    let v: Value = serde_json::from_str(&no_version.body).expect("json");
    assert_eq!(
        (code(&v), v["error"]["data"][0]["reason"].as_str()),
        (-32009, Some("VERSION_NOT_SUPPORTED"))
    );
    let wrong = d.post(
        None,
        &[("A2A-Version", "0.3")],
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}"#,
    );
    assert_eq!(code(&reply(wrong)), -32009);
    let twice = raw_post(
        "Content-Type: application/json\r\nA2A-Version: 1.0\r\nA2A-Version: 1.0\r\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}"#,
    );
    assert!(twice.contains("\"code\":-32009"), "{twice}");
    let patch = d.post(
        None,
        &[("A2A-Version", "1.0.3")],
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"tsk_x"}}"#,
    );
    assert_eq!(code(&reply(patch)), -32001);

    let table: &[(&str, Value, i64, Option<&str>)] = &[
        ("message/send", json!({}), -32601, None),
        ("murmur.StopSession", json!({}), -32601, None),
        ("CreateTaskPushNotificationConfig", json!({}), -32602, None),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "nope", "url": "http://127.0.0.1:9/"}),
            -32001,
            Some("TASK_NOT_FOUND"),
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "nope", "url": "http://169.254.169.254/"}),
            -32602,
            None,
        ),
        (
            "GetTaskPushNotificationConfig",
            json!({"taskId": "nope", "id": "c"}),
            -32001,
            Some("TASK_NOT_FOUND"),
        ),
        ("ListTaskPushNotificationConfigs", json!({}), -32602, None),
        ("GetExtendedAgentCard", json!({}), -32004, Some("UNSUPPORTED_OPERATION")),
        ("GetTask", json!([1]), -32602, None),
        ("GetTask", json!({}), -32602, None),
        (
            "GetTask",
            json!({"id": "tsk_00000000000000000000000000000000"}),
            -32001,
            Some("TASK_NOT_FOUND"),
        ),
        ("CancelTask", json!({"id": "nope"}), -32001, Some("TASK_NOT_FOUND")),
        ("SubscribeToTask", json!({"id": "nope"}), -32001, Some("TASK_NOT_FOUND")),
        ("ListTasks", json!({"pageSize": -3}), -32602, None),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "parts": [{"url": "https://x/y.png", "mediaType": "image/png"}]}}),
            -32005,
            Some("CONTENT_TYPE_NOT_SUPPORTED"),
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "taskId": "tsk_1", "parts": [{"text": "x"}]}}),
            // An unknown task (A2A v1.0 §3.1.2: "does not exist or is not accessible").
            -32001,
            Some("TASK_NOT_FOUND"),
        ),
    ];
    for (method, params, want, reason) in table {
        let r = d.rpc(None, method, params.clone());
        assert_eq!(code(&r), *want, "{method} {params}");
        assert_eq!(r["error"]["data"][0]["reason"].as_str(), *reason, "{method}");
        assert_eq!(r["id"], 1);
    }
    let nf = d.rpc(None, "GetTask", json!({"id": "tsk_x"}));
    assert_eq!(
        nf["error"],
        json!({"code": -32001, "message": "Task not found", "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "domain": "a2a-protocol.org", "metadata": {"taskId": "tsk_x"}, "reason": "TASK_NOT_FOUND"}]})
    );
    // Absent params read as {}.
    let r = d.post(None, &[], r#"{"jsonrpc":"2.0","id":9,"method":"ListTasks"}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&r.body).expect("json")["result"]["totalSize"],
        0
    );

    // 404s: other paths, methods, content types, empty body.
    let not_found = |h: Http| assert_eq!((h.status, h.body.as_str()), (404, ""));
    not_found(response(agent().get(&d.http_url("/")).call()));
    not_found(response(
        agent()
            .post(&d.http_url("/x"))
            .set("content-type", "application/json")
            .send_string("{}"),
    ));
    not_found(response(
        agent()
            .post(&d.http_url("/"))
            .set("content-type", "text/plain")
            .send_string("{}"),
    ));
    not_found(response(
        agent()
            .post(&d.http_url("/"))
            .set("content-type", "application/json")
            .send_string(""),
    ));
    not_found(response(agent().get(&d.http_url("/resources/files")).call()));
    // The content type only has to contain application/json.
    let h = response(
        agent()
            .post(&d.http_url("/"))
            .set("content-type", "application/json; charset=utf-8")
            .set("A2A-Version", "1.0")
            .send_string(r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#),
    );
    assert_eq!(h.status, 200);

    // Bodies over 8 MiB: 413, whether declared or streamed in chunks.
    let declared = d.raw(b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 8388609\r\n\r\n{");
    assert!(declared.starts_with("HTTP/1.1 413"), "{declared}");
    let mut chunked = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..9 {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(&chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let streamed = d.raw(&chunked);
    assert!(
        streamed.starts_with("HTTP/1.1 413"),
        "{}",
        &streamed[..streamed.len().min(200)]
    );
    // Exactly at the limit is read (and is not JSON-RPC).
    let mut at = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#.to_string();
    at.push_str(&" ".repeat(BODY_LIMIT - at.len()));
    assert_eq!(d.post(None, &[], &at).status, 200);
}

#[test]
fn none_door_refuses_task_methods_but_runs_its_local_task() {
    let d = start(config(Acceptance::None, 0, false));
    for m in ["SendMessage", "SendStreamingMessage", "SubscribeToTask"] {
        let r = d.rpc(None, m, json!({"id": "x"}));
        assert_eq!(
            (code(&r), &r["error"]["data"][0]["metadata"]),
            (-32004, &json!({"method": m})),
            "{m}"
        );
    }
    let t = d.board.submit_local("local work");
    d.wait_state(&t.id, TaskState::Completed);
    let got = d.rpc(None, "GetTask", json!({"id": t.id}));
    assert_eq!(got["result"]["artifacts"][0]["parts"][0]["text"], "echo: local work");
}

#[test]
fn send_message_outcomes() {
    let d = start(config(Acceptance::Queue, 5, false));
    let t = d.send(None, "hello", false);
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        t["artifacts"],
        json!([{"artifactId": "response", "name": "response", "parts": [{"text": "echo: hello"}]}])
    );
    assert!(
        t["id"]
            .as_str()
            .is_some_and(|s| crate::ids::is(crate::ids::IdKind::Task, s))
    );
    assert!(
        t["contextId"]
            .as_str()
            .is_some_and(|s| crate::ids::is(crate::ids::IdKind::Context, s))
    );
    let ts = t["status"]["timestamp"].as_str().unwrap_or_default();
    assert!(ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.', "{ts}");

    let f = d.send(None, "fail:boom", false);
    assert_eq!(f["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(f["status"]["message"]["parts"], json!([{"text": "boom"}]));
    assert_eq!(f["status"]["message"]["role"], "ROLE_AGENT");
    assert_eq!(f["status"]["message"]["taskId"], f["id"]);

    let n = d.send(None, "noanswer:nothing", false);
    assert_eq!(n["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(
        n["metadata"],
        json!({"murmur": {"noAnswer": true, "noAnswerBelow": [{"member": "reviewer", "status": "failed"}]}})
    );

    // returnImmediately answers SUBMITTED; the given contextId is kept.
    let params = json!({
        "message": {"messageId": "m2", "contextId": "ctx_mine", "parts": [{"text": "later"}]},
        "configuration": {"returnImmediately": true},
    });
    let r = d.rpc(None, "SendMessage", params)["result"]["task"].clone();
    assert_eq!(
        (r["status"]["state"].as_str(), r["contextId"].as_str()),
        (Some("TASK_STATE_SUBMITTED"), Some("ctx_mine"))
    );
    let id = r["id"].as_str().unwrap_or_default().to_string();
    d.wait_state(&id, TaskState::Completed);
    assert_eq!(
        d.rpc(None, "GetTask", json!({"id": id, "historyLength": 3}))["result"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[test]
fn a_forgotten_task_is_unknown_yet_its_open_reply_and_stream_see_its_end() {
    // Every ended task is forgotten at once, unless a reply or stream still owes its end.
    let keep = tasks::Retention { tasks: 0, bytes: 0 };
    let d = start_keeping(config(Acceptance::Queue, 5, false), keep);
    let t = d.send(None, "hello", false);
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], "echo: hello");
    let id = t["id"].as_str().unwrap_or_default();
    for method in ["GetTask", "CancelTask", "SubscribeToTask"] {
        let r = d.rpc(None, method, json!({ "id": id }));
        assert_eq!(
            (code(&r), r["error"]["message"].as_str()),
            (-32001, Some("Task not found")),
            "{method}: {r}"
        );
    }
    assert_eq!(d.rpc(None, "ListTasks", json!({}))["result"]["totalSize"], 0);

    let body = json!({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage", "params": {"message": {"messageId": "m", "parts": [{"text": "hi"}]}}}).to_string();
    let resp = agent()
        .post(&d.http_url("/"))
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0")
        .send_string(&body)
        .expect("stream");
    let events = sse_events(resp);
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    assert_eq!(d.rpc(None, "ListTasks", json!({}))["result"]["totalSize"], 0);
}

#[test]
fn single_acceptance_answers_busy_after_its_one_task() {
    let d = start(config(Acceptance::Single, 0, false));
    let first = d.send(None, "hold", true);
    assert_eq!(first["status"]["state"], "TASK_STATE_SUBMITTED");
    let busy = d.send(None, "second", false);
    assert_eq!(busy["status"]["state"], "TASK_STATE_REJECTED");
    assert_eq!(busy["status"]["message"]["parts"][0]["text"], REJECT_BUSY);
    let id = first["id"].as_str().unwrap_or_default().to_string();
    d.wait_state(&id, TaskState::Working);
    d.release.notify_one();
    d.wait_state(&id, TaskState::Completed);
    // The slot was used once: still busy after the task ended.
    assert_eq!(
        d.send(None, "third", false)["status"]["message"]["parts"][0]["text"],
        REJECT_BUSY
    );
}

#[test]
fn queue_cancel_and_close() {
    let d = start(config(Acceptance::Queue, 1, true));
    let op = d.op();
    let running = d.send(Some(&op), "hold", true)["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    d.wait_state(&running, TaskState::Working);
    let queued = d.send(Some(&op), "q", true)["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let refused = d.send(Some(&op), "r", true);
    assert_eq!(refused["status"]["message"]["parts"][0]["text"], REJECT_BUSY);
    // A rejected task is a task: GetTask finds it.
    let rid = refused["id"].as_str().unwrap_or_default();
    assert_eq!(
        d.rpc(Some(&op), "GetTask", json!({"id": rid}))["result"]["status"]["state"],
        "TASK_STATE_REJECTED"
    );

    let c = d.rpc(Some(&op), "CancelTask", json!({"id": queued}));
    assert_eq!(c["result"]["status"]["state"], "TASK_STATE_CANCELED");
    let again = d.rpc(Some(&op), "CancelTask", json!({"id": queued}));
    assert_eq!(
        (code(&again), again["error"]["data"][0]["reason"].as_str()),
        (-32002, Some("TASK_NOT_CANCELABLE"))
    );
    let c = d.rpc(Some(&op), "CancelTask", json!({"id": running}));
    assert_eq!(c["result"]["status"]["state"], "TASK_STATE_CANCELED");
    d.board.wait_idle_blocking();

    // Close: the queued task is rejected as closing, the running one cancelled, new ones refused.
    let hold = d.send(Some(&op), "hold", true)["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    d.wait_state(&hold, TaskState::Working);
    let q = d.send(Some(&op), "q", true)["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    d.board.close();
    let qs = d.rpc(Some(&op), "GetTask", json!({"id": q}))["result"].clone();
    assert_eq!(qs["status"]["state"], "TASK_STATE_REJECTED");
    assert_eq!(qs["status"]["message"]["parts"][0]["text"], REJECT_CLOSING);
    assert_eq!(
        d.rpc(Some(&op), "GetTask", json!({"id": hold}))["result"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert_eq!(
        d.send(Some(&op), "late", false)["status"]["message"]["parts"][0]["text"],
        REJECT_CLOSING
    );
}

#[test]
fn list_tasks_pages_and_filters() {
    let d = start(config(Acceptance::Queue, 200, false));
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            d.send(None, &format!("t{i}"), false)["id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let page = |params: Value| d.rpc(None, "ListTasks", params)["result"].clone();
    let p1 = page(json!({"pageSize": 2}));
    let got: Vec<&str> = p1["tasks"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(got, [ids[4].as_str(), ids[3].as_str()]);
    assert_eq!((p1["pageSize"].as_u64(), p1["totalSize"].as_u64()), (Some(2), Some(5)));
    assert_eq!(p1["tasks"][0].get("artifacts"), None);
    let token = p1["nextPageToken"].as_str().unwrap_or_default();
    assert!(!token.is_empty());
    let p2 = page(json!({"pageSize": 2, "pageToken": token}));
    assert_eq!(p2["tasks"][0]["id"], ids[2]);
    let p3 = page(json!({"pageSize": 2, "pageToken": p2["nextPageToken"]}));
    assert_eq!(
        (p3["tasks"].as_array().map(Vec::len), p3["nextPageToken"].as_str()),
        (Some(1), Some(""))
    );
    // The default; out of range is refused (A2A v1.0 `ListTasksRequest.page_size`: 1 to 100).
    assert_eq!(page(json!({}))["pageSize"], 50);
    assert_eq!(page(json!({"pageSize": 100}))["pageSize"], 100);
    assert_eq!(
        d.rpc(None, "ListTasks", json!({"pageSize": 1000}))["error"]["code"],
        -32602
    );
    // Filters.
    assert_eq!(page(json!({"status": "TASK_STATE_COMPLETED"}))["totalSize"], 5);
    assert_eq!(page(json!({"status": "TASK_STATE_FAILED"}))["totalSize"], 0);
    let ctx = d.rpc(None, "GetTask", json!({"id": ids[1]}))["result"]["contextId"].clone();
    let by_ctx = page(json!({"contextId": ctx}));
    assert_eq!(
        (by_ctx["totalSize"].as_u64(), &by_ctx["tasks"][0]["id"]),
        (Some(1), &json!(ids[1]))
    );
    assert_eq!(
        page(json!({"includeArtifacts": true}))["tasks"][0]["artifacts"][0]["artifactId"],
        "response"
    );
    assert_eq!(
        page(json!({"statusTimestampAfter": "2000-01-01T00:00:00Z"}))["totalSize"],
        5
    );
    assert_eq!(
        page(json!({"statusTimestampAfter": "2999-01-01T00:00:00Z"}))["totalSize"],
        0
    );
    assert_eq!(code(&d.rpc(None, "ListTasks", json!({"status": "DONE"}))), -32602);
}

#[test]
fn members_see_only_their_own_tasks() {
    let sk = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, true));
    let planner = format!("Bearer {}", sk.mint(FRM, "planner", "coder"));
    let reviewer = format!("Bearer {}", sk.mint(FRM, "reviewer", "coder"));
    let mine = d.send(Some(&planner), "hold", true)["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    d.wait_state(&mine, TaskState::Working);
    let done = d.send(Some(&d.op()), "op task", true)["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    for (method, params) in [
        ("GetTask", json!({"id": mine})),
        ("CancelTask", json!({"id": mine})),
        ("SubscribeToTask", json!({"id": mine})),
        ("GetTask", json!({"id": done})),
    ] {
        let r = d.rpc(Some(&reviewer), method, params.clone());
        assert_eq!(code(&r), -32001, "{method} {params}");
    }
    // Nothing was cancelled, and the reviewer's list is empty, counts included.
    assert_eq!(d.board.get(&mine).map(|t| t.state), Some(TaskState::Working));
    let list = d.rpc(Some(&reviewer), "ListTasks", json!({}))["result"].clone();
    assert_eq!(
        list,
        json!({"nextPageToken": "", "pageSize": 50, "tasks": [], "totalSize": 0})
    );
    // The planner sees its task and not the operator's; the operator sees both.
    let pl = d.rpc(Some(&planner), "ListTasks", json!({}))["result"].clone();
    assert_eq!(
        (pl["totalSize"].as_u64(), &pl["tasks"][0]["id"]),
        (Some(1), &json!(mine))
    );
    assert_eq!(code(&d.rpc(Some(&planner), "GetTask", json!({"id": done}))), -32001);
    assert_eq!(d.rpc(Some(&d.op()), "ListTasks", json!({}))["result"]["totalSize"], 2);
    assert_eq!(
        d.rpc(Some(&d.op()), "GetTask", json!({"id": mine}))["result"]["id"],
        mine
    );
    // The owner may cancel its own task.
    assert_eq!(
        d.rpc(Some(&planner), "CancelTask", json!({"id": mine}))["result"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );

    // The trace hook names the calling member only for mft1 requests.
    let received: Vec<(String, Option<String>)> = crate::sync::lock(&d.events)
        .iter()
        .filter_map(|e| match e {
            BoardEvent::Received {
                task_id, caller_member, ..
            } => Some((task_id.clone(), caller_member.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(received, [(mine.clone(), Some("planner".into())), (done, None)]);
}

#[test]
fn provenance_and_traceparent_reach_the_board() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let d = start(config(Acceptance::Queue, 5, false));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "mX", "parts": [{"text": "x"}]}}}).to_string();
    d.post(
        None,
        &[
            ("x-murmur-task-origin", "peer"),
            ("x-murmur-task-trust", "trusted"),
            ("traceparent", TP),
        ],
        &body,
    );
    d.post(None, &[], &body);
    // A malformed one never reaches the board (it would be recorded and handed to a span).
    d.post(None, &[("traceparent", "00-abc-def-01")], &body);
    let events = crate::sync::lock(&d.events).clone();
    let got: Vec<(Origin, Trust, Option<String>, String)> = events
        .iter()
        .filter_map(|e| match e {
            BoardEvent::Received {
                origin,
                trust,
                traceparent,
                message_id,
                ..
            } => Some((*origin, *trust, traceparent.clone(), message_id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        [
            (Origin::Peer, Trust::Trusted, Some(TP.into()), "mX".into()),
            (Origin::Event, Trust::Untrusted, None, "mX".into()),
            (Origin::Event, Trust::Untrusted, None, "mX".into())
        ]
    );
}

#[test]
fn sse_streams_follow_a_task_to_its_end() {
    let d = start(config(Acceptance::Queue, 5, true));
    let post = |body: &str| {
        agent()
            .post(&d.http_url("/"))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0")
            .set("authorization", &d.op())
            .send_string(body)
            .expect("stream")
    };
    let body = json!({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage", "params": {"message": {"messageId": "m", "parts": [{"text": "progress"}]}}}).to_string();
    let mut stream = Sse::new(post(&body));
    let first = stream.next().expect("snapshot");
    // SendStreamingMessage opens with the task as it was created.
    assert_eq!(first["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    let task_id = first["result"]["task"]["id"].as_str().unwrap_or_default().to_string();
    assert!(crate::ids::is(crate::ids::IdKind::Task, &task_id), "{first}");
    d.wait_state(&task_id, TaskState::Working);
    // The executor takes the task (working) a moment before it notes its progress: the
    // subscription below is to show that note.
    d.wait_status_text(&task_id);
    // A second stream subscribes to the same task; both then follow it to its end.
    let sub_body =
        json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task_id}}).to_string();
    let mut sub = Sse::new(post(&sub_body));
    let snap = sub.next().expect("snapshot");
    assert_eq!(snap["id"], 7);
    let status = &snap["result"]["task"]["status"];
    assert_eq!(
        (status["state"].as_str(), status["message"]["parts"][0]["text"].as_str()),
        (Some("TASK_STATE_WORKING"), Some("continuing with 1 member answer(s)"))
    );
    d.release.notify_one();

    let events = stream.rest();
    assert!(
        events.iter().all(|e| e["id"] == "s1" && e["jsonrpc"] == "2.0"),
        "{events:?}"
    );
    let last = &events[events.len() - 1]["result"]["statusUpdate"];
    assert_eq!(
        (last["taskId"].as_str(), &last["status"]["state"], &last["contextId"]),
        (
            Some(task_id.as_str()),
            &json!("TASK_STATE_COMPLETED"),
            &first["result"]["task"]["contextId"]
        )
    );
    let art = events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .expect("artifact event");
    assert_eq!(
        art["artifact"],
        json!({"artifactId": "response", "name": "response", "parts": [{"text": "released"}]})
    );
    assert_eq!(art["taskId"], task_id);

    let sub_events = sub.rest();
    assert!(sub_events.iter().all(|e| e["id"] == 7));
    assert_eq!(
        sub_events[sub_events.len() - 1]["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // Once terminal, SubscribeToTask is refused.
    assert_eq!(
        code(&d.rpc(Some(&d.op()), "SubscribeToTask", json!({"id": task_id}))),
        -32004
    );

    // A rejected task streams its snapshot and ends.
    let lone = start(config(Acceptance::Single, 0, false));
    lone.board.submit_local("hold");
    let resp = agent()
        .post(&lone.http_url("/"))
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0")
        .send_string(&body)
        .expect("stream");
    let ev = sse_events(resp);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["result"]["task"]["status"]["state"], "TASK_STATE_REJECTED");
}

#[test]
fn a_quick_streamed_task_still_shows_its_whole_course() {
    let d = start(config(Acceptance::Queue, 5, false));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {"messageId": "m", "parts": [{"text": "quick"}]}}}).to_string();
    for _ in 0..5 {
        let resp = agent()
            .post(&d.http_url("/"))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0")
            .send_string(&body)
            .expect("stream");
        let ev = sse_events(resp);
        let n = ev.len();
        assert!(n >= 3, "{ev:?}");
        assert_eq!(ev[0]["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
        assert_eq!(
            ev[n - 2]["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "echo: quick"
        );
        assert_eq!(
            ev[n - 1]["result"]["statusUpdate"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
    }
}

#[test]
fn cancel_reaches_a_streamed_task() {
    let d = start(config(Acceptance::Queue, 5, false));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {"messageId": "m", "parts": [{"text": "hold"}]}}}).to_string();
    let resp = agent()
        .post(&d.http_url("/"))
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0")
        .send_string(&body)
        .expect("stream");
    let id = d.board.all().first().map(|t| t.id.clone()).unwrap_or_default();
    d.wait_state(&id, TaskState::Working);
    assert_eq!(
        d.rpc(None, "CancelTask", json!({"id": id}))["result"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    let ev = sse_events(resp);
    assert_eq!(
        ev[ev.len() - 1]["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert!(ev.iter().all(|e| e["result"].get("artifactUpdate").is_none()));
}

#[test]
fn connections_are_kept_alive() {
    let d = start(config(Acceptance::Queue, 5, false));
    let addr = d.url.replace("localhost", "127.0.0.1");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
    let req = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut reader = BufReader::new(s.try_clone().expect("clone"));
    for _ in 0..2 {
        s.write_all(req.as_bytes()).expect("write");
        let mut status = String::new();
        reader.read_line(&mut status).expect("status");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let mut len = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0; len];
        reader.read_exact(&mut buf).expect("body");
        assert!(String::from_utf8_lossy(&buf).contains("\"totalSize\":0"));
    }
}

/// One response off a kept-alive connection: the status line, the lowercased header block, and
/// the body (by content-length).
fn read_response(reader: &mut BufReader<TcpStream>) -> (String, String, String) {
    let mut status = String::new();
    reader.read_line(&mut status).expect("status");
    let (mut headers, mut len) = (String::new(), 0);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header");
        if line == "\r\n" || line.is_empty() {
            break;
        }
        let line = line.to_ascii_lowercase();
        if let Some(v) = line.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        headers.push_str(&line);
    }
    let mut buf = vec![0; len];
    reader.read_exact(&mut buf).expect("body");
    (status, headers, String::from_utf8_lossy(&buf).into_owned())
}

/// One keep-alive connection, tokens changing between requests: the connection's memo of the
/// last genuine token must answer for exactly that token and nothing else.
#[test]
fn a_connection_remembers_only_the_token_it_last_verified() {
    let sk = SigningKey::generate().expect("key");
    let forger = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, true));
    let planner = sk.mint(FRM, "planner", "coder");
    let writer = sk.mint(FRM, "writer", "coder");
    let mut altered = planner.clone();
    altered.pop();
    altered.push(if planner.ends_with('A') { 'B' } else { 'A' });
    let addr = d.url.replace("localhost", "127.0.0.1");
    let s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let mut reader = BufReader::new(s);
    let mut call = |token: &str, body: &str| {
        let req = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        w.write_all(req.as_bytes()).expect("write");
        let (status, headers, body) = read_response(&mut reader);
        assert!(!headers.contains("connection: close"), "{status}{headers}");
        (status, body)
    };
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"returnImmediately":true}}}"#;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{}}"#;
    let (status, body) = call(&planner, send);
    assert!(status.starts_with("HTTP/1.1 200"), "{status} {body}");
    // planner sees its task; writer (genuine, next on the same connection) sees none; planner
    // again sees it: each request is answered as its own token's caller.
    for (token, total) in [(&planner, 1), (&writer, 0), (&planner, 1), (&planner, 1), (&writer, 0)] {
        let (status, body) = call(token, list);
        assert!(status.starts_with("HTTP/1.1 200"), "{status} {body}");
        assert!(body.contains(&format!("\"totalSize\":{total}")), "{body}");
    }
    // Right after planner was remembered: a token one byte off, a forgery and a token for
    // another door are refused as on a fresh connection.
    let (status, _) = call(&planner, list);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let other_door = sk.mint(FRM, "planner", "reviewer");
    for (token, want) in [
        (altered.as_str(), "401"),
        (&forger.mint(FRM, "planner", "coder"), "401"),
        (&other_door, "403"),
    ] {
        let (status, body) = call(token, list);
        assert!(status.starts_with(&format!("HTTP/1.1 {want}")), "{status} {body}");
        let (status, _) = call(&planner, list);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
}

/// The door's side of a connection has Nagle off: SSE events are small writes in quick
/// succession, and with Nagle a second event waited for the client's delayed ACK (40 ms).
#[test]
fn accepted_connections_have_nagle_off() {
    use std::mem::ManuallyDrop;
    use std::os::fd::FromRawFd as _;
    let d = start(config(Acceptance::Queue, 5, false));
    let addr = d.url.replace("localhost", "127.0.0.1");
    let s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    w.write_all(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let (status, _, _) = read_response(&mut BufReader::new(s.try_clone().expect("clone")));
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let (client, door) = (s.local_addr().expect("local"), s.peer_addr().expect("peer"));
    // The door runs in this process: find its end of this connection among our descriptors.
    let mut found = None;
    for entry in std::fs::read_dir("/proc/self/fd").expect("fds").flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: the descriptor is only inspected, never closed (ManuallyDrop), and every
        // call below fails harmlessly on one that is not a TCP socket.
        let sock = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        if sock.local_addr().ok() == Some(door) && sock.peer_addr().ok() == Some(client) {
            found = sock.nodelay().ok();
        }
    }
    assert_eq!(found, Some(true), "the door's end of the connection (None: not found)");
}

#[test]
fn refusals_of_small_requests_keep_the_connection() {
    let d = start(config(Acceptance::Queue, 5, true));
    let addr = d.url.replace("localhost", "127.0.0.1");
    let s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let mut reader = BufReader::new(s);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
    let req = |auth: &str| {
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n{auth}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let op = format!("Authorization: {}\r\n", d.op());
    let forged = "Authorization: Bearer mft1.e30.AAAA\r\n";
    for (auth, want) in [("", "401"), (forged, "401"), (op.as_str(), "200")] {
        w.write_all(req(auth).as_bytes()).expect("write");
        let (status, headers, body) = read_response(&mut reader);
        assert!(status.starts_with(&format!("HTTP/1.1 {want}")), "{status}");
        assert!(!headers.contains("connection: close"), "{status}{headers}");
        if want == "200" {
            assert!(body.contains("\"totalSize\":0"), "{body}");
        }
    }
    // A refused request declaring more than the drain limit is answered unread, and closed.
    let big = "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n";
    w.write_all(big.as_bytes()).expect("write");
    let (status, headers, _) = read_response(&mut reader);
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    assert!(headers.contains("connection: close"), "{headers}");
    let mut rest = Vec::new();
    assert_eq!(
        reader.read_to_end(&mut rest).map(|_| rest.len()).ok(),
        Some(0),
        "closed"
    );
}

#[test]
fn bind_failure_is_e_run_010() {
    let sys = actix_rt::System::new();
    let err = sys.block_on(async { Door::start(config(Acceptance::Queue, 1, false), "203.0.113.255").map(|_| ()) });
    let e = err.expect_err("cannot bind a foreign address");
    assert_eq!(e.code, crate::diag::E_RUN_010);
    assert!(
        e.message.starts_with("the door cannot bind 203.0.113.255: "),
        "{}",
        e.message
    );
    // Outside any runtime too: the door serves from a thread of its own.
    let door = Door::start(config(Acceptance::Queue, 1, false), "127.0.0.1").expect("starts outside a runtime");
    let card = response(
        agent()
            .get(&format!("http://{}/.well-known/agent-card.json", door.url()))
            .call(),
    );
    assert_eq!(card.status, 200, "{}", card.body);
}

impl Board {
    /// Test helper: blocks this (non-async) thread until the board is idle.
    fn wait_idle_blocking(&self) {
        for _ in 0..400 {
            if self.is_idle() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("board never became idle");
    }
}

/// A card's bytes without its `signatures` member (A2A v1.0 §8.4: they sign the rest), which
/// differ per door as each signs with a key of its own.
fn strip_signatures(card: &str) -> String {
    let Some(at) = card.find(r#""signatures":["#) else {
        return card.to_string();
    };
    let end = card[at..].find(']').map_or(card.len(), |e| at + e + 1);
    let end = if card[end..].starts_with(',') { end + 1 } else { end };
    format!("{}{}", &card[..at], &card[end..])
}

/// A2A v1.0 §8.4 (docs/reference/door.md#agent-card): the launcher's readiness probe learns the
/// key a member signs its card with from the member's own door, and hands it to the member's
/// callers; with that key the card verifies, and a card with one byte changed does not.
#[test]
fn the_probe_learns_the_card_key_and_a_changed_byte_fails() {
    let d = start(config(Acceptance::Queue, 2, true));
    let reported = crate::readiness::Reported {
        session_id: SES.into(),
        url: format!("http://{}", d.url),
        pid: None,
        workdir: None,
        operator_token: d.operator.clone().map(crate::secret::Secret::new),
    };
    let probed = actix_rt::System::new().block_on(async {
        let bounds = crate::outbound::Bounds::connect(std::time::Duration::from_secs(5));
        let client = crate::outbound::Client::door(None, &reported.url, bounds);
        crate::launcher::probe::probe_once(&client, &reported, std::time::Duration::from_secs(5)).await
    });
    let Ok(crate::launcher::probe::Probed::Ready(Some(handed))) = probed else {
        panic!("the probe found no card key: {probed:?}");
    };
    let key = crate::card_sig::CardVerifyKey::from_b64(&handed).expect("a key");
    let handed_on = crate::channel::address_line(&[crate::channel::Address {
        name: "coder".into(),
        url: reported.url.clone(),
        door: None,
        card_key: Some(handed.clone()),
    }]);
    let read = crate::channel::parse_address_line(&handed_on).expect("an address line");
    assert_eq!(read.addresses[0].card_key.as_deref(), Some(handed.as_str()));

    for text in [
        response(agent().get(&d.http_url("/.well-known/agent-card.json")).call()).body,
        d.rpc(Some(&d.op()), "GetExtendedAgentCard", json!({}))["result"].to_string(),
    ] {
        let card: Value = serde_json::from_str(&text).expect("card");
        assert_eq!(crate::card_sig::verify(&card, &key), Ok(()), "{text}");
        let changed = text.replacen("writes code", "writes cone", 1);
        let changed: Value = serde_json::from_str(&changed).expect("card");
        assert_eq!(
            crate::card_sig::verify(&changed, &key),
            Err(crate::card_sig::CardSigError::Mismatch)
        );
    }
    // Another door's key does not verify this door's card.
    let other = start(config(Acceptance::Queue, 2, false));
    let theirs: Value =
        serde_json::from_str(&response(agent().get(&other.http_url("/.well-known/agent-card.json")).call()).body)
            .expect("card");
    assert_eq!(
        crate::card_sig::verify(&theirs, &key),
        Err(crate::card_sig::CardSigError::OtherKey)
    );
}

/// docs/reference/door.md#agent-card: the card is signed once, when the door starts, and every
/// request is answered with those bytes; nothing it says changes while the door runs. A door
/// started again (a restarted member's, on another port) signs a card of its own that names its
/// new address, under a key of its own.
#[test]
fn the_card_is_signed_at_start_and_served_as_stored_bytes() {
    let get = |d: &TestDoor| response(agent().get(&d.http_url("/.well-known/agent-card.json")).call());
    let d = start(config(Acceptance::Queue, 2, true));
    let first = get(&d);
    // Requests between the two GETs (a task, a refused call) do not change the card.
    d.rpc(Some(&d.op()), "GetExtendedAgentCard", json!({}));
    let h = d.post(
        None,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#,
    );
    assert_eq!(h.status, 401);
    let second = get(&d);
    assert_eq!((first.status, second.status), (200, 200));
    assert_eq!(first.body, second.body, "two GETs, byte for byte");
    assert_eq!(first.content_length, second.content_length);
    let card: Value = serde_json::from_str(&first.body).expect("card json");
    let key = crate::card_sig::named_key(&card).expect("the card names its key");
    assert_eq!(crate::card_sig::verify(&card, &key), Ok(()));
    let url = |c: &Value| {
        c["supportedInterfaces"][0]["url"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(url(&card), format!("http://{}", d.url));

    // The same session's door started again, as after a restart: another port, so another card.
    let again = start(config(Acceptance::Queue, 2, true));
    assert_ne!(again.url, d.url);
    let theirs: Value = serde_json::from_str(&get(&again).body).expect("card json");
    assert_eq!(url(&theirs), format!("http://{}", again.url));
    let their_key = crate::card_sig::named_key(&theirs).expect("the card names its key");
    assert_eq!(crate::card_sig::verify(&theirs, &their_key), Ok(()));
    assert_eq!(
        crate::card_sig::verify(&theirs, &key),
        Err(crate::card_sig::CardSigError::OtherKey)
    );
    assert_eq!(get(&again).body, serde_json::to_string(&theirs).expect("json"));
    // The first door still serves what it signed at its start.
    assert_eq!(get(&d).body, first.body);
}

/// docs/a2a.md "Resuming a stream": a `Last-Event-ID` whose events the task's log no longer holds
/// gets the task as it stands first, marked `metadata.murmur.resumed`, then the live stream.
#[test]
fn a_resume_past_the_log_gets_a_marked_snapshot() {
    let d = start(config(Acceptance::Queue, 2, true));
    let id = d.send(Some(&d.op()), "hold", true)["id"]
        .as_str()
        .expect("id")
        .to_string();
    d.wait_state(&id, TaskState::Working);
    // More notes than the log keeps, each seen by a stream, so each is logged.
    let log = d.board.stream_log(&id).expect("a log");
    for i in 0..crate::wire::replay::LOG_EVENTS + 5 {
        d.board.set_working(&id, Some(&format!("note {i}")));
        let mut l = crate::sync::lock(&log);
        replay_catch_up(&d.board, &id, &mut l);
    }
    let last = crate::sync::lock(&log).events.last();
    let body = json!({"id": "s1", "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {"id": id}}).to_string();
    let resp = agent()
        .post(&d.http_url("/"))
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0")
        .set("authorization", &d.op())
        .set("Last-Event-ID", "1")
        .send_string(&body)
        .expect("a stream");
    let mut reader = BufReader::new(resp.into_reader());
    let mut head = String::new();
    reader.read_line(&mut head).expect("a line");
    assert_eq!(head, format!("id: {last}\n"));
    let mut data = String::new();
    reader.read_line(&mut data).expect("a line");
    let event: Value = serde_json::from_str(data.trim_start_matches("data: ")).expect("json");
    let task = &event["result"]["task"];
    assert_eq!(task["metadata"]["murmur"]["resumed"], "snapshot", "{event}");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        format!("note {}", crate::wire::replay::LOG_EVENTS + 4)
    );
    d.release.notify_one();
}

fn replay_catch_up(board: &Board, id: &str, log: &mut tasks::StreamLog) {
    super::replay::catch_up(board, id, log, None).expect("the task");
}

/// docs/reference/formation.md#limits-across-the-formations-edge: a client's limits are read
/// (malformed ones refused before a task exists); a member's metadata is not read at all, so
/// nothing it writes there can bound or widen its callee's task (its grant does).
#[test]
fn only_a_clients_limits_are_read() {
    let sk = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, true));
    let planner = format!("Bearer {}", sk.mint(FRM, "planner", "coder"));
    let send = |auth: &str, limits: Value| {
        let params = json!({"message": {"messageId": "m-l", "role": "ROLE_USER", "parts": [{"text": "op task"}],
                            "metadata": {crate::wire::limits::URI: limits}},
                            "configuration": {"returnImmediately": true}});
        d.rpc(Some(auth), "SendMessage", params)
    };
    let malformed = json!({"budgetTokens": 0});
    let refused = send(&d.op(), malformed.clone());
    assert_eq!(code(&refused), -32602, "{refused}");
    assert!(refused.to_string().contains("budgetTokens"), "{refused}");
    let fine = send(&d.op(), json!({"budgetTokens": 10}));
    assert!(fine["result"]["task"]["id"].is_string(), "{fine}");
    let from_member = send(&planner, malformed);
    assert!(from_member["result"]["task"]["id"].is_string(), "{from_member}");
}
