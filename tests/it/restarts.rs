//! Supervised restarts (`mur run --roster --restart N/SECS`, docs/reference/formation.md#restarts):
//! a peer killed while the formation runs comes back with a new door its callers reach, the entry
//! never does, a peer that ends too often is withdrawn with W-RST-001, and `kill -KILL` of the
//! launcher after a restart leaves no member. Real launcher, real members, real signals.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::faults::{all_members_gone, send, status_text, terminal_task};
use crate::support::{
    Launcher, Sandbox, door_rpc, formation_pids, member_traces, running_record, running_record_of_pid, wait_until,
};

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";

/// A lead that hands each task to `worker` (relay) and a worker that answers it (echo).
const RELAY_TO_ECHO: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

fn relay_and_echo() -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), RELAY_TO_ECHO).expect("roster");
    (sb, dir)
}

fn kill(pid: u32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL).expect("kill member");
}

/// The line the launcher prints once a restarted `member` is ready: its new pid.
fn ready_again(launch: &Launcher, member: &str, nth: usize) -> u32 {
    let prefix = format!("[mur run] member '{member}' was restarted and is ready again (pid ");
    let pid = |l: &str| l.strip_prefix(prefix.as_str())?.strip_suffix(')')?.parse::<u32>().ok();
    let mut found = None;
    wait_until(Duration::from_secs(60), || {
        found = launch.stderr().lines().filter_map(pid).nth(nth - 1);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("{member} was not ready again; stderr:\n{}", launch.stderr()))
}

/// The worker's pid as the launcher started it first.
fn first_pid(sb: &Sandbox) -> u32 {
    running_record(sb, "worker")["pid"].as_u64().expect("pid") as u32
}

fn call_statuses(sb: &Sandbox) -> Vec<String> {
    member_traces(sb, "lead")
        .into_iter()
        .flatten()
        .filter(|r: &Value| r["event_type"] == "member_call")
        .map(|r| r["status"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_killed_peer_comes_back_and_its_caller_reaches_the_new_door() {
    let (sb, dir) = relay_and_echo();
    let launch = Launcher::start(&sb, &dir, &["--restart", "3/60"], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let first = send(&lead, "before");
    let task = terminal_task(&lead, &first);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");

    let old = first_pid(&sb);
    kill(old);
    let restarted = format!(
        "[mur run] member 'worker' exited with status 137 while formation {frm} runs; restarting it (restart 1 of at most 3 within 60 s)"
    );
    let new = ready_again(&launch, "worker", 1);
    assert_ne!(new, old);
    let err = launch.stderr();
    assert!(err.lines().any(|l| l == restarted), "{err}");
    assert!(
        !err.contains("now end unreachable"),
        "a restarted peer is not withdrawn: {err}"
    );
    // A new process group of its own, under the same launcher.
    let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(new as i32))).expect("pgid");
    assert_eq!(pgid.as_raw() as u32, new);
    assert!(formation_pids(&frm).contains(&new), "{:?}", formation_pids(&frm));

    // The caller's next call reaches the new door, with the same token.
    let second = send(&lead, "after");
    let task = terminal_task(&lead, &second);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(call_statuses(&sb), ["completed", "completed"]);

    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("[mur run] SIGTERM: the formation was stopped; stopped: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(&format!("worker (pid {new})")), "{line}");
    assert!(formation_pids(&frm).is_empty(), "members still running");
}

#[test]
fn a_peer_that_ends_more_often_than_the_policy_allows_is_withdrawn() {
    let (sb, dir) = relay_and_echo();
    let launch = Launcher::start(&sb, &dir, &["--restart", "1/600"], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    kill(first_pid(&sb));
    let second = ready_again(&launch, "worker", 1);
    kill(second);
    let line = format!(
        "[mur run] warning[W-RST-001]: member 'worker' exited with status 137 while formation {frm} runs, after 1 restart(s) within 600 s (--restart 1/600); it is withdrawn: calls to it from 'lead' now end unreachable"
    );
    wait_until(Duration::from_secs(30), || launch.stderr().lines().any(|l| l == line))
        .unwrap_or_else(|| panic!("no W-RST-001 line: {}", launch.stderr()));
    let task = terminal_task(&lead, &send(&lead, "withdrawn"));
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert_eq!(
        status_text(&task),
        "worker's door could not be reached: its process has ended, and the launcher withdrew its door",
        "{task}"
    );
    assert_eq!(
        launch.stderr().matches("restarting it").count(),
        1,
        "{}",
        launch.stderr()
    );
    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
    assert!(formation_pids(&frm).is_empty(), "members still running");
}

#[test]
fn the_entry_member_is_never_restarted() {
    let (sb, dir) = relay_and_echo();
    let launch = Launcher::start(&sb, &dir, &["--restart", "3/60"], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead")["pid"].as_u64().expect("pid") as u32;
    kill(lead);
    let (code, _, err) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 137, "the entry's end is the formation's: {err}");
    assert!(!err.contains("restarting it"), "{err}");
    assert!(formation_pids(&frm).is_empty(), "members still running");
}

#[test]
fn kill_of_the_launcher_after_a_restart_leaves_no_member() {
    let (sb, dir) = relay_and_echo();
    let launch = Launcher::start(&sb, &dir, &["--restart", "3/60"], &[]);
    let _ = launch.formation_id();
    kill(first_pid(&sb));
    let _ = ready_again(&launch, "worker", 1);
    let launcher = launch.pid();
    launch.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let took = all_members_gone(&sb, launcher, killed, "kill -KILL after a restart");
    eprintln!("kill -KILL of the launcher after a restart: members gone {took:?} later");
    let _ = launch.wait(Duration::from_secs(10));
}

#[test]
fn a_policy_that_is_not_n_per_secs_is_refused_before_anything_starts() {
    let (sb, dir) = relay_and_echo();
    for (policy, why) in [
        ("0/60", "N must be from 1 to 1000 restarts"),
        ("3", "the policy is not N/SECS (restarts per window of seconds)"),
        ("3/0", "SECS must be from 1 to 86400 seconds"),
    ] {
        let out = sb.run(&dir, &["run", "--roster", "--restart", policy, "--task", "x"]);
        assert_eq!(out.status.code(), Some(1), "{policy}");
        let err = crate::support::stderr(&out);
        assert!(
            err.starts_with(&format!("error[E-RST-001]: --restart {policy}: {why}\n  hint: ")),
            "{policy}: {err}"
        );
        assert!(
            !sb.home().join(".murmur/formations").exists(),
            "{policy}: a formation was made"
        );
    }
}

/// A relay lead and a `stall` worker (echoes, but works on a task beginning with `w` until it is
/// cancelled), its tasks declared repeatable or not.
fn relay_and_stall(repeatable: bool) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    let lifecycle = format!(
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\n  repeatable_tasks: {repeatable}\nexports:\n  peer_tasks:\n    accept: true\n"
    );
    sb.install_component("stall", "src/capsule/testdata/stall.wat", &lifecycle);
    let dir = sb.path("formation");
    let roster = RELAY_TO_ECHO.replace("local/echo", "local/stall");
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    (sb, dir)
}

fn state_of(rec: &Value, id: &str) -> String {
    let task = door_rpc(rec, "GetTask", serde_json::json!({"id": id}));
    task["result"]["status"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("GetTask {id}: {task}"))
        .to_string()
}

/// Tasks at the worker's door before its kill: one ended, one running, two waiting.
struct Taken {
    done: String,
    running: String,
    waiting: [String; 2],
}

fn take_four(rec: &Value) -> Taken {
    let done = send(rec, "done before");
    assert_eq!(terminal_task(rec, &done)["status"]["state"], "TASK_STATE_COMPLETED");
    let running = send(rec, "wait for ever");
    wait_until(Duration::from_secs(30), || {
        state_of(rec, &running) == "TASK_STATE_WORKING"
    })
    .expect("the stalling task runs");
    let waiting = [send(rec, "queued one"), send(rec, "queued two")];
    for id in &waiting {
        assert_eq!(state_of(rec, id), "TASK_STATE_SUBMITTED");
    }
    Taken { done, running, waiting }
}

#[test]
fn a_restarted_peer_answers_for_every_task_it_took_and_fails_the_one_it_ran() {
    let (sb, dir) = relay_and_stall(false);
    let launch = Launcher::start(&sb, &dir, &["--restart", "3/60"], &[]);
    let frm = launch.formation_id();
    let before = running_record(&sb, "worker");
    let t = take_four(&before);
    let store = sb
        .home()
        .join(".murmur/records")
        .join(
            sb.home()
                .join(".murmur/formations")
                .join(&frm)
                .join("worker")
                .strip_prefix("/")
                .expect("absolute"),
        )
        .join("tasks.db");
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&store).expect("the worker's task store"));
    assert_eq!(mode & 0o777, 0o600);

    kill(first_pid(&sb));
    let after = running_record_of_pid(&sb, ready_again(&launch, "worker", 1));
    let done = terminal_task(&after, &t.done);
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "done before", "{done}");
    let ran = terminal_task(&after, &t.running);
    assert_eq!(ran["status"]["state"], "TASK_STATE_FAILED", "{ran}");
    assert!(status_text(&ran).starts_with("error[E-RST-002]: "), "{ran}");
    for (id, text) in t.waiting.iter().zip(["queued one", "queued two"]) {
        let task = terminal_task(&after, id);
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], text, "{task}");
    }
    let listed = door_rpc(&after, "ListTasks", serde_json::json!({}));
    let mut ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    ids.sort_unstable();
    let mut want = vec![
        t.done.as_str(),
        t.running.as_str(),
        t.waiting[0].as_str(),
        t.waiting[1].as_str(),
    ];
    want.sort_unstable();
    assert_eq!(ids, want, "ListTasks answers for every task the store holds");
    let err = launch.stderr();
    assert!(
        err.contains("took back 4 task(s) from the task store: 1 ended, 2 queued again, 1 failed"),
        "{err}"
    );

    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
    assert!(formation_pids(&frm).is_empty(), "members still running");
}

