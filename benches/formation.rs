//! Formation launch and teardown (issue 7, items 3 and 4), with the real `mur` binary of this
//! build (`CARGO_BIN_EXE_mur`, release under `cargo bench`) in a private HOME.
//!
//! - launch: `mur run --roster --json` (a serving formation: the entry stays up) of N echo
//!   members, the entry calling one worker; time from spawn to the formation line (first stdout
//!   line) and to the entry's readiness line (second);
//! - idle cost: over a second of idleness once every member is up, the CPU time the members use
//!   (`/proc/<pid>/task/*/schedstat`), then VmRSS, RssAnon and PSS (`/proc/<pid>/smaps_rollup`,
//!   shared pages split between the processes sharing them) of every member;
//! - teardown: SIGKILL the launcher, then poll every member's `/proc/<pid>` every 0.5 ms until
//!   the last is gone (exited or a zombie); a full `/proc` scan for `MURMUR_FORMATION_ID=<frm>`
//!   confirms nothing of the formation is left;
//! - answer: `mur run --roster --json --task ping` of a relay entry calling an echo worker;
//!   time from spawn to the entry's answer line, and from the formation line to it.
//!
//! The rosters (`MUR_BENCH_SHAPES`, default `one`): `one` — the entry calls `w01` and the other
//! members are idle peers; `chain` — `lead → w01 → w02 → …`, one edge per member; `all` —
//! `reachability: all`, every member may call every other but the entry (`(N−1)²` edges: 65 025
//! tokens to sign at 256 members, `N−1` of them and as many addresses in every first line).
//! The echo members declare `localhost` and a queue that holds every caller, so no roster warns.
//!
//! Knobs (environment): `MUR_BENCH_SIZES` (default `2,8,32,64`), `MUR_BENCH_SHAPES`,
//! `MUR_BENCH_REPS` (default 5),
//! `MUR_BENCH_IDLE_MS` (default 1000), `MUR_BENCH_MUR` (another `mur` binary to measure, e.g. a
//! copy built before a change, for before/after figures). A bare argument keeps only the parts (`launch`,
//! `answer`) whose name contains it.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;
use support::{alive, env_or, formation_pids, median, mur_binary};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;

const RELAY_MANIFEST: &str = "name: relay\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  \
     authentication:\n    scheme: bearer\ncapabilities:\n  network:\n    allow: [localhost]\n";

