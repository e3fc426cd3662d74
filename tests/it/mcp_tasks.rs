//! `mur::tools::mcp` beyond a call's plain result (issue #50): the trace context each call carries
//! in `params._meta`, the tasks extension (`io.modelcontextprotocol/tasks`: a call answered with a
//! task handle is polled until it ends, and cancelled with `tasks/cancel` when its bound passes or
//! its caller gives up), and a server's questions (multi round-trip `input_required` results and a
//! task's `inputRequests`) put through the caller's asking path. Against the official MCP Python
//! SDK's server in both revisions, and against hostile servers scripted by hand on 127.0.0.1: one
//! whose task never ends, one that floods questions, one that lies about its revision. Each
//! hostile case ends in an error carrying its code, within its bound.

use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, Instant};

use mur::tools::mcp::{Ask, CallContext, McpEndpoint, McpLimits, McpServer, Revisions};
use serde_json::{Value, json};

use crate::support::mcp::SdkServer;
use crate::support::provider::{Provider, Reply, Request, Step};

const KEY: &str = "mcp-test-key-5f2c9a17d3";
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

fn run<F: Future>(f: F) -> F::Output {
    actix_rt::System::new().block_on(f)
}

fn endpoint(url: &str, allow: &[&str]) -> McpEndpoint {
    McpEndpoint {
        name: "calc".to_string(),
        url: url.to_string(),
        bearer: Some(mur::secret::Secret::new(KEY.to_string())),
        allow: allow.iter().map(|s| s.to_string()).collect(),
    }
}

fn quick() -> McpLimits {
    McpLimits {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(2),
        idle: Duration::from_millis(500),
        ..McpLimits::default()
    }
}

fn traced() -> CallContext<'static> {
    CallContext {
        traceparent: Some(TRACEPARENT.to_string()),
        ask: None,
    }
}

// ---- The trace context ----

/// The SDK's server sees the call's `traceparent` in `_meta`, in the stateless revision and in
/// the handshake ones alike.
#[test]
fn the_sdk_server_receives_the_calls_traceparent_in_meta() {
    for revisions in [Revisions::Newest, Revisions::Handshake] {
        let sdk = SdkServer::start(KEY, &[]);
        run(async {
            let server = McpServer::connect_as(endpoint(&sdk.url(), &["add"]), McpLimits::default(), revisions)
                .await
                .unwrap_or_else(|e| panic!("connect ({revisions:?}): {e}\n{}", sdk.stderr()));
            let want = if revisions == Revisions::Newest {
                "2026-07-28"
            } else {
                "2025-11-25"
            };
            assert_eq!(server.protocol_version(), want);
            let sum = server
                .call_in("add", json!({"a": 2, "b": 3}), Duration::from_secs(10), &traced())
                .await
                .unwrap();
            assert_eq!(sum.text, "5");
            // A call without a trace context carries none.
            server
                .call("add", json!({"a": 1, "b": 1}), Duration::from_secs(10))
                .await
                .unwrap();
            server.close().await;
        });
        let log = sdk.log();
        let traced: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("traceparent ")).collect();
        assert_eq!(traced, [format!("tools/call {TRACEPARENT}")], "{revisions:?}: {log:?}");
    }
}

// ---- Hostile servers, scripted by hand ----

fn rpc(req: &Request, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req.json()["id"].clone(), "result": result})
}

fn method(req: &Request) -> String {
    req.json()["method"].as_str().unwrap_or("").to_string()
}

/// A stateless server: it lists 2026-07-28 and the tool `go`, answers `tools/call` with `call`,
/// `tasks/get` with `get` (given how many polls came before), and acknowledges `tasks/cancel`
/// and `tasks/update`; as many requests as `n`.
fn stateless_server(
    n: usize,
    call: impl Fn(&Request) -> Value + Send + Sync + Clone + 'static,
    get: impl Fn(&Request, usize) -> Value + Send + Sync + Clone + 'static,
) -> Provider {
    let polls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let steps = (0..n)
        .map(|_| {
            let (call, get, polls) = (call.clone(), get.clone(), polls.clone());
            Step::func(move |r| {
                let result = match method(r).as_str() {
                    "server/discover" => json!({"supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
                        "resultType": "complete"}),
                    "tools/list" => json!({"tools": [{"name": "go", "inputSchema": {"type": "object"}}]}),
                    "tools/call" => call(r),
                    "tasks/get" => get(r, polls.fetch_add(1, std::sync::atomic::Ordering::SeqCst)),
                    "tasks/cancel" | "tasks/update" => json!({"resultType": "complete"}),
                    other => panic!("unexpected {other}"),
                };
                Reply::json(rpc(r, result))
            })
        })
        .collect();
    Provider::start(steps)
}

