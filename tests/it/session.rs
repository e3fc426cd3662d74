//! The member runtime, `mur run --capsule`, through the real binary
//! (docs/reference/formation.md#how-a-formation-ends): start-up refusals, the readiness line,
//! records and running records, every lifecycle, results, SIGTERM, the lifeline, the inherited
//! deadline, `mur ps` and `mur stop`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Sandbox, repo_root, stderr, stdout};

const CANCELED: &str = "canceled: the task was canceled before it completed, so it has no result";
const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";

/// Builds `actors/<actor>/capsule.wat` under `manifest` and installs it into the global store.
fn install(sb: &Sandbox, actor: &str, name: &str, manifest: &str) {
    let dir = sb.path(&format!("src/{name}"));
    std::fs::copy(
        repo_root().join("actors").join(actor).join("capsule.wat"),
        dir.join("capsule.wat"),
    )
    .expect("copy wat");
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("manifest");
    let out = sb.run(&dir, &["build", "."]);
    assert!(out.status.success(), "build: {}", stderr(&out));
    let zip = dir.join(format!("{name}-0.1.0.mur.zip"));
    let out = sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8")]);
    assert!(out.status.success(), "install: {}", stderr(&out));
}

/// A component capsule on `actor`'s code with the given lifecycle and a public door.
fn public(sb: &Sandbox, actor: &str, name: &str, acceptance: &str, after: &str) {
    let m = format!(
        "name: {name}\nversion: 0.1.0\ncomponent: capsule.wat\nlifecycle:\n  task_acceptance: {acceptance}\n  after_task: {after}\n"
    );
    install(sb, actor, name, &m);
}

/// `actors/echo` as shipped: queue + sleep, an authenticating door.
fn echo(sb: &Sandbox) {
    let m = std::fs::read_to_string(repo_root().join("actors/echo/murmur.yaml")).expect("echo manifest");
    install(sb, "echo", "echo", &m);
}

/// A running `mur run --capsule` with its stdout lines and stderr collected.
struct Member {
    child: Child,
    lines: Receiver<String>,
    err: Arc<Mutex<String>>,
    /// Ends once stderr is read to its end.
    err_reader: std::thread::JoinHandle<()>,
    ready: Value,
    status: Option<ExitStatus>,
}

