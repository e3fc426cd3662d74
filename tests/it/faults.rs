//! Faults: a peer stopped or killed mid-task, the launcher killed at every phase of a launch, and a
//! full disk or unwritable records directory. Real launcher, real members, real signals; every
//! test ends by checking that nothing of the formation is left running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::{
    Launcher, Sandbox, door_rpc, formation_pids, member_traces, running_record, running_records, wait_until,
};

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";
const SPIN_PEER: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 1\nexports:\n  peer_tasks:\n    accept: true\n";

/// A lead that hands its task to `worker` (relay) and a worker that never finishes (spin).
const RELAY_TO_SPINNER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/spinner, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

const TWO_ECHOES: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

/// A sandbox with relay and spinner installed and a formation directory holding `roster`.
fn relay_and_spinner(roster: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    sb.install_component("spinner", "actors/spin/capsule.wat", SPIN_PEER);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    (sb, dir)
}

fn echoes(roster: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    (sb, dir)
}

fn records_of(sb: &Sandbox, member: &str) -> Vec<Value> {
    member_traces(sb, member).into_iter().flatten().collect()
}

fn has_event(sb: &Sandbox, member: &str, event_type: &str) -> bool {
    records_of(sb, member).iter().any(|r| r["event_type"] == event_type)
}

/// The `member_call` records (final outcomes) in `member`'s traces.
fn call_outcomes(sb: &Sandbox, member: &str) -> Vec<Value> {
    records_of(sb, member)
        .into_iter()
        .filter(|r| r["event_type"] == "member_call")
        .collect()
}

fn signal_pid(pid: i64, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).expect("signal member");
}

/// Every process, not a zombie, whose environment holds `HOME=<home>`, except `launcher`: the
/// members a launcher of this sandbox started, found even when no formation id is known (a
/// launcher killed before it printed one), and even a child forked but not yet executed.
pub(crate) fn members_of_home(home: &Path, launcher: u32) -> Vec<u32> {
    let home_kv = format!("HOME={}", home.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let ours = env.split(|b| *b == 0).any(|kv| kv == home_kv.as_bytes());
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
            .unwrap_or(true);
        if ours && !zombie && pid != launcher {
            out.push(pid);
        }
    }
    out
}

/// Waits until no member of the sandbox runs; returns how long after `killed` the last one went.
/// The page's bound is 30 s after a kill -KILL.
pub(crate) fn all_members_gone(sb: &Sandbox, launcher: u32, killed: Instant, what: &str) -> Duration {
    wait_until(Duration::from_secs(30), || {
        members_of_home(&sb.home(), launcher).is_empty()
    })
    .unwrap_or_else(|| {
        panic!(
            "{what}: members still running 30 s later: {:?}",
            members_of_home(&sb.home(), launcher)
        )
    });
    killed.elapsed()
}