/// actors/echo, holding every caller of a 256-member `all` formation and allowed to call its
/// peers: a roster of any shape here admits without a warning.
const ECHO_MANIFEST: &str = "name: echo\nversion: 0.1.0\ncomponent: capsule.wat\nlifecycle:\n  \
     task_acceptance: queue\n  after_task: sleep\n  queue_depth: 256\nexports:\n  peer_tasks:\n    \
     accept: true\nnetwork:\n  authentication:\n    scheme: bearer\ncapabilities:\n  network:\n    \
     allow: [localhost]\n";

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn mur(&self, cwd: &Path) -> Command {
        let mut c = Command::new(mur_binary());
        c.current_dir(cwd)
            .env("HOME", self.home())
            .env_remove("MURMUR_FORMATION_ID")
            .env_remove("MURMUR_FORMATION_CHANNEL")
            .env_remove("MURMUR_FORMATION_LIFELINE")
            .env_remove("MURMUR_FORMATION_PEERS")
            .env_remove("RUST_LOG");
        c
    }

    /// `mur build <src>` then `mur install -g <zip>`.
    fn install(&self, src: &Path) -> Result<()> {
        let out = self.mur(self.dir.path()).arg("build").arg(src).output()?;
        if !out.status.success() {
            bail!("mur build: {}", String::from_utf8_lossy(&out.stderr));
        }
        let built = String::from_utf8_lossy(&out.stdout).to_string();
        let zip = built
            .trim()
            .rsplit(": ")
            .next()
            .ok_or_else(|| anyhow!("mur build named no zip: {built}"))?;
        let out = self.mur(self.dir.path()).args(["install", "-g", zip]).output()?;
        if !out.status.success() {
            bail!("mur install: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    fn project(&self, name: &str, roster: &str) -> Result<PathBuf> {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("roster.yaml"), roster)?;
        Ok(dir)
    }
}

fn sandbox() -> Result<Sandbox> {
    let sb = Sandbox {
        dir: tempfile::Builder::new().prefix("mur-bench-").tempdir()?,
    };
    std::fs::create_dir_all(sb.home())?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let echo = sb.dir.path().join("src/echo");
    std::fs::create_dir_all(&echo)?;
    std::fs::copy(repo.join("actors/echo/capsule.wat"), echo.join("capsule.wat"))?;
    std::fs::write(echo.join("murmur.yaml"), ECHO_MANIFEST)?;
    sb.install(&echo)?;
    let relay = sb.dir.path().join("src/relay");
    std::fs::create_dir_all(&relay)?;
    std::fs::copy(repo.join("src/capsule/testdata/relay.wat"), relay.join("capsule.wat"))?;
    std::fs::write(relay.join("murmur.yaml"), RELAY_MANIFEST)?;
    sb.install(&relay)?;
    Ok(sb)
}

/// N echo members `lead` (entry), `w01 … w<N-1>`, reachable as `shape` says (module doc).
fn echo_roster(n: usize, shape: &str) -> String {
    let mut r = String::from(
        "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/echo\n    version: 0.1.0\n    entry: true\n",
    );
    for i in 1..n {
        r.push_str(&format!(
            "  - name: w{i:02}\n    capsule: local/echo\n    version: 0.1.0\n"
        ));
    }
    if n > 1 {
        match shape {
            "all" => r.push_str("reachability: all\n"),
            "chain" => {
                r.push_str("reachability:\n  - from: lead\n    to: [w01]\n");
                for i in 2..n {
                    r.push_str(&format!("  - from: w{:02}\n    to: [w{i:02}]\n", i - 1));
                }
            }
            _ => r.push_str("reachability:\n  - from: lead\n    to: [w01]\n"),
        }
    }
    r
}

/// Edges of `echo_roster(n, shape)`.
fn edges(n: usize, shape: &str) -> usize {
    match (n, shape) {
        (0 | 1, _) => 0,
        (_, "all") => (n - 1) * (n - 1),
        (_, "chain") => n - 1,
        _ => 1,
    }
}

const RELAY_ROSTER: &str = "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/relay\n    \
     version: 0.1.0\n    entry: true\n  - name: worker\n    capsule: local/echo\n    version: 0.1.0\n\
     reachability:\n  - from: lead\n    to: [worker]\n";

/// A launcher with its stdout read line by line here and its stderr kept for error reports.
struct Launch {
    child: Child,
    started: Instant,
    lines: std::io::Lines<BufReader<ChildStdout>>,
    err: Arc<Mutex<String>>,
}

impl Launch {
    fn start(sb: &Sandbox, dir: &Path, args: &[&str]) -> Result<Launch> {
        let mut cmd = sb.mur(dir);
        cmd.args(["run", "--roster", "--json"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let started = Instant::now();
        let mut child = cmd.spawn().context("spawn mur run --roster")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let err = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&err);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Ok(Launch {
            child,
            started,
            lines: BufReader::new(stdout).lines(),
            err,
        })
    }

    /// The next stdout line as JSON, and when it arrived (since spawn).
    fn next_json(&mut self) -> Result<(Value, Duration)> {
        let line = self
            .lines
            .next()
            .ok_or_else(|| anyhow!("stdout closed; stderr:\n{}", self.stderr()))??;
        let at = self.started.elapsed();
        let v = serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))?;
        Ok((v, at))
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time of every thread of `pid` so far, in ns (0 once it is gone).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time of a process so far, exited threads included (`/proc/<pid>/stat` utime + stime, in
/// clock ticks of 10 ms).
fn process_cpu_ms(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            // Fields 14 and 15 of stat(5); `rest` starts at field 3.
            Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?)
        })
        .map_or(f64::NAN, |ticks| ticks * 10.0)
}

/// (VmRSS, RssAnon, Pss) in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64, u64)> {
    let field = |text: &str, name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    Some((
        field(&status, "VmRSS:")?,
        field(&status, "RssAnon:")?,
        field(&rollup, "Pss:")?,
    ))
}

/// `median (min–max)`.
fn stat(v: &[f64], unit_div: f64, prec: usize) -> String {
    let lo = v.iter().cloned().fold(f64::MAX, f64::min) / unit_div;
    let hi = v.iter().cloned().fold(0f64, f64::max) / unit_div;
    format!("{:.prec$} ({lo:.prec$}–{hi:.prec$})", median(v.to_vec()) / unit_div)
}