fn run_args(name: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "run",
        "--capsule",
        &format!("local/{name}"),
        "--capsule-version",
        "0.1.0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

impl Member {
    /// Spawns the command and, with `--json`, reads the readiness line.
    fn start(mut cmd: Command, json: bool) -> Member {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn mur run");
        let out = child.stdout.take().expect("stdout");
        let mut errs = child.stderr.take().expect("stderr");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let err = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&err);
        let err_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = errs.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("stderr lock")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut m = Member {
            child,
            lines,
            err,
            err_reader,
            ready: Value::Null,
            status: None,
        };
        if json {
            let line = m
                .line(Duration::from_secs(30))
                .unwrap_or_else(|| panic!("no readiness line; stderr: {}", m.stderr()));
            m.ready = serde_json::from_str(&line).unwrap_or_else(|e| panic!("readiness line {line:?}: {e}"));
        }
        m
    }

    fn line(&self, within: Duration) -> Option<String> {
        match self.lines.recv_timeout(within) {
            Ok(l) => Some(l),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    fn stderr(&self) -> String {
        self.err.lock().expect("stderr lock").clone()
    }

    fn url(&self) -> String {
        format!("http://{}", self.ready["url"].as_str().expect("url"))
    }

    fn session_id(&self) -> String {
        self.ready["session_id"].as_str().expect("session_id").to_string()
    }

    /// The member's process, as its readiness line gives it.
    fn pid(&self) -> u32 {
        u32::try_from(self.ready["pid"].as_u64().expect("pid")).expect("a pid")
    }

    /// The port of the door's URL.
    fn port(&self) -> u16 {
        let url = self.ready["url"].as_str().expect("url");
        url.trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"))
    }

    fn records_dir(&self) -> PathBuf {
        PathBuf::from(self.ready["records_dir"].as_str().expect("records_dir"))
    }

    fn token(&self) -> Option<String> {
        self.ready["tokens"]["operator"].as_str().map(str::to_string)
    }

    /// One JSON-RPC call at the door; the parsed reply (or the HTTP status as `{"status":N}`).
    fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": method, "params": params}).to_string();
        let mut req = ureq::post(&self.url())
            .timeout(Duration::from_secs(30))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0");
        if let Some(t) = self.token() {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        match req.send_string(&body) {
            Ok(r) => serde_json::from_str(&r.into_string().expect("body")).expect("json reply"),
            Err(ureq::Error::Status(code, _)) => json!({ "status": code }),
            Err(e) => panic!("{method}: {e}"),
        }
    }

    /// SendMessage, waiting for the task to end; returns the Task.
    fn send(&self, text: &str) -> Value {
        let reply = self.rpc(
            "SendMessage",
            json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}}),
        );
        reply["result"]["task"].clone()
    }

    /// SendMessage returning at once; returns the Task as admitted (or refused).
    fn offer(&self, text: &str) -> Value {
        let reply = self.rpc(
            "SendMessage",
            json!({
                "configuration": {"returnImmediately": true},
                "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}
            }),
        );
        reply["result"]["task"].clone()
    }

    /// Waits until the door lists a task in `TASK_STATE_WORKING` (the capsule is running it).
    fn wait_working(&self) {
        let until = Instant::now() + LONG;
        while Instant::now() < until {
            let reply = self.rpc("ListTasks", json!({"status": "TASK_STATE_WORKING"}));
            if reply["result"]["totalSize"].as_u64().unwrap_or(0) > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no task started; stderr: {}", self.stderr());
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).expect("kill");
    }

    fn term(&self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
    }

    fn running(&mut self) -> bool {
        self.status.is_none() && self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the exit code (panics after `within`).
    fn wait(&mut self, within: Duration) -> i32 {
        let until = Instant::now() + within;
        loop {
            if let Some(s) = self.status {
                return s
                    .code()
                    .unwrap_or_else(|| panic!("ended by a signal: {s:?}; stderr: {}", self.stderr()));
            }
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                self.status = Some(s);
                crate::support::wait_until(crate::support::DRAIN, || self.err_reader.is_finished());
                continue;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("mur run did not exit within {within:?}; stderr: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every stdout line left after the process exited.
    fn rest(&self) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(l) = self.line(Duration::from_millis(500)) {
            v.push(l);
        }
        v
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn trace(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace.jsonl");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("trace line"))
        .collect()
}

fn events(t: &[Value]) -> Vec<String> {
    t.iter()
        .map(|r| r["event_type"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn a_task_with_json_prints_readiness_then_its_answer_and_keeps_records() {
    let sb = Sandbox::new();
    echo(&sb);
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args(
        "echo",
        &[
            "--task",
            "hello there",
            "--json",
            "--lifecycle-task-acceptance",
            "single",
            "--lifecycle-after-task",
            "exit",
        ],
    ));
    let mut m = Member::start(cmd, true);
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());

    let work = work.canonicalize().expect("canonical");
    let ses = m.session_id();
    let dir = m.records_dir();
    let r = &m.ready;
    let keys: Vec<&str> = r.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "auth",
            "name",
            "pid",
            "records_dir",
            "session_id",
            "url",
            "version",
            "workdir"
        ]
    );
    assert_eq!(
        (r["auth"].as_str(), r["name"].as_str(), r["version"].as_str()),
        (Some("bearer"), Some("local/echo"), Some("0.1.0"))
    );
    assert_eq!(r["pid"].as_u64(), Some(u64::from(m.child.id())));
    assert_eq!(r["workdir"].as_str(), work.to_str());
    assert!(r["url"].as_str().expect("url").starts_with("localhost:"), "{r}");
    assert_eq!(
        dir,
        sb.home()
            .join(".murmur/records")
            .join(work.strip_prefix("/").expect("abs"))
            .join(&ses)
    );

    let rest = m.rest();
    assert_eq!(rest.len(), 1, "{rest:?}");
    let answer: Value = serde_json::from_str(&rest[0]).expect("answer line");
    let task_id = answer["task_id"].as_str().expect("task_id").to_string();
    assert_eq!(
        rest[0],
        format!(r#"{{"answer":"hello there","state":"TASK_STATE_COMPLETED","task_id":"{task_id}"}}"#)
    );

    assert_eq!(mode(&dir), 0o700);
    for sub in ["logs", "out", "tmp", "home"] {
        assert!(dir.join(sub).is_dir(), "{sub}");
    }
    assert_eq!(read(&dir.join("out/result.txt")), "hello there");
    assert_eq!(read(&dir.join("task.md")), "hello there");
    assert!(dir.join("logs/bootstrap.log").is_file());
    assert!(
        std::fs::read_dir(&work).expect("workdir").next().is_none(),
        "nothing is written into the work folder"
    );

    let t = trace(&dir);
    assert_eq!(
        events(&t),
        [
            "session_start",
            "a2a_task_received",
            "task_start",
            "task_end",
            "session_end"
        ]
    );
    assert_eq!(t[0]["capsule_name"], "local/echo");
    assert_eq!(t[0]["session_id"], json!(ses));
    assert!(
        t[0].get("formation_id").is_none() && t[0].get("deadline").is_none(),
        "{}",
        t[0]
    );
    assert_eq!(t[2]["task_id"].as_str(), Some(task_id.as_str()));
    assert_eq!(
        (t[3]["task_id"].as_str(), t[3]["exit_status"].as_str()),
        (Some(task_id.as_str()), Some("ok"))
    );
    assert!(t[3]["duration_ms"].is_u64(), "{}", t[3]);
    assert_eq!(t[4]["exit_status"], "ok");
    assert!(
        !sb.home().join(format!(".murmur/running/{ses}.json")).exists(),
        "running record removed"
    );
}

#[test]
fn a_task_without_json_prints_only_its_answer_on_stdout() {
    let sb = Sandbox::new();
    public(&sb, "echo", "plain", "single", "exit");
    let work = sb.path("work");
    std::fs::write(work.join("task.txt"), "read from a file").expect("task file");
    let out = sb
        .mur(&work)
        .args(run_args("plain", &["--task", "task.txt"]))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "read from a file\n");
    assert!(
        stderr(&out).contains("[capsule-runtime] session ses_"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("serves its door at http://localhost:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_failed_task_ends_the_session_with_e_run_030() {
    let sb = Sandbox::new();
    public(&sb, "trap", "trap", "single", "exit");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("trap", &["--task", "x", "--json"]));
    let mut m = Member::start(cmd, true);
    assert_eq!(m.wait(LONG), 1);
    let rest = m.rest();
    let answer: Value = serde_json::from_str(&rest[0]).expect("answer line");
    assert_eq!(
        (answer["answer"].clone(), answer["state"].as_str()),
        (Value::Null, Some("TASK_STATE_FAILED"))
    );
    let result = read(&m.records_dir().join("out/result.txt"));
    assert!(result.starts_with("failed: "), "{result}");
    assert!(
        m.stderr().contains("[capsule-runtime] error[E-RUN-030]: the task tsk_"),
        "{}",
        m.stderr()
    );
    let t = trace(&m.records_dir());
    assert_eq!(t.last().expect("end")["exit_status"], "failed");
    assert_eq!(t[t.len() - 2]["exit_status"], "failed");
}

#[test]
fn lifecycles_without_a_task_end_after_their_first_task() {
    let sb = Sandbox::new();
    for (acc, after) in [
        ("single", "exit"),
        ("single", "sleep"),
        ("queue", "exit"),
        ("none", "sleep"),
    ] {
        public(&sb, "echo", &format!("e-{acc}-{after}"), "queue", "sleep");
        let work = sb.path(&format!("w-{acc}-{after}"));
        let mut cmd = sb.mur(&work);
        cmd.args(run_args(
            &format!("e-{acc}-{after}"),
            &[
                "--json",
                "--lifecycle-task-acceptance",
                acc,
                "--lifecycle-after-task",
                after,
            ],
        ))
        .env("MURMUR_A2A_TIMEOUT_SECS", "1");
        let mut m = Member::start(cmd, true);
        if acc == "none" {
            // A `none` door takes no task; the idle wait ends the session.
            let reply = m.rpc(
                "SendMessage",
                json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x", "mediaType": "text/plain"}]}}),
            );
            assert_eq!(reply["error"]["code"], -32004, "{reply}");
        } else {
            let task = m.send("one");
            assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{acc}+{after}: {task}");
            assert_eq!(task["artifacts"][0]["parts"][0]["text"], "one");
        }
        assert_eq!(m.wait(LONG), 0, "{acc}+{after}: {}", m.stderr());
        let t = trace(&m.records_dir());
        assert_eq!(t.last().expect("end")["exit_status"], "ok", "{acc}+{after}");
        if acc != "none" {
            let id = t[1]["task_id"].as_str().expect("task id").to_string();
            assert_eq!(read(&m.records_dir().join(format!("out/result_{id}.txt"))), "one");
            assert_eq!(read(&m.records_dir().join("out/result.txt")), "one");
        }
    }
}

#[test]
fn with_no_task_the_idle_wait_ends_the_session_ok() {
    let sb = Sandbox::new();
    public(&sb, "echo", "idle", "single", "exit");
    let work = sb.path("work");
    let started = Instant::now();
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("idle", &["--json"]))
        .env("MURMUR_A2A_TIMEOUT_SECS", "1");
    let mut m = Member::start(cmd, true);
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(events(&trace(&m.records_dir())), ["session_start", "session_end"]);
    assert!(m.rest().is_empty(), "no answer line without --task");
}

/// How long a test that proves a session has no idle timeout watches it serve on: past the 1 s
/// idle wait `MURMUR_A2A_TIMEOUT_SECS=1` sets. Nothing can be waited for here, since what is
/// checked is that nothing happens.
const PAST_THE_IDLE_WAIT: Duration = Duration::from_millis(1500);

#[test]
fn queue_and_sleep_serve_until_stopped_without_a_task() {
    let sb = Sandbox::new();
    public(&sb, "echo", "forever", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("forever", &["--json"]))
        .env("MURMUR_A2A_TIMEOUT_SECS", "1");
    let mut m = Member::start(cmd, true);
    for text in ["a", "b"] {
        assert_eq!(m.send(text)["status"]["state"], "TASK_STATE_COMPLETED");
    }
    // Both tasks answered, so the session is serving; a negative window past the idle wait
    // (which, had it one, would have ended the session within a second of its start).
    std::thread::sleep(PAST_THE_IDLE_WAIT);
    assert!(m.running(), "queue+sleep has no idle timeout");
    m.term();
    assert_eq!(m.wait(LONG), 0, "SIGTERM while idle ends ok: {}", m.stderr());
    let t = trace(&m.records_dir());
    assert_eq!(t.last().expect("end")["exit_status"], "ok");
    assert!(!m.stderr().contains("E-RUN-040"), "{}", m.stderr());
}

/// The scaffolds' `Next:` command (`mur run --capsule … --task …` of a `queue` + `sleep`
/// capsule) ends with its task: a `--task` run ends when its task ends, whatever the lifecycle.
#[test]
fn a_task_run_of_a_capsule_that_serves_on_ends_with_its_task() {
    let sb = Sandbox::new();
    public(&sb, "echo", "scout", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("scout", &["--task", "hi scout"]))
        .env("MURMUR_A2A_TIMEOUT_SECS", "1");
    let mut m = Member::start(cmd, false);
    assert_eq!(m.line(LONG).as_deref(), Some("hi scout"), "{}", m.stderr());
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    assert!(m.rest().is_empty(), "only the answer on stdout");
    assert!(!m.stderr().contains("until it is stopped"), "{}", m.stderr());
    // With --json, the answer line and then the end, as for any other lifecycle.
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("scout", &["--json", "--task", "first"]));
    let mut m = Member::start(cmd, true);
    let line = m.line(LONG).expect("answer line");
    assert!(
        line.starts_with(r#"{"answer":"first","state":"TASK_STATE_COMPLETED""#),
        "{line}"
    );
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    let t = trace(&m.records_dir());
    assert_eq!(t.last().expect("end")["exit_status"], "ok");
}

/// A session that keeps serving says so once on stderr, with how to stop it.
#[test]
fn a_session_that_serves_on_says_how_to_stop_it_once() {
    let sb = Sandbox::new();
    public(&sb, "echo", "server", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("server", &[]));
    let mut m = Member::start(cmd, false);
    let until = Instant::now() + LONG;
    while !m.stderr().contains("Ctrl-C") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = m.stderr();
    let ses = err
        .split_whitespace()
        .find(|w| w.starts_with("ses_"))
        .unwrap_or_else(|| panic!("no session id: {err}"))
        .to_string();
    let want = format!("until it is stopped: `mur stop {ses}` or Ctrl-C");
    assert_eq!(err.matches(&want).count(), 1, "{err}");
    assert!(err.starts_with("[capsule-runtime] session ses_"), "{err}");
    let stop = sb.run(&work, &["stop", &ses]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    assert_eq!(m.stderr().matches("until it is stopped").count(), 1, "{}", m.stderr());
}

#[test]
fn with_a_task_other_lifecycles_end_after_it() {
    let sb = Sandbox::new();
    public(&sb, "echo", "once", "queue", "sleep");
    for (acc, after) in [
        ("single", "exit"),
        ("single", "sleep"),
        ("queue", "exit"),
        ("none", "exit"),
    ] {
        let work = sb.path(&format!("w-{acc}-{after}"));
        let out = sb
            .mur(&work)
            .args(run_args(
                "once",
                &[
                    "--task",
                    "t",
                    "--lifecycle-task-acceptance",
                    acc,
                    "--lifecycle-after-task",
                    after,
                ],
            ))
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{acc}+{after}: {}", stderr(&out));
        assert_eq!(stdout(&out), "t\n", "{acc}+{after}");
    }
}

#[test]
fn sigterm_while_running_cancels_the_task_with_e_run_040() {
    let sb = Sandbox::new();
    public(&sb, "spin", "spin", "single", "exit");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("spin", &["--task", "spin", "--json"]));
    let mut m = Member::start(cmd, true);
    m.wait_working();
    m.term();
    assert_eq!(m.wait(LONG), 1);
    let err = m.stderr();
    assert!(err.contains("[capsule-runtime] error[E-RUN-040]: "), "{err}");
    let rest = m.rest();
    let answer: Value = serde_json::from_str(&rest[0]).expect("answer line");
    assert_eq!(answer["state"], "TASK_STATE_CANCELED");
    assert_eq!(read(&m.records_dir().join("out/result.txt")), CANCELED);
    let t = trace(&m.records_dir());
    assert_eq!(
        events(&t),
        [
            "session_start",
            "a2a_task_received",
            "task_start",
            "task_canceled",
            "session_end"
        ]
    );
    assert_eq!(t[3]["reason"], "sigterm");
    assert_eq!(t[4]["exit_status"], "canceled");
    assert!(read(&m.records_dir().join("logs/bootstrap.log")).contains("error[E-RUN-040]"));
}

/// Opens a request the door cannot finish (its body never completes), so stopping the door waits;
/// returns once the door has accepted it (the member holds one more socket).
fn stall_door(m: &Member) -> std::net::TcpStream {
    let pid = m.pid();
    let before = crate::wear::sockets(pid);
    let addr = m.ready["url"].as_str().expect("url").replace("localhost", "127.0.0.1");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(b"POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\na2a-version: 1.0\r\ncontent-length: 1000\r\n\r\n{")
        .expect("write");
    crate::support::wait_until(LONG, || crate::wear::sockets(pid) > before)
        .unwrap_or_else(|| panic!("the door did not accept the stalled request; stderr: {}", m.stderr()));
    s
}

/// Whether anything listens on TCP `port` here, from the kernel's tables (asking the port itself
/// would open a connection the door then has to serve).
fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3
                    && f[3] == "0A"
                    && f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
            })
        })
    })
}

