//! Tool calls of model capsules (issue 31): what one call costs the runtime, p50 and p99.
//!
//! - wasm: `WasmTool::call` (a fresh instance per call: instantiate, `call`, the result back)
//!   on three word-counting tools: the Rust tool `mur new --tool words --lang rust` scaffolds,
//!   as `mur build .` makes it (the committed `src/capsule/testdata/rust-tool/tool.wasm`, 41.5
//!   KB, which its `build.sh` rebuilds; no toolchain needed here); the Python tool `mur new
//!   --tool words --lang python` scaffolds, built by the real `mur build .` with componentize-py
//!   (provisioned as the tests do, in a venv under `target/test-python/`; the component is kept
//!   under `target/bench-tools/` until the scaffold or the pin changes); and, as the floor,
//!   `src/capsule/testdata/words-tool.wat`, a component with one small core module written by
//!   hand (no allocator, no JSON parser). A row whose toolchain cannot be provisioned is skipped
//!   with the reason.
//! - mcp: the same `tools/call` of `add(2, 3)` against one official MCP Python SDK server
//!   (`tests/interop/mcp_server.py`, as the tests start it), through mur's `McpServer::call`
//!   and through the SDK's own client (`benches/support/mcp_sdk_client.py`: connects once and
//!   times its calls), in alternating rounds, with the server answering in event streams (its
//!   default; `MUR_BENCH_MCP_MODES=sse,json` adds a server answering in plain JSON). Both
//!   clients speak MCP 2026-07-28, stateless (mur settles on it through `server/discover`, the
//!   SDK's `Client` in its default `mode="auto"` does the same; both are checked);
//!   `MUR_BENCH_MCP_SDK_PROTOCOL=2025-11-25` has the SDK client use the handshake and a session
//!   instead, as the runs before 2026-07-28 did. Both figures include the server's own time;
//!   their difference is what mur adds over the official client. Beside them, the part of mur's call that reads who owns the server's socket
//!   (`outbound::owner::verify_stream`: `/proc/net/tcp`, once per connection; mur's plain-http MCP
//!   requests carry one response per connection).
//!
//! Each row is first measured by criterion (its mean and confidence interval), then by
//! `MUR_BENCH_CALLS` calls (default 2000) timed one by one, after a warm-up, for the
//! percentiles; the mcp rows split those into `MUR_BENCH_ROUNDS` rounds (default 3) per client.
//! A filter (`cargo bench --workspace --bench tools -- mcp`) runs the parts whose names hold it.
//! Without `--bench` (`cargo test --benches`) each part runs a few calls.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::Criterion;
use mur::capsule::{CapsuleEngine, ToolGrant, ToolRun, WasmTool};
use mur::runner::CancelSignal;
use mur::tools::mcp::{McpEndpoint, McpLimits, McpServer};
use serde_json::json;

mod support;
use support::{env_or, mur_binary};

// The tests' own provisioning, so the bench and the tests share one venv per set of pins and
// start the SDK server the same way.
#[allow(dead_code)]
#[path = "../tests/it/support/mcp.rs"]
mod mcp;
#[path = "../tests/it/support/python.rs"]
mod python;

/// For `python` and `mcp`, as the tests' `support::repo_root`.
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const WORDS_WAT: &[u8] = include_bytes!("../src/capsule/testdata/words-tool.wat");
const WORDS_RUST: &[u8] = include_bytes!("../src/capsule/testdata/rust-tool/tool.wasm");
const INPUT: &str = r#"{"text": "the quick brown fox jumps over the lazy dog"}"#;
/// The bearer the SDK server requires.
const KEY: &str = "mcp-bench-key-8d1e4b7a20";
/// Untimed calls before each timed series (and each SDK client round).
const WARMUP: usize = 50;

/// One row of the table: a series of calls timed one by one, in µs.
struct Row {
    what: String,
    samples: Vec<f64>,
}

impl Row {
    fn print(&self) {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            self.what,
            s.len(),
            percentile(&s, 50),
            percentile(&s, 99),
            s.first().copied().unwrap_or(f64::NAN),
            mean
        );
    }

    fn p50(&self) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        percentile(&s, 50)
    }
}