struct LaunchRun {
    /// CPU time the idle members used over the idle window, per member, in % of one core.
    idle_cpu_pct: f64,
    formation_ms: f64,
    entry_ready_ms: f64,
    teardown_ms: f64,
    /// The launcher's CPU time from spawn to the formation line (signing, lines, spawning).
    launcher_cpu_ms: f64,
    /// Descriptors the launcher held once the formation was up.
    launcher_fds: usize,
    /// Threads of an idle member (mean over the members).
    threads_per_member: f64,
    /// Per member (VmRSS, RssAnon, Pss) KiB, peers and entry.
    memory: Vec<(u64, u64, u64)>,
}

fn launch_once(sb: &Sandbox, dir: &Path, n: usize, idle: Duration) -> Result<LaunchRun> {
    let mut l = Launch::start(sb, dir, &[])?;
    let (formation, at_formation) = l.next_json()?;
    let launcher_cpu_ms = process_cpu_ms(l.child.id());
    let (_ready, at_ready) = l.next_json()?;
    let launcher_fds = std::fs::read_dir(format!("/proc/{}/fd", l.child.id())).map_or(0, |d| d.count());
    let frm = formation["formation_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no formation_id: {formation}"))?
        .to_string();
    // Let start-up finish, then watch the idle members' CPU time over the idle window.
    std::thread::sleep(Duration::from_millis(200));
    let members = formation_pids(&frm);
    if members.len() != n {
        bail!("{} of {n} members running; stderr:\n{}", members.len(), l.stderr());
    }
    let cpu_before: u64 = members.iter().map(|p| cpu_ns(*p)).sum();
    let window = Instant::now();
    std::thread::sleep(idle);
    let cpu = members
        .iter()
        .map(|p| cpu_ns(*p))
        .sum::<u64>()
        .saturating_sub(cpu_before);
    let idle_cpu_pct = 100.0 * cpu as f64 / window.elapsed().as_nanos() as f64 / n as f64;
    let memory = members.iter().filter_map(|p| memory_kib(*p)).collect();
    let threads: usize = members
        .iter()
        .map(|p| std::fs::read_dir(format!("/proc/{p}/task")).map_or(0, |d| d.count()))
        .sum();
    let threads_per_member = threads as f64 / n as f64;

    // Teardown: SIGKILL the launcher alone, then watch the members we know of.
    let launcher = nix::unistd::Pid::from_raw(l.child.id() as i32);
    nix::sys::signal::kill(launcher, nix::sys::signal::Signal::SIGKILL)?;
    let killed = Instant::now();
    let mut left = members.clone();
    while !left.is_empty() {
        left.retain(|p| alive(*p));
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("members still alive 60 s after the launcher's SIGKILL: {left:?}");
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let teardown = killed.elapsed();
    let _ = l.child.wait();
    let rest = formation_pids(&frm);
    if !rest.is_empty() {
        bail!("processes of {frm} outlived its members: {rest:?}");
    }
    Ok(LaunchRun {
        idle_cpu_pct,
        formation_ms: at_formation.as_secs_f64() * 1e3,
        entry_ready_ms: at_ready.as_secs_f64() * 1e3,
        teardown_ms: teardown.as_secs_f64() * 1e3,
        launcher_cpu_ms,
        launcher_fds,
        threads_per_member,
        memory,
    })
}

/// (launch → answer, formation line → answer) in ms.
fn answer_once(sb: &Sandbox, dir: &Path) -> Result<(f64, f64)> {
    let mut l = Launch::start(sb, dir, &["--task", "ping"])?;
    let (_formation, at_formation) = l.next_json()?;
    let (_ready, _) = l.next_json()?;
    let (answer, at_answer) = l.next_json()?;
    if answer["answer"] != "ping" {
        bail!("unexpected answer line {answer}; stderr:\n{}", l.stderr());
    }
    let status = l.child.wait()?;
    if status.code() != Some(0) {
        bail!(
            "launcher ended {:?}/{:?}; stderr:\n{}",
            status.code(),
            status.signal(),
            l.stderr()
        );
    }
    Ok((
        at_answer.as_secs_f64() * 1e3,
        (at_answer - at_formation).as_secs_f64() * 1e3,
    ))
}

