//! Grants through the real binary (docs/reference/formation.md#grants): the launcher narrows a
//! grant for every call, the callee's door verifies it, and the callee's trace records on whose
//! behalf, until when and with how much its task ran; a deadline inherited down the chain ends
//! the deepest task `canceled` with its code.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Request, Step, openai};
use crate::support::{Sandbox, stderr, stdout};

const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
const KEY: &str = "sk-it-grants-0123456789";

const ROSTER: &str = "\
roster_version: 1
members:
  - name: lead
    capsule: local/lead
    version: 0.1.0
    entry: true
  - name: mid
    capsule: local/mid
    version: 0.1.0
  - name: deep
    capsule: local/deep
    version: 0.1.0
reachability:
  - from: lead
    to: [mid]
  - from: mid
    to: [deep]
";

const TAIL: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\n\
    exports:\n  peer_tasks:\n    accept: true\ncapabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n";

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

fn last_is_tool(req: &Request) -> bool {
    req.json()["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool")
}

/// lead → mid → deep: each calls the next (the lead with `lead_args` added to its call), waits,
/// then answers; deep answers at once, after `deep_delay`.
fn route(lead_args: Value, deep_delay: Duration) -> impl Fn(&Request) -> Reply + Send + Sync + Clone + 'static {
    move |req: &Request| {
        let member = member_of(req);
        let text = req.last_user_text().unwrap_or_default();
        if last_is_tool(req) {
            return Reply::json(openai::text("waiting"));
        }
        match member.as_str() {
            "deep" => Reply::json(openai::text(&format!("deep did: {text}"))).delayed(deep_delay),
            "lead" if text == "build it" => {
                let mut args = json!({"member": "mid", "task": "part"});
                if let (Some(a), Some(extra)) = (args.as_object_mut(), lead_args.as_object()) {
                    a.extend(extra.clone());
                }
                Reply::json(openai::tool_calls(&[("c1", "call-member", args)]))
            }
            "mid" if text == "part" => Reply::json(openai::tool_calls(&[(
                "c2",
                "call-member",
                json!({"member": "deep", "task": "deeper part"}),
            )])),
            _ => Reply::json(openai::text(&format!("{member} done"))),
        }
    }
}

