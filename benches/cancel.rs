//! An operator's cancel of a root task reaching every task of its subtree
//! (docs/reference/formation.md#grants), with the real `mur` binary of this build
//! (`CARGO_BIN_EXE_mur`) in a private HOME. Target: every task of the subtree ended within 1 s
//! of the root's cancel, in a formation of 8 members 3 levels deep.
//!
//! The formation: eight model members of one capsule, `lead` → `mid1`, `mid2`; `mid1` → `leaf1`,
//! `leaf2`, `leaf3`; `mid2` → `leaf4`, `leaf5`. Their provider is the tests' scripted one on
//! loopback (tests/it/support/provider.rs, the accepted stand-in for a model provider): a lead or
//! mid's first turn calls every one of its callees at once (`call-member`), its next turn says
//! it waits; a leaf's turn is held (never answered), so each repetition has all eight members
//! busy in one task tree: the root at the lead, two calls below it, five below those.
//!
//! `MUR_BENCH_REPS` times (default 20; once without `--bench`): a task is sent to the lead's
//! door, and once every leaf's model request is held and every caller waits, the operator's
//! `CancelTask` of the root goes to the lead's door. Two figures per repetition:
//! - observed: from just before the `CancelTask` request to the moment the records files show a
//!   `task_canceled` of this repetition for all eight members (polled every 2 ms, so an upper
//!   bound by the poll's period and the file reads);
//! - recorded: the latest of those eight records' own timestamps (milliseconds) less the wall
//!   clock just before the request.
//!
//! `MUR_BENCH_MUR` measures another `mur` binary.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod support;
use support::{build_and_install, formation_pids, median, member_door, mur_binary, mur_in};

#[path = "../tests/it/support/provider.rs"]
mod provider;
use provider::{Provider, Reply, Request, Step, openai};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};

const KEY_VAR: &str = "MUR_BENCH_PROVIDER_KEY";
const KEY: &str = "sk-bench-cancel-0123456789";

/// Who calls whom; a member not named here is a leaf.
const CALLS: [(&str, &[&str]); 3] = [
    ("lead", &["mid1", "mid2"]),
    ("mid1", &["leaf1", "leaf2", "leaf3"]),
    ("mid2", &["leaf4", "leaf5"]),
];
const MEMBERS: [&str; 8] = ["lead", "mid1", "mid2", "leaf1", "leaf2", "leaf3", "leaf4", "leaf5"];
const LEAVES: usize = 5;
/// The callers: each has one waiting turn per repetition once its calls are out.
const CALLERS: usize = 3;

/// How long a leaf's model request is held: longer than any repetition, so only a cancel that
/// reaches the leaf ends its task.
const HOLD: Duration = Duration::from_secs(600);

const TAIL: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\n\
    exports:\n  peer_tasks:\n    accept: true\ncapabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  \
    authentication:\n    scheme: bearer\n";

fn roster() -> String {
    let mut r = String::from("roster_version: 1\nmembers:\n");
    for (i, m) in MEMBERS.iter().enumerate() {
        let entry = if i == 0 { ", entry: true" } else { "" };
        r.push_str(&format!(
            "  - {{name: {m}, capsule: local/agent, version: 0.1.0{entry}}}\n"
        ));
    }
    r.push_str("reachability:\n");
    for (from, to) in CALLS {
        r.push_str(&format!("  - {{from: {from}, to: [{}]}}\n", to.join(", ")));
    }
    r
}

fn member_of(req: &Request) -> String {
    req.json()["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
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

fn door_rpc(door: &(String, String), method: &str, params: Value) -> Result<Value> {
    let body = json!({"id": 1, "jsonrpc": "2.0", "method": method, "params": params});
    let resp = ureq::post(&format!("http://{}/", door.0))
        .set("authorization", &format!("Bearer {}", door.1))
        .set("a2a-version", "1.0")
        .set("content-type", "application/json")
        .send_string(&body.to_string())
        .with_context(|| format!("{method} at the lead's door"))?;
    Ok(serde_json::from_str(&resp.into_string()?)?)
}

/// Every trace file under HOME's records, by the member its first record names.
fn traces(home: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![home.join(".murmur/records")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.ends_with("trace.jsonl") {
                let first = std::fs::File::open(&p)
                    .ok()
                    .and_then(|f| BufReader::new(f).lines().next()?.ok())
                    .and_then(|l| serde_json::from_str::<Value>(&l).ok());
                if let Some(m) = first.as_ref().and_then(|r| r["formation_member"].as_str()) {
                    out.push((m.to_string(), p));
                }
            }
        }
    }
    out
}

/// Per member, the timestamps (ms) of its records of `event_type`, in file order.
fn stamps(home: &Path, event_type: &str) -> Vec<(String, Vec<u64>)> {
    let needle = format!("\"{event_type}\"");
    let files = traces(home);
    MEMBERS
        .iter()
        .map(|m| {
            let ts = files
                .iter()
                .filter(|(who, _)| who == m)
                .flat_map(|(_, p)| {
                    std::fs::read_to_string(p)
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| l.contains(&needle))
                        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                        .filter(|r| r["event_type"] == event_type)
                        .filter_map(|r| r["timestamp"].as_u64())
                        .collect::<Vec<_>>()
                })
                .collect();
            (m.to_string(), ts)
        })
        .collect()
}

fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

struct Launched {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Launched {
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        support::stop_launcher(&mut self.child);
    }
}