/// The nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What a panic of the tests' provisioning said.
fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "it panicked".to_string())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// `mur` in a private HOME, without a formation's environment.
fn mur(home: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(mur_binary());
    c.current_dir(cwd)
        .env("HOME", home)
        .env_remove("MURMUR_FORMATION_ID")
        .env_remove("MURMUR_FORMATION_CHANNEL")
        .env_remove("MURMUR_FORMATION_LIFELINE")
        .env_remove("MURMUR_FORMATION_PEERS")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    c
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The Python `words` tool of `mur new --tool words --lang python`, built by `mur build .` with
/// componentize-py: its `tool.wasm`, built once per scaffold and pin.
fn python_tool() -> Result<PathBuf, String> {
    let pin = mur::scaffold::toolchain::COMPONENTIZE_PY;
    let python = std::panic::catch_unwind(|| python::python_with(&[pin], "componentize_py"))
        .map_err(|p| format!("componentize-py cannot be provisioned: {}", panic_text(p)))?;
    let bin = python.parent().ok_or("no venv bin directory")?.to_path_buf();
    let dir = tempfile::Builder::new()
        .prefix("mur-bench-tools-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let home = dir.path().join("home");
    let capsule = dir.path().join("counter");
    std::fs::create_dir_all(&home)
        .and_then(|()| std::fs::create_dir_all(&capsule))
        .map_err(|e| e.to_string())?;
    std::fs::write(
        capsule.join("murmur.yaml"),
        "name: counter\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: http://127.0.0.1:9/v1\n  \
         model: test-model\n  api_key: ${MUR_BENCH_PROVIDER_KEY}\n",
    )
    .map_err(|e| e.to_string())?;
    run_ok(
        mur(&home, &capsule).args(["new", "--tool", "words", "--lang", "python"]),
        "mur new --tool words --lang python",
    )?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    collect(&capsule.join("tools/words"), &capsule.join("tools/words"), &mut files).map_err(|e| e.to_string())?;
    files.sort();
    let tag = {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(pin.as_bytes());
        for (path, bytes) in &files {
            h.update([0]);
            h.update(path.as_bytes());
            h.update([0]);
            h.update(bytes);
        }
        h.finalize()[..6].iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let cached = target_dir()
        .join("bench-tools")
        .join(format!("words-python-{tag}.wasm"));
    if cached.exists() {
        return Ok(cached);
    }
    let mut path = vec![bin];
    path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    let path = std::env::join_paths(path).map_err(|e| e.to_string())?;
    println!(
        "building the Python tool with {pin} (once; kept at {})",
        cached.display()
    );
    run_ok(
        mur(&home, &capsule).env("PATH", path).args(["build", "."]),
        "mur build .",
    )?;
    std::fs::create_dir_all(cached.parent().ok_or("no parent")?).map_err(|e| e.to_string())?;
    let staging = cached.with_extension("tmp");
    std::fs::copy(capsule.join("tools/words/tool.wasm"), &staging)
        .and_then(|_| std::fs::rename(&staging, &cached))
        .map_err(|e| format!("keep the built tool: {e}"))?;
    Ok(cached)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out)?;
        } else {
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            out.push((rel, std::fs::read(&p)?));
        }
    }
    Ok(())
}

/// A tool's row: criterion's measurement, then `calls` calls timed one by one.
fn wasm_row(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    engine: &CapsuleEngine,
    what: &str,
    bytes: &[u8],
    expect: &str,
    calls: usize,
) -> Result<Row, String> {
    let grant = ToolGrant::default();
    let cancel = CancelSignal::new();
    let started = Instant::now();
    let tool = rt.block_on(WasmTool::load_bytes(engine, bytes, "words", &grant))?;
    println!(
        "{what}: {} bytes, compiled and described in {:.0} ms",
        bytes.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let call = || rt.block_on(tool.call(INPUT, &grant, &cancel));
    match call() {
        ToolRun::Result(r) if r == expect => {}
        other => return Err(format!("{what}: the call answered {other:?}, not {expect}")),
    }
    c.bench_function(&format!("wasm tool call: {what}"), |b| b.iter(call));
    for _ in 0..WARMUP {
        call();
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let run = call();
        samples.push(micros(started.elapsed()));
        if run != ToolRun::Result(expect.to_string()) {
            return Err(format!("{what}: a call answered {run:?}"));
        }
    }
    Ok(Row {
        what: format!("wasm: {what}"),
        samples,
    })
}

/// What each of mur's calls pays before its request goes out, `n` times: a fresh connection (one
/// response per connection on plain http) whose server's owner is read from `/proc/net/tcp`.
/// Timed on a connection of its own to the server, opened for these checks.
fn owner_checks(port: u16, n: usize) -> Result<Vec<f64>, String> {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        mur::outbound::owner::verify_stream(&stream).map_err(|e| format!("the owner check: {e}"))?;
        samples.push(micros(started.elapsed()));
    }
    Ok(samples)
}

/// Sockets listed in `/proc/net/tcp` now (TIME_WAIT ones included).
fn tcp_rows() -> usize {
    std::fs::read_to_string("/proc/net/tcp").map_or(0, |t| t.lines().count().saturating_sub(1))
}

