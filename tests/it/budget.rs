//! Token budgets through the real binary (docs/reference/formation.md#budgets): a formation's
//! `--max-tokens`, kept by the launcher over each model member's budget channel, and a session's
//! `inference.max_session_tokens`, against the scripted provider reporting its usage.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Request, Step, openai};
use crate::support::{Launcher, Sandbox, formation_pids, stderr, stdout, wait_until};

const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
const KEY: &str = "sk-it-budget-0123456789";

/// What every scripted reply reports using: far more than any reservation here asks, so the
/// budget's arithmetic is the provider's figures, and exactly one turn overruns its reservation.
const INPUT: u64 = 3000;
const OUTPUT: u64 = 3000;
const PER_TURN: u64 = INPUT + OUTPUT;

const ROSTER: &str = "\
roster_version: 1
members:
  - name: lead
    capsule: local/lead
    version: 0.1.0
    entry: true
  - name: worker-a
    capsule: local/worker-a
    version: 0.1.0
  - name: worker-b
    capsule: local/worker-b
    version: 0.1.0
reachability:
  - from: lead
    to: [worker-a, worker-b]
";

const TAIL: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\n\
    exports:\n  peer_tasks:\n    accept: true\ncapabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n";

fn with_usage(mut v: Value) -> Reply {
    v["usage"] = json!({"prompt_tokens": INPUT, "completion_tokens": OUTPUT, "total_tokens": PER_TURN});
    Reply::json(v)
}

fn member_of(req: &Request) -> String {
    let system = req.json()["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    system
        .lines()
        .find_map(|l| l.strip_prefix("member: "))
        .unwrap_or("-")
        .to_string()
}

/// The lead calls both workers, waits, then calls worker-a again once their answers are in
/// hand, then answers; each worker answers its task at once.
fn route(req: &Request) -> Reply {
    let member = member_of(req);
    let text = req.last_user_text().unwrap_or_default();
    if member != "lead" {
        return with_usage(openai::text(&format!("{member} did: {text}")));
    }
    let body = req.json();
    let last_is_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    let calls: &[(&str, &str, &str)] = if last_is_tool {
        return with_usage(openai::text("waiting for the workers"));
    } else if text == "build it" {
        &[("c1", "worker-a", "part a"), ("c2", "worker-b", "part b")]
    } else if text.contains("worker-a did: part a") {
        &[("c3", "worker-a", "do it again")]
    } else {
        return with_usage(openai::text("all done"));
    };
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, m, t)| (*id, "call-member", json!({"member": m, "task": t})))
        .collect();
    with_usage(openai::tool_calls(&calls))
}

