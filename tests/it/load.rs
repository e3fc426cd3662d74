//! Load: many concurrent tasks through an entry member into a busy peer, whose door holds no
//! task (`none`), one task in its life (`single`: queue depth "0"), or one running and 1 or 8
//! waiting (`queue`).
//!
//! The formation: `lead` (the entry, `fan`) hands each task to twelve relay members `a`…`l` at
//! once; each relay hands it to `worker` (`slow`: a fixed amount of work per task), so twelve calls
//! reach the worker together and all but as many as it holds are refused busy. Operator clients
//! send tasks to the lead's door concurrently and offer again on a busy refusal. The test then
//! accounts for every task at every door (ListTasks, traces, the lead's answers): nothing lost.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::{Launcher, Sandbox, door_rpc, formation_pids, member_traces, running_record, wait_until};

/// The relays, one letter each (the names `fan` calls).
const RELAYS: &str = "abcdefghijkl";
/// Concurrent operator clients at the lead's door.
const CLIENTS: usize = 6;
/// How long a client waits before offering a refused task again.
const CLIENT_RETRY: Duration = Duration::from_millis(200);

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";
const PEER: &str = "exports:\n  peer_tasks:\n    accept: true\n";

struct Case {
    name: &'static str,
    /// The worker's `lifecycle` block.
    worker_lifecycle: &'static str,
    /// Tasks sent to the lead.
    tasks: usize,
    /// Each relay's call bound (`lifecycle.delegation_deadline_secs`).
    relay_bound_secs: u64,
    /// Whether the worker's door must refuse some offers busy.
    expect_busy: Busy,
}

/// What a case's worker may answer busy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Busy {
    Never,
    /// Twelve calls at once meet a queue: some are refused.
    Some,
    /// Whether an offer arrives while the one task runs is the machine's timing: on a loaded
    /// machine the relays' calls can all come after it ended, and are then reported unreachable.
    Either,
}

/// What one load run measured.
#[derive(Debug, Default)]
struct Figures {
    tasks: usize,
    lead_accepted: usize,
    lead_busy_refusals: usize,
    lead_listed: usize,
    relay_listed: usize,
    worker_listed: usize,
    worker_taken: usize,
    worker_busy_refusals: usize,
    worker_canceled_late: usize,
    calls: usize,
    calls_found_busy: usize,
    busy_then_taken: usize,
    busy_reported: usize,
    call_statuses: BTreeMap<String, usize>,
    wall: Duration,
}

impl Figures {
    /// One line for the log, from which docs/reliability.md's table is written.
    fn summary(&self, case: &str) -> String {
        format!(
            "load {case}: {} tasks, {CLIENTS} clients, {} relays; wall {:.2} s; lead: {} taken, {} busy refusals offered again, ListTasks {}; relays: ListTasks {}; worker: {} offers, {} taken ({} cancelled late), {} busy refusals; calls: {} ({} found it busy: {} taken on a later offer, {} reported), outcomes {:?}",
            self.tasks,
            RELAYS.len(),
            self.wall.as_secs_f64(),
            self.lead_accepted,
            self.lead_busy_refusals,
            self.lead_listed,
            self.relay_listed,
            self.worker_listed,
            self.worker_taken,
            self.worker_canceled_late,
            self.worker_busy_refusals,
            self.calls,
            self.calls_found_busy,
            self.busy_then_taken,
            self.busy_reported,
            self.call_statuses,
        )
    }
}

fn install(sb: &Sandbox, case: &Case) {
    sb.install_component(
        "fan",
        "tests/it/testdata/fan.wat",
        &format!(
            "{GRANT}lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 2\n  delegation_deadline_secs: 120\n"
        ),
    );
    sb.install_component(
        "relay",
        "src/capsule/testdata/relay.wat",
        &format!(
            "{GRANT}{PEER}lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 1\n  delegation_deadline_secs: {}\n",
            case.relay_bound_secs
        ),
    );
    sb.install_component(
        "slow",
        "tests/it/testdata/slow.wat",
        &format!("{PEER}{}", case.worker_lifecycle),
    );
}