#[test]
fn a_second_sigterm_exits_143_at_once() {
    let sb = Sandbox::new();
    public(&sb, "echo", "twice", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("twice", &["--json"]))
        .env("MURMUR_TEST_TIMING", "member_teardown=20s");
    let mut m = Member::start(cmd, true);
    let _held = stall_door(&m);
    assert!(listening(m.port()), "the door listens before the first SIGTERM");
    m.term();
    // The first SIGTERM is under way once the door stops listening: it now waits for the stalled
    // request, which only the second one cuts short.
    crate::support::wait_until(LONG, || !listening(m.port()))
        .unwrap_or_else(|| panic!("the first SIGTERM did not stop the door; stderr: {}", m.stderr()));
    m.term();
    let started = Instant::now();
    assert_eq!(m.wait(LONG), 143);
    // At once: well under the 20 s teardown backstop, the only other way to exit 143 here.
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(
        !sb.home()
            .join(format!(".murmur/running/{}.json", m.session_id()))
            .exists()
    );
}

#[test]
fn the_teardown_backstop_exits_143() {
    let sb = Sandbox::new();
    public(&sb, "echo", "stuck", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("stuck", &["--json"]))
        .env("MURMUR_TEST_TIMING", "member_teardown=300ms");
    let mut m = Member::start(cmd, true);
    let _held = stall_door(&m);
    m.term();
    assert_eq!(m.wait(LONG), 143, "{}", m.stderr());
}

