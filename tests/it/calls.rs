//! Members calling members through real formations launched by the real binary: the call import
//! (relay.wat) and the wasi:http virtual address (http_probe.wat), allowed and forbidden.

use std::path::{Path, PathBuf};

use crate::support::{Sandbox, door_rpc, formation_pids, member_traces, running_record, stderr, stdout};

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";

fn formation_dir(sb: &Sandbox, roster: &str) -> PathBuf {
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    dir
}

fn run_task(sb: &Sandbox, dir: &Path, task: &str) -> (i32, String, String) {
    let out = sb.run(dir, &["run", "--roster", "--task", task]);
    let err = stderr(&out);
    let frm = err
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .unwrap_or_default()
        .to_string();
    if !frm.is_empty() {
        assert!(formation_pids(&frm).is_empty(), "members of {frm} still running");
    }
    (out.status.code().unwrap_or(-1), stdout(&out), err)
}

/// Every trace record of every session in the sandbox whose member is `member`.
fn member_records(sb: &Sandbox, member: &str) -> Vec<serde_json::Value> {
    member_traces(sb, member).into_iter().flatten().collect()
}

#[test]
fn virtual_addresses_reach_callees_only_with_the_runtimes_credentials() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component("probe", "src/calls/testdata/http_probe.wat", GRANT);
    let dir = formation_dir(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/probe, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\n  - {name: outsider, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    );
    // A callee: routed to its real door with the edge's token. The component's forged
    // Authorization would have been a 401; the door's 404 for GET /probe shows it was replaced.
    let (code, out, err) = run_task(&sb, &dir, "worker.formation.invalid");
    assert_eq!((code, out.as_str()), (0, "status 404\n"), "{err}");
    // The run whose request carried the edge's token shows it nowhere: the lead's components
    // learn only the name they may call.
    assert!(!err.contains("mft1."), "no token on stderr");
    // A member it may not call, and no member at all: one refusal, before any connection.
    let (code, out, err) = run_task(&sb, &dir, "outsider.formation.invalid");
    assert_eq!((code, out.as_str()), (0, "error 15\n"), "{err}");
    let (_, out_nobody, _) = run_task(&sb, &dir, "nobody.formation.invalid");
    assert_eq!(out_nobody, out, "the same refusal whether or not the name is a member");
}

/// A plain HTTP service on 127.0.0.1 that answers every request `200` and counts connections;
/// it stops when dropped.
struct LocalService {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LocalService {
    fn start() -> LocalService {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, st) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                };
                h.fetch_add(1, Ordering::SeqCst);
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        });
        LocalService { port, hits, stop }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for LocalService {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn loopback_is_reached_only_at_a_port_the_allow_list_names() {
    let sb = Sandbox::new();
    let service = LocalService::start();
    let port = service.port;
    sb.install_actor("echo");
    // The grant every caller declares, and the same with the service's port named.
    sb.install_component("probe", "src/calls/testdata/http_probe.wat", GRANT);
    sb.install_component(
        "granted",
        "src/calls/testdata/http_probe.wat",
        &format!("capabilities:\n  network:\n    allow: [localhost, \"localhost:{port}\"]\n"),
    );
    let roster = |lead: &str| {
        format!(
            "roster_version: 1\nmembers:\n  - {{name: lead, capsule: local/{lead}, version: 0.1.0, entry: true}}\n  - {{name: worker, capsule: local/echo, version: 0.1.0}}\nreachability:\n  - {{from: lead, to: [worker]}}\n"
        )
    };

    // `localhost` lets calls reach the worker's door, and nothing else on the loopback: every
    // spelling of the service's address is refused before a connection (error 15).
    let dir = formation_dir(&sb, &roster("probe"));
    let (code, out, err) = run_task(&sb, &dir, "worker.formation.invalid");
    assert_eq!((code, out.as_str()), (0, "status 404\n"), "{err}");
    for authority in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("127.1:{port}"),
    ] {
        let (code, out, err) = run_task(&sb, &dir, &authority);
        assert_eq!((code, out.as_str()), (0, "error 15\n"), "{authority}: {err}");
    }
    assert_eq!(service.hits(), 0, "the service saw no connection");

    // `localhost:<port>` opens that port, and that port alone; calls still work.
    let dir = formation_dir(&sb, &roster("granted"));
    let (code, out, err) = run_task(&sb, &dir, &format!("localhost:{port}"));
    assert_eq!((code, out.as_str()), (0, "status 200\n"), "{err}");
    assert_eq!(service.hits(), 1, "the named port was reached");
    let other = if port == u16::MAX { port - 1 } else { port + 1 };
    let (code, out, err) = run_task(&sb, &dir, &format!("localhost:{other}"));
    assert_eq!((code, out.as_str()), (0, "error 15\n"), "{err}");
    let (code, out, err) = run_task(&sb, &dir, "worker.formation.invalid");
    assert_eq!((code, out.as_str()), (0, "status 404\n"), "{err}");
}

#[test]
fn a_call_through_the_import_answers_and_is_traced_on_both_sides() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    let dir = formation_dir(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    );
    let (code, out, err) = run_task(&sb, &dir, "carried by a member call");
    assert_eq!((code, out.as_str()), (0, "carried by a member call\n"), "{err}");
    let lead = member_records(&sb, "lead");
    let call = lead
        .iter()
        .find(|r| r["event_type"] == "member_call")
        .expect("member_call in the caller's trace");
    assert_eq!(
        (call["member"].as_str(), call["status"].as_str()),
        (Some("worker"), Some("completed"))
    );
    assert!(lead.iter().any(|r| r["event_type"] == "member_call_start"));
    let worker = member_records(&sb, "worker");
    let received = worker
        .iter()
        .find(|r| r["event_type"] == "a2a_task_received" && r["caller_member"] == "lead")
        .expect("the callee records the calling member");
    assert_eq!(received["task_id"], call["member_task_id"]);
}