fn formation(lead_args: Value, deep_delay: Duration) -> (Sandbox, PathBuf, Provider) {
    let sb = Sandbox::new();
    let route = route(lead_args, deep_delay);
    let provider = Provider::start((0..16).map(|_| Step::func(route.clone())).collect());
    for name in ["lead", "mid", "deep"] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_turns: 6\n{TAIL}",
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

/// Every record of `event_type` in member `member`'s traces.
fn records(sb: &Sandbox, member: &str, event_type: &str) -> Vec<Value> {
    crate::support::member_traces(sb, member)
        .into_iter()
        .flatten()
        .filter(|r| r["event_type"] == event_type)
        .collect()
}

fn one(sb: &Sandbox, member: &str, event_type: &str) -> Value {
    let mut all = records(sb, member, event_type);
    assert_eq!(all.len(), 1, "{member}: one {event_type}: {all:?}");
    all.remove(0)
}

#[test]
fn a_three_level_chain_carries_its_origin_and_every_hop_to_the_deepest_trace() {
    let (sb, dir, _provider) = formation(json!({}), Duration::ZERO);
    let (code, out, err) = run(&sb, &dir, &["--deadline", "300"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let lead_task = one(&sb, "lead", "task_start")["task_id"].clone();
    let mid_task = one(&sb, "mid", "task_start")["task_id"].clone();

    // The lead's own task came with no grant: `--task` is the root of the chain.
    let lead = one(&sb, "lead", "task_grant");
    assert_eq!(
        (&lead["grant_id"], &lead["origin"], &lead["chain"]),
        (&Value::Null, &json!("task"), &json!([]))
    );
    // Each callee runs under a grant the launcher signed and its door verified.
    let mid = one(&sb, "mid", "task_grant");
    assert!(mid["grant_id"].as_str().is_some_and(|g| g.starts_with("grt_")), "{mid}");
    assert_eq!(mid["origin"], "task", "{mid}");
    assert_eq!(mid["chain"], json!([{"member": "lead", "task": lead_task}]), "{mid}");
    let deep = one(&sb, "deep", "task_grant");
    assert_eq!(deep["origin"], "task", "{deep}");
    assert_eq!(
        deep["chain"],
        json!([{"member": "lead", "task": lead_task}, {"member": "mid", "task": mid_task}]),
        "{deep}"
    );
    // The formation's deadline is every hop's, never wider.
    let deadline = mid["deadline_ms"].as_u64().expect("the formation's deadline");
    assert_eq!(deep["deadline_ms"], deadline, "{deep}");
    // No --max-tokens: the default guard's budget is the root's, and no hop widens it.
    let budget = |v: &Value| v["budget"].as_u64().unwrap_or_else(|| panic!("no budget: {v}"));
    assert!(budget(&deep) <= budget(&mid), "{deep}\n{mid}");
    assert!(budget(&mid) <= mur::guard::DEFAULT_MAX_TOKENS, "{mid}");
}

#[test]
fn a_deadline_narrowed_at_the_top_ends_the_task_two_levels_down_canceled_with_its_code() {
    // The lead gives mid 3 s; mid's call to deep inherits it; deep's model takes far longer.
    let (sb, dir, _provider) = formation(json!({"deadline_secs": 3}), Duration::from_secs(60));
    let (code, out, err) = run(&sb, &dir, &[]);
    assert_eq!(code, Some(0), "the lead goes on without the answer: {out}\n{err}");
    let mid = one(&sb, "mid", "task_grant");
    let deep = one(&sb, "deep", "task_grant");
    let deadline = mid["deadline_ms"].as_u64().expect("the narrowed deadline");
    assert_eq!(deep["deadline_ms"], deadline, "inherited: {deep}");
    let canceled = one(&sb, "deep", "task_canceled");
    assert!(
        canceled["reason"].as_str().is_some_and(|r| r.contains("E-GRT-002")),
        "deep's task ends at its grant's deadline: {canceled}"
    );
    assert!(
        records(&sb, "deep", "task_end").is_empty(),
        "a canceled task has no task_end"
    );
}

#[test]
fn a_per_call_budget_bounds_the_whole_subtree_below_it() {
    // Every turn reports 1000 tokens. The lead gives mid 2500; mid asks deep for more than it has
    // left, and gets at most that; once mid's subtree is out of room, mid's task fails with the
    // grant's code while the lead goes on.
    let sb = Sandbox::new();
    let per_turn = |v: Value| {
        let mut v = v;
        v["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 0, "total_tokens": 1000});
        v
    };
    let route = move |req: &Request| {
        let member = member_of(req);
        let text = req.last_user_text().unwrap_or_default();
        let reply = if last_is_tool(req) {
            openai::text("waiting")
        } else {
            match member.as_str() {
                "lead" if text == "build it" => openai::tool_calls(&[(
                    "c1",
                    "call-member",
                    json!({"member": "mid", "task": "part", "budget": 2500}),
                )]),
                "mid" if text == "part" => openai::tool_calls(&[(
                    "c2",
                    "call-member",
                    json!({"member": "deep", "task": "deeper part", "budget": 1_000_000}),
                )]),
                _ => openai::text(&format!("{member} done")),
            }
        };
        Reply::json(per_turn(reply))
    };
    let provider = Provider::start((0..16).map(|_| Step::func(route)).collect());
    for name in ["lead", "mid", "deep"] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_turns: 6\n{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let (code, out, err) = run(&sb, &dir, &[]);
    assert_eq!(code, Some(0), "the lead goes on: {out}\n{err}");

    let mid = one(&sb, "mid", "task_grant");
    assert_eq!(mid["budget"], 2500, "{mid}");
    let deep = one(&sb, "deep", "task_grant");
    let deep_budget = deep["budget"].as_u64().expect("deep's budget");
    assert!(
        deep_budget <= 1500,
        "at most what mid's grant had left after its turn: {deep}"
    );
    // The subtree's turns: each reserved within what was left, so at most one overran it.
    let spent: usize = ["mid", "deep"].iter().map(|m| records(&sb, m, "inference").len()).sum();
    assert!(
        spent * 1000 <= 2500 + 1000,
        "mid's subtree made {spent} turns of 1000 tokens"
    );
    let failed: Vec<Value> = records(&sb, "mid", "task_end")
        .into_iter()
        .filter(|r| r["exit_status"] != "ok")
        .collect();
    assert_eq!(failed.len(), 1, "mid's task ran out of its grant: {failed:?}");
    let lead_calls = records(&sb, "lead", "member_call");
    assert!(
        lead_calls
            .iter()
            .any(|c| c["status"] == "failed" && c["output"].as_str().is_some_and(|o| o.contains("E-BUD-004"))),
        "the lead's call to mid ended with the grant's budget error: {lead_calls:?}"
    );
}

/// A grant's payload for a call `from → to` in `formation`, as the launcher writes it.
fn grant_payload(formation: &str, from: &str, to: &str, deadline_ms: Option<u64>) -> String {
    let deadline = deadline_ms.map_or("null".to_string(), |d| d.to_string());
    format!(
        r#"{{"budget":null,"callee":"{to}","chain":[{{"member":"{from}","task":"tsk_0199c4e2f1b7712a9d3e4f5061728394"}}],"deadline_ms":{deadline},"formation":"{formation}","id":"grt_0199c4e2f1b7712a9d3e4f5061728394","origin":"operator"}}"#
    )
}

/// Member `reviewer` of `door.rs`'s formation alone, running `capsule` with `queue_depth`, its
/// signing key and grant key made from `seed`.
fn reviewer_door(
    sb: &Sandbox,
    capsule: &str,
    queue_depth: u32,
    seed: u8,
) -> (crate::door::Door, crate::door::Key, crate::door::GrantKeyBytes) {
    use crate::door::{AUTH, Door, FRM, GrantKeyBytes, Key, Member, PEERS, install, serve};
    let key = Key::new(seed);
    let reviewers = GrantKeyBytes([seed; 32]);
    install(sb, capsule, "reviewer", &format!("{AUTH}{PEERS}{}", serve(queue_depth)));
    let d = Door::member_with_grant_key(
        sb,
        "reviewer",
        &Member {
            key: &key,
            formation: FRM,
            name: "reviewer",
        },
        &reviewers,
    );
    (d, key, reviewers)
}

/// A caller ended by a deadline cancels its calls, whose tasks run under the same deadline: a
/// cancel that arrives after a task's deadline ends it for the deadline (E-GRT-002), whichever
/// comes first, the caller's cancel or the task's own timer; one before it is the caller's.
#[test]
fn a_cancel_after_a_tasks_deadline_ends_it_for_the_deadline() {
    use crate::door::FRM;
    let sb = Sandbox::new();
    // Never answers: one task runs and one waits, and a waiting task has no deadline timer yet,
    // so only the cancel can end it.
    let (d, key, reviewers) = reviewer_door(&sb, "spin", 1, 23);
    let op = d.op();
    let running = d.send(Some(&op), "a", true);
    let running = running["id"].as_str().expect("id").to_string();
    d.wait_state(Some(&op), &running, "TASK_STATE_WORKING");

    let token = format!("Bearer {}", key.mint(FRM, "coder", "reviewer"));
    let send = |deadline_ms: u64| {
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": {
            "message": {"messageId": format!("m{deadline_ms}"), "role": "ROLE_USER", "parts": [{"text": "b"}]},
            "configuration": {"returnImmediately": true}}})
        .to_string();
        let grant = reviewers.seal(&grant_payload(FRM, "coder", "reviewer", Some(deadline_ms)));
        let h = d.post(
            Some(&token),
            &[("x-murmur-task-origin", "peer"), ("x-murmur-grant", &grant)],
            &body,
        );
        let task = h.json()["result"]["task"].clone();
        assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{}", h.body);
        task["id"].as_str().expect("id").to_string()
    };
    let cancel = |id: &str| {
        let h = d.post(
            Some(&token),
            &[],
            &json!({"id": 2, "jsonrpc": "2.0", "method": "CancelTask", "params": {"id": id}}).to_string(),
        );
        assert_eq!(
            h.json()["result"]["status"]["state"],
            "TASK_STATE_CANCELED",
            "{}",
            h.body
        );
    };
    let reason_of = |id: &str| {
        let mut reason = Value::Null;
        let found = crate::support::wait_until(Duration::from_secs(10), || {
            reason = records(&sb, "reviewer", "task_canceled")
                .into_iter()
                .find(|r| r["task_id"] == id)
                .map_or(Value::Null, |r| r["reason"].clone());
            !reason.is_null()
        });
        assert!(found.is_some(), "no task_canceled for {id}");
        reason.as_str().unwrap_or_default().to_string()
    };

    // Queued with a deadline a moment away, cancelled by its caller once it has passed.
    let deadline = mur::timing::unix_ms() + 800;
    let late = send(deadline);
    std::thread::sleep(Duration::from_millis(
        deadline.saturating_sub(mur::timing::unix_ms()) + 50,
    ));
    cancel(&late);
    let reason = reason_of(&late);
    assert!(reason.contains("E-GRT-002"), "{reason}");

    // Queued with a deadline far away: the caller's cancel is the caller's.
    let early = send(mur::timing::unix_ms() + 3_600_000);
    cancel(&early);
    assert_eq!(reason_of(&early), "canceled by CancelTask from member:coder");
    drop(d);
}

#[test]
fn a_door_takes_a_genuine_grant_and_refuses_a_forged_or_altered_one_with_its_code() {
    use crate::door::{FRM, GrantKeyBytes};
    let sb = Sandbox::new();
    let (d, key, reviewers) = reviewer_door(&sb, "echo", 4, 21);
    let token = format!("Bearer {}", key.mint(FRM, "coder", "reviewer"));
    let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"returnImmediately": true}}})
    .to_string();
    let send = |grant: &str| {
        d.post(
            Some(&token),
            &[("x-murmur-task-origin", "peer"), ("x-murmur-grant", grant)],
            &body,
        )
    };
    let genuine = reviewers.seal(&grant_payload(FRM, "coder", "reviewer", Some(4_000_000_000_000)));
    let h = send(&genuine);
    assert_eq!(h.status, 200, "a genuine grant is taken: {}", h.body);
    assert!(h.json()["result"]["task"].is_object(), "{}", h.body);

    // The same MAC over a payload with a later deadline; another member's key (as the caller
    // would seal one with its own); a grant for another member; one made for a caller other than
    // the token's; one signed as the first grants were, with the formation's key.
    let (_, sig) = genuine.rsplit_once('.').expect("grant");
    let wider = reviewers.seal(&grant_payload(
        FRM,
        "coder",
        "reviewer",
        Some(u64::from(u32::MAX) * 1000),
    ));
    let (wider_head, _) = wider.rsplit_once('.').expect("grant");
    let refused = [
        (
            "a widened deadline under the old signature",
            format!("{wider_head}.{sig}"),
        ),
        (
            "another key's grant",
            GrantKeyBytes([22; 32]).seal(&grant_payload(FRM, "coder", "reviewer", None)),
        ),
        (
            "a grant for another member",
            reviewers.seal(&grant_payload(FRM, "coder", "writer", None)),
        ),
        (
            "a grant made for another caller",
            reviewers.seal(&grant_payload(FRM, "writer", "reviewer", None)),
        ),
        (
            "a grant signed with the formation's key",
            key.sign(&grant_payload(FRM, "coder", "reviewer", None))
                .replacen("mft1.", "mgr2.", 1),
        ),
        ("not a grant", "mgr2.e30.AAAA".to_string()),
    ];
    for (case, grant) in &refused {
        let h = send(grant);
        assert_eq!(h.status, 403, "{case}: {}", h.body);
        let v: Value = serde_json::from_str(&h.body).unwrap_or_else(|e| panic!("{case}: {e}: {}", h.body));
        assert_eq!(v["error"], "invalid_grant", "{case}: {v}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains("E-GRT-001")),
            "{case}: {v}"
        );
    }
    // A member that sends no grant is served as before.
    let h = d.post(Some(&token), &[("x-murmur-task-origin", "peer")], &body);
    assert_eq!(h.status, 200, "{}", h.body);
}

