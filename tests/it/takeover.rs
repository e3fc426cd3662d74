//! A caller reaches exactly its member (docs/reliability.md, "A dead peer's port taken over"):
//! once a peer's process has ended, another process that binds its old port, or that puts its
//! own socket where the peer's door socket was, receives no token and no task; the launcher
//! withdraws the dead peer from its callers and says so; and a plain-`http://` model endpoint
//! served by another user gets no key.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::faults::{send, status_text, terminal_task};
use crate::support::{Launcher, Sandbox, running_record, wait_until};

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";
/// A worker that takes one task in its life and exits after it.
const ONCE: &str =
    "lifecycle:\n  task_acceptance: single\n  after_task: exit\nexports:\n  peer_tasks:\n    accept: true\n";
const QUEUE: &str =
    "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";
const ROSTER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/worker, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

fn formation(worker_manifest: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    sb.install_component("worker", "actors/echo/capsule.wat", worker_manifest);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    (sb, dir)
}

/// Everything any client sends to a listener, connection by connection (each once it has ended),
/// and how many connections it accepted.
#[derive(Clone, Default)]
struct Heard {
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    dials: Arc<AtomicUsize>,
}

impl Heard {
    fn record(&self, mut conn: impl std::io::Read + Send + 'static) {
        self.dials.fetch_add(1, Ordering::SeqCst);
        let heard = self.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            heard.got.lock().unwrap_or_else(|e| e.into_inner()).push(got);
        });
    }

    fn bytes(&self) -> Vec<Vec<u8>> {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Connections accepted so far, ended or not.
    fn dials(&self) -> usize {
        self.dials.load(Ordering::SeqCst)
    }
}

fn port_of(rec: &Value) -> u16 {
    let url = rec["url"].as_str().expect("url");
    url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port")
}

fn pid_of(rec: &Value) -> u32 {
    rec["pid"].as_u64().expect("pid") as u32
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// How long a test watches for a dial that must not come, after the call that could have made it
/// has ended: nothing can be waited for, since what is checked is that nothing happens.
const LATE_DIAL_WINDOW: Duration = Duration::from_millis(300);

#[test]
fn a_dead_peers_port_taken_by_another_process_gets_no_token_and_no_task() {
    let (sb, dir) = formation(ONCE);
    let mut launch = Launcher::start(&sb, &dir, &[], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let worker = running_record(&sb, "worker");
    let (port, worker_pid) = (port_of(&worker), pid_of(&worker));

    // The worker's one task, answered (it keeps its door until the lead has read the end),
    // then it exits while the formation goes on.
    let first = terminal_task(&lead, &send(&lead, "task one"));
    assert_eq!(first["status"]["state"], "TASK_STATE_COMPLETED", "{first}");
    wait_until(Duration::from_secs(30), || !alive(worker_pid)).expect("the worker exits after its one task");

    // Another process binds the port the worker's door had.
    let taker = TcpListener::bind(("127.0.0.1", port)).expect("the dead worker's port is free to bind");
    let heard = Heard::default();
    {
        let heard = heard.clone();
        std::thread::spawn(move || {
            for conn in taker.incoming().flatten() {
                heard.record(conn);
            }
        });
    }
    let notice = format!(
        "[mur run] member 'worker' exited with status 0 while formation {frm} runs; calls to it from 'lead' now end unreachable"
    );
    wait_until(Duration::from_secs(10), || launch.stderr().lines().any(|l| l == notice))
        .unwrap_or_else(|| panic!("no withdrawal notice; stderr:\n{}", launch.stderr()));

    let second = terminal_task(&lead, &send(&lead, "confidential task two"));
    assert_eq!(second["status"]["state"], "TASK_STATE_FAILED", "{second}");
    assert_eq!(
        status_text(&second),
        "worker's door could not be reached: its process has ended, and the launcher withdrew its door"
    );
    // The failure is in; a late dial would come within this negative window.
    std::thread::sleep(LATE_DIAL_WINDOW);
    assert!(
        heard.bytes().is_empty(),
        "the port's new owner was dialled: {:?}",
        heard.bytes()
    );
    assert_eq!(heard.dials(), 0, "the port's new owner was dialled");
    assert!(
        launch.child.try_wait().expect("try_wait").is_none(),
        "the formation goes on without the worker"
    );
    launch.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(15));
    assert_eq!(code, 143, "{err}");
}

#[test]
fn a_socket_put_in_place_of_a_peers_door_by_another_process_gets_nothing() {
    let (sb, dir) = formation(QUEUE);
    let launch = Launcher::start(&sb, &dir, &[], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let worker = running_record(&sb, "worker");
    let first = terminal_task(&lead, &send(&lead, "task one"));
    assert_eq!(first["status"]["state"], "TASK_STATE_COMPLETED", "{first}");

    // The door socket lives in the formation's owner-only directory; a process of the same
    // user can still replace it. The caller checks who serves it, and sends nothing.
    let socket = sb.home().join(format!(".murmur/formations/{frm}/.doors/worker.sock"));
    assert!(socket.exists(), "the worker serves its door at {}", socket.display());
    std::fs::remove_file(&socket).expect("unlink the worker's socket");
    let taker = std::os::unix::net::UnixListener::bind(&socket).expect("bind in its place");
    let heard = Heard::default();
    {
        let heard = heard.clone();
        std::thread::spawn(move || {
            for conn in taker.incoming().flatten() {
                heard.record(conn);
            }
        });
    }
    let second = terminal_task(&lead, &send(&lead, "confidential task two"));
    assert_eq!(second["status"]["state"], "TASK_STATE_FAILED", "{second}");
    let why = status_text(&second);
    let want = format!(
        "the door's socket is served by process {}, not by the member's process {}",
        std::process::id(),
        pid_of(&worker)
    );
    assert!(
        why.starts_with("worker's door could not be reached: ") && why.contains(&want),
        "{why}"
    );
    wait_until(Duration::from_secs(5), || !heard.bytes().is_empty()).expect("the caller connected");
    assert!(
        heard.bytes().iter().all(Vec::is_empty),
        "bytes reached the impostor: {:?}",
        heard.bytes()
    );
    launch.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(15));
    assert_eq!(code, 143, "{err}");
}

/// A plain-`http://` loopback provider endpoint is this user's listener or gets nothing: a
/// listener of another user (here `nobody`, which needs root to start) receives no request and
/// no key, and the task fails saying who served the port.
#[test]
fn a_loopback_model_endpoint_served_by_another_user_gets_no_key() {
    let Some(other) = crate::support::foreign::ForeignListener::start() else {
        return;
    };
    let port = other.port;
    const KEY: &str = "sk-takeover-0123456789";

    let sb = Sandbox::new();
    let manifest = format!(
        "name: solo\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: http://127.0.0.1:{port}/v1\n  model: m\n  api_key: ${{MUR_IT_TAKEOVER_KEY}}\n"
    );
    sb.install_manifest("solo", &manifest);
    let work = sb.path("work");
    let run = sb
        .mur(&work)
        .args([
            "run",
            "--capsule",
            "local/solo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "the secret plan",
        ])
        .env("MUR_IT_TAKEOVER_KEY", KEY)
        .env("MURMUR_TEST_TIMING", "inference_retry=10ms")
        .output()
        .expect("mur run");
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("is served by user 65534, not by this user"), "{err}");
    let heard = other.stop();
    assert!(
        !heard.contains(KEY) && !heard.contains("secret"),
        "the other user's listener heard: {heard}"
    );
    assert!(heard.lines().all(|l| l.starts_with("GOT 0 ")), "{heard}");
    assert!(!err.contains(KEY), "{err}");
}