#[test]
fn running_record_ps_and_stop() {
    let sb = Sandbox::new();
    echo(&sb);
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("echo", &["--json", "--readiness-tokens"]));
    let mut m = Member::start(cmd, true);
    let token = m.token().expect("operator token with --readiness-tokens");
    assert!(token.starts_with("mdt1."), "{token}");
    let keys: Vec<&str> = m
        .ready
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "auth",
            "name",
            "pid",
            "records_dir",
            "session_id",
            "tokens",
            "url",
            "version",
            "workdir"
        ]
    );

    let ses = m.session_id();
    let running = sb.home().join(".murmur/running");
    let path = running.join(format!("{ses}.json"));
    assert_eq!((mode(&running), mode(&path)), (0o700, 0o600));
    let rec: Value = serde_json::from_str(&read(&path)).expect("record");
    let keys: Vec<&str> = rec.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "capsule_name",
            "capsule_version",
            "door_token",
            "outlives_launcher",
            "pid",
            "process_start",
            "records_dir",
            "session_id",
            "started_at",
            "url",
            "workdir"
        ]
    );
    assert_eq!(rec["door_token"].as_str(), Some(token.as_str()));
    assert_eq!(rec["url"], m.ready["url"]);
    assert_eq!(rec["records_dir"], m.ready["records_dir"]);

    // The operator token works at the door; no token is refused.
    assert_eq!(m.send("via the door")["status"]["state"], "TASK_STATE_COMPLETED");
    let refused = ureq::post(&m.url())
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0")
        .send_string("{}");
    assert!(matches!(refused, Err(ureq::Error::Status(401, _))));

    let ps = sb.run(&work, &["ps"]);
    let text = stdout(&ps);
    assert!(text.starts_with("SESSION "), "{text}");
    // The door's URL is in `mur ps --json`; the table keeps within 100 columns.
    let json = stdout(&sb.run(&work, &["ps", "--json"]));
    assert!(json.contains(m.ready["url"].as_str().expect("url")), "{json}");
    assert!(text.contains(&ses) && text.contains("local/echo@0.1.0"), "{text}");
    assert!(!text.contains("FORMATION"), "{text}");

    let stop = sb.run(&work, &["stop", &ses]);
    assert_eq!(
        (stop.status.code(), stdout(&stop)),
        (Some(0), format!("stopped:  {ses}\n")),
        "{}",
        stderr(&stop)
    );
    assert_eq!(m.wait(LONG), 0);
    assert!(!path.exists());
    assert_eq!(stdout(&sb.run(&work, &["ps"])), "No sessions are running.\n");
    let t = trace(&m.records_dir());
    assert_eq!(t.last().expect("end")["exit_status"], "ok");
    // No token in the trace or the log.
    let all = format!(
        "{}{}",
        read(&m.records_dir().join("trace.jsonl")),
        read(&m.records_dir().join("logs/bootstrap.log"))
    );
    assert!(!all.contains("mdt1."), "token leaked");

    let again = sb.run(&work, &["stop", &ses]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains(&format!(
            "error[E-RUN-022]: no session {ses} is running on this machine"
        )),
        "{}",
        stderr(&again)
    );
}

/// One refused start: environment, arguments, exit code, a piece of the expected stderr.
type Refused<'a> = (Vec<(&'a str, &'a str)>, Vec<String>, i32, String);