fn main() -> Result<()> {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wants = |part: &str| filter.as_deref().is_none_or(|f| part.contains(f));
    let sizes: Vec<usize> = std::env::var("MUR_BENCH_SIZES")
        .unwrap_or_else(|_| "2,8,32,64".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let shapes: Vec<String> = std::env::var("MUR_BENCH_SHAPES")
        .unwrap_or_else(|_| "one".into())
        .split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| ["one", "chain", "all"].contains(&c.as_str()))
        .collect();
    let reps: usize = env_or("MUR_BENCH_REPS", 5);
    let idle = Duration::from_millis(env_or("MUR_BENCH_IDLE_MS", 1000));
    let sb = sandbox()?;
    println!(
        "formation: {reps} runs each, binary {}, load: {}",
        mur_binary().display(),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );

    if wants("launch") {
        println!();
        println!(
            "| members | roster | edges | spawn → formation line ms | spawn → entry ready ms | per member ms | \
             SIGKILL launcher → last member gone ms | launcher CPU to the line ms | launcher fds | threads per member |"
        );
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut mem_rows = Vec::new();
        for shape in &shapes {
            for &n in &sizes {
                let dir = sb.project(&format!("f{n}-{shape}"), &echo_roster(n, shape))?;
                // One unmeasured launch warms the page cache and the store.
                launch_once(&sb, &dir, n, Duration::from_millis(100))?;
                let runs: Vec<LaunchRun> = (0..reps)
                    .map(|_| launch_once(&sb, &dir, n, idle))
                    .collect::<Result<_>>()
                    .with_context(|| format!("{n} members, {shape}"))?;
                let f: Vec<f64> = runs.iter().map(|r| r.formation_ms).collect();
                let per: Vec<f64> = f.iter().map(|x| x / n as f64).collect();
                let col = |k: fn(&LaunchRun) -> f64| runs.iter().map(k).collect::<Vec<_>>();
                println!(
                    "| {n} | {shape} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    edges(n, shape),
                    stat(&f, 1.0, 0),
                    stat(&col(|r| r.entry_ready_ms), 1.0, 0),
                    stat(&per, 1.0, 1),
                    stat(&col(|r| r.teardown_ms), 1.0, 0),
                    stat(&col(|r| r.launcher_cpu_ms), 1.0, 0),
                    stat(&col(|r| r.launcher_fds as f64), 1.0, 0),
                    stat(&col(|r| r.threads_per_member), 1.0, 1),
                );
                let all: Vec<&(u64, u64, u64)> = runs.iter().flat_map(|r| &r.memory).collect();
                let pick = |k: fn(&(u64, u64, u64)) -> u64| -> Vec<f64> { all.iter().map(|m| k(m) as f64).collect() };
                mem_rows.push(format!(
                    "| {n} | {shape} | {} | {} | {} | {} |",
                    stat(&pick(|m| m.0), 1024.0, 1),
                    stat(&pick(|m| m.1), 1024.0, 1),
                    stat(&pick(|m| m.2), 1024.0, 2),
                    stat(&col(|r| r.idle_cpu_pct), 1.0, 2),
                ));
            }
        }
        println!();
        println!("| members | roster | idle VmRSS MiB | idle RssAnon MiB | idle PSS MiB | idle CPU % per member |");
        println!("|---:|---|---:|---:|---:|---:|");
        for r in mem_rows {
            println!("{r}");
        }
    }

    if wants("answer") {
        let dir = sb.project("relay", RELAY_ROSTER)?;
        answer_once(&sb, &dir)?;
        let runs: Vec<(f64, f64)> = (0..reps).map(|_| answer_once(&sb, &dir)).collect::<Result<_>>()?;
        println!();
        println!("| lead (relay) → worker (echo) | spawn → answer ms | formation line → answer ms |");
        println!("|---|---:|---:|");
        println!(
            "| --task ping | {} | {} |",
            stat(&runs.iter().map(|r| r.0).collect::<Vec<_>>(), 1.0, 0),
            stat(&runs.iter().map(|r| r.1).collect::<Vec<_>>(), 1.0, 0),
        );
    }
    Ok(())
}
