//! Remote capsules (issue #34, docs/reference/capsules.md#remote-capsules): a member whose door
//! forwards its tasks to an A2A v1.0 agent nobody here wrote, the official A2A Python SDK's
//! server (`tests/interop/a2a_remote_agent.py`), provisioned by the test under `target/`.
//! The member is the real binary, its door the real door; the remote agent logs what reached it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::door::{AUTH, Door, FRM, Key, Member, PEERS, serve};
use crate::support::python::python_with;
use crate::support::{Sandbox, member_traces, repo_root, stderr, stdout};

use crate::support::pins::A2A_PY as A2A_SERVER;

/// The remote agent's bearer (long enough to be looked for in every record).
const KEY: &str = "far-agent-key-7c41e9b2d05a";
const KEY_VAR: &str = "FAR_AGENT_KEY";

/// `a2a_remote_agent.py` on 127.0.0.1; killed when dropped.
struct FarAgent {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    port: u16,
    dir: tempfile::TempDir,
}

impl FarAgent {
    /// Started with `env` (`A2A_TEST_KEY`, `A2A_TEST_STREAMING`); the key goes by environment.
    fn start(env: &[(&str, &str)]) -> FarAgent {
        let python = python_with(A2A_SERVER, "a2a.server.routes, uvicorn, starlette");
        let dir = tempfile::Builder::new().prefix("mur-far-").tempdir().expect("tempdir");
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let mut child = Command::new(python)
            .arg(repo_root().join("tests/interop/a2a_remote_agent.py"))
            // Not the repository: the SDK's `types` package must not be shadowed.
            .current_dir(dir.path())
            .env("A2A_TEST_LOG", dir.path().join("requests.log"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn the A2A SDK agent");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let Ok(port) = line.trim().parse::<u16>() else {
            let _ = child.kill();
            let _ = child.wait();
            let err = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
            panic!("the A2A SDK agent printed no port ({line:?}):\n{err}");
        };
        FarAgent {
            child,
            _stdout: stdout,
            port,
            dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// Every line the agent logged so far.
    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn tasks(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter_map(|l| l.strip_prefix("task ").map(str::to_string))
            .collect()
    }
}

impl Drop for FarAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A remote capsule `local/<name>@0.1.0` forwarding to `url`, with an authenticating door that
/// serves peers and queues tasks.
fn install_remote(sb: &Sandbox, name: &str, url: &str, extra: &str) {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\nremote:\n  url: {url}\n  api_key: ${{{KEY_VAR}}}\n  timeout: 20\n{AUTH}{PEERS}{}{extra}",
        serve(4)
    );
    sb.install_manifest(name, &manifest);
}

fn text(text: &str) -> Value {
    json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// Every file of a records directory, as text: none may hold the remote key.
fn records_text(dir: &Path) -> String {
    let mut out = String::new();
    for e in walk(dir) {
        out.push_str(&String::from_utf8_lossy(&std::fs::read(e).unwrap_or_default()));
    }
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

/// The member's door forwards what its roster lets reach it, streaming, asking and cancelling
/// through to the Python SDK's agent, which sees the member's bearer and nothing of the caller's.
#[test]
fn a_remote_member_forwards_its_tasks_to_the_python_sdk_agent() {
    let mut far = FarAgent::start(&[("A2A_TEST_KEY", KEY)]);
    let sb = Sandbox::new();
    install_remote(&sb, "far", &far.url(), "");
    let key = Key::new(31);
    let m = Member {
        key: &key,
        formation: FRM,
        name: "far",
    };
    let d = Door::member_with(&sb, "far", &m, &[(KEY_VAR, KEY)]);
    let lead = format!("Bearer {}", key.mint(FRM, "lead", "far"));

    // A caller the roster lets in: the remote agent's answer is the task's.
    let reply = d.rpc(Some(&lead), "SendMessage", text("hello"));
    let task = &reply["result"]["task"];
    assert_eq!(
        task["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{reply}\n{}",
        d.stderr()
    );
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "remote says: hello");

    // A genuine token for another edge: 403 at the member's door, and nothing reaches the agent.
    let outsider = format!("Bearer {}", key.mint(FRM, "outsider", "reviewer"));
    let h = d.call(Some(&outsider), "SendMessage", text("must not arrive"));
    assert_eq!(h.status, 403, "{}", h.body);
    let h = d.call(None, "SendMessage", text("must not arrive either"));
    assert_eq!(h.status, 401, "{}", h.body);

    // A streamed answer arrives in chunks, each as the agent sent it (members follow a task
    // with SubscribeToTask; the operator may open a stream at once).
    let events = d
        .stream(Some(&d.op()), "SendStreamingMessage", text("chunks: one two three"))
        .rest();
    let chunks: Vec<String> = events
        .iter()
        .filter_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .map(str::to_string)
        .collect();
    // The agent sends a chunk every 50 ms; at least two reach the caller apart.
    assert!(chunks.len() >= 2, "{events:?}");
    assert!(chunks.concat().starts_with("onetwothree"), "{chunks:?}");
    let last = events.last().expect("events");
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );

    // The remote agent asks: the member's task asks its caller, and the answer goes back.
    let asking = d.send(Some(&lead), "ask: Which colour?", true);
    let id = asking["id"].as_str().expect("id").to_string();
    let asked = d.wait_state(Some(&lead), &id, "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(
        asked["status"]["message"]["parts"][0]["text"], "Which colour?",
        "{asked}"
    );
    let answer =
        json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "blue"}]}});
    d.rpc(Some(&lead), "SendMessage", answer);
    let done = d.wait_state(Some(&lead), &id, "TASK_STATE_COMPLETED");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "answered: blue", "{done}");

    // CancelTask reaches the remote agent.
    let hang = d.send(Some(&lead), "hang", true);
    let hang_id = hang["id"].as_str().expect("id").to_string();
    let seen = crate::support::wait_until(Duration::from_secs(10), || far.tasks().iter().any(|t| t == "hang"));
    assert!(seen.is_some(), "{:?}", far.log());
    d.rpc(Some(&lead), "CancelTask", json!({"id": hang_id}));
    d.wait_state(Some(&lead), &hang_id, "TASK_STATE_CANCELED");
    let cancelled = crate::support::wait_until(Duration::from_secs(10), || {
        far.log().iter().any(|l| l.starts_with("cancel "))
    });
    assert!(cancelled.is_some(), "{:?}", far.log());

    // A remote failure is the task's, with the agent's words.
    let failed = d.send(Some(&lead), "fail", false);
    assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED", "{failed}");
    let why = failed["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("the far agent always fails this"), "{why}");

    // What reached the agent: the tasks let in, each request with the member's bearer only.
    assert_eq!(
        far.tasks(),
        [
            "hello",
            "chunks: one two three",
            "ask: Which colour?",
            "blue",
            "hang",
            "fail"
        ]
    );
    let log = far.log();
    let auths: Vec<&String> = log.iter().filter(|l| l.starts_with("auth ")).collect();
    assert!(!auths.is_empty());
    assert!(auths.iter().all(|a| *a == &format!("auth Bearer {KEY}")), "{auths:?}");
    assert!(
        !log.iter().any(|l| l.contains("mft1.")),
        "a caller's token reached the agent: {log:?}"
    );
    // ...and the key is nowhere in the member's records or output.
    assert!(
        !records_text(&d.records_dir()).contains(KEY),
        "the key is in the records"
    );
    assert!(!d.stderr().contains(KEY), "the key is on stderr");

    // The agent gone after readiness: the next task fails at once, saying so (its kept
    // connection is found closed and a new one is refused).
    let _ = far.child.kill();
    let _ = far.child.wait();
    let gone = d.send(Some(&lead), "anyone there?", false);
    assert_eq!(gone["status"]["state"], "TASK_STATE_FAILED", "{gone}");
    let why = gone["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("the remote agent cannot be reached"), "{why}");
}

/// A card without streaming: the task goes out as a blocking SendMessage (GetTask only if the
/// reply still shows it live).
#[test]
fn without_streaming_the_member_polls_the_remote_task() {
    let far = FarAgent::start(&[("A2A_TEST_STREAMING", "0")]);
    let sb = Sandbox::new();
    // No key: the card asks for none, and nothing is sent.
    let manifest = format!(
        "name: near\nversion: 0.1.0\nremote:\n  url: {}.well-known/agent-card.json\n{AUTH}{}",
        far.url(),
        serve(2)
    );
    sb.install_manifest("near", &manifest);
    // Spans exported (to a collector that takes anything): the remote requests carry the
    // task span's traceparent, in the caller's trace.
    let collector = crate::support::provider::Provider::start(
        (0..64)
            .map(|_| crate::support::provider::Reply::json(json!({})).into())
            .collect(),
    );
    let d = Door::start(&sb, "near", &[("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url())]);
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = format!("00-{TRACE}-00f067aa0ba902b7-01");
    let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": text("polled")}).to_string();
    let h = d.post(Some(&d.op()), &[("traceparent", &caller)], &body);
    let task = h.json()["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "remote says: polled");
    let log = far.log();
    let parents: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("traceparent ")).collect();
    assert!(!parents.is_empty(), "{log:?}");
    assert!(
        parents
            .iter()
            .all(|p| p.starts_with(&format!("00-{TRACE}-")) && *p != caller),
        "{parents:?}"
    );
    let methods: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("method ")).collect();
    assert_eq!(methods.first(), Some(&"SendMessage"), "{log:?}");
    assert!(methods[1..].iter().all(|m| *m == "GetTask"), "{log:?}");
    assert!(log.iter().all(|l| !l.starts_with("auth ") || l == "auth -"), "{log:?}");

    // The next task reuses the connection the first one opened, as a direct client would.
    let again = d.send(Some(&d.op()), "polled again", false);
    assert_eq!(
        again["artifacts"][0]["parts"][0]["text"], "remote says: polled again",
        "{again}"
    );
    let log = far.log();
    let peers: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("peer ")).collect();
    assert!(peers.len() >= 2 && peers.iter().all(|p| *p == peers[0]), "{log:?}");
}

/// A component lead (relay.wat) calls the remote member through a real formation and answers
/// with the remote agent's answer.
#[test]
fn a_component_lead_answers_with_the_remote_members_answer() {
    let far = FarAgent::start(&[("A2A_TEST_KEY", KEY)]);
    let sb = Sandbox::new();
    install_remote(&sb, "far", &far.url(), "");
    sb.install_component(
        "relay",
        "src/capsule/testdata/relay.wat",
        "capabilities:\n  network:\n    allow: [localhost]\n",
    );
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/far, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .expect("roster");
    let out = sb
        .mur(&dir)
        .args(["run", "--roster", "--task", "through the lead"])
        .env(KEY_VAR, KEY)
        .output()
        .expect("run");
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), "remote says: through the lead\n"),
        "{}",
        stderr(&out)
    );
    assert_eq!(far.tasks(), ["through the lead"]);
    assert!(!stderr(&out).contains(KEY));
    // `mur doctor` names the host the remote member's tasks go to and the variable it reads.
    let doctor = sb.mur(&dir).arg("doctor").env(KEY_VAR, KEY).output().expect("doctor");
    let host = far
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let said = format!("{}{}", stdout(&doctor), stderr(&doctor));
    assert!(
        said.contains(&format!("env: worker reads {KEY_VAR}, sent to {host} (remote agent)")),
        "{said}"
    );
    assert!(!said.contains(KEY), "{said}");
    let worker: Vec<Value> = member_traces(&sb, "worker").into_iter().flatten().collect();
    assert!(
        worker
            .iter()
            .any(|r| r["event_type"] == "a2a_task_received" && r["caller_member"] == "lead"),
        "{worker:?}"
    );
    assert!(!serde_json::to_string(&worker).unwrap_or_default().contains(KEY));
}