#[test]
fn start_up_refusals() {
    let sb = Sandbox::new();
    public(&sb, "echo", "ok", "single", "exit");
    install(&sb, "echo", "bare", "name: bare\nversion: 0.1.0\n");
    let work = sb.path("work");
    let sidecar = sb.home().join(".murmur/artifacts/local/ok/0.1.0/ok-0.1.0.sha256");
    let sha = read(&sidecar).trim().to_string();
    let zeros = "0".repeat(64);
    let cases: Vec<Refused> = vec![
        (
            vec![("MURMUR_FORMATION_ID", "frm_1")],
            run_args("ok", &[]),
            1,
            "[capsule-runtime] error[E-RUN-044]: MURMUR_FORMATION_ID is set to 'frm_1', which is not a formation id".into(),
        ),
        (
            vec![("MURMUR_FORMATION_PEERS", "a=http://a.formation.invalid")],
            run_args("ok", &[]),
            1,
            "[capsule-runtime] error[E-RUN-046]: MURMUR_FORMATION_PEERS is set".into(),
        ),
        (
            vec![("MURMUR_FORMATION_LIFELINE", "5")],
            run_args("ok", &[]),
            1,
            "error[E-RUN-046]: MURMUR_FORMATION_LIFELINE does not name this member's lifeline: it is set, but MURMUR_FORMATION_ID is not, so the launch is refused".into(),
        ),
        (
            vec![("MURMUR_FORMATION_ID", FRM), ("MURMUR_FORMATION_LIFELINE", "77")],
            run_args("ok", &[]),
            1,
            "error[E-RUN-046]: MURMUR_FORMATION_LIFELINE does not name this member's lifeline: descriptor 77 is not open".into(),
        ),
        (
            vec![("MURMUR_FORMATION_AUTHORITY", "5")],
            run_args("ok", &[]),
            1,
            "error[E-RUN-046]: MURMUR_FORMATION_AUTHORITY does not name this member's authority channel: it is set, but MURMUR_FORMATION_ID is not, so the launch is refused".into(),
        ),
        (
            vec![("MURMUR_FORMATION_ID", FRM), ("MURMUR_FORMATION_AUTHORITY", "77")],
            run_args("ok", &[]),
            1,
            "error[E-RUN-046]: MURMUR_FORMATION_AUTHORITY does not name this member's authority channel: descriptor 77 is not open".into(),
        ),
        (
            vec![("MURMUR_FORMATION_CHANNEL", "9")],
            run_args("ok", &[]),
            1,
            "error[E-RUN-046]: MURMUR_FORMATION_CHANNEL does not carry this member's formation credentials: it is set, but MURMUR_FORMATION_ID is not".into(),
        ),
        (
            vec![],
            run_args("ok", &["--capsule-sha256", &zeros]),
            1,
            format!("[capsule-runtime] error[E-RUN-047]: capsule 'local/ok@0.1.0' resolved to bytes with sha256 {sha}, but it was admitted with sha256 {zeros}"),
        ),
        (
            vec![],
            ["run", "--capsule", "local/nope", "--capsule-version", "0.1.0"].iter().map(|s| s.to_string()).collect(),
            1,
            "[capsule-runtime] error[E-RUN-002]: capsule 'local/nope@0.1.0' cannot be run: not installed in the project or global store".into(),
        ),
        (
            vec![],
            run_args("bare", &[]),
            1,
            "error[E-RUN-002]: capsule 'local/bare@0.1.0' cannot be run: it is a manifest-only capsule".into(),
        ),
        (vec![], run_args("ok", &["--lifecycle-after-task", "nap"]), 2, "invalid value 'nap'".into()),
    ];
    for (env, args, code, want) in cases {
        let out = sb
            .mur(&work)
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(code), "{env:?} {args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&want),
            "{env:?} {args:?}:\n{}\nwanted: {want}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }
    // A refused start stages nothing.
    assert!(!sb.home().join(".murmur/records").exists());
    // The right hash is accepted.
    let out = sb
        .mur(&work)
        .args(run_args("ok", &["--capsule-sha256", &sha, "--task", "y"]))
        .output()
        .expect("run");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "y\n".to_string()),
        "{}",
        stderr(&out)
    );
}

/// A lifeline the test holds: `MURMUR_FORMATION_ID` and the read end of a pipe only the child
/// inherits. Returns (read end, to drop once spawned; write end, whose drop closes the lifeline).
fn with_lifeline(cmd: &mut Command) -> (OwnedFd, OwnedFd) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let raw = r.as_raw_fd();
    cmd.env("MURMUR_FORMATION_ID", FRM)
        .env("MURMUR_FORMATION_LIFELINE", raw.to_string());
    // SAFETY: only an async-signal-safe fcntl runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    (r, w)
}

#[test]
fn a_closed_lifeline_winds_an_idle_member_down() {
    let sb = Sandbox::new();
    public(&sb, "echo", "life", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("life", &["--json"]));
    let (r, w) = with_lifeline(&mut cmd);
    let mut m = Member::start(cmd, true);
    drop(r);
    assert_eq!(m.ready["formation_id"], FRM);
    let rec: Value = serde_json::from_str(&read(
        &sb.home().join(format!(".murmur/running/{}.json", m.session_id())),
    ))
    .expect("record");
    assert_eq!(
        (rec["formation_id"].as_str(), rec["formation_lifeline"].as_bool()),
        (Some(FRM), Some(true))
    );
    assert!(
        rec.get("outlives_launcher").is_none() && rec.get("formation_member").is_none(),
        "{rec}"
    );
    assert!(!m.stderr().contains("W-RUN-007"));

    drop(w);
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    // An idle member's end is an ordinary end: in its log, not on stderr.
    let line = "[capsule-runtime] formation lifeline closed — the formation has ended; ending the session (no task was running)";
    assert!(!m.stderr().contains("formation lifeline closed"), "{}", m.stderr());
    assert!(read(&m.records_dir().join("logs/bootstrap.log")).contains(line));
    let t = trace(&m.records_dir());
    assert_eq!(events(&t), ["session_start", "formation_ended", "session_end"]);
    assert_eq!(t[0]["formation_id"], FRM);
    assert!(
        t[0].get("formation_member").is_none(),
        "a hand-started member names no roster member"
    );
    assert_eq!(
        (t[1]["formation_id"].as_str(), &t[1]["parent_id"]),
        (Some(FRM), &t[0]["event_id"])
    );
    assert_eq!(t[2]["exit_status"], "ok");
}