fn main() -> Result<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let reps: usize = if bench {
        support::env_or("MUR_BENCH_REPS", 20)
    } else {
        1
    };

    let held = Arc::new(AtomicUsize::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let route = {
        let (held, waiting) = (Arc::clone(&held), Arc::clone(&waiting));
        move |req: &Request| {
            let member = member_of(req);
            if last_is_tool(req) {
                waiting.fetch_add(1, Ordering::SeqCst);
                return Reply::json(openai::text("waiting for my calls"));
            }
            match CALLS.iter().find(|(m, _)| *m == member) {
                Some((_, callees)) => {
                    let calls: Vec<(String, Value)> = callees
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (format!("c{i}"), json!({"member": c, "task": format!("part for {c}")})))
                        .collect();
                    let calls: Vec<(&str, &str, Value)> = calls
                        .iter()
                        .map(|(id, args)| (id.as_str(), "call-member", args.clone()))
                        .collect();
                    Reply::json(openai::tool_calls(&calls))
                }
                None => {
                    held.fetch_add(1, Ordering::SeqCst);
                    Reply::json(openai::text("never sent")).delayed(HOLD)
                }
            }
        }
    };
    // Each repetition makes 1 + 2 turns at the callers per caller and one at each leaf; the
    // script is long enough for any sensible MUR_BENCH_REPS.
    let turns = (reps + 1) * (2 * CALLERS + LEAVES) + 64;
    let provider = Provider::start((0..turns).map(|_| Step::func(route.clone())).collect());

    let bin = mur_binary();
    let tmp = tempfile::Builder::new().prefix("mur-bench-").tempdir()?;
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home)?;
    let manifest = format!(
        "name: agent\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n  max_turns: 6\n{TAIL}",
        provider.url()
    );
    let src = tmp.path().join("src").join("agent");
    std::fs::create_dir_all(&src)?;
    std::fs::write(src.join("murmur.yaml"), &manifest)?;
    build_and_install(&bin, &home, tmp.path(), &src).map_err(|e| anyhow!(e))?;
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("roster.yaml"), roster())?;

    // Serving (no --task); no formation budget, so repetitions never run out of tokens.
    let mut child = mur_in(&bin, &home, &project)
        .env(KEY_VAR, KEY)
        .args(["run", "--roster", "--max-tokens", "unlimited"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .context("spawn mur run --roster")?;
    let pipe = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let launched = Launched {
        child,
        stderr: Arc::new(Mutex::new(String::new())),
    };
    let into = Arc::clone(&launched.stderr);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut s = into.lock().unwrap_or_else(|e| e.into_inner());
            s.push_str(&line);
            s.push('\n');
        }
    });
    wait_for(
        Duration::from_secs(60),
        "the formation line with every peer ready",
        || launched.stderr().contains("  entry  "),
    )
    .with_context(|| launched.stderr())?;
    let frm = launched
        .stderr()
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .map(|f| f.trim().to_string())
        .ok_or_else(|| anyhow!("no formation line"))?;
    let mut door = None;
    wait_for(Duration::from_secs(30), "the lead's running record", || {
        door = member_door(&home, "lead");
        door.is_some()
    })?;
    let door = door.ok_or_else(|| anyhow!("no lead door"))?;

    let (mut observed, mut recorded, mut rpc) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 1..=reps {
        let reply = door_rpc(
            &door,
            "SendMessage",
            json!({"configuration": {"returnImmediately": true},
                   "message": {"messageId": format!("msg-root-{rep}"), "role": "ROLE_USER",
                               "parts": [{"text": format!("build it, round {rep}")}]}}),
        )?;
        let root = reply["result"]["task"]["id"]
            .as_str()
            .ok_or_else(|| anyhow!("no task in {reply}"))?
            .to_string();
        wait_for(Duration::from_secs(60), "every member busy", || {
            held.load(Ordering::SeqCst) >= LEAVES * rep && waiting.load(Ordering::SeqCst) >= CALLERS * rep
        })
        .with_context(|| format!("round {rep}: {}", launched.stderr()))?;
        // Each caller has asked and waits, each leaf's request is held: the whole tree is busy.
        let at = now_ms();
        let start = Instant::now();
        let canceled = door_rpc(&door, "CancelTask", json!({"id": root}))?;
        rpc.push(start.elapsed().as_secs_f64() * 1000.0);
        if canceled["result"]["status"]["state"] != "TASK_STATE_CANCELED" {
            bail!("the root was not canceled: {canceled}");
        }
        let mut last = Vec::new();
        wait_for(Duration::from_secs(10), "a task_canceled at every member", || {
            last = stamps(&home, "task_canceled");
            last.iter().all(|(_, ts)| ts.len() >= rep)
        })
        .with_context(|| format!("round {rep}: {last:?}"))?;
        observed.push(start.elapsed().as_secs_f64() * 1000.0);
        let latest = last
            .iter()
            .filter_map(|(_, ts)| ts.get(rep - 1))
            .max()
            .copied()
            .unwrap_or(at);
        recorded.push(latest.saturating_sub(at) as f64);
        // Every task ended canceled, none otherwise.
        if let Some((m, _)) = stamps(&home, "task_end").into_iter().find(|(_, ts)| !ts.is_empty()) {
            bail!("{m} ended a task otherwise than canceled");
        }
    }
    if formation_pids(&frm).len() < MEMBERS.len() {
        bail!("the formation stopped serving: {}", launched.stderr());
    }
    drop(launched);
    let stats = |v: &[f64]| {
        let max = v.iter().copied().fold(0.0, f64::max);
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        format!("median {:.1} ms, min {min:.1} ms, max {max:.1} ms", median(v.to_vec()))
    };
    println!(
        "cancel of the root → every task of its subtree canceled (8 members, 3 levels, {reps} rounds):\n  \
         observed in the records (2 ms polls): {}\n  \
         by the records' own timestamps (ms): {}\n  \
         the CancelTask request itself: {}",
        stats(&observed),
        stats(&recorded),
        stats(&rpc)
    );
    Ok(())
}