#[test]
fn a_forbidden_call_never_reaches_the_member() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    // relay always calls `worker`, but this roster lets lead call nobody: `worker` is a peer it
    // may not call.
    let dir = formation_dir(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\n",
    );
    let (code, out, err) = run_task(&sb, &dir, "should not arrive");
    assert_eq!(code, 1, "the lead's task fails: {err}");
    assert_eq!(
        out,
        "failed: 'worker' is not a member this capsule may call; it may call no member\n"
    );
    let worker = member_records(&sb, "worker");
    assert!(!worker.is_empty(), "the worker ran");
    assert!(
        !worker.iter().any(|r| r["event_type"] == "a2a_task_received"),
        "the worker's trace shows nothing of the call"
    );
}

/// A background `mur run --roster` whose output is collected.
struct Background {
    child: std::process::Child,
    err: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    fn start(sb: &Sandbox, dir: &Path, args: &[&str], timing: &str) -> Background {
        use std::io::BufRead;
        let mut child = sb
            .mur(dir)
            .arg("run")
            .arg("--roster")
            .args(args)
            .env("MURMUR_TEST_TIMING", timing)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn launcher");
        let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = err.clone();
        let pipe = child.stderr.take().expect("stderr");
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        Background {
            child,
            err,
            reader: Some(reader),
        }
    }

    fn wait(mut self) -> (i32, String) {
        let code = crate::support::wait_until(std::time::Duration::from_secs(60), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        })
        .and_then(|_| self.child.wait().ok())
        .and_then(|s| s.code())
        .unwrap_or(-1);
        // Everything the launcher wrote: its stderr ends once it and its members are gone.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let err = self.err.lock().expect("lock").clone();
        (code, err)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn send_task(rec: &serde_json::Value, text: &str) -> String {
    let reply = door_rpc(
        rec,
        "SendMessage",
        serde_json::json!({"configuration": {"returnImmediately": true}, "message": {"messageId": format!("msg-{text}"), "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}}),
    );
    reply["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_string()
}

const SPIN_PEER: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 1\nexports:\n  peer_tasks:\n    accept: true\n";

/// Tasks the worker received from `lead` and did not reject as busy.
fn taken_from_lead(sb: &Sandbox) -> Vec<String> {
    let recs = member_records(sb, "worker");
    let rejected: Vec<&serde_json::Value> = recs
        .iter()
        .filter(|r| r["event_type"] == "task_rejected")
        .map(|r| &r["task_id"])
        .collect();
    recs.iter()
        .filter(|r| r["event_type"] == "a2a_task_received" && r["caller_member"] == "lead")
        .filter(|r| !rejected.contains(&&r["task_id"]))
        .map(|r| r["task_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_busy_callee_gets_the_task_once_it_frees_up() {
    let sb = Sandbox::new();
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    sb.install_component("spinner", "actors/spin/capsule.wat", SPIN_PEER);
    let dir = formation_dir(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/spinner, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    );
    let launch = Background::start(&sb, &dir, &[], "busy_first=200ms,busy_max=400ms,component_task=60s");
    let worker = running_record(&sb, "worker");
    let lead = running_record(&sb, "lead");
    // Fill the worker: one task running, one waiting (queue_depth 1).
    let fillers = [send_task(&worker, "fill 1"), send_task(&worker, "fill 2")];
    send_task(&lead, "for the busy worker");
    crate::support::wait_until(std::time::Duration::from_secs(30), || {
        member_records(&sb, "lead")
            .iter()
            .any(|r| r["event_type"] == "member_call_busy")
    })
    .expect("the lead's call found the worker busy");
    assert!(
        taken_from_lead(&sb).is_empty(),
        "a busy worker refuses the offers (each is task_rejected)"
    );
    // Free the worker: the next re-offer is taken.
    for id in &fillers {
        door_rpc(&worker, "CancelTask", serde_json::json!({"id": id}));
    }
    crate::support::wait_until(std::time::Duration::from_secs(30), || taken_from_lead(&sb).len() == 1)
        .expect("the worker took the lead's task once it was free");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(launch.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("stop the formation");
    let (code, err) = launch.wait();
    assert_eq!(code, 143, "{err}");
}

#[test]
fn a_callee_killed_mid_task_is_unreachable_to_its_caller() {
    let sb = Sandbox::new();
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    sb.install_component("spinner", "actors/spin/capsule.wat", SPIN_PEER);
    let dir = formation_dir(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/spinner, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    );
    let launch = Background::start(
        &sb,
        &dir,
        &["--task", "never answered"],
        "component_task=60s,answer_poll=100ms",
    );
    crate::support::wait_until(std::time::Duration::from_secs(30), || {
        member_records(&sb, "worker")
            .iter()
            .any(|r| r["event_type"] == "a2a_task_received" && r["caller_member"] == "lead")
    })
    .expect("the worker is working on the lead's call");
    let worker = running_record(&sb, "worker");
    let pid = worker["pid"].as_i64().expect("pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill worker");
    let (code, err) = launch.wait();
    assert_eq!(code, 1, "the lead's task fails without an answer: {err}");
    let call = member_records(&sb, "lead")
        .into_iter()
        .find(|r| r["event_type"] == "member_call")
        .expect("the call's outcome is traced");
    assert_eq!(call["status"], "unreachable", "{call}");
}