/// A remote agent that echoes the key it was sent — in a failed status, in a rejection, in a
/// JSON-RPC error — hands it to no one: the member scrubs every credential it holds where the
/// agent's replies are read, so the caller's answer, `out/result.txt`, `logs/bootstrap.log`,
/// `trace.jsonl` and stderr say `[redacted]` instead.
#[test]
fn a_remote_agent_quoting_its_key_passes_it_on_to_no_one() {
    let far = FarAgent::start(&[("A2A_TEST_KEY", KEY)]);
    let sb = Sandbox::new();
    install_remote(&sb, "far", &far.url(), "");
    let cases = [
        (
            "leak: failed",
            "TASK_STATE_FAILED",
            "the remote agent's task failed: bad credential: Bearer [redacted]",
        ),
        (
            "leak: rejected",
            "TASK_STATE_REJECTED",
            "the remote agent rejected the task: not for Bearer [redacted]",
        ),
        (
            "leak: error",
            "TASK_STATE_FAILED",
            "the remote agent answered JSON-RPC error -32603: cannot serve Authorization: Bearer [redacted]",
        ),
    ];
    for (task, state, said) in cases {
        let out = sb
            .mur(&sb.path("work"))
            .args(["run", "--capsule", "local/far", "--capsule-version", "0.1.0", "--json"])
            .args(["--task", task])
            .env(KEY_VAR, KEY)
            .output()
            .expect("mur run");
        let (text, err) = (stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(1), "{task}: {text}{err}");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .collect();
        let answer = lines.last().expect("the task's line");
        assert_eq!(answer["state"], state, "{task}: {text}");
        assert!(err.contains(said), "{task}: {err}");
        let dir = std::path::PathBuf::from(lines[0]["records_dir"].as_str().expect("records_dir"));
        let result = std::fs::read_to_string(dir.join("out/result.txt")).expect("out/result.txt");
        assert!(result.ends_with(said), "{task}: {result}");
        for f in ["logs/bootstrap.log", "trace.jsonl"] {
            assert!(dir.join(f).is_file(), "{task}: no {f}");
        }
        assert!(
            !text.contains(KEY) && !err.contains(KEY) && !records_text(&dir).contains(KEY),
            "{task}: the key was passed on"
        );
    }
    // The agent did quote the key it was sent: every request carried it.
    let log = far.log();
    let auths: Vec<&String> = log.iter().filter(|l| l.starts_with("auth ")).collect();
    assert!(
        auths.len() >= 3 && auths.iter().all(|a| *a == &format!("auth Bearer {KEY}")),
        "{log:?}"
    );
}