fn roster() -> String {
    let names: Vec<String> = RELAYS.chars().map(String::from).collect();
    let mut r = String::from(
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/fan, version: 0.1.0, entry: true}\n",
    );
    for n in &names {
        r.push_str(&format!("  - {{name: {n}, capsule: local/relay, version: 0.1.0}}\n"));
    }
    r.push_str("  - {name: worker, capsule: local/slow, version: 0.1.0}\nreachability:\n");
    r.push_str(&format!("  - {{from: lead, to: [{}]}}\n", names.join(", ")));
    for n in &names {
        r.push_str(&format!("  - {{from: {n}, to: [worker]}}\n"));
    }
    r
}

/// Every task a door lists to the operator, page by page, and its `totalSize`; `None` once the
/// door is gone (a member whose session ended).
fn list_all(rec: &Value) -> Option<(Vec<Value>, usize)> {
    let url = format!("http://{}/", rec["url"].as_str().expect("url"));
    let token = rec["door_token"].as_str().expect("door token");
    let mut tasks = Vec::new();
    let mut page_token = String::new();
    loop {
        let mut params = json!({"pageSize": 100, "includeArtifacts": true});
        if !page_token.is_empty() {
            params["pageToken"] = json!(page_token);
        }
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": "ListTasks", "params": params});
        let text = ureq::post(&url)
            .set("authorization", &format!("Bearer {token}"))
            .set("a2a-version", "1.0")
            .set("content-type", "application/json")
            .send_string(&body.to_string())
            .ok()?
            .into_string()
            .ok()?;
        let reply: Value = serde_json::from_str(&text).expect("JSON-RPC reply");
        let page = &reply["result"];
        let total = page["totalSize"].as_u64().unwrap_or_else(|| panic!("{reply}")) as usize;
        tasks.extend(page["tasks"].as_array().cloned().unwrap_or_default());
        page_token = page["nextPageToken"].as_str().unwrap_or_default().to_string();
        if page_token.is_empty() {
            return Some((tasks, total));
        }
    }
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

fn is_terminal(task: &Value) -> bool {
    matches!(
        state(task),
        "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED"
    )
}

fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// One operator client: takes task numbers until none is left, offering each until the lead
/// takes it. Returns the ids taken and the busy refusals it met.
fn client(lead: &Value, next: &AtomicUsize, total: usize) -> (Vec<String>, usize) {
    let mut taken = Vec::new();
    let mut busy = 0;
    loop {
        let n = next.fetch_add(1, Ordering::SeqCst);
        if n >= total {
            return (taken, busy);
        }
        let mut offer = 0;
        loop {
            offer += 1;
            assert!(offer < 1000, "task {n} was refused {offer} times");
            let reply = door_rpc(
                lead,
                "SendMessage",
                json!({"configuration": {"returnImmediately": true}, "message": {"messageId": format!("load-{n}-{offer}"), "role": "ROLE_USER", "parts": [{"text": format!("load task {n}"), "mediaType": "text/plain"}]}}),
            );
            let task = &reply["result"]["task"];
            match state(task) {
                "TASK_STATE_SUBMITTED" => {
                    taken.push(task["id"].as_str().expect("task id").to_string());
                    break;
                }
                "TASK_STATE_REJECTED" => {
                    assert_eq!(status_text(task), "task rejected: capsule is busy", "{reply}");
                    busy += 1;
                    std::thread::sleep(CLIENT_RETRY);
                }
                _ => panic!("unexpected reply: {reply}"),
            }
        }
    }
}

fn run_case(case: &Case) -> Figures {
    let sb = Sandbox::new();
    install(&sb, case);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), roster()).expect("roster");
    let launch = Launcher::start(
        &sb,
        &dir,
        &[],
        &[("MURMUR_TEST_TIMING", "busy_first=100ms,busy_max=400ms")],
    );
    let frm = launch.formation_id();
    assert!(
        launch
            .stderr()
            .contains("[mur run] warning[W-ROS-001]: roster.yaml lets 12 member(s) call 'worker'"),
        "{}",
        launch.stderr()
    );
    let lead = running_record(&sb, "lead");
    let worker = running_record(&sb, "worker");
    let relays: Vec<Value> = RELAYS.chars().map(|c| running_record(&sb, &c.to_string())).collect();

    // Concurrent clients at the lead's door.
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (lead, next, results, total) = (lead.clone(), next.clone(), results.clone(), case.tasks);
            std::thread::spawn(move || {
                let r = client(&lead, &next, total);
                results.lock().expect("lock").push(r);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client");
    }
    let results = std::mem::take(&mut *results.lock().expect("lock"));
    let accepted: BTreeSet<String> = results.iter().flat_map(|(ids, _)| ids.iter().cloned()).collect();
    let lead_busy: usize = results.iter().map(|(_, b)| b).sum();
    assert_eq!(accepted.len(), case.tasks, "{}: every task was taken once", case.name);

    // Every task the lead took reaches a terminal state.
    let mut lead_tasks = Vec::new();
    let mut lead_total = 0;
    wait_until(Duration::from_secs(120), || {
        (lead_tasks, lead_total) = list_all(&lead).expect("the lead's door answers");
        lead_tasks.iter().all(is_terminal)
    })
    .unwrap_or_else(|| panic!("{}: lead tasks still live: {lead_tasks:?}", case.name));
    let wall = started.elapsed();

    // The lead's door lists every offer: the tasks it took, and each busy refusal.
    assert_eq!(lead_total, lead_tasks.len(), "{}", case.name);
    assert_eq!(
        lead_total,
        case.tasks + lead_busy,
        "{}: lead ListTasks total",
        case.name
    );
    let rejected: Vec<&Value> = lead_tasks
        .iter()
        .filter(|t| state(t) == "TASK_STATE_REJECTED")
        .collect();
    assert_eq!(rejected.len(), lead_busy, "{}", case.name);
    assert!(
        rejected
            .iter()
            .all(|t| status_text(t) == "task rejected: capsule is busy")
    );
    let taken: BTreeSet<String> = lead_tasks
        .iter()
        .filter(|t| state(t) != "TASK_STATE_REJECTED")
        .map(|t| t["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        taken, accepted,
        "{}: the lead lists exactly the tasks it took",
        case.name
    );
    // Each took answer names every relay once, with its call's status digit.
    let mut digits: BTreeMap<char, usize> = BTreeMap::new();
    for t in lead_tasks.iter().filter(|t| state(t) != "TASK_STATE_REJECTED") {
        assert_eq!(state(t), "TASK_STATE_COMPLETED", "{}: {t}", case.name);
        let answer = t["artifacts"][0]["parts"][0]["text"].as_str().expect("answer");
        let pairs: Vec<(char, char)> = answer
            .as_bytes()
            .chunks(2)
            .map(|p| (p[0] as char, p[1] as char))
            .collect();
        let members: String = pairs.iter().map(|(m, _)| *m).collect();
        assert_eq!(members, RELAYS, "{}: one call per relay: {answer}", case.name);
        for (_, d) in pairs {
            *digits.entry(d).or_default() += 1;
        }
    }

    // The relays' doors: every task terminal, one per lead task.
    let mut relay_listed = 0;
    let mut relay_failed = 0;
    for (letter, rec) in RELAYS.chars().zip(&relays) {
        let mut listed = (Vec::new(), 0);
        wait_until(Duration::from_secs(60), || {
            listed = list_all(rec).expect("a relay's door answers");
            listed.0.iter().all(is_terminal)
        })
        .unwrap_or_else(|| panic!("{}: relay {letter} has live tasks", case.name));
        assert_eq!(
            listed.1, case.tasks,
            "{}: relay {letter} got one call per lead task",
            case.name
        );
        relay_listed += listed.1;
        relay_failed += listed.0.iter().filter(|t| state(t) == "TASK_STATE_FAILED").count();
    }
    // The worker's door, while it still serves (a `single` worker ends after its one task).
    let worker_listed = list_all(&worker);
    if let Some((tasks, _)) = &worker_listed {
        assert!(tasks.iter().all(is_terminal), "{}: worker tasks live", case.name);
    }

    launch.signal(Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(60));
    assert_eq!(code, 143, "{}: {err}", case.name);
    assert!(formation_pids(&frm).is_empty(), "{}: members left running", case.name);

    // The relays' traces: every call has exactly one outcome, and every busy refusal was
    // offered again until the worker took the task, or reported as `rejected`.
    let mut figures = Figures {
        tasks: case.tasks,
        lead_accepted: accepted.len(),
        lead_busy_refusals: lead_busy,
        lead_listed: lead_total,
        relay_listed,
        wall,
        ..Figures::default()
    };
    let mut started_ids = BTreeSet::new();
    let mut busy_records = 0;
    for letter in RELAYS.chars() {
        let recs: Vec<Value> = member_traces(&sb, &letter.to_string()).into_iter().flatten().collect();
        let mut per_call: HashMap<String, (usize, bool, Option<String>)> = HashMap::new();
        for r in &recs {
            let Some(call) = r["call_id"].as_str() else { continue };
            let entry = per_call.entry(call.to_string()).or_default();
            match r["event_type"].as_str() {
                Some("member_call_busy") => {
                    entry.0 += 1;
                    busy_records += 1;
                }
                Some("member_call_start") => {
                    entry.1 = true;
                    started_ids.insert(r["member_task_id"].as_str().unwrap_or_default().to_string());
                }
                Some("member_call") => {
                    assert!(entry.2.is_none(), "{}: call {call} has two outcomes", case.name);
                    entry.2 = r["status"].as_str().map(str::to_string);
                }
                _ => {}
            }
        }
        assert_eq!(
            per_call.len(),
            case.tasks,
            "{}: relay {letter}: one call per task",
            case.name
        );
        for (call, (busy, started, outcome)) in per_call {
            let outcome = outcome.unwrap_or_else(|| panic!("{}: call {call} has no outcome", case.name));
            figures.calls += 1;
            *figures.call_statuses.entry(outcome.clone()).or_default() += 1;
            if busy > 0 {
                figures.calls_found_busy += 1;
                // Offered again until taken, or its end reported to the relay.
                if started {
                    figures.busy_then_taken += 1;
                } else {
                    assert_ne!(outcome, "completed", "{}: call {call}", case.name);
                    figures.busy_reported += 1;
                }
            }
        }
    }
    // The worker's trace: every task it received ended once. Each busy refusal is one
    // `member_call_busy`; each task it took is one a relay started, or one it took just as the
    // call gave up, which was cancelled.
    let worker_trace: Vec<Value> = member_traces(&sb, "worker").into_iter().flatten().collect();
    let mut ends: HashMap<String, (String, String)> = HashMap::new();
    let mut received = Vec::new();
    for r in &worker_trace {
        let id = r["task_id"].as_str().unwrap_or_default().to_string();
        match r["event_type"].as_str() {
            Some("a2a_task_received") => received.push(id),
            Some(kind @ ("task_end" | "task_rejected" | "task_canceled")) => {
                let why = r["reason"].as_str().or(r["exit_status"].as_str()).unwrap_or_default();
                let previous = ends.insert(id.clone(), (kind.to_string(), why.to_string()));
                assert!(previous.is_none(), "{}: worker task {id} ended twice", case.name);
            }
            _ => {}
        }
    }
    assert_eq!(ends.len(), received.len(), "{}: every worker task ended", case.name);
    for id in &received {
        let (kind, why) = ends
            .get(id)
            .unwrap_or_else(|| panic!("{}: worker task {id} never ended", case.name));
        match kind.as_str() {
            "task_rejected" if why == "task rejected: capsule is busy" => figures.worker_busy_refusals += 1,
            // A re-offer that arrived as the `single` worker was closing.
            "task_rejected" => assert_eq!(why, "task rejected: the session is closing", "{}", case.name),
            _ if started_ids.contains(id) => figures.worker_taken += 1,
            "task_canceled" => {
                figures.worker_taken += 1;
                figures.worker_canceled_late += 1;
            }
            other => panic!(
                "{}: worker task {id} ended {other} ({why}) but no call started it",
                case.name
            ),
        }
    }
    assert_eq!(
        figures.worker_busy_refusals, busy_records,
        "{}: busy refusals vs member_call_busy",
        case.name
    );
    assert_eq!(
        figures.worker_taken - figures.worker_canceled_late,
        started_ids.len(),
        "{}",
        case.name
    );
    figures.worker_listed = received.len();
    if let Some((tasks, total)) = &worker_listed {
        assert_eq!(*total, received.len(), "{}: worker ListTasks vs its trace", case.name);
        assert_eq!(tasks.len(), *total, "{}", case.name);
    }
    // What the relays' calls ended as is what the lead's answers say: a relay whose call did not
    // complete failed its task, which the lead saw as a failed call (digit 1).
    let not_completed = figures.calls - figures.call_statuses.get("completed").copied().unwrap_or(0);
    assert_eq!(relay_failed, not_completed, "{}", case.name);
    assert_eq!(digits.get(&'1').copied().unwrap_or(0), not_completed, "{}", case.name);
    assert_eq!(
        digits.get(&'0').copied().unwrap_or(0) + not_completed,
        case.tasks * RELAYS.len(),
        "{}: {digits:?}",
        case.name
    );
    if case.expect_busy != Busy::Either {
        assert_eq!(
            figures.worker_busy_refusals > 0,
            case.expect_busy == Busy::Some,
            "{}: busy refusals at the worker: {figures:?}",
            case.name
        );
    }
    eprintln!("{}", figures.summary(case.name));
    figures
}

#[test]
fn load_into_a_peer_that_takes_no_task() {
    // `none`: its door refuses every SendMessage, so every call fails at once and is reported.
    let f = run_case(&Case {
        name: "none",
        worker_lifecycle: "lifecycle:\n  task_acceptance: none\n",
        tasks: 4,
        relay_bound_secs: 10,
        expect_busy: Busy::Never,
    });
    assert_eq!(f.worker_listed, 0, "{f:?}");
    assert_eq!(f.call_statuses.get("failed"), Some(&f.calls), "{f:?}");
}

#[test]
fn load_into_a_peer_that_takes_one_task_in_its_life() {
    // Queue depth "0": `single` holds one task and no queue. Offers that arrive while it runs
    // are refused busy and offered again; once that task ends the session ends, and the calls
    // still being offered, and every later one, are reported unreachable.
    let f = run_case(&Case {
        name: "single",
        worker_lifecycle: "lifecycle:\n  task_acceptance: single\n  after_task: sleep\n",
        tasks: 4,
        relay_bound_secs: 10,
        expect_busy: Busy::Either,
    });
    assert_eq!(f.worker_taken, 1, "{f:?}");
    assert_eq!(f.call_statuses.get("completed"), Some(&1), "{f:?}");
    assert_eq!(f.busy_reported, f.calls_found_busy, "{f:?}");
}

#[test]
fn load_into_a_peer_with_queue_depth_1() {
    let f = run_case(&Case {
        name: "queue_depth 1",
        worker_lifecycle: "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 1\n",
        tasks: 8,
        relay_bound_secs: 60,
        expect_busy: Busy::Some,
    });
    assert_eq!(f.call_statuses.get("completed"), Some(&f.calls), "{f:?}");
}

#[test]
fn load_into_a_peer_with_queue_depth_8() {
    let f = run_case(&Case {
        name: "queue_depth 8",
        worker_lifecycle: "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 8\n",
        tasks: 10,
        relay_bound_secs: 60,
        expect_busy: Busy::Some,
    });
    assert_eq!(f.call_statuses.get("completed"), Some(&f.calls), "{f:?}");
}