#[test]
fn a_closed_lifeline_cancels_a_running_task_and_exits_0() {
    let sb = Sandbox::new();
    public(&sb, "spin", "spun", "single", "exit");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("spun", &["--json", "--task", "go"]));
    let (r, w) = with_lifeline(&mut cmd);
    let mut m = Member::start(cmd, true);
    drop(r);
    m.wait_working();
    // The board shows the task working a moment before the executor records taking it: the
    // lifeline closes once the run has begun, as the test means.
    let started = crate::support::wait_until(LONG, || {
        events(&trace(&m.records_dir())).contains(&"task_start".to_string())
    });
    assert!(started.is_some(), "no task_start; stderr: {}", m.stderr());
    drop(w);
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    assert!(!m.stderr().contains("E-RUN-040"), "{}", m.stderr());
    let t = trace(&m.records_dir());
    let cancelled = format!(
        "[capsule-runtime] formation lifeline closed — the formation has ended; cancelling task {}, still running, and ending the session",
        t[1]["task_id"].as_str().unwrap_or("?")
    );
    assert_eq!(m.stderr().matches(&cancelled).count(), 1, "{}", m.stderr());
    assert_eq!(
        events(&t),
        [
            "session_start",
            "a2a_task_received",
            "task_start",
            "formation_ended",
            "task_canceled",
            "session_end"
        ]
    );
    assert_eq!(t[4]["reason"], "formation_ended");
    assert_eq!(t[5]["exit_status"], "formation_ended");
    assert_eq!(read(&m.records_dir().join("out/result.txt")), CANCELED);
}

#[test]
fn a_member_without_a_lifeline_warns_w_run_007() {
    let sb = Sandbox::new();
    public(&sb, "echo", "hand", "single", "exit");
    let work = sb.path("work");
    let out = sb
        .mur(&work)
        .args(run_args("hand", &["--task", "x", "--json"]))
        .env("MURMUR_FORMATION_ID", FRM)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let want = format!(
        "[capsule-runtime] warning[W-RUN-007]: this session is a member of formation {FRM} but was handed no lifeline, so it will not wind down when that formation ends; end it with `mur stop` (`mur explain W-RUN-007`)"
    );
    assert_eq!(stderr(&out).matches(&want).count(), 1, "{}", stderr(&out));
    let ready: Value = serde_json::from_str(stdout(&out).lines().next().expect("readiness")).expect("json");
    assert_eq!(ready["formation_id"], FRM);
    let dir = PathBuf::from(ready["records_dir"].as_str().expect("dir"));
    assert!(read(&dir.join("logs/bootstrap.log")).contains(&want));
}

#[test]
fn the_inherited_deadline_ends_the_session_with_e_run_053() {
    let sb = Sandbox::new();
    public(&sb, "echo", "late", "queue", "sleep");
    let work = sb.path("work");
    let at = chrono::Utc::now().timestamp_millis() + 1500;
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("late", &["--json", "--inherited-deadline", &at.to_string()]));
    let mut m = Member::start(cmd, true);
    assert_eq!(m.wait(LONG), 1, "{}", m.stderr());
    let when = chrono::DateTime::from_timestamp_millis(at)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let want = format!(
        "[capsule-runtime] error[E-RUN-053]: the session reached the deadline it inherited, at {when}, from the formation or the capsule that launched it"
    );
    assert!(m.stderr().contains(&want), "{}", m.stderr());
    let t = trace(&m.records_dir());
    assert_eq!(events(&t), ["session_start", "deadline_reached", "session_end"]);
    assert_eq!(t[0]["deadline"]["at"].as_str(), Some(when.as_str()));
    assert_eq!(t[0]["deadline"]["source"], "inherited");
    assert_eq!(
        (t[1]["deadline_at"].as_str(), t[1]["source"].as_str()),
        (Some(when.as_str()), Some("inherited"))
    );
    assert_eq!(t[2]["exit_status"], "deadline_reached");
}