/// Readiness refusals: the member never reports ready, and says why with its code.
#[test]
fn a_remote_member_that_cannot_be_ready_is_refused_at_start() {
    let sb = Sandbox::new();
    let far = FarAgent::start(&[("A2A_TEST_KEY", KEY)]);
    install_remote(&sb, "far", &far.url(), "");
    let run = |env: &[(&str, &str)]| {
        let mut cmd = sb.mur(&sb.path("work"));
        cmd.args(["run", "--capsule", "local/far", "--capsule-version", "0.1.0"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        (out.status.code(), stderr(&out))
    };
    // The credential variable unset: refused at launch, not at the first task.
    let (code, err) = run(&[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("error[E-RUN-071]") && err.contains(KEY_VAR), "{err}");
    assert!(
        far.log().is_empty(),
        "nothing is sent without the credential: {:?}",
        far.log()
    );
    // In a formation the launcher names the member that could not be ready.
    sb.install_component(
        "relay",
        "src/capsule/testdata/relay.wat",
        "capabilities:\n  network:\n    allow: [localhost]\n",
    );
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/far, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .expect("roster");
    let out = sb.run(&dir, &["run", "--roster", "--task", "never"]);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("worker") && err.contains("E-RUN-071"), "{err}");
    assert!(far.log().is_empty(), "{:?}", far.log());

    // Nobody listening there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://127.0.0.1:{}/", dead.local_addr().expect("addr").port());
    drop(dead);
    install_remote(&sb, "gone", &dead_url, "");
    let out = sb
        .mur(&sb.path("work"))
        .args(["run", "--capsule", "local/gone", "--capsule-version", "0.1.0"])
        .env(KEY_VAR, KEY)
        .output()
        .expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E-RUN-070]") && err.contains("cannot be fetched"),
        "{err}"
    );
    assert!(!err.contains(KEY));

    // A card of A2A 0.3: not ready, and why.
    let old = crate::support::provider::Provider::start(vec![
        crate::support::provider::Reply::json(
            json!({"name": "old", "protocolVersion": "0.3.0", "url": "http://127.0.0.1:9/"}),
        )
        .into(),
    ]);
    install_remote(&sb, "old", &format!("{}/.well-known/agent-card.json", old.url()), "");
    let out = sb
        .mur(&sb.path("work"))
        .args(["run", "--capsule", "local/old", "--capsule-version", "0.1.0"])
        .env(KEY_VAR, KEY)
        .output()
        .expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E-RUN-070]") && err.contains("of A2A 0.3.0, not 1.0"),
        "{err}"
    );
    assert!(
        old.requests().iter().all(|r| r.header("authorization").is_none()),
        "the card is fetched without the key"
    );
}

