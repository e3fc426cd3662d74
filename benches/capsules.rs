//! Component capsules: compile once, instantiate cheaply (issue 19, items 2 and 3), with the real
//! `mur` binary of this build (`CARGO_BIN_EXE_mur`, release under `cargo bench`) in a private HOME.
//!
//! - install: `mur install -g` of the capsule, which compiles its component into the cache;
//! - answer: `mur run --roster --json --task ping` of N members running the same component (the
//!   entry answers itself; the others idle); spawn → answer line, the first launch after install
//!   and then warm (median of the rest);
//! - uncached: the same with `~/.murmur/compiled` removed before each launch (the launcher
//!   compiles it once, before any member starts), only when `MUR_BENCH_UNCACHED=1` (minutes for
//!   a large component);
//! - task: a served session (`mur run --capsule … --json`, queue/sleep) answers `MUR_BENCH_TASKS`
//!   SendMessage calls one after the other; the first task and the median of the rest, request
//!   → completed reply;
//! - idle: an N-member serving formation, once every member is ready and a second idle; VmRSS
//!   and PSS (`/proc/<pid>/smaps_rollup`: shared pages split between the processes sharing them).
//!
//! Knobs (environment): `MUR_BENCH_COMPONENT` (a component file, `.wasm` or `.wat`; default the
//! repository's Rust demo worker, `actors/demo/scaffold/worker/capsule.wasm`), so Python and
//! JavaScript components are measured the same way; `MUR_BENCH_SIZES` (default `1,8`),
//! `MUR_BENCH_REPS` (default 5), `MUR_BENCH_TASKS` (default 20), `MUR_BENCH_MUR` (another `mur`).

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;
use support::{env_or, formation_pids, median, mur_binary};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};

const AUTH: &str = "network:\n  authentication:\n    scheme: bearer\n";