/// No running record (nor a half-written one) is left behind, and `mur ps` lists nothing.
pub(crate) fn nothing_claims_to_run(sb: &Sandbox, dir: &Path, what: &str) {
    let left: Vec<String> = std::fs::read_dir(sb.home().join(".murmur/running"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "{what}: left in ~/.murmur/running: {left:?}");
    let ps = sb.run(dir, &["ps"]);
    assert_eq!(
        crate::support::stdout(&ps),
        "No sessions are running.\n",
        "{what}: mur ps"
    );
}

/// `SendMessage` with `returnImmediately` at a member's door; returns the task id.
pub(crate) fn send(rec: &Value, text: &str) -> String {
    let reply = door_rpc(
        rec,
        "SendMessage",
        json!({"configuration": {"returnImmediately": true}, "message": {"messageId": format!("msg-{text}"), "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}}),
    );
    reply["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_string()
}

/// The task once it is terminal (30 s at most).
pub(crate) fn terminal_task(rec: &Value, id: &str) -> Value {
    let mut task = Value::Null;
    wait_until(Duration::from_secs(30), || {
        task = door_rpc(rec, "GetTask", json!({"id": id}))["result"].clone();
        matches!(
            task["status"]["state"].as_str(),
            Some("TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED")
        )
    })
    .unwrap_or_else(|| panic!("task {id} did not end: {task}"));
    task
}

pub(crate) fn status_text(task: &Value) -> String {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_peer_stopped_mid_task_times_out_its_caller_and_is_killed_when_the_formation_ends() {
    let (sb, dir) = relay_and_spinner(RELAY_TO_SPINNER);
    let launch = Launcher::start(
        &sb,
        &dir,
        &["--task", "never answered"],
        &[
            ("MURMUR_DELEGATION_TIMEOUT_SECS", "3"),
            ("MURMUR_TEST_TIMING", "component_task=60s,launcher_grace=1s"),
        ],
    );
    let frm = launch.formation_id();
    // The call started (the worker's door answered the SendMessage): now the worker stops.
    wait_until(Duration::from_secs(30), || has_event(&sb, "lead", "member_call_start"))
        .expect("the lead's call to the worker started");
    let worker = running_record(&sb, "worker");
    signal_pid(worker["pid"].as_i64().expect("pid"), Signal::SIGSTOP);
    let stopped_at = Instant::now();

    let (code, out, err) = launch.wait(Duration::from_secs(60));
    let took = stopped_at.elapsed();
    eprintln!("SIGSTOP of the worker mid-call: launcher exited {took:?} later");
    assert_eq!(code, 1, "the entry's task failed, so the formation did: {err}");
    // The stopped worker holds its connections open and never answers: the call's bound ends it.
    let calls = call_outcomes(&sb, "lead");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["status"], "timed_out", "{}", calls[0]);
    assert_eq!(
        out,
        "failed: worker did not answer within the call's bound of 3 s; its task was left running\n"
    );
    // The launcher closed the worker's lifeline; a stopped process cannot read it, so the grace
    // ran out and its process group was killed.
    assert!(
        err.contains("[capsule-runtime] error[E-RUN-030]"),
        "the entry reports its failed task: {err}"
    );
    assert!(
        formation_pids(&frm).is_empty(),
        "members still running after the launcher exited"
    );
    let worker_trace = records_of(&sb, "worker");
    assert!(
        !worker_trace.iter().any(|r| r["event_type"] == "session_end"),
        "the stopped worker was killed, never wound down"
    );
    let lead_trace = records_of(&sb, "lead");
    assert_eq!(lead_trace.last().expect("lead trace")["event_type"], "session_end");
}

#[test]
fn a_serving_formation_goes_on_after_a_peer_is_killed_mid_task() {
    let (sb, dir) = relay_and_spinner(RELAY_TO_SPINNER);
    let mut launch = Launcher::start(
        &sb,
        &dir,
        &[],
        &[("MURMUR_TEST_TIMING", "component_task=60s,answer_poll=100ms")],
    );
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let worker = running_record(&sb, "worker");
    let first = send(&lead, "first");
    wait_until(Duration::from_secs(30), || has_event(&sb, "lead", "member_call_start"))
        .expect("the lead's call to the worker started");
    signal_pid(worker["pid"].as_i64().expect("pid"), Signal::SIGKILL);

    // The caller's call ends unreachable, and the entry's task fails with it.
    let task = terminal_task(&lead, &first);
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert!(
        status_text(&task).starts_with("worker's door stopped answering while it worked on the task: "),
        "{task}"
    );
    // The formation goes on: the entry still takes tasks, and a call to the dead peer ends
    // unreachable at once, once the launcher has withdrawn it (and said so).
    let notice = format!(
        "[mur run] member 'worker' exited with status 137 while formation {frm} runs; calls to it from 'lead' now end unreachable"
    );
    wait_until(Duration::from_secs(30), || launch.stderr().lines().any(|l| l == notice))
        .unwrap_or_else(|| panic!("the launcher withdrew the worker: {}", launch.stderr()));
    let second = send(&lead, "second");
    let task = terminal_task(&lead, &second);
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    // At once: the launcher withdrew the dead peer from its caller, and said so.
    assert_eq!(
        status_text(&task),
        "worker's door could not be reached: its process has ended, and the launcher withdrew its door",
        "{task}"
    );
    let statuses: Vec<Value> = call_outcomes(&sb, "lead").iter().map(|c| c["status"].clone()).collect();
    assert_eq!(statuses, ["unreachable", "unreachable"]);
    let listed = door_rpc(&lead, "ListTasks", json!({}));
    assert_eq!(listed["result"]["totalSize"], 2, "{listed}");
    assert!(
        launch.child.try_wait().expect("try_wait").is_none(),
        "the launcher still runs the formation"
    );

    // Stopping it does not wait out the grace for the dead peer.
    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(15));
    assert_eq!(code, 143, "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("[mur run] SIGTERM: the formation was stopped; stopped: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("lead (pid ") && line.contains("worker (pid "), "{line}");
    assert!(formation_pids(&frm).is_empty());
    let lead_trace = records_of(&sb, "lead");
    assert!(lead_trace.iter().any(|r| r["event_type"] == "formation_ended"));
    assert_eq!(
        lead_trace.last().expect("trace")["exit_status"],
        "ok",
        "an idle entry ends ok"
    );
    // The killed worker's record names a dead process: `mur ps` prunes it.
    let ps = sb.run(&dir, &["ps"]);
    assert_eq!(crate::support::stdout(&ps), "No sessions are running.\n");
}

#[test]
fn a_stopped_peer_is_killed_when_a_serving_formation_is_stopped() {
    let (sb, dir) = echoes(TWO_ECHOES);
    let launch = Launcher::start(&sb, &dir, &[], &[("MURMUR_TEST_TIMING", "launcher_grace=1s")]);
    let frm = launch.formation_id();
    wait_until(Duration::from_secs(30), || formation_pids(&frm).len() == 2).expect("both members run");
    let worker = running_record(&sb, "worker");
    signal_pid(worker["pid"].as_i64().expect("pid"), Signal::SIGSTOP);
    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(20));
    assert_eq!(code, 143, "{err}");
    assert!(
        err.contains("[mur run] SIGTERM: the formation was stopped; stopped: lead (pid "),
        "{err}"
    );
    assert!(formation_pids(&frm).is_empty(), "the stopped worker was killed");
    let lead_trace = records_of(&sb, "lead");
    assert_eq!(lead_trace.last().expect("trace")["event_type"], "session_end");
}

#[test]
fn kill_of_the_launcher_early_in_a_launch_leaves_no_member() {
    // Three peers start at once; the launcher dies at increasing delays after its spawn, which
    // lands the kill before, during and after the peers' start.
    let roster = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: w1, capsule: local/echo, version: 0.1.0}\n  - {name: w2, capsule: local/echo, version: 0.1.0}\n  - {name: w3, capsule: local/echo, version: 0.1.0}\n";
    let (sb, dir) = echoes(roster);
    let minted = |sb: &Sandbox| {
        std::fs::read_dir(sb.home().join(".murmur/formations"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let mut rows = Vec::new();
    for delay_ms in [0u64, 1, 2, 5, 10, 20, 50, 100, 200] {
        let before = minted(&sb);
        let launch = Launcher::start(&sb, &dir, &[], &[]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        launch.signal(Signal::SIGKILL);
        let killed = Instant::now();
        let at_kill = members_of_home(&sb.home(), launch.pid()).len();
        let gone = all_members_gone(
            &sb,
            launch.pid(),
            killed,
            &format!("kill -KILL {delay_ms} ms after spawn"),
        );
        let (code, _, err) = launch.wait(Duration::from_secs(10));
        assert_eq!(code, 128 + 9);
        let phase = if err.contains("formation: ") {
            "formation line printed"
        } else if minted(&sb) > before {
            "formation directory made, not announced"
        } else {
            "no formation directory yet"
        };
        rows.push((delay_ms, at_kill, phase, gone));
    }
    for (delay, at_kill, phase, gone) in &rows {
        eprintln!(
            "kill -KILL {delay:>3} ms after spawn: {phase}, {at_kill} member process(es) at the kill, last member gone {gone:?} after the kill"
        );
    }
    assert!(
        rows.iter().any(|(_, n, _, _)| *n > 0),
        "some kill landed while members ran: {rows:?}"
    );
    nothing_claims_to_run(&sb, &dir, "early kills");
}

/// A `mur` for the launcher to start: peers whose work folder ends in `/<slow>` wait `secs`
/// before the real binary runs (a member slow to come up); everything else is the real binary.
fn slow_peer_binary(sb: &Sandbox, slow: &str, secs: u32) -> PathBuf {
    let path = sb.dir.path().join("slow-mur");
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in\n  *'/{slow} '*) sleep {secs} ;;\nesac\nexec '{}' \"$@\"\n",
        crate::support::mur_bin().display()
    );
    std::fs::write(&path, script).expect("write wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[test]
fn kill_of_the_launcher_while_peers_start_leaves_no_member() {
    let roster = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: quick, capsule: local/echo, version: 0.1.0}\n  - {name: slow, capsule: local/echo, version: 0.1.0}\n";
    let (sb, dir) = echoes(roster);
    let wrapper = slow_peer_binary(&sb, "slow", 2);
    let wrapper = wrapper.to_str().expect("utf-8");

    // (a) Neither peer is ready: the kill lands as soon as the first member process exists.
    let launch = Launcher::start(&sb, &dir, &[], &[("MURMUR_MUR_BINARY", wrapper)]);
    wait_until(Duration::from_secs(30), || {
        !members_of_home(&sb.home(), launch.pid()).is_empty()
    })
    .expect("a peer process exists");
    launch.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let gone = all_members_gone(&sb, launch.pid(), killed, "kill while no peer was ready");
    let (_, _, err) = launch.wait(Duration::from_secs(10));
    assert!(!err.contains("formation: "), "killed before the formation line: {err}");
    eprintln!("kill -KILL before any peer was ready: last member gone {gone:?} after the kill");

    // (b) One peer serves its door, the other is still coming up; the entry has not started.
    let launch = Launcher::start(&sb, &dir, &[], &[("MURMUR_MUR_BINARY", wrapper)]);
    let quick = running_record(&sb, "quick");
    assert!(
        running_records(&sb).iter().all(|r| r["formation_member"] != "slow"),
        "the slow peer is not up yet"
    );
    launch.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let gone = all_members_gone(&sb, launch.pid(), killed, "kill while one peer was ready");
    let (_, _, err) = launch.wait(Duration::from_secs(10));
    assert!(!err.contains("formation: "), "killed before the formation line: {err}");
    eprintln!("kill -KILL with one peer ready and one starting: last member gone {gone:?} after the kill");
    // The ready peer wound down through its lifeline.
    let traces = member_traces(&sb, "quick");
    let trace = traces
        .iter()
        .find(|t| t[0]["session_id"] == quick["session_id"])
        .expect("the quick peer's trace");
    assert!(trace.iter().any(|r| r["event_type"] == "formation_ended"));
    assert_eq!(trace.last().expect("trace")["exit_status"], "ok");
    nothing_claims_to_run(&sb, &dir, "kills while peers start");
}

#[test]
fn kill_of_the_launcher_while_the_entry_runs_its_task_leaves_no_member() {
    let (sb, dir) = relay_and_spinner(RELAY_TO_SPINNER);
    let launch = Launcher::start(
        &sb,
        &dir,
        &["--task", "in flight"],
        &[("MURMUR_TEST_TIMING", "component_task=60s")],
    );
    let frm = launch.formation_id();
    // Running, not only received: a task still queued at the kill is rejected, not cancelled.
    wait_until(Duration::from_secs(30), || {
        let recs = records_of(&sb, "worker");
        recs.iter()
            .any(|r| r["event_type"] == "a2a_task_received" && r["caller_member"] == "lead")
            && recs.iter().any(|r| r["event_type"] == "task_start")
    })
    .expect("the worker runs the lead's call");
    launch.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let gone = all_members_gone(&sb, launch.pid(), killed, "kill while the entry ran its task");
    let _ = launch.wait(Duration::from_secs(10));
    eprintln!("kill -KILL while the entry's task waited on a peer: last member gone {gone:?} after the kill");
    assert!(formation_pids(&frm).is_empty());
    // Both wound down through their lifelines: their live tasks were cancelled.
    for member in ["lead", "worker"] {
        let recs = records_of(&sb, member);
        let types: Vec<&str> = recs.iter().map(|r| r["event_type"].as_str().unwrap_or("")).collect();
        assert!(types.contains(&"formation_ended"), "{member}: {types:?}");
        assert!(
            types.contains(&"task_canceled"),
            "{member}: its task was cancelled: {types:?}"
        );
        assert_eq!(
            recs.last().expect("trace")["exit_status"],
            "formation_ended",
            "{member}"
        );
    }
    nothing_claims_to_run(&sb, &dir, "kill while the entry ran");
}

/// The launcher closes the entry's lifeline before its peers', yet the entry hears of its own end
/// through a listener thread while a peer's wind-down reaches the entry's task through a call: the
/// task must still end `canceled` by the formation's end
/// (docs/reference/formation.md#how-a-member-ends), never `failed` on the callee's cancellation.
/// The race was lost about one run in ten, so it is run several times.
#[test]
fn sigterm_while_the_entry_waits_on_a_peer_cancels_its_task_every_time() {
    for round in 1..=4 {
        let (sb, dir) = relay_and_spinner(RELAY_TO_SPINNER);
        let launch = Launcher::start(
            &sb,
            &dir,
            &["--task", "in flight"],
            &[("MURMUR_TEST_TIMING", "component_task=60s")],
        );
        wait_until(Duration::from_secs(30), || {
            records_of(&sb, "worker")
                .iter()
                .any(|r| r["event_type"] == "a2a_task_received" && r["caller_member"] == "lead")
        })
        .expect("the worker runs the lead's call");
        launch.signal(Signal::SIGTERM);
        let (code, out, err) = launch.wait(Duration::from_secs(60));
        let what = format!("round {round}");
        assert_eq!(code, 143, "{what}: {err}");
        assert!(
            out.starts_with("canceled: "),
            "{what}: the entry's task was cancelled: {out:?}\n{err}"
        );
        let recs = records_of(&sb, "lead");
        let types: Vec<&str> = recs.iter().map(|r| r["event_type"].as_str().unwrap_or("")).collect();
        let ended = types.iter().position(|t| *t == "formation_ended");
        let canceled = types.iter().position(|t| *t == "task_canceled");
        assert!(ended.is_some() && canceled > ended, "{what}: lead: {types:?}");
        assert_eq!(recs.last().expect("trace")["exit_status"], "formation_ended", "{what}");
        assert!(
            !err.contains("E-RUN-040"),
            "{what}: no member reports an error of its own: {err}"
        );
        nothing_claims_to_run(&sb, &dir, &what);
    }
}

/// Runs the launcher with `RLIMIT_FSIZE` 0 (every write to a regular file fails, as on a full
/// disk) and SIGXFSZ ignored, so the writes fail with EFBIG instead of killing the writer; both
/// are inherited by the members.
fn launch_on_a_full_disk(sb: &Sandbox, dir: &Path) -> (i32, String, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = sb.mur(dir);
    cmd.args(["run", "--roster", "--task", "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    // SAFETY: between fork and exec this only calls setrlimit and sigaction, both
    // async-signal-safe, and touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            let limit = nix::libc::rlimit {
                rlim_cur: 0,
                rlim_max: nix::libc::RLIM_INFINITY,
            };
            if nix::libc::setrlimit(nix::libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            nix::sys::signal::signal(Signal::SIGXFSZ, nix::sys::signal::SigHandler::SigIgn)
                .map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    Launcher::spawn(cmd).wait(Duration::from_secs(60))
}

#[test]
fn a_full_disk_refuses_the_launch_with_a_clear_error_and_leaves_nothing_running() {
    let (sb, dir) = echoes(TWO_ECHOES);
    let (code, out, err) = launch_on_a_full_disk(&sb, &dir);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "the entry never started: {out}");
    assert!(
        err.contains("error[E-RUN-045]: the formation could not be launched\n  'worker' (local/echo@0.1.0): its process exited with status 1 before reporting; its last stderr lines were:"),
        "{err}"
    );
    assert!(
        err.contains("[capsule-runtime] error[E-RUN-012]: trace.jsonl cannot be written: File too large (os error 27)"),
        "the peer says what it could not write: {err}"
    );
    assert!(err.contains("  hint: "), "{err}");
    assert!(!err.contains("  entry  lead"), "no formation line: {err}");
    assert!(members_of_home(&sb.home(), 0).is_empty(), "no member left");
    nothing_claims_to_run(&sb, &dir, "full disk");

    // A formation of the entry member alone: the entry itself refuses.
    let solo = sb.path("solo");
    std::fs::write(
        solo.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n",
    )
    .expect("roster");
    let (code, out, err) = launch_on_a_full_disk(&sb, &solo);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("[capsule-runtime] error[E-RUN-012]: trace.jsonl cannot be written: File too large (os error 27)"),
        "{err}"
    );
    assert!(members_of_home(&sb.home(), 0).is_empty(), "no member left");
    nothing_claims_to_run(&sb, &solo, "full disk, entry alone");
}

#[test]
fn an_unwritable_records_directory_refuses_the_launch_and_leaves_nothing_running() {
    let (sb, dir) = echoes(TWO_ECHOES);
    let murmur = sb.home().join(".murmur");
    let project = std::fs::canonicalize(&dir).expect("canonical project");
    let entry_group = murmur
        .join("records")
        .join(project.strip_prefix("/").expect("absolute"));
    // (path made a regular file, what stderr must say, whether the worker was started)
    let cases: Vec<(PathBuf, String, bool)> = vec![
        (
            murmur.join("records"),
            "error[E-RUN-045]: the formation could not be launched\n  'worker' (local/echo@0.1.0): its process exited with status 1 before reporting; its last stderr lines were:\n    [capsule-runtime] error[E-RUN-012]: the records directory ".into(),
            true,
        ),
        (
            murmur.join("formations"),
            "error[E-RUN-045]: the formation could not be launched\n  'worker' (local/echo@0.1.0): its directory ".into(),
            false,
        ),
        (
            entry_group.clone(),
            format!(
                "[capsule-runtime] error[E-RUN-012]: the records directory {}/ses_",
                entry_group.display()
            ),
            true,
        ),
    ];
    for (path, want, worker_started) in &cases {
        let what = path.display().to_string();
        let _ = std::fs::remove_dir_all(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, "not a directory\n").expect("write blocker");
        let out = sb.run(&dir, &["run", "--roster", "--task", "t"]);
        let err = crate::support::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(want.as_str()), "{what}: want {want:?} in:\n{err}");
        assert!(
            err.contains("Not a directory (os error 20)"),
            "{what}: the cause is named: {err}"
        );
        assert_eq!(crate::support::stdout(&out), "", "{what}: no answer on stdout");
        if *worker_started && path == &entry_group {
            // The peer was up: it wound down when the entry failed, idle, so its log says so.
            let wound_down = crate::support::member_sessions(&sb, "worker")
                .iter()
                .any(|(dir, recs)| {
                    recs.iter().any(|r| r["event_type"] == "formation_ended")
                        && std::fs::read_to_string(dir.join("logs/bootstrap.log"))
                            .unwrap_or_default()
                            .contains("formation lifeline closed")
                });
            assert!(wound_down, "{err}");
        }
        assert!(members_of_home(&sb.home(), 0).is_empty(), "{what}: no member left");
        nothing_claims_to_run(&sb, &dir, &what);
        std::fs::remove_file(path).expect("remove blocker");
    }
}

/// The launcher's debug lines that signal `pid` or its process group (see `registry::send_kill`).
fn signals_to(err: &str, pid: i64) -> Vec<usize> {
    let group = format!("SIGKILL to process group {pid}");
    let alone = format!("SIGKILL to member {pid}");
    err.lines()
        .enumerate()
        .filter(|(_, l)| {
            let l = l.trim_end();
            l.ends_with(&group) || l.ends_with(&alone)
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn a_peer_reaped_early_is_never_signalled_again() {
    // A pid, and so a process group id, is the launcher's only until it reaps the process: the
    // kernel may hand the number to any new process after that. A peer that ended on its own
    // long before the formation must not be signalled when the formation ends.
    let (sb, dir) = echoes(TWO_ECHOES);
    let launch = Launcher::start(
        &sb,
        &dir,
        &[],
        &[
            ("RUST_LOG", "mur::launcher=debug"),
            ("MURMUR_TEST_TIMING", "launcher_grace=1s"),
        ],
    );
    let frm = launch.formation_id();
    wait_until(Duration::from_secs(30), || formation_pids(&frm).len() == 2).expect("both members run");
    let worker = running_record(&sb, "worker")["pid"].as_i64().expect("pid");
    signal_pid(worker, Signal::SIGKILL);
    let forgotten = format!("member {worker} forgotten before it is reaped");
    wait_until(Duration::from_secs(30), || launch.stderr().contains(&forgotten))
        .unwrap_or_else(|| panic!("the launcher never reaped the worker:\n{}", launch.stderr()));
    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(20));
    assert_eq!(code, 143, "{err}");
    assert!(
        err.contains("[mur run] SIGTERM: the formation was stopped; stopped: lead (pid "),
        "{err}"
    );
    let reaped_at = err
        .lines()
        .position(|l| l.trim_end().ends_with(&forgotten))
        .expect("forgotten line");
    let late: Vec<&str> = signals_to(&err, worker)
        .into_iter()
        .filter(|&i| i > reaped_at)
        .filter_map(|i| err.lines().nth(i))
        .collect();
    assert!(late.is_empty(), "signalled after it was reaped: {late:?}\n{err}");
    // The lead wound down through its lifeline, as ever.
    assert!(has_event(&sb, "lead", "formation_ended"));
    assert!(formation_pids(&frm).is_empty());
}