fn task(id: &str, status: &str, extra: Value) -> Value {
    let mut t = json!({"taskId": id, "status": status, "createdAt": "2026-12-05T10:00:00Z",
        "lastUpdatedAt": "2026-12-05T10:00:00Z", "ttlMs": 60000, "pollIntervalMs": 0});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        t[k] = v;
    }
    t
}

fn handle(id: &str) -> Value {
    let mut t = task(id, "working", json!({}));
    t["resultType"] = json!("task");
    t
}

fn methods(p: &Provider) -> Vec<String> {
    p.requests().iter().map(method).collect()
}

/// Waits (bounded) until the server received a request of `m`.
fn wait_for(p: &Provider, m: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if methods(p).iter().any(|x| x == m) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A task that completes after two polls: its result is the call's, each poll names the task,
/// and the call carried its trace context.
#[test]
fn a_task_is_polled_until_it_completes() {
    let p = stateless_server(
        10,
        |_| handle("t-1"),
        |r, n| {
            assert_eq!(r.json()["params"]["taskId"], "t-1");
            if n < 2 {
                task("t-1", "working", json!({"statusMessage": "halfway"}))
            } else {
                task(
                    "t-1",
                    "completed",
                    json!({"result": {"content": [{"type": "text", "text": "done"}]}}),
                )
            }
        },
    );
    let url = format!("{}/mcp", p.url());
    let r = run(async {
        let server = McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap();
        server.call_in("go", json!({}), Duration::from_secs(5), &traced()).await
    })
    .unwrap();
    assert_eq!((r.text.as_str(), r.is_error), ("done", false));
    assert_eq!(
        methods(&p),
        [
            "server/discover",
            "tools/list",
            "tools/call",
            "tasks/get",
            "tasks/get",
            "tasks/get"
        ]
    );
    let reqs = p.requests();
    let call = &reqs[2].json();
    assert_eq!(call["params"]["_meta"]["traceparent"], TRACEPARENT);
    assert_eq!(
        call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"],
        json!({"io.modelcontextprotocol/tasks": {}})
    );
    // Each poll is a request of the revision: its method header and _meta.
    assert_eq!(reqs[3].header("mcp-method"), Some("tasks/get"));
    assert_eq!(
        reqs[3].json()["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
}

/// A task that never ends: polled at no more than the clamped pace, given up at the call's bound
/// with E-MCP-002, and cancelled with `tasks/cancel`.
#[test]
fn a_task_that_never_ends_is_cancelled_at_the_bound_with_its_code() {
    let p = stateless_server(200, |_| handle("t-9"), |_, _| task("t-9", "working", json!({})));
    let url = format!("{}/mcp", p.url());
    let started = Instant::now();
    let e = run(async {
        let server = McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap();
        server.call("go", json!({}), Duration::from_secs(1)).await.unwrap_err()
    });
    let took = started.elapsed();
    assert!(
        e.starts_with(
            "error[E-MCP-002]: MCP server 'calc': go: its task t-9 timed out: it did not end within 1s, and was cancelled\n  hint: "
        ),
        "{e}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(wait_for(&p, "tasks/cancel"), "{:?}", methods(&p));
    let reqs = p.requests();
    let cancel = reqs.iter().find(|r| method(r) == "tasks/cancel").unwrap();
    assert_eq!(cancel.json()["params"]["taskId"], "t-9");
    assert_eq!(cancel.header("mcp-method"), Some("tasks/cancel"));
    // The server asked for polls with no pause: the client kept to its own floor (50 ms), so a
    // second holds at most about twenty.
    let polls = methods(&p).iter().filter(|m| *m == "tasks/get").count();
    assert!((2..=25).contains(&polls), "{polls} polls");
}

/// A caller that gives up (the model's turn or the task cancelled: the call's future dropped)
/// cancels the server's task.
#[test]
fn dropping_a_call_cancels_its_task() {
    let p = stateless_server(
        200,
        |_| handle("t-5"),
        |_, _| task("t-5", "working", json!({"pollIntervalMs": 100})),
    );
    let url = format!("{}/mcp", p.url());
    run(async {
        let server = McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap();
        let call = server.call("go", json!({}), Duration::from_secs(30));
        let gave_up = actix_rt::time::timeout(Duration::from_millis(400), call).await;
        assert!(gave_up.is_err(), "the call ended by itself: {gave_up:?}");
        // The cancel is spawned, not awaited: the system stays up until the server has it.
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !methods(&p).iter().any(|m| m == "tasks/cancel") {
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let reqs = p.requests();
    let cancel = reqs.iter().find(|r| method(r) == "tasks/cancel");
    assert_eq!(
        cancel.map(|c| c.json()["params"]["taskId"].clone()),
        Some(json!("t-5")),
        "{:?}",
        methods(&p)
    );
}

/// The questions a call asks as `input_required` results reach the caller's asking path with
/// the server's text, the answers go back as `inputResponses` with the `requestState` echoed; a
/// task's questions go back by `tasks/update`, each asked once however often it is polled.
#[test]
fn questions_reach_the_asking_path_and_answers_go_back() {
    let elicit = |message: &str, field: &str, kind: &str| {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
            "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}}}})
    };
    let e1 = elicit("How many copies?", "count", "integer");
    let e2 = elicit("Which printer?", "printer", "string");
    let p = stateless_server(
        20,
        move |r| {
            let params = &r.json()["params"];
            match params.get("inputResponses") {
                None => json!({"resultType": "input_required", "requestState": "st-1",
                    "inputRequests": {"copies": e1.clone()}}),
                Some(_) => handle("t-2"),
            }
        },
        move |_, n| match n {
            0 | 1 => task(
                "t-2",
                "input_required",
                json!({"inputRequests": {"printer": e2.clone()}}),
            ),
            _ => task(
                "t-2",
                "completed",
                json!({"result": {"content": [{"type": "text", "text": "printed"}]}}),
            ),
        },
    );
    let url = format!("{}/mcp", p.url());
    let questions = RefCell::new(Vec::<String>::new());
    let r = run(async {
        let server = McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap();
        let ask = |q: String| -> futures_util::future::LocalBoxFuture<'static, Result<String, String>> {
            let answer = if q.contains("How many") { "3" } else { "laser" };
            questions.borrow_mut().push(q);
            Box::pin(async move { Ok(answer.to_string()) })
        };
        let cx = CallContext {
            traceparent: None,
            ask: Some(&ask as &Ask<'_>),
        };
        server.call_in("go", json!({}), Duration::from_secs(5), &cx).await
    })
    .unwrap();
    assert_eq!(r.text, "printed");
    assert_eq!(
        questions.into_inner(),
        [
            "MCP server 'calc' (go) asks: How many copies?",
            "MCP server 'calc' (go) asks: Which printer?"
        ]
    );
    let reqs = p.requests();
    let calls: Vec<Value> = reqs
        .iter()
        .filter(|r| method(r) == "tools/call")
        .map(Request::json)
        .collect();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0]["id"], calls[1]["id"], "a retry is a request of its own");
    assert_eq!(calls[1]["params"]["requestState"], "st-1");
    assert_eq!(
        calls[1]["params"]["inputResponses"],
        json!({"copies": {"action": "accept", "content": {"count": 3}}})
    );
    let updates: Vec<Value> = reqs
        .iter()
        .filter(|r| method(r) == "tasks/update")
        .map(Request::json)
        .collect();
    assert_eq!(updates.len(), 1, "{:?}", methods(&p));
    assert_eq!(
        updates[0]["params"],
        json!({"taskId": "t-2", "inputResponses": {"printer": {"action": "accept", "content": {"printer": "laser"}}},
            "_meta": updates[0]["params"]["_meta"].clone()})
    );
}

/// A server that floods questions: five at once, or one more after each answer, or one nobody
/// may be asked. Each ends in E-MCP-003 after a bounded number of questions.
#[test]
fn a_flood_of_questions_ends_with_its_code() {
    let q = |i: usize| {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": format!("Question {i}?"),
            "requestedSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}})
    };
    let at_once: serde_json::Map<String, Value> = (0..5).map(|i| (format!("k{i}"), q(i))).collect();
    let five = json!({"resultType": "input_required", "inputRequests": at_once});
    let endless = move |r: &Request| {
        let n = r.json()["id"].as_u64().unwrap_or(0) as usize;
        json!({"resultType": "input_required", "inputRequests": {format!("k{n}"): q(n)}})
    };
    let sampling = json!({"resultType": "input_required",
        "inputRequests": {"s": {"method": "sampling/createMessage", "params": {"messages": []}}}});
    let cases: Vec<(Provider, &str)> = vec![
        (
            stateless_server(10, move |_| five.clone(), |_, _| json!({})),
            "go: the server asked 5 questions at once, more than the 4 a call may be asked",
        ),
        (
            stateless_server(30, endless, |_, _| json!({})),
            "error[E-MCP-003]: MCP server 'calc': go: it asked for input more than 8 times",
        ),
        (
            stateless_server(10, move |_| sampling.clone(), |_, _| json!({})),
            "error[E-MCP-003]: MCP server 'calc': go: the server asks \"sampling/createMessage\", which this client does not answer",
        ),
    ];
    for (p, want) in cases {
        let url = format!("{}/mcp", p.url());
        let asked = RefCell::new(0usize);
        let e = run(async {
            let server = McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap();
            let ask = |_q: String| -> futures_util::future::LocalBoxFuture<'static, Result<String, String>> {
                *asked.borrow_mut() += 1;
                Box::pin(async { Ok("fine".to_string()) })
            };
            let cx = CallContext {
                traceparent: None,
                ask: Some(&ask as &Ask<'_>),
            };
            server
                .call_in("go", json!({}), Duration::from_secs(5), &cx)
                .await
                .unwrap_err()
        });
        assert!(e.contains(want), "{e}\nwant: {want}");
        assert!(e.contains("E-MCP-003"), "{e}");
        assert!(*asked.borrow() <= 8, "{} questions asked", asked.borrow());
    }
}

/// A task that asks, of a caller that cannot ask (no asking path): E-MCP-003, and the task is
/// cancelled rather than left waiting.
#[test]
fn a_question_without_an_asking_path_cancels_the_task() {
    let e1 = json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Sure?",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}});
    let p = stateless_server(
        20,
        |_| handle("t-3"),
        move |_, _| task("t-3", "input_required", json!({"inputRequests": {"ok": e1.clone()}})),
    );
    let url = format!("{}/mcp", p.url());
    let e = run(async {
        let server = McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap();
        let e = server.call("go", json!({}), Duration::from_secs(5)).await.unwrap_err();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !methods(&p).iter().any(|m| m == "tasks/cancel") {
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        e
    });
    assert!(
        e.starts_with("error[E-MCP-003]: MCP server 'calc': go: it asks for input, and this task cannot ask"),
        "{e}"
    );
    assert!(methods(&p).iter().any(|m| m == "tasks/cancel"), "{:?}", methods(&p));
}

/// A server that lists the stateless revision and then answers with a session id: refused with
/// E-MCP-001, as one that refuses the revision's requests is.
#[test]
fn a_stateless_answer_with_a_session_id_is_a_lie_with_its_code() {
    let p = Provider::start(vec![
        Step::func(|r| {
            Reply::json(rpc(
                r,
                json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}),
            ))
        }),
        Step::func(|r| {
            Reply::json(rpc(
                r,
                json!({"tools": [{"name": "go", "inputSchema": {"type": "object"}}]}),
            ))
            .header("mcp-session-id", "sess-1")
        }),
    ]);
    let url = format!("{}/mcp", p.url());
    let e = run(async { McpServer::connect(endpoint(&url, &["go"]), quick()).await.unwrap_err() });
    assert!(
        e.starts_with(
            "error[E-MCP-001]: MCP server 'calc': tools/list failed: it listed MCP 2026-07-28 in server/discover, yet answered with a session id"
        ),
        "{e}"
    );
}