#[test]
fn a_components_own_grant_on_a_virtual_address_never_reaches_the_door() {
    // The probe writes `x-murmur-grant: mgr1.e30.AAAA` (a grant no launcher signed, which the door
    // refuses 403) on its GET to its callee's virtual address. The host drops it and the runtime
    // writes the call's own, so the door answers the path itself: 404 for GET /probe.
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component(
        "probe",
        "tests/it/testdata/http_probe_grant.wat",
        "capabilities:\n  network:\n    allow: [localhost]\n",
    );
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/probe, version: 0.1.0, entry: true}\n  \
         - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .expect("roster");
    let out = sb.run(&dir, &["run", "--roster", "--task", "worker.formation.invalid"]);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), "status 404\n"),
        "{}",
        stderr(&out)
    );
}

/// What `member`'s traces record of its own spending: (tokens in, tokens out, model turns, tool calls).
fn own_spending(sb: &Sandbox, member: &str) -> (u64, u64, u64, u64) {
    let turns = records(sb, member, "inference");
    let sum = |k: &str| turns.iter().map(|r| r[k].as_u64().unwrap_or(0)).sum::<u64>();
    (
        sum("input_tokens"),
        sum("output_tokens"),
        turns.len() as u64,
        records(sb, member, "tool_call").len() as u64,
    )
}

