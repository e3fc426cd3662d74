//! Remote capsules (issue 34): the latency a remote member adds to a call of a remote A2A agent.
//!
//! One official A2A Python SDK agent (`tests/interop/a2a_remote_agent.py`, as the tests start it,
//! requiring a bearer) and one remote member in front of it (`mur run --capsule` of a remote
//! capsule, its own door with the operator token). The SDK's own client
//! (`benches/support/a2a_sdk_client.py`: discovers the card once, then blocking SendMessage calls
//! timed one by one) calls the agent directly and through the member, alternating call by call
//! (the first of each pair taking turns) so the load of a shared machine falls on both paths
//! alike. Both figures include the agent's own time and the client's; their difference is what
//! the member adds: its door, its board, the forwarded request and the relayed answer, shown as
//! the difference of the two p50s and as the median of the pairs' differences. Beside the SDK
//! client, a raw client (one keep-alive connection, `TCP_NODELAY`, each request one write) makes
//! the same calls, so the client library's own costs are out of the figure. Both clients keep
//! one connection to whichever server they call, the agent or the member's door: the same
//! client and the same connection policy on both paths. (The agent must set `TCP_NODELAY` on
//! what it accepts, or each reply it writes in two pieces waits ~40 ms for the client's delayed
//! ACK on a keep-alive connection; `a2a_remote_agent.py` does.)
//!
//! Modes (`MUR_BENCH_REMOTE_MODES`, default `blocking,streaming`): `blocking` serves a card
//! without streaming, so the member forwards a blocking SendMessage as the direct client sends;
//! `streaming` serves one with streaming, so the member forwards SendStreamingMessage and relays
//! its events. `MUR_BENCH_CALLS` (default 500) pairs of calls per round, `MUR_BENCH_ROUNDS`
//! (default 3) rounds per client, 50 untimed pairs before each round. Without `--bench` (`cargo test
//! --benches`) each client makes a few calls.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

mod support;
use support::{env_or, mur_binary};

// The tests' own provisioning, so the bench and the tests share one venv per set of pins.
#[path = "../tests/it/support/python.rs"]
mod python;

/// For `python`, as the tests' `support::repo_root`.
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const A2A_SERVER: &[&str] = &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.54.0"];
const KEY: &str = "far-bench-key-2b8e41c07d9a";
const WARMUP: usize = 50;

type Result<T> = std::result::Result<T, String>;

/// A child killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line `child` prints, within its start.
fn first_line(child: &mut Child) -> Result<String> {
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut r = BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    // Drained from here on, so the child never writes into a closed pipe.
    std::thread::spawn(move || for _ in r.lines() {});
    Ok(line.trim().to_string())
}

fn agent(python: &Path, dir: &Path, streaming: bool) -> Result<(Running, u16)> {
    let mut child = Command::new(python)
        .arg(repo_root().join("tests/interop/a2a_remote_agent.py"))
        .current_dir(dir)
        .env("A2A_TEST_LOG", dir.join("agent.log"))
        .env("A2A_TEST_KEY", KEY)
        .env("A2A_TEST_STREAMING", if streaming { "1" } else { "0" })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn the agent: {e}"))?;
    let port = first_line(&mut child)?
        .parse::<u16>()
        .map_err(|e| format!("the agent's port: {e}"))?;
    Ok((Running(child), port))
}

fn mur(home: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(mur_binary());
    c.current_dir(cwd)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}

