//! Push notifications (A2A v1.0 §3.1.7–3.1.10, §4.3.3, §13.2; docs/a2a.md#push-notifications)
//! against a real door, with the official SDK clients (Python and JS) creating the configs and a
//! webhook this test runs on loopback: every update arrives, with the token and the credentials,
//! in order, ending in the terminal state; the first POST answered 500 is retried; webhook URLs
//! to a link-local or metadata address, or plain `http` to a name, are refused with `-32602`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::door::Door;
use crate::support::python::python_with;
use crate::support::toolchains::node_with;
use crate::support::{Sandbox, repo_root, stderr};

use crate::support::pins::{A2A_JS as A2A_JS_SDK, A2A_PY as A2A_SDK};

/// One POST the webhook received, and what it answered.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HashMap<String, String>,
    body: Value,
    status: u16,
}

/// A webhook on 127.0.0.1: it answers the first POST to each path in `fail_first` with 500 and
/// every other with 204, and records them all.
struct Webhook {
    port: u16,
    hits: Arc<Mutex<Vec<Hit>>>,
    stop: Arc<AtomicBool>,
}

impl Webhook {
    fn start(fail_first: &[&str]) -> Webhook {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the webhook");
        let port = listener.local_addr().expect("addr").port();
        let hits = Arc::new(Mutex::new(Vec::<Hit>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (Arc::clone(&hits), Arc::clone(&stop));
        let mut failing: Vec<String> = fail_first.iter().map(|p| p.to_string()).collect();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                if let Some(mut hit) = read_request(&conn) {
                    hit.status = match failing.iter().position(|p| *p == hit.path) {
                        Some(i) => {
                            failing.remove(i);
                            500
                        }
                        None => 204,
                    };
                    let reply = format!(
                        "HTTP/1.1 {} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        hit.status
                    );
                    let _ = (&conn).write_all(reply.as_bytes());
                    h.lock().expect("hits").push(hit);
                }
            }
        });
        Webhook { port, hits, stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn hits(&self, path: &str) -> Vec<Hit> {
        self.hits
            .lock()
            .expect("hits")
            .iter()
            .filter(|h| h.path == path)
            .cloned()
            .collect()
    }

    /// The hits to `path` once one of them carries a terminal state, waiting at most `within`.
    fn until_terminal(&self, path: &str, within: Duration) -> Vec<Hit> {
        let end = Instant::now() + within;
        loop {
            let hits = self.hits(path);
            if hits
                .iter()
                .any(|h| h.status < 300 && state_of(&h.body).is_some_and(terminal))
                || Instant::now() > end
            {
                return hits;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn read_request(conn: &TcpStream) -> Option<Hit> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let n: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; n];
    r.read_exact(&mut body).ok()?;
    Some(Hit {
        path,
        headers,
        body: serde_json::from_slice(&body).ok()?,
        status: 0,
    })
}

/// The task state an update carries: a task's, or a status update's.
fn state_of(update: &Value) -> Option<&str> {
    update
        .pointer("/task/status/state")
        .or_else(|| update.pointer("/statusUpdate/status/state"))
        .and_then(Value::as_str)
}

fn terminal(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED"
    )
}

/// How far along a state is, so the updates' order can be checked.
fn rank(state: &str) -> u8 {
    match state {
        "TASK_STATE_SUBMITTED" => 0,
        "TASK_STATE_WORKING" => 1,
        _ => 2,
    }
}

/// What a webhook must have received for one task: the task first (its first POST answered 500
/// and sent again, the same bytes), then updates in order, the artifact before the status that
/// ends the task, every one with the config's token and credentials.
fn assert_delivered(hits: &[Hit], task_id: &str, token: &str, authorization: &str, answer: &str) {
    let shown = format!("{hits:#?}");
    assert!(hits.len() >= 3, "{shown}");
    for h in hits {
        assert_eq!(
            h.headers.get("x-a2a-notification-token").map(String::as_str),
            Some(token),
            "{shown}"
        );
        assert_eq!(
            h.headers.get("authorization").map(String::as_str),
            Some(authorization),
            "{shown}"
        );
        assert_eq!(
            h.headers.get("content-type").map(String::as_str),
            Some("application/a2a+json"),
            "{shown}"
        );
        let id = h
            .body
            .pointer("/task/id")
            .or_else(|| h.body.pointer("/statusUpdate/taskId"))
            .or_else(|| h.body.pointer("/artifactUpdate/taskId"));
        assert_eq!(id, Some(&json!(task_id)), "{shown}");
    }
    assert_eq!((hits[0].status, hits[1].status), (500, 204), "{shown}");
    assert_eq!(hits[0].body, hits[1].body, "a retry sends the same update\n{shown}");
    assert_eq!(state_of(&hits[0].body), Some("TASK_STATE_SUBMITTED"), "{shown}");
    let last = hits.last().map(|h| &h.body).expect("a last hit");
    assert_eq!(
        last.pointer("/statusUpdate/status/state"),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{shown}"
    );
    let artifact = &hits[hits.len() - 2].body;
    assert_eq!(
        artifact.pointer("/artifactUpdate/artifact/parts/0/text"),
        Some(&json!(answer)),
        "{shown}"
    );
    let ranks: Vec<u8> = hits[1..].iter().filter_map(|h| state_of(&h.body)).map(rank).collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "updates out of order\n{shown}");
    assert_eq!(
        hits.iter().filter(|h| state_of(&h.body).is_some_and(terminal)).count(),
        1,
        "one terminal update\n{shown}"
    );
}

fn echo_door(sb: &Sandbox) -> Door {
    sb.install_actor("echo");
    Door::start(sb, "echo", &[])
}

/// The official Python SDK client (a2a-sdk 1.3.0): a config given with SendMessage gets every
/// update of its task, the first retried after a 500; the config is read, listed, another created
/// and deleted; refused URLs are `InvalidParamsError` (-32602), an unknown task
/// `TaskNotFoundError`.
#[test]
fn the_official_python_client_gets_every_update_at_its_webhook() {
    let py = python_with(A2A_SDK, "a2a.client, a2a.types.a2a_pb2, httpx");
    let hook = Webhook::start(&["/py"]);
    let sb = Sandbox::new();
    let d = echo_door(&sb);
    let token = d.op().trim_start_matches("Bearer ").to_string();
    let out = Command::new(&py)
        .arg(repo_root().join("tests/interop/a2a_push_check.py"))
        .arg(format!("http://{}", d.local_url()))
        .arg(&token)
        .arg(hook.url("/py"))
        .stdin(Stdio::null())
        .output()
        .expect("run the SDK push check");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a2a_push_check.py failed\n--- stdout\n{so}\n--- stderr\n{se}"
    );
    assert!(so.contains("checks passed"), "{so}");
    let task_id = so
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("task "))
        .expect("the task id");
    let hits = hook.until_terminal("/py", Duration::from_secs(30));
    assert_delivered(&hits, task_id, "py-token", "Bearer py-credentials", "push me");
    // The door's stderr never shows a token or the credentials.
    let err = d.stderr();
    assert!(!err.contains("py-token") && !err.contains("py-credentials"), "{err}");
}