#[test]
fn every_calls_answer_brings_back_what_its_whole_subtree_spent() {
    let (sb, dir, provider) = formation(json!({}), Duration::ZERO);
    let (code, out, err) = run(&sb, &dir, &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let (mid, deep) = (own_spending(&sb, "mid"), own_spending(&sb, "deep"));
    // The scripted provider reports 10 in and 5 out for an answer, 20 and 7 for a tool call:
    // deep answered once, mid called (a tool call) and answered.
    assert_eq!(
        (deep.0, deep.1, deep.2),
        (10, 5, 1),
        "deep's turns as the provider reported them"
    );
    assert!(mid.2 >= 2 && mid.0 >= 30, "{mid:?}");
    let cost = |member: &str| one(&sb, member, "member_call")["subtree_cost"].clone();
    let figures = |c: &Value| {
        (
            c["input_tokens"].as_u64().unwrap_or(u64::MAX),
            c["output_tokens"].as_u64().unwrap_or(u64::MAX),
            c["model_turns"].as_u64().unwrap_or(u64::MAX),
            c["tool_calls"].as_u64().unwrap_or(u64::MAX),
        )
    };
    // mid's call to deep brought back deep's spending; the lead's call to mid, mid's and deep's.
    let below_mid = cost("mid");
    assert_eq!(figures(&below_mid), deep, "{below_mid}");
    let below_lead = cost("lead");
    assert_eq!(
        figures(&below_lead),
        (mid.0 + deep.0, mid.1 + deep.1, mid.2 + deep.2, mid.3 + deep.3),
        "{below_lead}"
    );
    // A subtree's wall time is its root task's, which holds the call below it.
    let wall = |c: &Value| c["wall_ms"].as_u64().expect("wall_ms");
    assert!(wall(&below_lead) >= wall(&below_mid), "{below_lead} {below_mid}");
    // Every provider request came from one member's turn: the roll-up plus the lead's own
    // turns are all the provider answered.
    let lead = own_spending(&sb, "lead");
    assert_eq!(
        (lead.2 + below_lead["model_turns"].as_u64().unwrap_or(0)) as usize,
        provider.requests().len()
    );

    // `mur trace show` draws the call tree with each subtree's total.
    let frm = one(&sb, "lead", "session_start")["formation_id"]
        .as_str()
        .expect("formation id")
        .to_string();
    let show = stdout(&sb.run(&dir, &["trace", "show", &frm]));
    let line = |caller: &str, callee: &str| {
        show.lines()
            .find(|l| l.contains(&format!("{caller} → {callee}  completed")))
            .unwrap_or_else(|| panic!("no {caller} → {callee} call in:\n{show}"))
            .to_string()
    };
    assert!(
        line("lead", "mid").contains(&format!(
            "[subtree: {} tokens in, {} out, {} model turns, ",
            mid.0 + deep.0,
            mid.1 + deep.1,
            mid.2 + deep.2
        )),
        "{show}"
    );
    assert!(
        line("mid", "deep").contains("[subtree: 10 tokens in, 5 out, 1 model turn, "),
        "{show}"
    );
}

#[test]
fn an_operators_cancel_of_the_root_task_reaches_every_level_of_its_calls() {
    // deep's model holds its answer for a minute: only a cancel that reaches it ends its task.
    let (sb, dir, _provider) = formation(json!({}), Duration::from_secs(60));
    let launcher = crate::support::Launcher::start(&sb, &dir, &[], &[(KEY_VAR, KEY)]);
    let lead = crate::support::running_record(&sb, "lead");
    let reply = crate::support::door_rpc(
        &lead,
        "SendMessage",
        json!({"configuration": {"returnImmediately": true},
               "message": {"messageId": "msg-root", "role": "ROLE_USER", "parts": [{"text": "build it"}]}}),
    );
    let root = reply["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_string();
    let started = crate::support::wait_until(Duration::from_secs(60), || {
        !records(&sb, "deep", "task_start").is_empty()
    });
    assert!(started.is_some(), "deep never started: {}", launcher.stderr());

    let canceled = crate::support::door_rpc(&lead, "CancelTask", json!({"id": root}));
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    // mid's task and deep's end canceled: the cancel went down level by level, though the
    // formation goes on serving.
    let reached = crate::support::wait_until(Duration::from_secs(20), || {
        ["mid", "deep"]
            .iter()
            .all(|m| !records(&sb, m, "task_canceled").is_empty())
    });
    assert!(
        reached.is_some(),
        "mid: {:?}\ndeep: {:?}",
        records(&sb, "mid", "task_canceled"),
        records(&sb, "deep", "task_canceled")
    );
    for m in ["mid", "deep"] {
        assert_eq!(records(&sb, m, "task_end").len(), 0, "{m} ended its task otherwise");
    }
    assert!(
        crate::support::formation_pids(&launcher.formation_id()).len() >= 3,
        "the formation still serves"
    );
    launcher.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, err) = launcher.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
}

/// The limits extension's key in a message's metadata.
const LIMITS: &str = "urn:mur:a2a:limits:v1";

fn limited_task(text: &str, limits: Value) -> Value {
    json!({"message": {"messageId": format!("msg-{text}"), "role": "ROLE_USER", "parts": [{"text": text}],
           "metadata": {LIMITS: limits}}})
}

/// A client's deadline and budget sent with the entry's task (the limits extension) narrow the
/// root it runs under and every call below it; a budget wider than what the formation has left
/// is cut to it; a member's own metadata is not read (its call carries a grant).
#[test]
fn a_clients_limits_narrow_its_task_and_every_call_below_and_never_widen() {
    let (sb, dir, _provider) = formation(json!({}), Duration::ZERO);
    let launcher = crate::support::Launcher::start(&sb, &dir, &["--max-tokens", "100000"], &[(KEY_VAR, KEY)]);
    let lead = crate::support::running_record(&sb, "lead");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let deadline_ms = now + 600_000;
    let reply = crate::support::door_rpc(
        &lead,
        "SendMessage",
        limited_task("build it", json!({"budgetTokens": 5000, "deadlineMs": deadline_ms})),
    );
    assert_eq!(
        reply["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{reply}\n{}",
        launcher.stderr()
    );
    let root = one(&sb, "lead", "task_grant");
    assert!(
        root["grant_id"].as_str().is_some_and(|g| g.starts_with("grt_")),
        "{root}"
    );
    assert_eq!(root["origin"], "operator", "{root}");
    assert_eq!(root["chain"], json!([]), "{root}");
    assert_eq!(
        (&root["deadline_ms"], &root["budget"]),
        (&json!(deadline_ms), &json!(5000))
    );
    for member in ["mid", "deep"] {
        let g = one(&sb, member, "task_grant");
        assert_eq!(g["deadline_ms"], deadline_ms, "{member}: {g}");
        assert!(g["budget"].as_u64().is_some_and(|b| b <= 5000), "{member}: {g}");
        assert_eq!(g["origin"], "operator", "{member}: {g}");
    }

    // Wider than the formation's budget: only what it has left.
    let reply = crate::support::door_rpc(
        &lead,
        "SendMessage",
        limited_task("build it", json!({"budgetTokens": 1_000_000_000_000u64})),
    );
    assert_eq!(
        reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{reply}"
    );
    let roots = records(&sb, "lead", "task_grant");
    assert_eq!(roots.len(), 2, "{roots:?}");
    let budget = roots[1]["budget"].as_u64().expect("a budget");
    assert!(budget <= 100_000, "never wider than the formation's: {}", roots[1]);
    assert_eq!(roots[1]["deadline_ms"], Value::Null, "{}", roots[1]);

    launcher.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, err) = launcher.wait(Duration::from_secs(30));
    assert_eq!(code, 143, "{err}");
}

/// The budget a callee runs under comes from its caller's grant, not a cap of the call: mid's
/// call to deep asks for nothing narrower, so it may take a grant prepared when mid's task
/// started (its budget then what mid had left before its first turn). deep calls nobody it may
/// and keeps trying, turn after turn; whatever cap deep's grant carries, every reservation must
/// also fit mid's grant, so mid's subtree still stops within its 2500 tokens.
#[test]
fn a_budget_from_the_callers_grant_stops_a_looping_callee_whatever_grant_it_was_given() {
    let sb = Sandbox::new();
    let per_turn = |v: Value| {
        let mut v = v;
        v["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 0, "total_tokens": 1000});
        v
    };
    let route = move |req: &Request| {
        let member = member_of(req);
        let text = req.last_user_text().unwrap_or_default();
        let reply = match member.as_str() {
            // Loops: a call it may not make, every turn, until its budget stops it.
            "deep" => openai::tool_calls(&[("c9", "call-member", json!({"member": "lead", "task": "again"}))]),
            _ if last_is_tool(req) => openai::text("waiting"),
            "lead" if text == "build it" => openai::tool_calls(&[(
                "c1",
                "call-member",
                json!({"member": "mid", "task": "part", "budget": 2500}),
            )]),
            "mid" if text == "part" => {
                openai::tool_calls(&[("c2", "call-member", json!({"member": "deep", "task": "deeper part"}))])
            }
            _ => openai::text(&format!("{member} done")),
        };
        Reply::json(per_turn(reply))
    };
    let provider = Provider::start((0..32).map(|_| Step::func(route)).collect());
    for name in ["lead", "mid", "deep"] {
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_turns: 12\n{TAIL}",
            provider.url()
        );
        sb.install_manifest(name, &manifest);
    }
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let (code, out, err) = run(&sb, &dir, &[]);
    assert_eq!(code, Some(0), "the lead goes on: {out}\n{err}");

    let mid = one(&sb, "mid", "task_grant");
    assert_eq!(mid["budget"], 2500, "{mid}");
    let deep = one(&sb, "deep", "task_grant");
    let deep_budget = deep["budget"].as_u64().expect("deep's budget");
    assert!(deep_budget <= 2500, "never more than mid's grant: {deep}");
    // Narrowed before mid's first turn was charged (a grant narrowed at the call would have at
    // most 1500): deep runs under a prepared grant whose cap is more than mid has left.
    assert!(
        deep_budget > 1500,
        "deep's grant was prepared as mid's task started: {deep}"
    );
    assert_eq!(deep["chain"].as_array().map(Vec::len), Some(2), "{deep}");
    // Without the budget deep would make 12 turns; each reserved within what mid's grant had
    // left, so at most one overran it.
    let spent: usize = ["mid", "deep"].iter().map(|m| records(&sb, m, "inference").len()).sum();
    assert!(
        spent * 1000 <= 2500 + 1000,
        "mid's subtree made {spent} turns of 1000 tokens (deep's grant: {deep})"
    );
    // deep's task is stopped by mid's grant one of two ways, by which reservation comes first:
    // its own next turn is refused (a failed task_end), or mid's next turn, made while the call
    // runs, is refused, mid's task fails, and its call to deep is cancelled (deep's
    // task_canceled, a task's other end record).
    let deep_failed = records(&sb, "deep", "task_end")
        .iter()
        .any(|r| r["exit_status"] != "ok");
    let deep_canceled = !records(&sb, "deep", "task_canceled").is_empty();
    let mid_failed = records(&sb, "mid", "task_end")
        .iter()
        .any(|r| r["exit_status"] == "failed");
    assert!(
        deep_failed || (deep_canceled && mid_failed),
        "deep's task ran out of mid's grant\ndeep: {:?}\nmid: {:?}\nlead: {:?}\n{out}\n{err}",
        crate::support::member_traces(&sb, "deep"),
        crate::support::member_traces(&sb, "mid"),
        crate::support::member_traces(&sb, "lead")
    );
}