#[test]
fn a_repeatable_task_runs_again_after_a_restart_before_those_that_waited() {
    let (sb, dir) = relay_and_stall(true);
    let launch = Launcher::start(&sb, &dir, &["--restart", "3/60"], &[]);
    let frm = launch.formation_id();
    let t = take_four(&running_record(&sb, "worker"));
    kill(first_pid(&sb));
    let after = running_record_of_pid(&sb, ready_again(&launch, "worker", 1));
    wait_until(Duration::from_secs(30), || {
        state_of(&after, &t.running) == "TASK_STATE_WORKING"
    })
    .expect("the running task runs again");
    assert_eq!(state_of(&after, &t.done), "TASK_STATE_COMPLETED");
    for id in &t.waiting {
        assert_eq!(
            state_of(&after, id),
            "TASK_STATE_SUBMITTED",
            "they wait behind it, in order"
        );
    }
    // The new door streams the task it took back, from its state now to its end.
    let mut events = subscribe(&after, &t.running);
    assert!(events.next_data().contains("TASK_STATE_WORKING"));
    let cancel = door_rpc(&after, "CancelTask", serde_json::json!({"id": t.running}));
    assert_eq!(cancel["result"]["status"]["state"], "TASK_STATE_CANCELED", "{cancel}");
    let mut last = String::new();
    while !last.contains("TASK_STATE_CANCELED") {
        last = events.next_data();
        assert!(!last.is_empty(), "the stream ended before the task's end");
    }
    for id in &t.waiting {
        assert_eq!(terminal_task(&after, id)["status"]["state"], "TASK_STATE_COMPLETED");
    }
    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
    assert!(formation_pids(&frm).is_empty(), "members still running");
}