use crate::support::pins::A2A_JS;

/// `a2a_remote_agent.mjs` under node, on 127.0.0.1; killed when dropped.
struct JsAgent {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    port: u16,
    dir: tempfile::TempDir,
}

impl JsAgent {
    fn start(key: &str) -> JsAgent {
        let prefix = crate::support::toolchains::node_with(A2A_JS);
        let dir = tempfile::Builder::new()
            .prefix("mur-far-js-")
            .tempdir()
            .expect("tempdir");
        // ES modules resolve packages beside the script, so the script runs from a directory
        // whose node_modules is the provisioned one.
        let script = dir.path().join("agent.mjs");
        std::fs::copy(repo_root().join("tests/interop/a2a_remote_agent.mjs"), &script).expect("copy script");
        std::os::unix::fs::symlink(prefix.join("node_modules"), dir.path().join("node_modules")).expect("link");
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let mut child = Command::new("node")
            .arg(&script)
            .current_dir(dir.path())
            .env("A2A_TEST_LOG", dir.path().join("requests.log"))
            .env("A2A_TEST_KEY", key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn node");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let Ok(port) = line.trim().parse::<u16>() else {
            let _ = child.kill();
            let _ = child.wait();
            let err = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
            panic!("the A2A JS SDK agent printed no port ({line:?}):\n{err}");
        };
        JsAgent {
            child,
            _stdout: stdout,
            port,
            dir,
        }
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for JsAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same member in front of the official A2A JS SDK's server: an answer, a streamed one in
/// chunks, and a cancel that reaches it; the agent sees the member's bearer only.
#[test]
fn a_remote_member_forwards_its_tasks_to_the_js_sdk_agent() {
    let far = JsAgent::start(KEY);
    let sb = Sandbox::new();
    install_remote(&sb, "farjs", &format!("http://127.0.0.1:{}/", far.port), "");
    let d = Door::start(&sb, "farjs", &[(KEY_VAR, KEY)]);
    let op = d.op();
    let task = d.send(Some(&op), "hello", false);
    assert_eq!(
        task["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{task}\n{}",
        d.stderr()
    );
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "js says: hello");

    let events = d
        .stream(Some(&op), "SendStreamingMessage", text("chunks: uno dos tres"))
        .rest();
    let chunks: Vec<&str> = events
        .iter()
        .filter_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert!(chunks.len() >= 2, "{events:?}");
    assert!(chunks.concat().starts_with("unodostres"), "{chunks:?}");

    let hang = d.send(Some(&op), "hang", true);
    let id = hang["id"].as_str().expect("id").to_string();
    let seen = crate::support::wait_until(Duration::from_secs(10), || far.log().iter().any(|l| l == "task hang"));
    assert!(seen.is_some(), "{:?}", far.log());
    d.rpc(Some(&op), "CancelTask", json!({"id": id}));
    d.wait_state(Some(&op), &id, "TASK_STATE_CANCELED");
    let cancelled = crate::support::wait_until(Duration::from_secs(10), || {
        far.log().iter().any(|l| l.starts_with("cancel "))
    });
    assert!(cancelled.is_some(), "{:?}", far.log());

    // What `mur new --capsule NAME --remote URL` writes builds, installs and runs a task.
    let url = format!("http://127.0.0.1:{}/", far.port);
    let out = sb.run(&sb.path("src"), &["new", "--capsule", "scaffolded", "--remote", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("export SCAFFOLDED_API_KEY="), "{}", stdout(&out));
    let dir = sb.path("src/scaffolded");
    let out = sb.run(&dir, &["build", "."]);
    assert!(out.status.success(), "{}", stderr(&out));
    let zip = stdout(&out).trim().rsplit(": ").next().expect("zip").to_string();
    assert!(sb.run(&dir, &["install", "-g", &zip]).status.success());
    let out = sb
        .mur(&sb.path("work"))
        .args([
            "run",
            "--capsule",
            "local/scaffolded",
            "--capsule-version",
            "0.1.0",
            "--task",
            "from the scaffold",
        ])
        .env("SCAFFOLDED_API_KEY", KEY)
        .output()
        .expect("run");
    assert_eq!(stdout(&out), "js says: from the scaffold\n", "{}", stderr(&out));
    let log = far.log();
    let auths: Vec<&String> = log.iter().filter(|l| l.starts_with("auth ")).collect();
    assert!(
        !auths.is_empty() && auths.iter().all(|a| *a == &format!("auth Bearer {KEY}")),
        "{auths:?}"
    );
    assert!(!records_text(&d.records_dir()).contains(KEY));
}

/// A hostile remote agent, scripted by hand on 127.0.0.1: a card that passes, then for each
/// task the fault its text names.
fn hostile_agent() -> crate::support::provider::Provider {
    use crate::support::provider::{Piece, Provider, Reply, Step};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let busy = Arc::new(AtomicUsize::new(0));
    let port = Arc::new(std::sync::OnceLock::<String>::new());
    let at = Arc::clone(&port);
    let handler = Arc::new(move |req: &crate::support::provider::Request| -> Reply {
        let url = at.get().cloned().unwrap_or_default();
        if req.method == "GET" {
            return Reply::json(json!({
                "name": "hostile",
                "supportedInterfaces": [{"url": format!("{url}/"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {"streaming": true},
            }));
        }
        let body = req.json();
        if body["method"] != "SendStreamingMessage" {
            return Reply::json(
                json!({"jsonrpc": "2.0", "id": body["id"], "result": {"task": {"id": "t", "status": {"state": "TASK_STATE_CANCELED"}}}}),
            );
        }
        let event = |result: Value| {
            format!(
                "data: {}\n\n",
                json!({"jsonrpc": "2.0", "id": body["id"], "result": result})
            )
        };
        let working = event(json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}));
        let done = event(
            json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": [{"artifactId": "a", "parts": [{"text": "finally"}]}]}}),
        );
        match body["params"]["message"]["parts"][0]["text"].as_str().unwrap_or("") {
            "garbage" => Reply::status(200, "<html>not json-rpc</html>"),
            "garbage stream" => Reply::pieces(vec![Piece::Bytes(working), Piece::Bytes("data: {{{ nope\n\n".into())]),
            "refused" => Reply::status(401, r#"{"error":"who are you"}"#),
            "forbidden" => Reply::status(403, r#"{"error":"not you"}"#),
            "always busy" => Reply::status(429, r#"{"error":"slow down"}"#).header("retry-after", "30"),
            "not mine" => Reply::sse(&[
                working,
                event(
                    json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_REJECTED", "message": {"parts": [{"text": "not my kind of work"}]}}}}),
                ),
            ]),
            "redirect" => Reply::status(307, "").header("location", "http://127.0.0.2:9/"),
            "busy" if busy.fetch_add(1, Ordering::SeqCst) == 0 => {
                Reply::status(429, r#"{"error":"slow down"}"#).header("retry-after", "1")
            }
            "busy" => Reply::sse(&[working, done]),
            "huge event" => Reply::pieces(vec![
                Piece::Bytes(working),
                Piece::Bytes(format!("data: \"{}", "x".repeat(1_200_000))),
            ]),
            "endless" => Reply::pieces(vec![Piece::Bytes(working), Piece::Pause(Duration::from_secs(8))]),
            // A plain JSON-RPC reply (no stream) past the reply bound.
            "huge answer" => Reply::json(json!({"jsonrpc": "2.0", "id": body["id"], "result": {"task": {
                "id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
                "artifacts": [{"artifactId": "a", "parts": [{"text": "x".repeat(9 << 20)}]}],
            }}})),
            _ => Reply::status(500, "{}"),
        }
    });
    let script: Vec<Step> = (0..40)
        .map(|_| {
            let h = Arc::clone(&handler);
            Step::func(move |r| h(r))
        })
        .collect();
    let p = Provider::start(script);
    let _ = port.set(p.url().to_string());
    p
}

/// Garbage, refusals, redirects, a rate limit, an oversized event and an answer that never comes:
/// each ends the member's task with a clear failure, within its bound; the retry is honoured.
/// A refused credential, a rate limit past the bound and a remote rejection end it `rejected`
/// (a caller's call to it then ends `rejected`, as at a door that refuses). Spans are not
/// exported, and every forwarded request still carries the task's trace context.
#[test]
fn a_hostile_remote_agent_fails_tasks_clearly_and_within_their_bounds() {
    let far = hostile_agent();
    let sb = Sandbox::new();
    let manifest = format!(
        "name: hostile\nversion: 0.1.0\nremote:\n  url: {}/\n  timeout: 2\n{AUTH}{}",
        far.url(),
        serve(8)
    );
    sb.install_manifest("hostile", &manifest);
    let d = Door::start(&sb, "hostile", &[]);
    let op = d.op();
    const FAILED: &str = "TASK_STATE_FAILED";
    const REJECTED: &str = "TASK_STATE_REJECTED";
    let fails = [
        ("garbage", FAILED, "not JSON"),
        ("garbage stream", FAILED, "stream event that is not JSON"),
        ("refused", REJECTED, "refused this member's credential (HTTP 401)"),
        ("forbidden", REJECTED, "refused this member's credential (HTTP 403)"),
        (
            "always busy",
            REJECTED,
            "answered HTTP 429 and asked to wait 30000 ms, past this task's bound",
        ),
        (
            "not mine",
            REJECTED,
            "the remote agent rejected the task: not my kind of work",
        ),
        ("redirect", FAILED, "redirect (HTTP 307), which is never followed"),
        // A 5xx is retried after 0.5 s and 1 s; the next wait would pass the 2 s bound.
        (
            "unavailable",
            FAILED,
            "answered HTTP 500 and asked to wait 2000 ms, past this task's bound",
        ),
        ("huge event", FAILED, "past its bound"),
        ("huge answer", FAILED, "reply is longer than 8388608 bytes"),
        (
            "endless",
            FAILED,
            "did not finish within remote.timeout (2 s); its task was cancelled",
        ),
    ];
    let mut ids = Vec::new();
    for (text, state, why) in fails {
        let started = std::time::Instant::now();
        let task = d.send(Some(&op), text, false);
        ids.push(task["id"].as_str().unwrap_or_default().to_string());
        assert_eq!(task["status"]["state"], state, "{text}: {task}");
        let said = task["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(said.contains(why), "{text}: {said}");
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{text} took {:?}",
            started.elapsed()
        );
    }
    // The never-ending task was cancelled at the agent.
    assert!(
        far.requests().iter().any(|r| r.json()["method"] == "CancelTask"),
        "no CancelTask"
    );
    // A 429 is retried after its retry-after, and the retry's answer is the task's.
    let task = d.send(Some(&op), "busy", false);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "finally");
    let busy = far
        .requests()
        .iter()
        .filter(|r| r.json()["params"]["message"]["parts"][0]["text"] == "busy")
        .count();
    assert_eq!(busy, 2);

    // A rejected task's end is recorded as such, with its reason.
    let records = d.trace();
    let rejected: Vec<&str> = records
        .iter()
        .filter(|r| r["event_type"] == "task_rejected")
        .filter_map(|r| r["task_id"].as_str())
        .collect();
    assert_eq!(rejected, [&ids[2], &ids[3], &ids[4], &ids[5]], "{records:?}");

    // The caller's trace context reaches the remote agent as the caller sent it: this member
    // exports no span of its own to stand between them.
    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": text("busy")}).to_string();
    let h = d.post(Some(&op), &[("traceparent", CALLER)], &body);
    assert_eq!(
        h.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        h.body
    );
    // Every forwarded request carried one: the caller's, or one in a trace of the task's own
    // (the task id's digits as the trace id).
    let posts: Vec<_> = far.requests().into_iter().filter(|r| r.method == "POST").collect();
    let last = posts.last().expect("the last task's request");
    assert_eq!(last.header("traceparent"), Some(CALLER));
    for r in &posts[..posts.len() - 1] {
        // Each request's id names the member's task it was sent for (`tsk_…-1`, `tsk_…-cancel`).
        let body = r.json();
        let task = body["id"]
            .as_str()
            .unwrap_or_default()
            .split('-')
            .next()
            .unwrap_or_default();
        let trace = task.strip_prefix("tsk_").unwrap_or_default();
        let tp = r.header("traceparent").unwrap_or_default();
        assert!(
            trace.len() == 32 && tp.len() == 55 && tp.starts_with(&format!("00-{trace}-")) && tp.ends_with("-00"),
            "{tp:?} on {body}"
        );
    }
    assert!(
        ids.iter()
            .all(|id| posts.iter().any(|r| r.text().contains(id.as_str())))
    );
}

/// A remote member that pins its agent's card key (`remote.card_key`) starts only when the card is
/// signed by that key. The agent here is another mur door: its card is signed with its own key.
#[test]
fn a_remote_member_trusts_only_a_card_signed_by_the_key_it_pins() {
    let sb = Sandbox::new();
    crate::door::install(&sb, "echo", "agent", &serve(4));
    let agent = Door::start(&sb, "agent", &[]);
    let card = agent.get("/.well-known/agent-card.json", None).json();
    let key = card["signatures"][0]["header"]["jwk"]["x"]
        .as_str()
        .unwrap_or_else(|| panic!("the door's card names its key: {card}"))
        .to_string();
    // Same origin as the card's interface (`localhost`), so no allow rule is needed.
    let url = agent.url("/").replace("127.0.0.1", "localhost");
    let manifest = |name: &str, key: &str| {
        format!("name: {name}\nversion: 0.1.0\nremote:\n  url: {url}\n  card_key: {key}\n  timeout: 20\n")
    };
    let run = |capsule: &str| {
        sb.mur(&sb.path("work"))
            .args([
                "run",
                "--capsule",
                capsule,
                "--capsule-version",
                "0.1.0",
                "--task",
                "signed and sealed",
            ])
            .output()
            .expect("run")
    };
    let tasks = || {
        agent.call(None, "ListTasks", json!({})).json()["result"]["tasks"]
            .as_array()
            .map_or(0, Vec::len)
    };

    sb.install_manifest("pinned", &manifest("pinned", &key));
    let out = run("local/pinned");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), "signed and sealed");
    assert_eq!(tasks(), 1);

    // Pinned to a key that did not sign the card (RFC 8037's example key): not trusted, no task.
    sb.install_manifest(
        "mispinned",
        &manifest("mispinned", "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"),
    );
    let out = run("local/mispinned");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E-RUN-070]") && err.contains("is not signed by the key remote.card_key names"),
        "{err}"
    );
    assert_eq!(tasks(), 1, "the agent got no task from a member that does not trust it");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

const LIMITS: &str = "urn:mur:a2a:limits:v1";

/// A client's deadline and budget reach the remote agent under the limits extension the card
/// declares, and the member ends the task at the deadline itself, though the agent would go on,
/// forwarding the cancel. Malformed limits are refused before a task exists; a task without any
/// sends none.
#[test]
fn a_remote_member_forwards_its_tasks_limits_and_keeps_their_deadline_itself() {
    let far = hostile_agent();
    let sb = Sandbox::new();
    let manifest = format!(
        "name: hostile\nversion: 0.1.0\nremote:\n  url: {}/\n  timeout: 60\n{AUTH}{}",
        far.url(),
        serve(8)
    );
    sb.install_manifest("hostile", &manifest);
    let d = Door::start(&sb, "hostile", &[]);
    let op = d.op();
    let card: Value = serde_json::from_str(&d.get("/.well-known/agent-card.json", None).body).expect("card");
    let declared = card["capabilities"]["extensions"]
        .as_array()
        .expect("extensions")
        .iter()
        .any(|e| e["uri"] == LIMITS && e["required"] == false);
    assert!(declared, "the card declares the extension: {card}");

    // "endless" streams `working` and then nothing for 8 s; remote.timeout is 60 s: only the
    // client's deadline can end it in time.
    let deadline_ms = now_ms() + 1500;
    let reply = d.rpc(
        Some(&op),
        "SendMessage",
        json!({"message": {"messageId": "m-lim", "role": "ROLE_USER", "parts": [{"text": "endless"}],
               "metadata": {LIMITS: {"budgetTokens": 700, "deadlineMs": deadline_ms}}}}),
    );
    let task = &reply["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_CANCELED", "{reply}");
    let sent = far
        .requests()
        .into_iter()
        .find(|r| r.json()["params"]["message"]["parts"][0]["text"] == "endless")
        .expect("the task reached the agent");
    assert_eq!(sent.header("a2a-extensions"), Some(LIMITS));
    assert_eq!(
        sent.json()["params"]["message"]["metadata"][LIMITS],
        json!({"budgetTokens": 700, "deadlineMs": deadline_ms})
    );
    let forwarded = crate::support::wait_until(Duration::from_secs(10), || {
        far.requests().iter().any(|r| r.json()["method"] == "CancelTask")
    });
    assert!(forwarded.is_some(), "the cancel at the deadline was forwarded");
    let canceled = d
        .trace()
        .into_iter()
        .find(|r| r["event_type"] == "task_canceled")
        .expect("task_canceled");
    assert!(
        canceled["reason"].as_str().is_some_and(|r| r.contains("E-GRT-002")),
        "{canceled}"
    );

    for (bad, field) in [
        (json!({"budgetTokens": 0}), "budgetTokens"),
        (json!({"deadlineMs": "soon"}), "deadlineMs"),
        (json!(7), "must be an object"),
    ] {
        let before = far.requests().len();
        let refused = d.rpc(
            Some(&op),
            "SendMessage",
            json!({"message": {"messageId": "m-bad", "role": "ROLE_USER", "parts": [{"text": "busy"}],
                   "metadata": {LIMITS: bad}}}),
        );
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(refused.to_string().contains(field), "{refused}");
        assert_eq!(far.requests().len(), before, "no task was forwarded");
    }

    let plain = d.send(Some(&op), "busy", false);
    assert_eq!(plain["status"]["state"], "TASK_STATE_COMPLETED", "{plain}");
    let last = far
        .requests()
        .into_iter()
        .rfind(|r| r.json()["params"]["message"]["parts"][0]["text"] == "busy")
        .expect("busy");
    assert_eq!(last.header("a2a-extensions"), None);
    assert!(
        last.json()["params"]["message"].get("metadata").is_none(),
        "{}",
        last.text()
    );
}