fn component_path() -> PathBuf {
    std::env::var_os("MUR_BENCH_COMPONENT")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("actors/demo/scaffold/worker/capsule.wasm"),
            PathBuf::from,
        )
}

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

    /// A capsule `name@0.1.0` of the component under test, built; returns its zip.
    fn build(&self, name: &str, extra: &str) -> Result<PathBuf> {
        let src = self.dir.path().join("src").join(name);
        std::fs::create_dir_all(&src)?;
        let component = component_path();
        let file = if component.extension().is_some_and(|e| e == "wat") {
            "capsule.wat"
        } else {
            "capsule.wasm"
        };
        std::fs::copy(&component, src.join(file)).with_context(|| format!("{}", component.display()))?;
        std::fs::write(
            src.join("murmur.yaml"),
            format!("name: {name}\nversion: 0.1.0\ncomponent: {file}\n{AUTH}{extra}"),
        )?;
        let out = self.mur(self.dir.path()).arg("build").arg(&src).output()?;
        if !out.status.success() {
            bail!("mur build: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(src.join(format!("{name}-0.1.0.mur.zip")))
    }

    fn install(&self, zip: &Path) -> Result<Duration> {
        let started = Instant::now();
        let out = self.mur(self.dir.path()).args(["install", "-g"]).arg(zip).output()?;
        let took = started.elapsed();
        if !out.status.success() {
            bail!("mur install: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(took)
    }

    fn project(&self, name: &str, roster: &str) -> Result<PathBuf> {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("roster.yaml"), roster)?;
        Ok(dir)
    }
}

/// N members of `local/subject`: `m00` the entry, the rest idle peers.
fn roster(n: usize) -> String {
    let mut r = String::from("roster_version: 1\nmembers:\n");
    for i in 0..n {
        r.push_str(&format!(
            "  - name: m{i:02}\n    capsule: local/subject\n    version: 0.1.0\n{}",
            if i == 0 { "    entry: true\n" } else { "" }
        ));
    }
    r
}

/// A running `mur` whose stdout is read line by line; its process group is killed on drop.
struct Running {
    child: Child,
    started: Instant,
    lines: std::io::Lines<BufReader<ChildStdout>>,
    err: Arc<Mutex<String>>,
}

impl Running {
    fn start(mut cmd: Command) -> Result<Running> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let started = Instant::now();
        let mut child = cmd.spawn().context("spawn mur")?;
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
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Ok(Running {
            child,
            started,
            lines: BufReader::new(stdout).lines(),
            err,
        })
    }

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

    /// SIGKILLs the launcher and waits until every process of `frm` is gone.
    fn kill_formation(&mut self, frm: &str) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let since = Instant::now();
        while !formation_pids(frm).is_empty() {
            if since.elapsed() > Duration::from_secs(60) {
                bail!("members of {frm} outlived their launcher by a minute");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (VmRSS, PSS) in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let field = |text: &str, name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    Some((field(&status, "VmRSS:")?, field(&rollup, "Pss:")?))
}

fn stat(v: &[f64], prec: usize) -> String {
    let lo = v.iter().cloned().fold(f64::MAX, f64::min);
    let hi = v.iter().cloned().fold(0f64, f64::max);
    format!("{:.prec$} ({lo:.prec$}–{hi:.prec$})", median(v.to_vec()))
}

fn largest_entry(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .map(|e| e.path())
}

/// MB/s of the runtime's integrity digest (BLAKE3) over `path`: from memory (what hashing a
/// mapping costs once the pages are mapped; on every core for a large entry), and through 1 MiB
/// reads of the (cached) file on one core; and of sha256 from memory, the digest it replaced.
fn digest_rates(path: &Path) -> Result<(f64, f64, f64)> {
    let bytes = std::fs::read(path)?;
    let mb = bytes.len() as f64 / 1e6;
    let best = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            f()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(mb / best)
    };
    let memory = best(&mut || {
        std::hint::black_box(mur::compiled::digest_hex(&bytes));
        Ok(())
    })?;
    let file = best(&mut || {
        std::hint::black_box(mur::compiled::digest_reader(std::fs::File::open(path)?)?);
        Ok(())
    })?;
    let sha256 = best(&mut || {
        std::hint::black_box(mur::digest::sha256_hex(&bytes));
        Ok(())
    })?;
    Ok((memory, file, sha256))
}

/// `mur run --roster --json --task ping`: ms from spawn to the answer line.
fn answer_once(sb: &Sandbox, dir: &Path) -> Result<f64> {
    let mut cmd = sb.mur(dir);
    cmd.args(["run", "--roster", "--json", "--task", "ping"]);
    let mut l = Running::start(cmd)?;
    let (formation, _) = l.next_json()?;
    let frm = formation["formation_id"].as_str().unwrap_or_default().to_string();
    let (_ready, _) = l.next_json()?;
    let (answer, at) = l.next_json()?;
    if answer["answer"].as_str().is_none() {
        bail!("no answer: {answer}; stderr:\n{}", l.stderr());
    }
    l.kill_formation(&frm)?;
    Ok(at.as_secs_f64() * 1e3)
}

/// An N-member serving formation, idle: (VmRSS, PSS) KiB of each member.
fn idle_once(sb: &Sandbox, dir: &Path, n: usize) -> Result<Vec<(u64, u64)>> {
    let mut cmd = sb.mur(dir);
    cmd.args(["run", "--roster", "--json"]);
    let mut l = Running::start(cmd)?;
    let (formation, _) = l.next_json()?;
    let frm = formation["formation_id"].as_str().unwrap_or_default().to_string();
    let _ = l.next_json()?;
    // Every peer is up once its pid runs; a second of idleness settles them.
    std::thread::sleep(Duration::from_secs(1));
    let members = formation_pids(&frm);
    if members.len() != n {
        bail!("{} of {n} members running; stderr:\n{}", members.len(), l.stderr());
    }
    let memory = members.iter().filter_map(|p| memory_kib(*p)).collect();
    l.kill_formation(&frm)?;
    Ok(memory)
}

/// A served session answering `tasks` tasks in turn: ms per task, and its memory afterwards.
fn tasks_once(sb: &Sandbox, tasks: usize) -> Result<(Vec<f64>, (u64, u64))> {
    let work = sb.dir.path().join("work");
    std::fs::create_dir_all(&work)?;
    let mut cmd = sb.mur(&work);
    cmd.args(["run", "--capsule", "local/served", "--capsule-version", "0.1.0"])
        .args(["--json", "--readiness-tokens"]);
    let mut l = Running::start(cmd)?;
    let (ready, _) = l.next_json()?;
    let url = ready["url"].as_str().ok_or_else(|| anyhow!("no url: {ready}"))?;
    let url = format!("http://{}/", url.replacen("localhost", "127.0.0.1", 1));
    let token = ready["tokens"]["operator"]
        .as_str()
        .ok_or_else(|| anyhow!("no operator token"))?
        .to_string();
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(600)).build();
    let mut took = Vec::new();
    for i in 0..tasks {
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": {
            "message": {"messageId": format!("m{i}"), "role": "ROLE_USER",
                        "parts": [{"text": "ping", "mediaType": "text/plain"}]},
            "configuration": {"returnImmediately": false}}});
        let started = Instant::now();
        let text = agent
            .post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .set("Content-Type", "application/json")
            .set("A2A-Version", "1.0")
            .send_string(&body.to_string())
            .map_err(|e| anyhow!("SendMessage: {e}"))?
            .into_string()?;
        let reply: Value = serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))?;
        took.push(started.elapsed().as_secs_f64() * 1e3);
        let state = &reply["result"]["task"]["status"]["state"];
        if state != "TASK_STATE_COMPLETED" {
            bail!("task {i} ended {state}: {reply}; stderr:\n{}", l.stderr());
        }
    }
    let memory = memory_kib(l.child.id()).unwrap_or_default();
    Ok((took, memory))
}

