//! What a peer's task store (docs/reference/formation.md#tasks-across-a-restart) adds to
//! acknowledging a task. Goal: a SendMessage is acknowledged within 1 ms p50 of a door without
//! a store.
//!
//! Two figures, in one run:
//! - *the board*: `Board::submit` of one task, then its end (`finish`), on a board with a store
//!   (an SQLite file in a temporary directory) and on one without, interleaved;
//! - *the door*: a serving formation of two `echo` members, `lead` (the entry: no store) and
//!   `worker` (a peer: a store), launched with the real `mur` binary of this build
//!   (`CARGO_BIN_EXE_mur`, or `MUR_BENCH_MUR`) in a private HOME; SendMessage with
//!   `returnImmediately` to each door in turn over a kept-alive connection, timed from the request
//!   to its reply. The two doors are the same code on the same capsule; the peer's writes the
//!   task to its store before it answers.
//!
//! `MUR_BENCH_REPS` (default 2000) tasks per side.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod support;
use support::{env_or, formation_pids, install_wat, member_door, mur_binary, mur_in};

use anyhow::{Context as _, Result, anyhow, bail};
use mur::tasks::{Board, NewTask, Origin, TaskOutcome, Trust};

const ECHO_MANIFEST: &str = "name: echo\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  \
     authentication:\n    scheme: bearer\nlifecycle:\n  \
     task_acceptance: queue\n  after_task: sleep\n  queue_depth: 64\nexports:\n  peer_tasks:\n    accept: true\n";
const ROSTER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

fn offer(i: usize) -> NewTask {
    NewTask {
        text: format!("task {i}: a sentence of the length a call carries, more or less"),
        context_id: None,
        message_id: format!("msg-{i}"),
        owner: Some("operator".into()),
        caller_member: None,
        origin: Origin::Event,
        trust: Trust::Untrusted,
        traceparent: None,
        grant: None,
        limits: None,
    }
}

/// µs of `submit` on each board, interleaved.
fn boards(reps: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let tmp = tempfile::tempdir()?;
    let (store, kept) = mur::tasks::store::TaskStore::open(&tmp.path().join("tasks.db")).map_err(|e| anyhow!(e))?;
    let kept_board = Board::new(mur::manifest::Acceptance::Queue, 64);
    kept_board.restore(store, kept, false);
    let plain = Board::new(mur::manifest::Acceptance::Queue, 64);
    let (mut with, mut without) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for i in 0..reps {
        for (board, out) in [(&kept_board, &mut with), (&plain, &mut without)] {
            let t = Instant::now();
            let snap = board.submit(offer(i));
            out.push(t.elapsed().as_secs_f64() * 1e6);
            board.finish(&snap.id, TaskOutcome::Completed(format!("answer {i}")));
        }
    }
    Ok((with, without))
}

/// µs of SendMessage at the lead's door (no store) and the worker's (a store), interleaved.
fn doors(reps: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let tmp = tempfile::Builder::new().prefix("mur-bench-").tempdir()?;
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home)?;
    let bin = mur_binary();
    install_wat(
        &bin,
        &home,
        tmp.path(),
        ("echo", "actors/echo/capsule.wat", ECHO_MANIFEST),
    )
    .map_err(|e| anyhow!(e))?;
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("roster.yaml"), ROSTER)?;
    let mut child = mur_in(&bin, &home, &project)
        .args(["run", "--roster"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("spawn mur run --roster")?;
    let start = Instant::now();
    let (lead, worker) = loop {
        if let (Some(l), Some(w)) = (member_door(&home, "lead"), member_door(&home, "worker")) {
            break (l, w);
        }
        if start.elapsed() > Duration::from_secs(60) {
            support::stop_launcher(&mut child);
            bail!("the formation did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let frm = support::running_record(&home, "lead")
        .and_then(|r| r["formation_id"].as_str().map(str::to_string))
        .unwrap_or_default();
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
    let send = |door: &(String, String), i: usize| -> Result<f64> {
        let body = serde_json::json!({"id": i, "jsonrpc": "2.0", "method": "SendMessage", "params": {
            "configuration": {"returnImmediately": true},
            "message": {"messageId": format!("m{i}"), "role": "ROLE_USER", "parts": [{"text": format!("task {i}: a sentence of the length a call carries, more or less")}]}}});
        let t = Instant::now();
        let reply = agent
            .post(&format!("http://{}/", door.0))
            .set("authorization", &format!("Bearer {}", door.1))
            .set("a2a-version", "1.0")
            .set("content-type", "application/json")
            .send_string(&body.to_string())
            .map_err(|e| anyhow!("SendMessage: {e}"))?
            .into_string()?;
        let took = t.elapsed().as_secs_f64() * 1e6;
        if !reply.contains("\"task\"") || reply.contains("TASK_STATE_REJECTED") {
            bail!("not taken: {reply}");
        }
        Ok(took)
    };
    let (mut with, mut without) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    let run = (|| -> Result<()> {
        // Warm both connections first.
        for i in 0..20 {
            send(&lead, i)?;
            send(&worker, i)?;
        }
        for i in 0..reps {
            without.push(send(&lead, i)?);
            with.push(send(&worker, i)?);
            // Let the echo tasks end, so neither queue fills.
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    })();
    support::stop_launcher(&mut child);
    run?;
    if !frm.is_empty() && !formation_pids(&frm).is_empty() {
        bail!("members of {frm} still running");
    }
    Ok((with, without))
}

fn line(what: &str, with: Vec<f64>, without: Vec<f64>) {
    let (w50, o50) = (percentile(with.clone(), 0.5), percentile(without.clone(), 0.5));
    println!(
        "{what}: with a store p50 {w50:.1} µs (p90 {:.1}), without p50 {o50:.1} µs (p90 {:.1}): the store adds {:.1} µs p50",
        percentile(with, 0.9),
        percentile(without, 0.9),
        w50 - o50
    );
}

fn main() -> Result<()> {
    let reps: usize = env_or("MUR_BENCH_REPS", 2000);
    let (with, without) = boards(reps)?;
    line(&format!("board submit, {reps} tasks"), with, without);
    let (with, without) = doors(reps)?;
    line(
        &format!("door SendMessage (returnImmediately), {reps} tasks"),
        with,
        without,
    );
    Ok(())
}