#[test]
fn stop_a_formation_of_hand_started_members() {
    let sb = Sandbox::new();
    public(&sb, "echo", "hand", "queue", "sleep");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("hand", &["--json"])).env("MURMUR_FORMATION_ID", FRM);
    let mut m = Member::start(cmd, true);
    let ses = m.session_id();

    let ps = stdout(&sb.run(&work, &["ps"]));
    let lines: Vec<&str> = ps.lines().collect();
    assert!(
        lines[0].contains("STARTED (UTC)") && lines[0].ends_with("MEMBER"),
        "{ps}"
    );
    assert_eq!(
        lines[1],
        format!("formation {FRM}  launcher pid -  1 member(s)"),
        "{ps}"
    );
    assert!(lines[2].starts_with(&ses) && lines[2].ends_with("  -"), "{ps}");

    let out = sb.run(&work, &["stop", FRM]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("stopped:  {FRM}\nlauncher: none running\nmember:   {ses}  local/hand@0.1.0  session_end ok\n")
    );
    assert_eq!(m.wait(LONG), 0);

    let again = sb.run(&work, &["stop", FRM]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains(&format!(
            "error[E-RUN-022]: no member of formation {FRM} is running on this machine"
        )),
        "{}",
        stderr(&again)
    );
    let bad = sb.run(&work, &["stop", "frm_12"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains(
            "error[E-RUN-022]: 'frm_12' is not a formation id: it needs exactly 32 hex digits after `frm_`, found 2"
        ),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn trace_retain_bounds_the_sessions_of_a_records_group() {
    let sb = Sandbox::new();
    let m = "name: kept\nversion: 0.1.0\ncomponent: capsule.wat\ntrace:\n  retain:\n    max_sessions: 1\n";
    install(&sb, "echo", "kept", m);
    let work = sb.path("work");
    let group = sb
        .home()
        .join(".murmur/records")
        .join(work.canonicalize().expect("canonical").strip_prefix("/").expect("abs"));
    let first = sb
        .mur(&work)
        .args(run_args("kept", &["--task", "a", "--json"]))
        .output()
        .expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let ready: Value = serde_json::from_str(stdout(&first).lines().next().expect("readiness")).expect("json");
    let old = ready["session_id"].as_str().expect("ses").to_string();
    assert!(group.join(&old).is_dir());

    let second = sb
        .mur(&work)
        .args(run_args("kept", &["--task", "b"]))
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(stdout(&second), "b\n", "nothing but the answer on stdout");
    assert!(
        stderr(&second).contains(&format!(
            "[capsule-runtime] retention: removed session {old} (max_sessions)"
        )),
        "{}",
        stderr(&second)
    );
    assert!(!group.join(&old).exists());
    assert_eq!(std::fs::read_dir(&group).expect("group").count(), 1);
}

/// Issue 29, item 6: a capsule's `trace.retain` prunes its own sessions only. Another capsule run
/// in the same work folder shares the records group; its sessions survive however small the
/// pruner's `max_sessions` is.
#[test]
fn trace_retain_never_removes_another_capsules_sessions() {
    let sb = Sandbox::new();
    install(
        &sb,
        "echo",
        "other",
        "name: other\nversion: 0.1.0\ncomponent: capsule.wat\n",
    );
    let m = "name: pruner\nversion: 0.1.0\ncomponent: capsule.wat\ntrace:\n  retain:\n    max_sessions: 1\n";
    install(&sb, "echo", "pruner", m);
    let work = sb.path("work");
    let group = sb
        .home()
        .join(".murmur/records")
        .join(work.canonicalize().expect("canonical").strip_prefix("/").expect("abs"));
    let run = |name: &str, task: &str| -> String {
        let out = sb
            .mur(&work)
            .args(run_args(name, &["--task", task, "--json"]))
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let ready: Value = serde_json::from_str(stdout(&out).lines().next().expect("readiness")).expect("json");
        ready["session_id"].as_str().expect("ses").to_string()
    };
    let others = [run("other", "a"), run("other", "b")];
    let first_pruner = run("pruner", "c");
    let last_pruner = run("pruner", "d");
    for s in &others {
        assert!(group.join(s).is_dir(), "the other capsule's session {s} was removed");
    }
    assert!(!group.join(&first_pruner).exists(), "the pruner's older session stays");
    assert!(group.join(&last_pruner).is_dir());
    assert_eq!(std::fs::read_dir(&group).expect("group").count(), 3);
}

/// Hands `lines` to the child on a formation channel: `MURMUR_FORMATION_ID` and
/// `MURMUR_FORMATION_CHANNEL`, the read end of a pipe only the child inherits, holding `lines`
/// and then EOF. Returns the read end, to drop once spawned.
fn with_channel(cmd: &mut Command, lines: &[String]) -> OwnedFd {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let mut w = std::fs::File::from(w);
    for l in lines {
        w.write_all(l.as_bytes()).expect("channel line");
    }
    drop(w);
    let raw = r.as_raw_fd();
    cmd.env("MURMUR_FORMATION_ID", FRM)
        .env("MURMUR_FORMATION_CHANNEL", raw.to_string());
    // SAFETY: only an async-signal-safe fcntl runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    r
}

#[test]
fn a_member_calls_its_callee_through_its_channel() {
    use mur::channel::{Address, Call, FirstLine, address_line};
    let sb = Sandbox::new();
    echo(&sb);
    let relay = "name: relay\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  authentication:\n    scheme: bearer\ncapabilities:\n  network:\n    allow: [localhost]\n";
    let dir = sb.path("src/relay");
    std::fs::copy(
        repo_root().join("src/capsule/testdata/relay.wat"),
        dir.join("capsule.wat"),
    )
    .expect("relay wat");
    std::fs::write(dir.join("murmur.yaml"), relay).expect("manifest");
    assert!(sb.run(&dir, &["build", "."]).status.success());
    let zip = dir.join("relay-0.1.0.mur.zip");
    assert!(
        sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8")])
            .status
            .success()
    );

    let key = mur::token::SigningKey::generate().expect("key");
    let first = |member: &str, calls: Vec<Call>| FirstLine {
        formation_id: FRM.into(),
        member: member.into(),
        launcher: None,
        entry: false,
        verify_key: key.verify_key().to_b64(),
        calls,
    };
    let work = sb.path("worker");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("echo", &["--json"]));
    let r = with_channel(&mut cmd, &[first("worker", vec![]).to_line()]);
    let mut worker = Member::start(cmd, true);
    drop(r);
    assert_eq!(worker.ready["formation_id"], FRM);
    let rec: Value = serde_json::from_str(&read(
        &sb.home().join(format!(".murmur/running/{}.json", worker.session_id())),
    ))
    .expect("record");
    assert_eq!(
        (rec["formation_id"].as_str(), rec["formation_member"].as_str()),
        (Some(FRM), Some("worker"))
    );
    assert_eq!(rec["outlives_launcher"], true, "no lifeline: {rec}");
    assert!(
        rec.get("formation_entry").is_none() && rec.get("formation_launcher").is_none(),
        "{rec}"
    );

    let token = key.mint(FRM, "lead", "worker");
    let lines = [
        first(
            "lead",
            vec![Call {
                name: "worker".into(),
                token: mur::secret::Secret::new(token.clone()),
            }],
        )
        .to_line(),
        address_line(&[Address {
            name: "worker".into(),
            url: worker.url(),
            door: None,
            card_key: None,
        }]),
    ];
    let lead_dir = sb.path("lead");
    let mut cmd = sb.mur(&lead_dir);
    cmd.args(run_args("relay", &["--json", "--task", "pass it on"]));
    let r = with_channel(&mut cmd, &lines);
    let mut lead = Member::start(cmd, true);
    drop(r);
    assert_eq!(lead.wait(LONG), 0, "{}", lead.stderr());
    let answer: Value = serde_json::from_str(&lead.rest()[0]).expect("answer line");
    assert_eq!(
        (answer["answer"].as_str(), answer["state"].as_str()),
        (Some("pass it on"), Some("TASK_STATE_COMPLETED"))
    );

    let t = trace(&lead.records_dir());
    assert_eq!(t[0]["formation_member"], "lead");
    assert_eq!(t[0]["formation_callees"], json!(["worker"]));
    let kinds = events(&t);
    assert!(
        kinds.contains(&"member_call_start".to_string()) && kinds.contains(&"member_call".to_string()),
        "{kinds:?}"
    );
    let call = t
        .iter()
        .find(|r| r["event_type"] == "member_call")
        .expect("member_call");
    assert_eq!(
        (call["member"].as_str(), call["status"].as_str()),
        (Some("worker"), Some("completed"))
    );
    let wt = trace(&worker.records_dir());
    let received = wt
        .iter()
        .find(|r| r["event_type"] == "a2a_task_received")
        .expect("received");
    assert_eq!(received["caller_member"], "lead");
    assert!(
        !read(&lead.records_dir().join("trace.jsonl")).contains(&token),
        "no token in the trace"
    );

    worker.term();
    assert_eq!(worker.wait(LONG), 0);
}

#[test]
fn a_door_that_cannot_bind_is_e_run_010() {
    let sb = Sandbox::new();
    public(&sb, "echo", "nobind", "single", "exit");
    let work = sb.path("work");
    // 192.0.2.1 (TEST-NET-1) is no address of this host.
    let out = sb
        .mur(&work)
        .args(run_args("nobind", &["--json", "--bind", "192.0.2.1"]))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("[capsule-runtime] error[E-RUN-010]: the door cannot bind 192.0.2.1"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "no readiness line: {}", stdout(&out));
    assert!(
        !sb.home().join(".murmur/running").exists()
            || std::fs::read_dir(sb.home().join(".murmur/running"))
                .expect("dir")
                .next()
                .is_none()
    );
    let group = sb
        .home()
        .join(".murmur/records")
        .join(work.canonicalize().expect("canonical").strip_prefix("/").expect("abs"));
    let ses = std::fs::read_dir(&group)
        .expect("group")
        .next()
        .expect("one session")
        .expect("entry")
        .path();
    let t = trace(&ses);
    assert_eq!(events(&t), ["session_start", "session_end"]);
    assert_eq!(t[1]["exit_status"], "failed");
}

#[test]
fn stores_come_from_the_work_folder_or_store_root() {
    let sb = Sandbox::new();
    // A project with its own store: `mur install` without -g files the capsule there.
    let project = sb.path("project");
    std::fs::write(project.join("murmur.yaml"), "name: project\nversion: 0.1.0\n").expect("project manifest");
    let dir = sb.path("src/local-echo");
    std::fs::copy(repo_root().join("actors/echo/capsule.wat"), dir.join("capsule.wat")).expect("wat");
    std::fs::write(
        dir.join("murmur.yaml"),
        "name: pecho\nversion: 0.1.0\ncomponent: capsule.wat\n",
    )
    .expect("manifest");
    assert!(sb.run(&dir, &["build", "."]).status.success());
    let zip = dir.join("pecho-0.1.0.mur.zip");
    let out = sb.run(&project, &["install", zip.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));

    let in_project = sb
        .mur(&project)
        .args(run_args("pecho", &["--task", "p"]))
        .output()
        .expect("run");
    assert_eq!(
        (in_project.status.code(), stdout(&in_project)),
        (Some(0), "p\n".to_string()),
        "{}",
        stderr(&in_project)
    );

    let elsewhere = sb.path("elsewhere");
    let out = sb
        .mur(&elsewhere)
        .args(run_args("pecho", &["--task", "q"]))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "not in the global store");
    assert!(stderr(&out).contains("error[E-RUN-002]"), "{}", stderr(&out));
    let root = project.to_str().expect("utf-8");
    let out = sb
        .mur(&elsewhere)
        .args(run_args("pecho", &["--task", "q", "--store-root", root]))
        .output()
        .expect("run");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "q\n".to_string()),
        "{}",
        stderr(&out)
    );
    let out = sb
        .mur(&elsewhere)
        .args(run_args("pecho", &["--task", "r", "--workdir", root]))
        .output()
        .expect("run");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "r\n".to_string()),
        "--workdir names the project: {}",
        stderr(&out)
    );
}