fn main() -> Result<()> {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wants = |part: &str| filter.as_deref().is_none_or(|f| part.contains(f));
    let sizes: Vec<usize> = std::env::var("MUR_BENCH_SIZES")
        .unwrap_or_else(|_| "1,8".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let reps: usize = env_or("MUR_BENCH_REPS", 5);
    let tasks: usize = env_or("MUR_BENCH_TASKS", 20);
    let component = component_path();
    let sb = Sandbox {
        dir: tempfile::Builder::new().prefix("mur-bench-").tempdir()?,
    };
    std::fs::create_dir_all(sb.home())?;
    println!(
        "capsules: component {} ({} bytes), binary {}, {reps} runs, load: {}",
        component.display(),
        std::fs::metadata(&component).map(|m| m.len()).unwrap_or(0),
        mur_binary().display(),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    let subject = sb.build("subject", "")?;
    let served = sb.build(
        "served",
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\n",
    )?;
    let install = sb.install(&subject)?;
    sb.install(&served)?;
    // One entry per archive: `subject` and `served` are two archives of the same component.
    let entries: Vec<u64> = std::fs::read_dir(sb.home().join(".murmur/compiled"))?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .collect();
    println!();
    println!(
        "install (compiles): {:.0} ms; compiled entry {:.1} MiB ({} entries)",
        install.as_secs_f64() * 1e3,
        entries.iter().max().copied().unwrap_or(0) as f64 / (1 << 20) as f64,
        entries.len()
    );
    if let Some(entry) = largest_entry(&sb.home().join(".murmur/compiled")) {
        let (memory, file, sha256) = digest_rates(&entry)?;
        println!(
            "blake3 of the entry (best of 3): {memory:.0} MB/s in memory (a load hashes a mapping of the file), {file:.0} MB/s on one core through 1 MiB reads of the cached file; sha256 in memory {sha256:.0} MB/s, CPU SHA extensions: {}",
            if std::fs::read_to_string("/proc/cpuinfo")
                .unwrap_or_default()
                .contains(" sha_ni")
            {
                "yes"
            } else {
                "no"
            }
        );
    }

    if wants("answer") {
        println!();
        println!("| members | first launch after install: spawn → answer ms | warm: spawn → answer ms |");
        println!("|---:|---:|---:|");
        for &n in &sizes {
            let dir = sb.project(&format!("f{n}"), &roster(n))?;
            let first = answer_once(&sb, &dir)?;
            let warm: Vec<f64> = (0..reps).map(|_| answer_once(&sb, &dir)).collect::<Result<_>>()?;
            println!("| {n} | {first:.0} | {} |", stat(&warm, 0));
        }
    }

    if wants("uncached") && std::env::var("MUR_BENCH_UNCACHED").is_ok_and(|v| v == "1") {
        println!();
        println!("| members | no cache (each member compiles): spawn → answer ms |");
        println!("|---:|---:|");
        for &n in &sizes {
            let dir = sb.project(&format!("u{n}"), &roster(n))?;
            let _ = std::fs::remove_dir_all(sb.home().join(".murmur/compiled"));
            // The first member to finish fills the cache; the rest of this launch compiled too.
            let ms = answer_once(&sb, &dir)?;
            println!("| {n} | {ms:.0} |");
        }
        sb.install(&subject)?;
    }

    if wants("task") {
        let (took, (rss, pss)) = tasks_once(&sb, tasks)?;
        println!();
        println!(
            "| served member | first task ms | later tasks ms (median, min–max) | VmRSS after MiB | PSS after MiB |"
        );
        println!("|---|---:|---:|---:|---:|");
        println!(
            "| {tasks} tasks in turn | {:.1} | {} | {:.1} | {:.1} |",
            took.first().copied().unwrap_or(f64::NAN),
            stat(took.get(1..).unwrap_or_default(), 1),
            rss as f64 / 1024.0,
            pss as f64 / 1024.0
        );
    }

    if wants("idle") {
        println!();
        println!("| members | idle VmRSS MiB per member | idle PSS MiB per member |");
        println!("|---:|---:|---:|");
        for &n in &sizes {
            let dir = sb.project(&format!("i{n}"), &roster(n))?;
            let mem = idle_once(&sb, &dir, n)?;
            let rss: Vec<f64> = mem.iter().map(|m| m.0 as f64 / 1024.0).collect();
            let pss: Vec<f64> = mem.iter().map(|m| m.1 as f64 / 1024.0).collect();
            println!("| {n} | {} | {} |", stat(&rss, 1), stat(&pss, 1));
        }
    }
    Ok(())
}