/// The three-member formation against one provider; `worker_a_extra` goes under worker-a's
/// `inference:`.
fn formation(worker_a_extra: &str) -> (Sandbox, PathBuf, Provider) {
    let sb = Sandbox::new();
    let provider = Provider::start((0..16).map(|_| Step::func(route)).collect());
    for (name, extra) in [("lead", ""), ("worker-a", worker_a_extra), ("worker-b", "")] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_turns: 6\n{extra}{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    (sb, dir, provider)
}

fn run(sb: &Sandbox, dir: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = sb
        .mur(dir)
        .env(KEY_VAR, KEY)
        .args(["run", "--roster", "--task", "build it"])
        .args(extra)
        .output()
        .expect("mur run --roster");
    (out.status.code(), stdout(&out), stderr(&out))
}

fn formation_id(err: &str) -> String {
    err.lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .expect("formation line")
        .trim()
        .to_string()
}

fn budget_file(sb: &Sandbox, frm: &str) -> Value {
    let path = sb.home().join(".murmur/formations").join(frm).join("budget.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("budget.json")).expect("budget.json is JSON")
}

/// Every `inference` record of the formation's members, with the member's name.
fn inference_records(sb: &Sandbox) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for member in ["lead", "worker-a", "worker-b"] {
        for recs in crate::support::member_traces(sb, member) {
            out.extend(
                recs.into_iter()
                    .filter(|r| r["event_type"] == "inference")
                    .map(|r| (member.to_string(), r)),
            );
        }
    }
    out
}

#[test]
fn a_formation_budget_allowing_four_turns_sends_exactly_four_and_ends_with_the_budget_error() {
    let (sb, dir, provider) = formation("");
    // Three turns leave room for a fourth's reservation; the fourth's reported use spends it out.
    let budget = 4 * PER_TURN - 1;
    let (code, out, err) = run(&sb, &dir, &["--max-tokens", &budget.to_string()]);
    assert_ne!(code, Some(0), "the formation must fail: {out}\n{err}");
    assert!(
        err.contains("E-BUD-001"),
        "the entry's failure names the budget:\n{err}"
    );
    assert_eq!(provider.requests().len(), 4, "exactly four provider requests in all");
    let frm = formation_id(&err);
    assert!(formation_pids(&frm).is_empty(), "nothing outlives the formation");

    // The launcher's figures: the provider's totals, nothing still held.
    let figures = budget_file(&sb, &frm);
    assert_eq!(figures["limit"], budget);
    assert_eq!(figures["spent"], 4 * PER_TURN);
    assert_eq!(figures["held"], 0, "no reservation outlives its member: {figures}");
    assert_eq!(
        figures["members"]["lead"],
        json!({"spent": 2 * PER_TURN, "turns": 2, "held": 0})
    );
    assert_eq!(
        figures["members"]["worker-a"],
        json!({"spent": PER_TURN, "turns": 1, "held": 0})
    );
    assert_eq!(
        figures["members"]["worker-b"],
        json!({"spent": PER_TURN, "turns": 1, "held": 0})
    );

    // Each inference record carries its reservation and its settlement.
    let records = inference_records(&sb);
    assert_eq!(records.len(), 4, "{records:?}");
    for (member, r) in &records {
        let reserved = r["budget_reserved"].as_u64().unwrap_or_else(|| panic!("{member}: {r}"));
        assert!(reserved > 50 && reserved < PER_TURN, "{member}: reserved {reserved}");
        assert_eq!(r["budget_charged"], PER_TURN, "{member}: {r}");
        assert!(r["budget_left"].is_i64(), "{member}: {r}");
    }
    // The lead's last turn was refused: its failure names the formation's budget.
    let lead_ends: Vec<Value> = crate::support::member_traces(&sb, "lead")
        .into_iter()
        .flatten()
        .filter(|r| r["event_type"] == "task_end")
        .collect();
    assert!(
        lead_ends.iter().any(|r| r["status"] != "ok"),
        "the lead's task did not complete: {lead_ends:?}"
    );

    // `mur trace show` adds up to the provider's reported totals.
    let show = sb.run(&dir, &["trace", "show", &frm]);
    let text = stdout(&show);
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(
        text.contains(&format!(
            "budget:\n  limit {budget}  spent {}  left {}\n",
            4 * PER_TURN,
            budget as i64 - (4 * PER_TURN) as i64
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("lead      spent {}  turns 2", 2 * PER_TURN)),
        "{text}"
    );
    let total = text
        .lines()
        .find(|l| l.trim_start().starts_with("total"))
        .expect("usage total row");
    let cells: Vec<u64> = total.split_whitespace().filter_map(|c| c.parse().ok()).collect();
    let (tokens_in, tokens_out) = (cells[cells.len() - 2], cells[cells.len() - 1]);
    assert_eq!(tokens_in + tokens_out, 4 * PER_TURN, "{text}");
}

#[test]
fn a_members_session_budget_stops_it_while_the_others_go_on() {
    // worker-a may spend less than one turn's reservation: its task fails, the rest completes.
    let (sb, dir, provider) = formation("  max_session_tokens: 60\n");
    let (code, out, err) = run(&sb, &dir, &["--max-tokens", "1000000"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(out, "all done\n");
    let members: Vec<String> = provider.requests().iter().map(member_of).collect();
    assert!(
        !members.iter().any(|m| m == "worker-a"),
        "worker-a sent nothing: {members:?}"
    );
    assert_eq!(members.iter().filter(|m| *m == "worker-b").count(), 1, "{members:?}");
    // worker-a's failure reached the lead's model in its continuation, naming the session budget.
    assert!(
        provider
            .requests()
            .iter()
            .any(|r| member_of(r) == "lead" && r.text().contains("E-BUD-002")),
        "the lead was told why worker-a gave no answer"
    );
    let figures = budget_file(&sb, &formation_id(&err));
    assert_eq!(figures["held"], 0);
    assert_eq!(figures["spent"], members.len() as u64 * PER_TURN);
}

#[test]
fn a_member_killed_holding_a_reservation_has_it_returned() {
    // worker-b's turn is held by the provider until the test has killed worker-b.
    let gate = crate::support::provider::Gate::new();
    let held = gate.clone();
    let sb = Sandbox::new();
    let provider = Provider::start(
        (0..16)
            .map(|_| {
                let held = held.clone();
                Step::func(move |req: &Request| {
                    if member_of(req) == "worker-b" {
                        held.wait(Duration::from_secs(30));
                    }
                    route(req)
                })
            })
            .collect(),
    );
    for name in ["lead", "worker-a", "worker-b"] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_turns: 6\n{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let launcher = Launcher::start(
        &sb,
        &dir,
        &["--task", "build it", "--max-tokens", "1000000"],
        &[(KEY_VAR, KEY)],
    );
    let frm = launcher.formation_id();
    assert!(
        wait_until(Duration::from_secs(30), || provider
            .requests()
            .iter()
            .any(|r| member_of(r) == "worker-b"))
        .is_some(),
        "worker-b's turn reached the provider"
    );
    let b = crate::support::running_record(&sb, "worker-b");
    let pid = b["pid"].as_u64().expect("worker-b's pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill worker-b");
    gate.open();
    let (code, out, err) = launcher.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "the lead answers without worker-b:\n{out}\n{err}");
    // The lead's turns after worker-b died settled and wrote the figures: nothing is held, and
    // worker-b was charged nothing for the turn it never settled.
    let figures = budget_file(&sb, &frm);
    assert_eq!(figures["held"], 0, "{figures}");
    assert_eq!(figures["members"]["worker-b"]["spent"], 0, "{figures}");
    assert!(figures["members"]["lead"]["turns"].as_u64() >= Some(2), "{figures}");
}

#[test]
fn budget_values_that_are_not_a_number_of_tokens_are_refused_with_their_code() {
    let (sb, dir, provider) = formation("");
    for bad in ["0", "-5", "1000000000001", "lots", "1e6", ""] {
        let (code, out, err) = run(&sb, &dir, &["--max-tokens", bad]);
        assert_eq!(code, Some(1), "--max-tokens {bad:?}: {out}\n{err}");
        assert!(err.contains("error[E-BUD-003]"), "--max-tokens {bad:?}: {err}");
        assert!(err.contains("hint:"), "{err}");
    }
    assert!(provider.requests().is_empty(), "a refused launch starts nothing");
}

#[test]
fn a_standalone_session_honours_its_own_budget() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![with_usage(openai::text("never")).into()]);
    let manifest = format!(
        "name: solo\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_session_tokens: 20\n",
        provider.url()
    );
    sb.install_manifest("solo", &manifest);
    let dir = sb.path("work");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .args([
            "run",
            "--capsule",
            "local/solo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hello",
        ])
        .output()
        .expect("mur run --capsule");
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("E-BUD-002") && err.contains("max_session_tokens: 20"),
        "{err}"
    );
    assert!(provider.requests().is_empty(), "the refused turn was never sent");
}

/// `budget.json` once it exists and parses (the launcher replaces it whole, by a rename).
fn budget_now(sb: &Sandbox, frm: &str) -> Option<Value> {
    let path = sb.home().join(".murmur/formations").join(frm).join("budget.json");
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Waits until `budget.json` satisfies `cond`; the figures then, or a panic naming the last seen.
fn wait_budget(sb: &Sandbox, frm: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let mut seen = None;
    wait_until(Duration::from_secs(30), || {
        seen = budget_now(sb, frm);
        seen.as_ref().is_some_and(&cond)
    })
    .unwrap_or_else(|| panic!("budget.json never showed {what}; last: {seen:?}"));
    seen.expect("figures")
}

fn send_message(rec: &Value, text: &str, return_immediately: bool) -> Value {
    crate::support::door_rpc(
        rec,
        "SendMessage",
        json!({"configuration": {"returnImmediately": return_immediately},
               "message": {"messageId": format!("msg-{text}"), "role": "ROLE_USER",
                           "parts": [{"text": text, "mediaType": "text/plain"}]}}),
    )
}

#[test]
fn cancelled_turns_end_their_holds_and_the_budget_still_grants_the_next_task() {
    // Every turn of a task whose text starts "stall" is held by the provider until the end of
    // the test; the operator cancels it at the member's door while its request is in flight.
    let stall = crate::support::provider::Gate::new();
    let held = stall.clone();
    let provider = Provider::start(
        (0..16)
            .map(|_| {
                let held = held.clone();
                Step::func(move |req: &Request| {
                    if req.last_user_text().unwrap_or_default().starts_with("stall") {
                        held.wait(Duration::from_secs(60));
                    }
                    with_usage(openai::text("answered"))
                })
            })
            .collect(),
    );
    let sb = Sandbox::new();
    // Each turn reserves a little over 12 000 of the 40 000.
    for name in ["lead", "worker-a", "worker-b"] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 12000\n{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let launcher = Launcher::start(&sb, &dir, &["--max-tokens", "40000"], &[(KEY_VAR, KEY)]);
    let frm = launcher.formation_id();
    let worker = crate::support::running_record(&sb, "worker-a");

    let mut charged = 0;
    for round in 1..=2 {
        let text = format!("stall {round}");
        let sent = send_message(&worker, &text, true);
        let id = sent["result"]["task"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{sent}"))
            .to_string();
        // In flight: the figures show the hold, as the member's.
        let during = wait_budget(&sb, &frm, "the turn's hold", |f| f["held"].as_u64() > Some(0));
        let hold = during["members"]["worker-a"]["held"].as_u64().expect("worker-a holds");
        assert!(hold > 12_000 && hold == during["held"], "{during}");
        wait_until(Duration::from_secs(30), || {
            provider
                .requests()
                .iter()
                .any(|r| r.last_user_text().as_deref() == Some(text.as_str()))
        })
        .expect("the request is with the provider");
        let canceled = crate::support::door_rpc(&worker, "CancelTask", json!({"id": id}));
        assert_eq!(
            canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
            "{canceled}"
        );
        // The abandoned request is charged its reservation, once: nothing stays held.
        charged += hold;
        let after = wait_budget(&sb, &frm, "the hold ended", |f| {
            f["held"] == 0 && f["spent"].as_u64() > Some(0)
        });
        assert_eq!(after["spent"], charged, "{after}");
        assert_eq!(
            after["members"]["worker-a"],
            json!({"spent": charged, "turns": round, "held": 0})
        );
    }

    // A new task is still granted, and answered.
    let reply = send_message(&worker, "go on", false);
    let task = &reply["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "no E-BUD-001: {reply}");
    let end = wait_budget(&sb, &frm, "the third turn settled", |f| {
        f["spent"].as_u64() > Some(charged)
    });
    assert_eq!(end["spent"], charged + PER_TURN, "{end}");
    assert_eq!(end["held"], 0, "{end}");

    stall.open();
    launcher.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, err) = launcher.wait(Duration::from_secs(60));
    assert_eq!(code, 143, "{err}");
    assert_eq!(budget_file(&sb, &frm)["held"], 0);
}

#[test]
fn a_turn_in_flight_at_the_formations_deadline_is_charged_its_reservation_once() {
    // The runtime's own cancel: the lead's only turn is held by the provider past --deadline.
    let stall = crate::support::provider::Gate::new();
    let held = stall.clone();
    let provider = Provider::start(
        (0..4)
            .map(|_| {
                let held = held.clone();
                Step::func(move |_: &Request| {
                    held.wait(Duration::from_secs(60));
                    with_usage(openai::text("too late"))
                })
            })
            .collect(),
    );
    let sb = Sandbox::new();
    for name in ["lead", "worker-a", "worker-b"] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 500\n{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let launcher = Launcher::start(
        &sb,
        &dir,
        &["--task", "build it", "--max-tokens", "1000000", "--deadline", "10"],
        &[(KEY_VAR, KEY)],
    );
    let frm = launcher.formation_id();
    let during = wait_budget(&sb, &frm, "the lead's hold", |f| f["held"].as_u64() > Some(0));
    let hold = during["members"]["lead"]["held"].as_u64().expect("the lead holds");
    let (code, _, err) = launcher.wait(Duration::from_secs(60));
    stall.open();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("E-RUN-053"), "{err}");
    // Charged as a reply without usage is, once; not returned uncharged when the member exited.
    let end = budget_file(&sb, &frm);
    assert_eq!(end["held"], 0, "{end}");
    assert_eq!(end["spent"], hold, "{end}");
    assert_eq!(end["members"]["lead"], json!({"spent": hold, "turns": 1, "held": 0}));
}

/// Every directory under the sandbox's `~/.murmur`, itself included, is 0700 and every file 0600
/// or tighter.
fn assert_owner_only(sb: &Sandbox) {
    let mut stack = vec![sb.home().join(".murmur")];
    let (mut seen, mut open) = (0, Vec::new());
    while let Some(dir) = stack.pop() {
        let mode = std::fs::symlink_metadata(&dir).expect("stat").permissions().mode() & 0o7777;
        if mode != 0o700 {
            open.push(format!("{} {mode:o}", dir.display()));
        }
        for e in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let meta = std::fs::symlink_metadata(e.path()).expect("stat");
            seen += 1;
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.permissions().mode() & 0o7777 & !0o600 != 0 {
                open.push(format!(
                    "{} {:o}",
                    e.path().display(),
                    meta.permissions().mode() & 0o7777
                ));
            }
        }
    }
    assert!(seen > 0, "nothing under ~/.murmur");
    assert!(open.is_empty(), "not owner-only:\n{}", open.join("\n"));
}

#[test]
fn a_budgeted_formation_writes_its_marker_owner_only_and_retention_removes_it_like_any_other() {
    let sb = Sandbox::new();
    let provider = Provider::start(
        (0..16)
            .map(|_| Step::func(|_| with_usage(openai::text("done"))))
            .collect(),
    );
    // The entry member keeps the two newest formations.
    for (name, extra) in [("lead", "trace:\n  retain:\n    max_sessions: 2\n"), ("worker-a", "")] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n{extra}{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/lead, version: 0.1.0, entry: true}\n  \
         - {name: worker-a, capsule: local/worker-a, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker-a]}\n",
    )
    .expect("roster");
    let formations = sb.home().join(".murmur/formations");
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (code, out, err) = run(&sb, &dir, &["--max-tokens", "100000"]);
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(!err.contains("no ownership marker"), "{err}");
        let frm = formation_id(&err);
        let here = formations.join(&frm);
        assert!(here.join("formation.json").is_file(), "run {i} left its marker");
        assert_eq!(mode(&here), 0o700);
        assert_eq!(mode(&here.join("budget.json")), 0o600);
        assert_eq!(mode(&here.join("formation.json")), 0o600);
        if i == 2 {
            assert!(
                err.contains(&format!(
                    "[mur run] retention: removed formation {} (max_sessions)",
                    ids[0]
                )),
                "{err}"
            );
        }
        ids.push(frm);
    }
    assert!(!formations.join(&ids[0]).exists(), "the oldest went");
    assert!(formations.join(&ids[1]).exists() && formations.join(&ids[2]).exists());
}

#[test]
fn everything_under_the_murmur_home_stays_owner_only_after_a_budgeted_run() {
    let (sb, dir, _provider) = formation("");
    let (code, out, err) = run(&sb, &dir, &["--max-tokens", "1000000"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        sb.home()
            .join(".murmur/formations")
            .join(formation_id(&err))
            .join("budget.json")
            .is_file()
    );
    assert_owner_only(&sb);
}
