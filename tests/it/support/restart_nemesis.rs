//! The restart nemesis (docs/reliability.md#the-restart-nemesis): a formation under
//! `--restart` whose peer is killed at random while tasks flow, by the signals a peer dies of
//! (SIGKILL, as the kernel's out-of-memory killer sends it; SIGSEGV; SIGABRT, what a Rust
//! process does when an allocation fails), and the invariants the task store and calls across a
//! restart promise: every task a door acknowledged ends in a terminal state its caller observed,
//! no task runs twice unless its capsule allows it, every call has exactly one outcome, traces
//! stay whole, nothing outlives the formation.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::nemesis::{Rng, trace_valid};
use super::{
    Launcher, Sandbox, door_rpc, formation_pids, member_sessions, running_record, running_record_of_pid, wait_until,
};

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";
const ROSTER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/slow, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

/// How the peer dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerFault {
    /// SIGKILL: `kill -9`, and the kernel's out-of-memory killer.
    Kill,
    /// SIGSEGV: a crash in native code.
    Segv,
    /// SIGABRT: a Rust process whose allocation fails aborts.
    Abort,
}

impl PeerFault {
    pub const ALL: [PeerFault; 3] = [PeerFault::Kill, PeerFault::Segv, PeerFault::Abort];

    fn signal(self) -> Signal {
        match self {
            PeerFault::Kill => Signal::SIGKILL,
            PeerFault::Segv => Signal::SIGSEGV,
            PeerFault::Abort => Signal::SIGABRT,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PeerFault::Kill => "SIGKILL (kill -9, the out-of-memory killer)",
            PeerFault::Segv => "SIGSEGV (a crash)",
            PeerFault::Abort => "SIGABRT (a failed allocation's abort)",
        }
    }
}

/// What one run did.
#[derive(Debug, Default)]
pub struct RestartFigures {
    pub seed: u64,
    pub repeatable: bool,
    pub faults: BTreeMap<PeerFault, u64>,
    pub restarts: u64,
    /// Tasks a door acknowledged (SendMessage answered with a task), at the entry and the peer.
    pub acknowledged: u64,
    pub completed: u64,
    /// Ended `failed` with E-RST-002: they ran when the peer died.
    pub failed_by_restart: u64,
    /// Ended otherwise (`failed` for a call offered while the peer was down, `rejected` busy).
    pub other_ends: u64,
    /// Acknowledged and never seen terminal: the goal is 0.
    pub lost: u64,
    /// Worker tasks started more than once (only a repeatable capsule may).
    pub run_again: u64,
    pub calls: u64,
    pub elapsed: Duration,
}

impl RestartFigures {
    pub fn report(&self) -> String {
        let faults: Vec<String> = self.faults.iter().map(|(k, n)| format!("{}: {n}", k.name())).collect();
        format!(
            "restart nemesis: seed {:#x}, repeatable {}, {:.1} s: faults {} ({}), restarts {}, tasks acknowledged {} (completed {}, failed by a restart {}, other ends {}), lost {}, run again {}, member calls {}",
            self.seed,
            self.repeatable,
            self.elapsed.as_secs_f64(),
            self.faults.values().sum::<u64>(),
            faults.join(", "),
            self.restarts,
            self.acknowledged,
            self.completed,
            self.failed_by_restart,
            self.other_ends,
            self.lost,
            self.run_again,
            self.calls,
        )
    }
}

struct Sent {
    id: String,
    text: String,
    /// At the peer's door (else at the entry's).
    at_worker: bool,
}