/// One SDK client round: `calls` timed calls after a warm-up, in a process of its own, speaking
/// `protocol`.
fn sdk_round(python: &Path, url: &str, calls: usize, protocol: &str) -> Result<Vec<f64>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = dir.path().join("samples");
    let out = Command::new(python)
        .arg(repo_root().join("benches/support/mcp_sdk_client.py"))
        .arg(url)
        .arg(calls.to_string())
        .arg(WARMUP.to_string())
        .arg(&file)
        // Not the repository: nothing there may shadow the SDK's modules.
        .current_dir(dir.path())
        .env("MCP_BENCH_KEY", KEY)
        .env("MCP_BENCH_PROTOCOL", protocol)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run the SDK client: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the SDK client failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    println!(
        "  SDK client round: {} ({} rows of /proc/net/tcp after it)",
        String::from_utf8_lossy(&out.stdout).trim(),
        tcp_rows()
    );
    let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    text.lines()
        .map(|l| l.parse::<f64>().map_err(|e| format!("sample {l:?}: {e}")))
        .collect()
}

/// mur's and the SDK client's rows against one SDK server answering in `mode`, and the owner
/// check that each of mur's calls makes.
fn mcp_rows(
    c: &mut Criterion,
    mode: &str,
    sdk_protocol: &str,
    calls: usize,
    rounds: usize,
) -> Result<(Row, Row, Row), String> {
    let json_flag = match mode {
        "sse" => "0",
        "json" => "1",
        _ => return Err("MUR_BENCH_MCP_MODES takes sse and json".to_string()),
    };
    let sdk = std::panic::catch_unwind(|| mcp::SdkServer::start(KEY, &[("MCP_TEST_JSON", json_flag)]))
        .map_err(|p| format!("the MCP SDK server cannot start: {}", panic_text(p)))?;
    let python = std::panic::catch_unwind(|| python::python_with(mcp::MCP_SDK, "mcp.client.streamable_http, httpx2"))
        .map_err(|p| format!("the MCP SDK cannot be provisioned: {}", panic_text(p)))?;
    let sys = actix_rt::System::new();
    let endpoint = McpEndpoint {
        name: "calc".to_string(),
        url: sdk.url(),
        bearer: Some(mur::secret::Secret::new(KEY.to_string())),
        allow: vec!["add".to_string()],
    };
    let server = sys
        .block_on(McpServer::connect(endpoint, McpLimits::default()))
        .map_err(|e| format!("{e}\n{}", sdk.stderr()))?;
    // The official server lists 2026-07-28 in `server/discover`, so mur speaks it: stateless
    // requests, the version in each one's `_meta`.
    let ours_protocol = server.protocol_version();
    if ours_protocol != "2026-07-28" {
        return Err(format!("mur settled on MCP {ours_protocol}, not 2026-07-28"));
    }
    println!("mcp ({mode}): mur speaks MCP {ours_protocol}, the SDK client {sdk_protocol}");
    let timeout = Duration::from_secs(10);
    let call = || {
        sys.block_on(server.call("add", json!({"a": 2, "b": 3}), timeout))
            .map_err(|e| format!("mur's call: {e}"))
    };
    let check = |r: Result<mur::tools::mcp::CallResult, String>| -> Result<(), String> {
        let r = r?;
        if r.is_error || r.text != "5" {
            return Err(format!("add(2, 3) answered {r:?}"));
        }
        Ok(())
    };
    check(call())?;
    let label = if mode == "json" {
        "JSON answers"
    } else {
        "event-stream answers"
    };
    c.bench_function(
        &format!("mcp {ours_protocol} tools/call add, {label}: mur McpServer::call"),
        |b| b.iter(call),
    );
    let per_round = calls.div_ceil(rounds.max(1));
    let (mut ours, mut theirs, mut owner) = (Vec::new(), Vec::new(), Vec::new());
    // mur's p50 minus the SDK client's, round by round: the two series of a round run back to
    // back, so the machine's load drifts less between them than across the whole run.
    let mut differences: Vec<f64> = Vec::new();
    for round in 0..rounds.max(1) {
        let (mut our_p50, mut their_p50) = (f64::NAN, f64::NAN);
        // Alternating which client goes first, so neither always follows the other.
        for first in [round % 2 == 0, round % 2 == 1] {
            if first {
                for i in 0..WARMUP {
                    check(call()).map_err(|e| format!("{e} (warm-up call {i})\n{}", sdk.stderr()))?;
                }
                let mut round = Vec::with_capacity(per_round);
                for i in 0..per_round {
                    let started = Instant::now();
                    let r = call();
                    round.push(micros(started.elapsed()));
                    check(r).map_err(|e| format!("{e} (timed call {i})\n{}", sdk.stderr()))?;
                }
                round.sort_by(f64::total_cmp);
                let mut checks = owner_checks(sdk.port(), per_round.div_ceil(5))?;
                checks.sort_by(f64::total_cmp);
                println!(
                    "  mur round: calls={} p50_us={:.0} p99_us={:.0}; then the owner check alone: p50_us={:.0} \
                     over {} rows of /proc/net/tcp",
                    round.len(),
                    percentile(&round, 50),
                    percentile(&round, 99),
                    percentile(&checks, 50),
                    tcp_rows()
                );
                our_p50 = percentile(&round, 50);
                ours.extend(round);
                owner.extend(checks);
            } else {
                let mut round = sdk_round(&python, &sdk.url(), per_round, sdk_protocol)?;
                round.sort_by(f64::total_cmp);
                their_p50 = percentile(&round, 50);
                theirs.extend(round);
            }
        }
        differences.push(our_p50 - their_p50);
    }
    println!(
        "  mur − SDK client, p50 round by round: {} µs; median {:.0} µs",
        differences
            .iter()
            .map(|d| format!("{d:+.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        support::median(differences.clone())
    );
    sys.block_on(server.close());
    Ok((
        Row {
            what: format!("mcp, {label}: mur `McpServer::call` ({ours_protocol})"),
            samples: ours,
        },
        Row {
            what: format!("mcp, {label}: the SDK's `call_tool` ({sdk_protocol})"),
            samples: theirs,
        },
        Row {
            what: "mcp: of mur's call, the loopback owner check (`outbound::owner::verify_stream`)".to_string(),
            samples: owner,
        },
    ))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let filter: Option<&String> = args.iter().find(|a| !a.starts_with('-'));
    let wants = |part: &str| filter.is_none_or(|f| part.contains(f.as_str()));
    let calls: usize = if bench { env_or("MUR_BENCH_CALLS", 2000) } else { 5 };
    let rounds: usize = if bench { env_or("MUR_BENCH_ROUNDS", 3) } else { 1 };
    // Without `--bench`, criterion runs each function once.
    let mut c = Criterion::default().configure_from_args();
    println!(
        "tools: {calls} calls per row, binary {}, {} rows in /proc/net/tcp, load: {}",
        mur_binary().display(),
        tcp_rows(),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    let mut rows: Vec<Row> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();

    if wants("wasm") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let engine = CapsuleEngine::new().expect("the WebAssembly engine");
        let what = "words, Rust (mur new --tool, as mur build makes it)";
        match wasm_row(&mut c, &rt, &engine, what, WORDS_RUST, "9", calls) {
            Ok(row) => rows.push(row),
            Err(e) => panic!("{e}"),
        }
        // It counts the spaces and adds one.
        let what = "words, WAT (hand-written, the floor)";
        match wasm_row(&mut c, &rt, &engine, what, WORDS_WAT, "10", calls) {
            Ok(row) => rows.push(row),
            Err(e) => panic!("{e}"),
        }
        let what = "words, Python (componentize-py)";
        let built = python_tool().and_then(|path| {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            wasm_row(&mut c, &rt, &engine, what, &bytes, "9", calls)
        });
        match built {
            Ok(row) => rows.push(row),
            Err(why) => skipped.push(format!("wasm: {what}: {why}")),
        }
    }

    if wants("mcp") {
        let modes = std::env::var("MUR_BENCH_MCP_MODES").unwrap_or_else(|_| "sse".into());
        let sdk_protocol = std::env::var("MUR_BENCH_MCP_SDK_PROTOCOL").unwrap_or_else(|_| "2026-07-28".into());
        for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            match std::panic::catch_unwind(AssertUnwindSafe(|| {
                mcp_rows(&mut c, mode, &sdk_protocol, calls, rounds)
            })) {
                Ok(Ok((ours, theirs, owner))) => {
                    println!(
                        "mcp ({mode}): mur p50 {:.0} µs, the SDK client's {:.0} µs: mur adds {:.0} µs",
                        ours.p50(),
                        theirs.p50(),
                        ours.p50() - theirs.p50()
                    );
                    rows.extend([ours, theirs, owner]);
                }
                Ok(Err(why)) => skipped.push(format!("mcp ({mode}): {why}")),
                Err(p) => skipped.push(format!("mcp ({mode}): {}", panic_text(p))),
            }
        }
    }

    println!();
    println!("| call | calls | p50 µs | p99 µs | min µs | mean µs |");
    println!("|---|---:|---:|---:|---:|---:|");
    for row in &rows {
        row.print();
    }
    for s in &skipped {
        println!("skipped: {s}");
    }
    c.final_summary();
}