#[test]
fn stop_a_launched_formation_through_its_launcher() {
    let sb = Sandbox::new();
    echo(&sb);
    let dir = sb.path("formation");
    let roster = "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/echo\n    version: 0.1.0\n    entry: true\n  - name: worker\n    capsule: local/echo\n    version: 0.1.0\nreachability:\n  - from: lead\n    to: [worker]\n";
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    let mut launcher = sb
        .mur(&dir)
        .args(["run", "--roster", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("launcher");
    let mut out = BufReader::new(launcher.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("formation line");
    let formation: Value = serde_json::from_str(&line).expect("formation line json");
    let frm = formation["formation_id"].as_str().expect("formation id").to_string();
    // The entry's readiness line follows once it serves.
    line.clear();
    out.read_line(&mut line).expect("entry readiness line");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));

    let ps = stdout(&sb.run(&dir, &["ps"]));
    let summary = format!("formation {frm}  launcher pid {}  2 member(s)", launcher.id());
    assert!(ps.lines().any(|l| l == summary), "{ps}");

    let stop = sb.run(&dir, &["stop", &frm]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    let text = stdout(&stop);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("stopped:  {frm}"));
    assert_eq!(lines[1], format!("launcher: pid {}, SIGTERM", launcher.id()));
    assert_eq!(lines.len(), 4, "{text}");
    for l in &lines[2..] {
        assert!(
            l.starts_with("member:   ses_") && l.ends_with("  local/echo@0.1.0  formation_ended"),
            "{text}"
        );
    }
    let status = launcher.wait().expect("launcher exit");
    assert_eq!(status.code(), Some(143));
    assert_eq!(stdout(&sb.run(&dir, &["ps"])), "No sessions are running.\n");
}

#[test]
fn after_the_first_task_queued_tasks_are_rejected_not_started() {
    let sb = Sandbox::new();
    public(&sb, "spin", "qexit", "queue", "exit");
    let work = sb.path("work");
    let mut cmd = sb.mur(&work);
    cmd.args(run_args("qexit", &["--json"]));
    let mut m = Member::start(cmd, true);
    let first = m.offer("spin")["id"].as_str().expect("first id").to_string();
    m.wait_working();
    let queued = m.offer("waits");
    assert_eq!(queued["status"]["state"], "TASK_STATE_SUBMITTED", "{queued}");
    let canceled = m.rpc("CancelTask", json!({"id": first}));
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    assert_eq!(m.wait(LONG), 0, "{}", m.stderr());
    let t = trace(&m.records_dir());
    let second = queued["id"].as_str().expect("queued id");
    let rejected = t
        .iter()
        .find(|r| r["event_type"] == "task_rejected")
        .expect("task_rejected");
    assert_eq!(
        (rejected["task_id"].as_str(), rejected["reason"].as_str()),
        (Some(second), Some("task rejected: the session is closing"))
    );
    assert_eq!(
        t.iter().filter(|r| r["event_type"] == "task_canceled").count(),
        1,
        "only the first task was cancelled: {t:?}"
    );
    assert_eq!(t.last().expect("end")["exit_status"], "ok");
}