fn send(rec: &Value, text: &str) -> Option<(String, String)> {
    let reply = door_rpc(
        rec,
        "SendMessage",
        json!({"configuration": {"returnImmediately": true}, "message": {"messageId": format!("msg-{text}"), "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}}),
    );
    let task = &reply["result"]["task"];
    Some((
        task["id"].as_str()?.to_string(),
        task["status"]["state"].as_str()?.to_string(),
    ))
}

fn terminal(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED"
    )
}

/// The pids of the ready lines the launcher printed so far, in order.
fn ready_pids(launch: &Launcher) -> Vec<u32> {
    let prefix = "[mur run] member 'worker' was restarted and is ready again (pid ";
    launch
        .stderr()
        .lines()
        .filter_map(|l| l.strip_prefix(prefix)?.strip_suffix(')')?.parse().ok())
        .collect()
}

/// Runs `rounds` faults against one formation and checks the invariants; panics with the seed
/// when one breaks.
pub fn run(seed: u64, rounds: usize, repeatable: bool) -> RestartFigures {
    let started = Instant::now();
    let mut rng = Rng::new(seed);
    let mut fig = RestartFigures {
        seed,
        repeatable,
        ..RestartFigures::default()
    };
    let broken = |what: String| -> ! {
        panic!("restart nemesis: invariant broken with seed {seed:#x} (replay: MUR_NEMESIS_SEED={seed:#x}): {what}")
    };

    let sb = Sandbox::new();
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    let lifecycle = format!(
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 16\n  repeatable_tasks: {repeatable}\nexports:\n  peer_tasks:\n    accept: true\n"
    );
    sb.install_component("slow", "src/capsule/testdata/slow.wat", &lifecycle);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let launch = Launcher::start(&sb, &dir, &["--restart", "1000/600"], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let mut worker = running_record(&sb, "worker");
    let mut sent: Vec<Sent> = Vec::new();
    let mut ends: HashMap<String, Value> = HashMap::new();

    for round in 0..rounds {
        let kind = PeerFault::ALL[rng.below(PeerFault::ALL.len() as u64) as usize];
        // Tasks flow: some at the peer's door, some through the entry's call.
        for i in 0..1 + rng.below(3) {
            let text = format!("r{round} direct {i}");
            if let Some((id, _)) = send(&worker, &text) {
                sent.push(Sent {
                    id,
                    text,
                    at_worker: true,
                });
            }
        }
        for i in 0..rng.below(2) {
            let text = format!("r{round} via lead {i}");
            if let Some((id, _)) = send(&lead, &text) {
                sent.push(Sent {
                    id,
                    text,
                    at_worker: false,
                });
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(120)));
        let pid = worker["pid"].as_u64().expect("pid") as u32;
        let target = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(target, kind.signal());
        if kind == PeerFault::Segv {
            // wasmtime's handler hands a SIGSEGV that is not a wasm trap to the default action
            // and returns: a real fault re-executes and meets it, a sent signal only on its
            // second delivery.
            let gone = wait_until(Duration::from_millis(300), || {
                nix::sys::signal::kill(target, None).is_err()
            });
            if gone.is_none() {
                let _ = nix::sys::signal::kill(target, kind.signal());
            }
        }
        *fig.faults.entry(kind).or_default() += 1;
        let nth = round + 1;
        let mut pids = Vec::new();
        wait_until(Duration::from_secs(60), || {
            pids = ready_pids(&launch);
            pids.len() >= nth
        })
        .unwrap_or_else(|| {
            broken(format!(
                "round {round} ({}): the worker was not ready again: {}",
                kind.name(),
                launch.stderr()
            ))
        });
        fig.restarts = pids.len() as u64;
        worker = running_record_of_pid(&sb, pids[nth - 1]);

        // Every task acknowledged so far ends, and its caller sees the end.
        for s in &sent {
            if ends.contains_key(&s.id) {
                continue;
            }
            let rec = if s.at_worker { &worker } else { &lead };
            let mut task = Value::Null;
            let seen = wait_until(Duration::from_secs(60), || {
                task = door_rpc(rec, "GetTask", json!({"id": s.id}))["result"].clone();
                terminal(task["status"]["state"].as_str().unwrap_or_default())
            });
            if seen.is_none() {
                fig.lost += 1;
                broken(format!(
                    "round {round} ({}): task {} ({}) did not end: {task}",
                    kind.name(),
                    s.id,
                    s.text
                ));
            }
            ends.insert(s.id.clone(), task);
        }
    }

    // The ends, as the callers saw them.
    for s in &sent {
        fig.acknowledged += 1;
        let task = &ends[&s.id];
        let state = task["status"]["state"].as_str().unwrap_or_default();
        let why = task["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default();
        match state {
            "TASK_STATE_COMPLETED" => {
                fig.completed += 1;
                let answer = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or_default();
                if answer != s.text {
                    broken(format!(
                        "task {} ({}) completed with another answer: {task}",
                        s.id, s.text
                    ));
                }
            }
            "TASK_STATE_FAILED" if why.contains("E-RST-002") => {
                if repeatable {
                    broken(format!("a repeatable task failed by the restart: {task}"));
                }
                fig.failed_by_restart += 1;
            }
            _ => fig.other_ends += 1,
        }
    }

    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(60));
    if code != 143 || err.contains("panicked") {
        broken(format!("the formation ended {code}: {err}"));
    }
    wait_until(Duration::from_secs(30), || formation_pids(&frm).is_empty())
        .unwrap_or_else(|| broken(format!("members outlived the formation: {:?}", formation_pids(&frm))));

    // No task ran twice unless its capsule allows it; traces are whole.
    let mut starts: HashMap<String, u64> = HashMap::new();
    let sessions: Vec<(PathBuf, Vec<Value>)> = member_sessions(&sb, "worker");
    if sessions.len() != rounds + 1 {
        broken(format!("{} worker sessions for {rounds} restarts", sessions.len()));
    }
    for (dir, recs) in &sessions {
        for r in recs.iter().filter(|r| r["event_type"] == "task_start") {
            *starts
                .entry(r["task_id"].as_str().unwrap_or_default().to_string())
                .or_default() += 1;
        }
        let killed = recs.last().is_none_or(|r| r["event_type"] != "session_end");
        let last_one = recs.first().map(|r| &r["session_id"]) == worker.get("session_id");
        if let Err(e) = trace_valid(&dir.join("trace.jsonl"), killed && !last_one) {
            broken(e);
        }
    }
    fig.run_again = starts.values().filter(|n| **n > 1).count() as u64;
    if !repeatable && fig.run_again > 0 {
        broken(format!(
            "{} task(s) of a capsule that does not allow it ran twice: {starts:?}",
            fig.run_again
        ));
    }
    // Every call the entry made has exactly one outcome.
    for (dir, recs) in member_sessions(&sb, "lead") {
        if let Err(e) = trace_valid(&dir.join("trace.jsonl"), false) {
            broken(e);
        }
        let mut outcomes: HashMap<String, u64> = HashMap::new();
        for r in recs.iter().filter(|r| r["event_type"] == "member_call") {
            *outcomes
                .entry(r["call_id"].as_str().unwrap_or_default().to_string())
                .or_default() += 1;
            // A call that was following a task the worker took follows it to the new door.
            if r["status"] == "unreachable" && !r["member_task_id"].is_null() {
                broken(format!("a call lost the task it followed: {r}"));
            }
        }
        fig.calls += outcomes.len() as u64;
        if let Some((call, n)) = outcomes.iter().find(|(_, n)| **n != 1) {
            broken(format!("call {call} has {n} outcomes"));
        }
    }
    fig.elapsed = started.elapsed();
    eprintln!("{}", fig.report());
    fig
}