/// Builds and installs the remote capsule `far` in front of the agent at `port`, starts it, and
/// returns it with its door's URL and operator token.
fn member(home: &Path, port: u16) -> Result<(Running, String, String)> {
    let src = home.join("src/far");
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    let manifest = format!(
        "name: far\nversion: 0.1.0\nremote:\n  url: http://127.0.0.1:{port}/\n  api_key: ${{FAR_BENCH_KEY}}\nnetwork:\n  authentication:\n    scheme: bearer\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\n"
    );
    std::fs::write(src.join("murmur.yaml"), manifest).map_err(|e| e.to_string())?;
    let out = mur(home, &src)
        .args(["build", "."])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("mur build: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let zip = String::from_utf8_lossy(&out.stdout)
        .trim()
        .rsplit(": ")
        .next()
        .unwrap_or("")
        .to_string();
    let out = mur(home, &src)
        .args(["install", "-g", &zip])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("mur install: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let work = home.join("work");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let mut child = mur(home, &work)
        .args([
            "run",
            "--capsule",
            "local/far",
            "--capsule-version",
            "0.1.0",
            "--json",
            "--readiness-tokens",
        ])
        .env("FAR_BENCH_KEY", KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let line = first_line(&mut child)?;
    let ready: serde_json::Value = serde_json::from_str(&line).map_err(|e| format!("readiness line {line:?}: {e}"))?;
    let url = ready["url"]
        .as_str()
        .ok_or("no url")?
        .replacen("localhost", "http://127.0.0.1", 1);
    let token = ready["tokens"]["operator"]
        .as_str()
        .ok_or("no operator token")?
        .to_string();
    Ok((Running(child), format!("{url}/"), token))
}

/// A pair of paths' samples, call by call: `(direct µs, through µs)`.
type Pairs = Vec<(f64, f64)>;

/// One round of `calls` SDK client calls, alternating between the agent (`direct`, with its key)
/// and the member's door (`door`, with its operator token) in one client process: each pair's µs.
fn round(
    python: &Path,
    direct: &str,
    door: &str,
    token: &str,
    calls: usize,
    warmup: usize,
    dir: &Path,
) -> Result<Pairs> {
    let samples = dir.join("samples");
    let out = Command::new(python)
        .arg(repo_root().join("benches/support/a2a_sdk_client.py"))
        .args([direct, &calls.to_string(), &warmup.to_string()])
        .arg(&samples)
        .arg(door)
        .current_dir(dir)
        .env("A2A_BENCH_TOKEN", KEY)
        .env("A2A_BENCH_TOKEN2", token)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("the SDK client: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = std::fs::read_to_string(&samples).map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect())
}

/// One keep-alive connection with `TCP_NODELAY`, each request written in one piece.
struct Raw {
    addr: String,
    token: String,
    conn: std::net::TcpStream,
    reader: BufReader<std::net::TcpStream>,
}

impl Raw {
    fn open(addr: &str, token: &str) -> Result<Raw> {
        let conn = std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        conn.set_nodelay(true).map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let reader = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
        Ok(Raw {
            addr: addr.to_string(),
            token: token.to_string(),
            conn,
            reader,
        })
    }

    /// One blocking SendMessage, timed from its write to its whole reply: µs.
    fn call(&mut self, i: usize) -> Result<f64> {
        use std::io::{Read, Write};
        let (addr, token, conn, reader) = (&self.addr, &self.token, &mut self.conn, &mut self.reader);
        let body = format!(
            r#"{{"id":{i},"jsonrpc":"2.0","method":"SendMessage","params":{{"message":{{"messageId":"m{i}-{}","parts":[{{"text":"ping"}}],"role":"ROLE_USER"}}}}}}"#,
            std::process::id()
        );
        let req = format!(
            "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\na2a-version: 1.0\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let t = std::time::Instant::now();
        conn.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).map_err(|e| e.to_string())?;
            if line.is_empty() {
                return Err("the connection closed".into());
            }
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0u8; length];
        reader.read_exact(&mut buf).map_err(|e| e.to_string())?;
        let elapsed = t.elapsed();
        if !String::from_utf8_lossy(&buf).contains("TASK_STATE_COMPLETED") {
            return Err(format!("SendMessage answered {}", String::from_utf8_lossy(&buf)));
        }
        Ok(elapsed.as_secs_f64() * 1e6)
    }
}

/// One round of `calls` raw calls alternating between the agent and the member's door, the first
/// of each pair taking turns: the floor no client library's own costs blur.
fn raw_round(agent: &str, door: &str, token: &str, calls: usize, warmup: usize) -> Result<Pairs> {
    let mut direct = Raw::open(agent, KEY)?;
    let mut through = Raw::open(door, token)?;
    let mut pairs = Vec::with_capacity(calls);
    for i in 0..warmup + calls {
        let (d, t) = if i % 2 == 0 {
            let d = direct.call(i)?;
            (d, through.call(i)?)
        } else {
            let t = through.call(i)?;
            (direct.call(i)?, t)
        };
        if i >= warmup {
            pairs.push((d, t));
        }
    }
    Ok(pairs)
}

fn pct(sorted: &[f64], p: usize) -> f64 {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or(f64::NAN)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let calls = if bench { env_or("MUR_BENCH_CALLS", 500) } else { 5 };
    let rounds = if bench { env_or("MUR_BENCH_ROUNDS", 3) } else { 1 };
    let warmup = if bench { WARMUP } else { 2 };
    let modes = std::env::var("MUR_BENCH_REMOTE_MODES").unwrap_or_else(|_| "blocking,streaming".into());
    let python = python::python_with(A2A_SERVER, "a2a.client, a2a.server.routes, uvicorn, httpx");
    println!("| mode | client | path | calls | p50 µs | p90 µs | p99 µs | mean µs |");
    println!("|---|---|---|---|---|---|---|---|");
    for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if let Err(e) = run(&python, mode == "streaming", mode, calls, rounds, warmup) {
            println!("| {mode} | | skipped: {e} | | | | | |");
        }
    }
}

fn run(python: &Path, streaming: bool, mode: &str, calls: usize, rounds: usize, warmup: usize) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("mur-bench-remote-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let (_agent, port) = agent(python, dir.path(), streaming)?;
    let (_member, door, token) = member(dir.path(), port)?;
    let direct_url = format!("http://127.0.0.1:{port}/");
    let door_addr = door.trim_start_matches("http://").trim_end_matches('/').to_string();
    let agent_addr = format!("127.0.0.1:{port}");
    for client in ["a2a-sdk", "raw"] {
        let mut pairs = Pairs::new();
        for _ in 0..rounds {
            pairs.extend(match client {
                "raw" => raw_round(&agent_addr, &door_addr, &token, calls, warmup)?,
                _ => round(python, &direct_url, &door, &token, calls, warmup, dir.path())?,
            });
        }
        let direct: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let through: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let mut added: Vec<f64> = pairs.iter().map(|p| p.1 - p.0).collect();
        added.sort_by(f64::total_cmp);
        let (mut p50s, mut p90s) = ([0.0; 2], [0.0; 2]);
        for (i, (what, mut s)) in [("direct to the agent", direct), ("through the remote member", through)]
            .into_iter()
            .enumerate()
        {
            s.sort_by(f64::total_cmp);
            let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
            p50s[i] = pct(&s, 50);
            p90s[i] = pct(&s, 90);
            println!(
                "| {mode} | {client} | {what} | {} | {:.0} | {:.0} | {:.0} | {mean:.0} |",
                s.len(),
                pct(&s, 50),
                pct(&s, 90),
                pct(&s, 99)
            );
        }
        println!(
            "| {mode} | {client} | added by the member (difference of the p50s, p90s) | | {:.0} | {:.0} | | |",
            p50s[1] - p50s[0],
            p90s[1] - p90s[0]
        );
        println!(
            "| {mode} | {client} | added by the member (median of the pairs' differences) | {} | {:.0} | | | |",
            added.len(),
            pct(&added, 50)
        );
    }
    Ok(())
}