#[test]
fn a_call_in_flight_follows_its_callee_to_the_new_door_and_ends_once() {
    let (sb, dir) = relay_and_stall(false);
    let launch = Launcher::start(&sb, &dir, &["--restart", "3/60"], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let worker = running_record(&sb, "worker");
    let asked = send(&lead, "wait for the worker");
    let mut taken = String::new();
    wait_until(Duration::from_secs(30), || {
        let listed = door_rpc(&worker, "ListTasks", serde_json::json!({}));
        taken = listed["result"]["tasks"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        !taken.is_empty() && state_of(&worker, &taken) == "TASK_STATE_WORKING"
    })
    .expect("the worker runs the lead's call");

    kill(first_pid(&sb));
    let after = running_record_of_pid(&sb, ready_again(&launch, "worker", 1));
    // The lead's call followed its task to the new door and ended with what that process says.
    let task = terminal_task(&lead, &asked);
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert!(status_text(&task).contains("E-RST-002"), "{task}");
    assert!(!status_text(&task).contains("stopped answering"), "{task}");
    assert_eq!(state_of(&after, &taken), "TASK_STATE_FAILED");
    assert_eq!(call_statuses(&sb), ["failed"], "exactly one outcome of the one call");

    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
    assert!(formation_pids(&frm).is_empty(), "members still running");
}

/// An open SubscribeToTask stream at a door a running record names.
struct Events(std::io::BufReader<Box<dyn std::io::Read + Send + Sync>>);

impl Events {
    /// The next event's `data:` line ("" once the stream ends).
    fn next_data(&mut self) -> String {
        use std::io::BufRead as _;
        let mut line = String::new();
        loop {
            line.clear();
            if self.0.read_line(&mut line).unwrap_or(0) == 0 {
                return String::new();
            }
            if let Some(data) = line.strip_prefix("data:") {
                return data.trim().to_string();
            }
        }
    }
}

fn subscribe(rec: &Value, id: &str) -> Events {
    let body = serde_json::json!({"id": 1, "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {"id": id}});
    let resp = ureq::post(&format!("http://{}/", rec["url"].as_str().expect("url")))
        .set(
            "authorization",
            &format!("Bearer {}", rec["door_token"].as_str().expect("door token")),
        )
        .set("a2a-version", "1.0")
        .set("content-type", "application/json")
        .timeout(Duration::from_secs(30))
        .send_string(&body.to_string())
        .expect("SubscribeToTask");
    assert_eq!(resp.content_type(), "text/event-stream");
    Events(std::io::BufReader::new(resp.into_reader()))
}