/// The official JS SDK client (@a2a-js/sdk 1.3.0) does the same through its own JSON-RPC
/// transport: `tests/interop/a2a_push_check.mjs`.
#[test]
fn the_official_js_client_gets_every_update_at_its_webhook() {
    let prefix = node_with(A2A_JS_SDK);
    let hook = Webhook::start(&["/js"]);
    let sb = Sandbox::new();
    let d = echo_door(&sb);
    let token = d.op().trim_start_matches("Bearer ").to_string();
    let script = repo_root().join("tests/interop/a2a_push_check.mjs");
    let out = Command::new("node")
        .arg(&script)
        .arg(format!("http://{}", d.local_url()))
        .arg(&token)
        .arg(hook.url("/js"))
        .arg(&prefix)
        .stdin(Stdio::null())
        .output()
        .expect("run the JS SDK push check");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a2a_push_check.mjs failed\n--- stdout\n{so}\n--- stderr\n{se}"
    );
    assert!(so.contains("checks passed"), "{so}");
    let task_id = so
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("task "))
        .expect("the task id");
    let hits = hook.until_terminal("/js", Duration::from_secs(30));
    assert_delivered(&hits, task_id, "js-token", "Bearer js-credentials", "push me too");
}

/// Over the door's own JSON-RPC: a config created on a task that already ended gets the task as
/// it stands (one update); a config of the same id replaces it; the bound per task; paging; each
/// refusal names its field, however the address is spelled, and a refused SendMessage starts no
/// task. (A formation token not reaching these methods is `door::formation_tokens_*`.)
#[test]
fn configs_are_bounded_paged_judged_and_hold_nothing_up() {
    let hook = Webhook::start(&[]);
    let sb = Sandbox::new();
    let d = echo_door(&sb);
    let op = d.op();
    let msg = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "late"}]}});
    let task = d.rpc(Some(&op), "SendMessage", msg)["result"]["task"].clone();
    let id = task["id"].as_str().expect("a task id").to_string();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let made = d.rpc(
        Some(&op),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "url": hook.url("/late"), "token": "t"}),
    );
    assert_eq!(
        made["result"],
        json!({"id": id, "taskId": id, "token": "t", "url": hook.url("/late")}),
        "{made}"
    );
    let hits = hook.until_terminal("/late", Duration::from_secs(30));
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert_eq!(hits[0].body["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(hits[0].body["task"]["artifacts"][0]["parts"][0]["text"], "late");

    // The same id again replaces the config; up to 8 a task (the first is the one above), then
    // -32602 naming taskId.
    for n in 1..8 {
        let r = d.rpc(
            Some(&op),
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "id": format!("c{n}"), "url": "http://127.0.0.1:9/"}),
        );
        assert_eq!(r["result"]["id"], format!("c{n}"), "{r}");
    }
    let full = d.rpc(
        Some(&op),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "c8", "url": "http://127.0.0.1:9/"}),
    );
    assert_eq!(full["error"]["code"], -32602, "{full}");
    assert_eq!(
        full["error"]["data"][0]["fieldViolations"][0]["field"], "taskId",
        "{full}"
    );
    let again = d.rpc(
        Some(&op),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "c3", "url": "http://localhost:9/x"}),
    );
    assert_eq!(again["result"]["url"], "http://localhost:9/x", "{again}");
    let listed = d.rpc(
        Some(&op),
        "ListTaskPushNotificationConfigs",
        json!({"taskId": id, "pageSize": 5}),
    );
    assert_eq!(
        listed["result"]["configs"].as_array().map(Vec::len),
        Some(5),
        "{listed}"
    );
    let token = listed["result"]["nextPageToken"]
        .as_str()
        .expect("a next page")
        .to_string();
    let rest = d.rpc(
        Some(&op),
        "ListTaskPushNotificationConfigs",
        json!({"taskId": id, "pageSize": 5, "pageToken": token}),
    );
    assert_eq!(rest["result"]["configs"].as_array().map(Vec::len), Some(3), "{rest}");
    assert_eq!(rest["result"]["nextPageToken"], "", "{rest}");

    // Each refusal names the field, whatever the spelling of the address.
    for url in [
        "http://169.254.169.254/",
        "http://2852039166/",
        "https://0xa9.0xfe.0xa9.0xfe/",
        "https://[::ffff:169.254.169.254]/",
        "http://example.com/hook",
        "http://[fe80::1]/",
        "https://[fd00:ec2::254]/",
        "ftp://127.0.0.1/",
    ] {
        let r = d.rpc(
            Some(&op),
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "url": url}),
        );
        assert_eq!(r["error"]["code"], -32602, "{url}: {r}");
        assert_eq!(
            r["error"]["data"][0]["fieldViolations"][0]["field"], "url",
            "{url}: {r}"
        );
        let send = d.rpc(
            Some(&op),
            "SendMessage",
            json!({"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                "configuration": {"taskPushNotificationConfig": {"url": url}}}),
        );
        assert_eq!(
            send["error"]["data"][0]["fieldViolations"][0]["field"], "configuration.taskPushNotificationConfig.url",
            "{url}: {send}"
        );
    }
    // No task was created by a refused SendMessage.
    assert_eq!(d.rpc(Some(&op), "ListTasks", json!({}))["result"]["totalSize"], 1);

    // A webhook that takes the connection and never answers holds up nothing: the task
    // completes, the blocking reply comes, other requests are served meanwhile.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind a silent webhook");
    let silent_url = format!("http://127.0.0.1:{}/", silent.local_addr().expect("addr").port());
    let send = d.rpc(
        Some(&op),
        "SendMessage",
        json!({"message": {"messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "not held"}]},
            "configuration": {"taskPushNotificationConfig": {"url": silent_url}}}),
    );
    assert_eq!(
        send["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{send}"
    );
    let held = send["result"]["task"]["id"].as_str().expect("an id").to_string();
    let got = d.rpc(
        Some(&op),
        "GetTaskPushNotificationConfig",
        json!({"taskId": held, "id": held}),
    );
    assert_eq!(got["result"]["url"], silent_url.as_str(), "{got}");
    assert_eq!(d.rpc(Some(&op), "ListTasks", json!({}))["result"]["totalSize"], 2);
    drop(silent);
}

/// The config methods as the A2A TCK (a2aproject/a2a-tck) calls them, which the door serves as
/// A2A has it: Get, List and Delete name the task by its proto field name (`task_id`), which
/// ProtoJSON parsers accept beside the JSON name (A2A §5.5 follows ProtoJSON, ADR-001), and a
/// config's URL names a host that does not resolve here (`.invalid` never does, RFC 6761): it is
/// stored, to be resolved and judged at each delivery. The same field under both names is
/// `-32602`; an unknown task under either is `-32001`.
#[test]
fn configs_are_read_under_proto_field_names_and_unresolved_hosts_are_stored() {
    let sb = Sandbox::new();
    let d = echo_door(&sb);
    let op = d.op();
    let msg = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "tck"}]}});
    let task = d.rpc(Some(&op), "SendMessage", msg)["result"]["task"].clone();
    let id = task["id"].as_str().expect("a task id").to_string();

    let url = "https://hooks.example.invalid/webhook";
    let made = d.rpc(
        Some(&op),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "tck-1", "url": url}),
    );
    assert_eq!(
        made["result"],
        json!({"id": "tck-1", "taskId": id, "url": url}),
        "{made}"
    );
    let by_proto_name = d.rpc(
        Some(&op),
        "CreateTaskPushNotificationConfig",
        json!({"task_id": id, "id": "tck-2", "url": url}),
    );
    assert_eq!(by_proto_name["result"]["taskId"], json!(id), "{by_proto_name}");

    let got = d.rpc(
        Some(&op),
        "GetTaskPushNotificationConfig",
        json!({"task_id": id, "id": "tck-1"}),
    );
    assert_eq!(got["result"], made["result"], "{got}");
    let listed = d.rpc(
        Some(&op),
        "ListTaskPushNotificationConfigs",
        json!({"task_id": id, "page_size": 1}),
    );
    assert_eq!(listed["result"]["configs"], json!([made["result"]]), "{listed}");
    assert_eq!(listed["result"]["nextPageToken"], "1", "{listed}");
    let deleted = d.rpc(
        Some(&op),
        "DeleteTaskPushNotificationConfig",
        json!({"task_id": id, "id": "tck-1"}),
    );
    assert_eq!(deleted["result"], json!({}), "{deleted}");
    let gone = d.rpc(
        Some(&op),
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": "tck-1"}),
    );
    assert_eq!(gone["error"]["code"], -32001, "{gone}");

    let twice = d.rpc(
        Some(&op),
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "task_id": id, "id": "tck-2"}),
    );
    assert_eq!(twice["error"]["code"], -32602, "{twice}");
    assert_eq!(
        twice["error"]["data"][0]["fieldViolations"][0]["field"], "taskId",
        "{twice}"
    );
    for method in [
        "GetTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
    ] {
        let r = d.rpc(
            Some(&op),
            method,
            json!({"task_id": "nonexistent-task-id", "id": "default"}),
        );
        assert_eq!(r["error"]["code"], -32001, "{method}: {r}");
        assert_eq!(r["error"]["message"], "Task not found", "{method}: {r}");
    }
    // What the URL rule judges without resolving is still refused at once: plain http to a name.
    let refused = d.rpc(
        Some(&op),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "url": "http://hooks.example.invalid/"}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}
