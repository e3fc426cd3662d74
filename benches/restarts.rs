//! A restarted peer's time to ready (docs/reference/formation.md#restarts), with the
//! real `mur` binary of this build (`CARGO_BIN_EXE_mur`) in a private HOME.
//!
//! A serving formation `lead` (relay) → `worker` (echo) is launched with `--restart 1000/86400`;
//! then, `MUR_BENCH_REPS` times (default 20), the worker's process is killed with SIGKILL and the
//! time is taken from the kill to the launcher's `… was restarted and is ready again (pid N)`
//! line: the old process reaped, its authority channel released, the new one spawned, its task
//! store read back (first filled with `MUR_BENCH_STORE_TASKS` tasks, default 1000, each taken or
//! refused as busy: both are kept), its readiness line read and its door probed as that session.
//! `MUR_BENCH_MUR` measures another `mur` binary.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod support;
use support::{env_or, formation_pids, install_wat, median, mur_binary, mur_in, running_record};

use anyhow::{Context as _, Result, anyhow, bail};

const RELAY_MANIFEST: &str = "name: relay\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  \
     authentication:\n    scheme: bearer\ncapabilities:\n  network:\n    allow: [localhost]\n";
const ECHO_MANIFEST: &str = "name: echo\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  \
     authentication:\n    scheme: bearer\nlifecycle:\n  \
     task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";
const ROSTER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

fn main() -> Result<()> {
    let reps: usize = env_or("MUR_BENCH_REPS", 20);
    let tmp = tempfile::Builder::new().prefix("mur-bench-").tempdir()?;
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home)?;
    let bin = mur_binary();
    for capsule in [
        ("echo", "actors/echo/capsule.wat", ECHO_MANIFEST),
        ("relay", "src/capsule/testdata/relay.wat", RELAY_MANIFEST),
    ] {
        install_wat(&bin, &home, tmp.path(), capsule).map_err(|e| anyhow!(e))?;
    }
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("roster.yaml"), ROSTER)?;

    let mut child = mur_in(&bin, &home, &project)
        .args(["run", "--roster", "--restart", "1000/86400"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .context("spawn mur run --roster")?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let next = |what: &str, pred: &dyn Fn(&str) -> bool| -> Result<(Instant, String)> {
        loop {
            let (at, line) = rx
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| anyhow!("no {what} within 60 s"))?;
            if pred(&line) {
                return Ok((at, line));
            }
        }
    };
    let (_, formation) = next("formation line", &|l| l.starts_with("formation: "))?;
    let frm = formation.trim_start_matches("formation: ").trim().to_string();
    let mut pid = {
        let start = Instant::now();
        loop {
            if let Some(p) = running_record(&home, "worker")
                .and_then(|r| r["pid"].as_u64())
                .map(|p| p as u32)
            {
                break p;
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("no running record of the worker");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // A store that holds tasks, as a serving peer's does: each restart reads them back.
    let kept: usize = env_or("MUR_BENCH_STORE_TASKS", 1000);
    if kept > 0 {
        let (url, token) = support::member_door(&home, "worker").ok_or_else(|| anyhow!("no worker door"))?;
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
        for i in 0..kept {
            let body = serde_json::json!({"id": i, "jsonrpc": "2.0", "method": "SendMessage", "params": {
                "configuration": {"returnImmediately": true},
                "message": {"messageId": format!("m{i}"), "role": "ROLE_USER", "parts": [{"text": format!("task {i} for the store")}]}}});
            agent
                .post(&format!("http://{url}/"))
                .set("authorization", &format!("Bearer {token}"))
                .set("a2a-version", "1.0")
                .set("content-type", "application/json")
                .send_string(&body.to_string())
                .map_err(|e| anyhow!("SendMessage: {e}"))?;
        }
    }
    let prefix = "[mur run] member 'worker' was restarted and is ready again (pid ";
    let mut took = Vec::with_capacity(reps);
    for _ in 0..reps {
        let killed = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        let (at, line) = next("ready-again line", &|l| l.starts_with(prefix))?;
        took.push(at.duration_since(killed).as_secs_f64() * 1000.0);
        pid = line
            .trim_start_matches(prefix)
            .trim_end_matches(')')
            .parse()
            .context("the new pid")?;
    }
    support::stop_launcher(&mut child);
    if !formation_pids(&frm).is_empty() {
        bail!("members of {frm} still running");
    }
    let min = took.iter().copied().fold(f64::INFINITY, f64::min);
    let max = took.iter().copied().fold(0.0, f64::max);
    println!(
        "restart to ready (kill of the worker to its ready-again line, {kept} tasks sent to its store first), {reps} restarts: median {:.1} ms, min {min:.1} ms, max {max:.1} ms",
        median(took)
    );
    Ok(())
}
