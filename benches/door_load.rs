//! Door end to end over loopback (issue 7, item 2): the same JSON-RPC `GetTask` against a public
//! door and an authenticating one, under `wrk`, at several concurrency levels.
//!
//! Two real doors run in this process (library `Door::start`, one actix worker each, as a member
//! runs them), each holding one completed task. `wrk` drives them over 127.0.0.1 with:
//! - `public`        — the public door, no `Authorization`;
//! - `formation`     — the authenticating door, a valid `mft1` (remembered after first sight);
//! - `operator`      — the authenticating door, its `mdt1` operator token (HMAC, remembered);
//! - `card`          — the authenticating door's public agent card (`GET
//!   /.well-known/agent-card.json`, no `Authorization`), signed once when the door started;
//! - `forged-each`   — a different forged `mft1` on every request (signed by another key), so
//!   each costs one Ed25519 verification and ends 401 `invalid_token`;
//! - `forged-same`   — one forged `mft1` over and over (its refusal is remembered);
//! - `no-token`      — no `Authorization` at all (401 `unauthenticated`);
//! - `floor`         — not a door: a bare actix-web server (one worker) answering every POST with
//!   the public door's `GetTask` reply, pre-rendered. It is what this machine, loopback and
//!   actix-web allow at all, so the doors' figures can be read against it;
//! - `floor-hyper`   — the same bytes from a bare hyper 1 server (HTTP/1.1, one current-thread
//!   runtime that accepts and serves on the same thread): the second floor, without actix.
//!
//! Each variant runs in each mode of `MUR_BENCH_MODES` (default `keep-alive`): `keep-alive`
//! reuses each of wrk's connections; `close` sends `Connection: close`, so every request opens,
//! and the server closes, a connection of its own (what curl in a script and one-shot clients do).
//!
//! Per run: requests/s, latency p50/p99 (wrk's), and door CPU per request (the sum of this
//! process's thread CPU times from `/proc/self/task/*/schedstat`, divided by requests). On
//! 2 cores the doors are pinned to CPU 0 and wrk to CPU 1 (`taskset`), so the door has one core
//! to itself, as it would in a formation, and the load generator does not steal it. Within each
//! repetition the variants take turns (in reverse order every other repetition), and the
//! auth/public ratios are taken between runs made back to back, so drifts in the machine's
//! background load fall on both sides of a ratio.
//!
//! Knobs (environment): `MUR_BENCH_SECS` (per run, default 5), `MUR_BENCH_REPS` (default 3),
//! `MUR_BENCH_CONNS` (default `1,4,16,64`), `MUR_BENCH_PIN=0` to skip pinning,
//! `MUR_BENCH_VARIANTS` (names, comma-separated, in the order they take turns), `MUR_BENCH_MODES`
//! (`keep-alive`, `close` or both, comma-separated), `MUR_BENCH_WARMUP` (seconds of warm-up per
//! variant, default 1; 0 for none, as instruction counts taken by difference want). A bare argument
//! keeps only the variants whose name contains it. Needs `wrk` (Debian package `wrk`).
//!
//! Tokens are written only into a 0600 Lua script in a private temp directory: never argv,
//! environment or stdout.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, mpsc};
use std::time::Duration;

mod support;
use support::{env_or, median};

use anyhow::{Context as _, Result, anyhow, bail};
use mur::door::{CARD_PATH, Door, DoorConfig, FormationTrust};
use mur::manifest::Acceptance;
use mur::tasks::{Board, TaskOutcome};
use mur::token::SigningKey;
use serde_json::{Value, json};

const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const SES: &str = "ses_0199c4e2f1b7712a9d3e4f5061728394";

/// One door running on its own thread and actix system.
struct RunningDoor {
    addr: String,
    operator: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RunningDoor {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config(formation: Option<FormationTrust>) -> DoorConfig {
    DoorConfig {
        capsule_name: "local/coder".into(),
        capsule_version: "1.0.0".into(),
        description: "bench door".into(),
        session_id: SES.into(),
        authenticate: formation.is_some(),
        peer_tasks_accept: true,
        acceptance: Acceptance::Queue,
        queue_depth: 10,
        formation,
        network_allow: vec![],
        tools: vec![],
        skills: vec![],
        input_modes: vec![],
        socket: None,
    }
}

/// Completes every task at once with `echo: <text>`.
async fn execute(board: Arc<Board>) {
    while let Some(w) = board.next_work().await {
        board.finish(&w.task_id, TaskOutcome::Completed(format!("echo: {}", w.text)));
    }
}

fn start_door(cfg: DoorConfig) -> Result<RunningDoor> {
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let door = match Door::start(cfg, "127.0.0.1") {
                Ok(d) => d,
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("{}", e.render("door"))));
                    return;
                }
            };
            let _ = tx.send(Ok((
                format!("127.0.0.1:{}", door.port()),
                door.operator_token().map(|t| t.reveal().to_string()),
            )));
            actix_rt::spawn(execute(Arc::clone(door.board())));
            let _ = stop_rx.await;
            door.board().close();
            door.stop().await;
        });
    });
    let (addr, operator) = rx.recv().context("door thread")??;
    Ok(RunningDoor {
        addr,
        operator,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// The `floor` variant's server: the same HTTP stack as a door (actix-web, one worker), no
/// JSON-RPC, no board, no auth; every request gets `body`.
fn start_floor(body: String) -> Result<RunningDoor> {
    use actix_web::{App, HttpResponse, HttpServer, web};
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let body = web::Bytes::from(body);
            let server = HttpServer::new(move || {
                let body = body.clone();
                // Reading the request body matters: actix closes a connection whose body was
                // left unread, and the floor must keep connections alive as the doors do.
                App::new().default_service(web::to(move |_request: web::Bytes| {
                    let body = body.clone();
                    async move { HttpResponse::Ok().content_type("application/json").body(body) }
                }))
            })
            .workers(1)
            // As a door: Nagle off.
            .tcp_nodelay(true)
            .disable_signals()
            .bind(("127.0.0.1", 0));
            let server = match server {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("floor server: {e}")));
                    return;
                }
            };
            let port = server.addrs().first().map_or(0, |a| a.port());
            let server = server.run();
            let handle = server.handle();
            actix_rt::spawn(server);
            let _ = tx.send(Ok(format!("127.0.0.1:{port}")));
            let _ = stop_rx.await;
            handle.stop(false).await;
        });
    });
    let addr = rx.recv().context("floor thread")??;
    Ok(RunningDoor {
        addr,
        operator: None,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// hyper's I/O traits over a tokio socket: what `hyper_util::rt::TokioIo` does, without the crate.
struct Io(tokio::net::TcpStream);

impl hyper::rt::Read for Io {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        // SAFETY: tokio's ReadBuf only writes initialised bytes into the unfilled part and reports
        // how many; exactly those are marked filled.
        let n = unsafe {
            let mut tbuf = tokio::io::ReadBuf::uninit(buf.as_mut());
            match tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut self.0), cx, &mut tbuf) {
                Poll::Ready(Ok(())) => tbuf.filled().len(),
                other => return other,
            }
        };
        // SAFETY: the first `n` bytes were just initialised by the read.
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut self.0), cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut self.0), cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut self.0), cx)
    }

    fn is_write_vectored(&self) -> bool {
        tokio::io::AsyncWrite::is_write_vectored(&self.0)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        tokio::io::AsyncWrite::poll_write_vectored(std::pin::Pin::new(&mut self.0), cx, bufs)
    }
}

/// The `floor-hyper` variant's server: hyper 1's HTTP/1.1 server on one current-thread runtime
/// (accepting and serving on one thread, Nagle off as in a door); every request gets `body`.
fn start_floor_hyper(body: String) -> Result<RunningDoor> {
    use http_body_util::{BodyExt as _, Full};
    use hyper::body::Incoming;
    let (tx, rx) = mpsc::channel();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(anyhow!("hyper floor runtime: {e}")));
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("hyper floor: {e}")));
                    return;
                }
            };
            let port = listener.local_addr().map_or(0, |a| a.port());
            let _ = tx.send(Ok(format!("127.0.0.1:{port}")));
            let body = actix_web::web::Bytes::from(body);
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut stop_rx => break,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                };
                let _ = stream.set_nodelay(true);
                let body = body.clone();
                tokio::task::spawn_local(async move {
                    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let body = body.clone();
                        async move {
                            // Read the request body, as the doors do, so keep-alive holds.
                            request.into_body().collect().await?;
                            let mut reply = hyper::Response::new(Full::new(body));
                            reply.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, hyper::Error>(reply)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(Io(stream), service)
                        .await;
                });
            }
        });
    });
    let addr = rx.recv().context("hyper floor thread")??;
    Ok(RunningDoor {
        addr,
        operator: None,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// The body a door answers to `GetTask` for `task_id`.
fn get_task_reply(addr: &str, task_id: &str) -> Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}});
    Ok(ureq::post(&format!("http://{addr}/"))
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0")
        .send_string(&body.to_string())?
        .into_string()?)
}

/// SendMessage (blocking until the executor completes it); returns the task id.
fn create_task(addr: &str, auth: Option<&str>) -> Result<String> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                   "parts": [{"text": "hello", "mediaType": "text/plain"}]}},
    });
    let mut r = ureq::post(&format!("http://{addr}/"))
        .set("content-type", "application/json")
        .set("A2A-Version", "1.0");
    if let Some(a) = auth {
        r = r.set("authorization", &format!("Bearer {a}"));
    }
    let reply: Value = serde_json::from_str(&r.send_string(&body.to_string())?.into_string()?)?;
    let task = &reply["result"]["task"];
    if task["status"]["state"] != "TASK_STATE_COMPLETED" {
        bail!("the bench task did not complete: {reply}");
    }
    task["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no task id in {reply}"))
}

/// What one variant sends.
enum Auth {
    None,
    Bearer(String),
    /// A file of tokens, one per line, one per request in turn.
    EachFrom(PathBuf),
}

struct Variant {
    name: &'static str,
    addr: String,
    task_id: String,
    auth: Auth,
    /// The HTTP status every reply must have.
    status: u16,
    /// `GET /.well-known/agent-card.json` instead of `GetTask`.
    card: bool,
}

fn lua_str(s: &str) -> String {
    // Tokens, ids and paths here are ASCII without quotes or backslashes; `%q`-style escaping
    // keeps the script valid whatever they hold.
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The wrk script: a fixed request (or one token per request), and a `done` that prints one
/// machine-readable line.
fn script(v: &Variant, close: bool) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": v.task_id}});
    let mut s = if v.card {
        format!("wrk.method = \"GET\"\nwrk.path = {}\n", lua_str(CARD_PATH))
    } else {
        format!(
            "wrk.method = \"POST\"\nwrk.body = {}\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
             wrk.headers[\"A2A-Version\"] = \"1.0\"\n",
            lua_str(&body.to_string())
        )
    };
    if close {
        s.push_str("wrk.headers[\"Connection\"] = \"close\"\n");
    }
    match &v.auth {
        Auth::None => {}
        Auth::Bearer(t) => s.push_str(&format!(
            "wrk.headers[\"Authorization\"] = {}\n",
            lua_str(&format!("Bearer {t}"))
        )),
        Auth::EachFrom(path) => s.push_str(&format!(
            "local tokens = {{}}\nfor line in io.lines({}) do tokens[#tokens + 1] = \"Bearer \" .. line end\n\
             local i = 0\nrequest = function()\n  i = i % #tokens + 1\n  \
             wrk.headers[\"Authorization\"] = tokens[i]\n  return wrk.format()\nend\n",
            lua_str(&path.to_string_lossy())
        )),
    }
    s.push_str(
        "done = function(summary, latency, requests)\n  io.write(string.format(\
         \"WRKRESULT %d %d %d %d %d %d %d %d %d\\n\", summary.requests, summary.duration, \
         summary.errors.status, summary.errors.connect + summary.errors.read + \
         summary.errors.write + summary.errors.timeout, latency:percentile(50), \
         latency:percentile(90), latency:percentile(99), latency.max, latency.mean))\nend\n",
    );
    s
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// This process's CPU time so far, in ns (all threads alive now; the doors' live for the run).
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One wrk run.
#[derive(Debug, Clone, Copy)]
struct Run {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_req: f64,
}

fn wrk(pin: bool, script: &Path, addr: &str, conns: u32, secs: u64, status: u16) -> Result<Run> {
    let mut cmd = if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "1", "wrk"]);
        c
    } else {
        Command::new("wrk")
    };
    cmd.args(["-t", "1", "-c", &conns.to_string(), "-d", &format!("{secs}s")])
        .args(["--timeout", "10s", "-s"])
        .arg(script)
        .arg(format!("http://{addr}/"));
    let before = cpu_ns();
    let out = cmd.output().context("running wrk (apt-get install wrk)")?;
    let cpu = cpu_ns().saturating_sub(before);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("WRKRESULT "))
        .ok_or_else(|| anyhow!("wrk printed no result: {text}{}", String::from_utf8_lossy(&out.stderr)))?;
    let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    let [
        requests,
        duration_us,
        non2xx,
        socket_errors,
        p50,
        _p90,
        p99,
        _max,
        _mean,
    ] = f[..]
    else {
        bail!("unexpected wrk result line: {line}");
    };
    // A public or genuine request answered other than 200, or a forged one other than 401,
    // means the bench measured the wrong thing.
    let want_non2xx = if status == 200 { 0.0 } else { requests };
    if non2xx != want_non2xx || socket_errors > 0.0 {
        bail!("wrk saw {non2xx} non-2xx of {requests} (want {want_non2xx}) and {socket_errors} socket errors");
    }
    Ok(Run {
        rps: requests / (duration_us / 1e6),
        p50_us: p50,
        p99_us: p99,
        cpu_us_per_req: cpu as f64 / 1e3 / requests.max(1.0),
    })
}

/// (median, min, max).
fn spread(v: Vec<f64>) -> (f64, f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(v), lo, hi)
}

fn main() -> Result<()> {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let secs: u64 = env_or("MUR_BENCH_SECS", 5);
    let reps: usize = env_or("MUR_BENCH_REPS", 3);
    let warmup: u64 = env_or("MUR_BENCH_WARMUP", 1);
    let conns: Vec<u32> = std::env::var("MUR_BENCH_CONNS")
        .unwrap_or_else(|_| "1,4,16,64".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let pin = std::env::var("MUR_BENCH_PIN").map_or(true, |v| v != "0");
    if Command::new("wrk").arg("--version").output().is_err() {
        bail!("door_load needs wrk on PATH (Debian: apt-get install wrk)");
    }

    let key = SigningKey::generate()?;
    let public = start_door(config(None))?;
    let authed = start_door(config(Some(FormationTrust {
        formation_id: FRM.into(),
        member: "coder".into(),
        verify_key: key.verify_key(),
        grant_key: None,
    })))?;
    let token = key.mint(FRM, "planner", "coder");
    let operator = authed
        .operator
        .clone()
        .ok_or_else(|| anyhow!("the authenticating door has no operator token"))?;
    let public_task = create_task(&public.addr, None)?;
    let member_task = create_task(&authed.addr, Some(&token))?;
    let reply = get_task_reply(&public.addr, &public_task)?;
    let floor = start_floor(reply.clone())?;
    let floor_hyper = start_floor_hyper(reply)?;

    let dir = tempfile::Builder::new().prefix("mur-door-load-").tempdir()?;
    // Distinct forgeries, cycled: the door remembers at most 256 refused tokens (a FIFO ring), so
    // each one is evicted long before it comes round again and every request costs a verify.
    let forger = SigningKey::generate()?;
    let forged_path = dir.path().join("forged.txt");
    let forged_one = forger.mint(FRM, "planner", "coder");

    if pin {
        // Doors (and everything this process starts later) on CPU 0; wrk goes on CPU 1.
        let ok = Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("door_load: taskset failed; running unpinned");
        }
    }

    let variants = [
        Variant {
            name: "floor",
            addr: floor.addr.clone(),
            task_id: public_task.clone(),
            auth: Auth::None,
            status: 200,
            card: false,
        },
        Variant {
            name: "floor-hyper",
            addr: floor_hyper.addr.clone(),
            task_id: public_task.clone(),
            auth: Auth::None,
            status: 200,
            card: false,
        },
        Variant {
            name: "public",
            addr: public.addr.clone(),
            task_id: public_task,
            auth: Auth::None,
            status: 200,
            card: false,
        },
        Variant {
            name: "formation",
            addr: authed.addr.clone(),
            task_id: member_task.clone(),
            auth: Auth::Bearer(token),
            status: 200,
            card: false,
        },
        Variant {
            name: "operator",
            addr: authed.addr.clone(),
            task_id: member_task.clone(),
            auth: Auth::Bearer(operator),
            status: 200,
            card: false,
        },
        Variant {
            name: "card",
            addr: authed.addr.clone(),
            task_id: String::new(),
            auth: Auth::None,
            status: 200,
            card: true,
        },
        Variant {
            name: "forged-each",
            addr: authed.addr.clone(),
            task_id: member_task.clone(),
            auth: Auth::EachFrom(forged_path.clone()),
            status: 401,
            card: false,
        },
        Variant {
            name: "forged-same",
            addr: authed.addr.clone(),
            task_id: member_task.clone(),
            auth: Auth::Bearer(forged_one),
            status: 401,
            card: false,
        },
        Variant {
            name: "no-token",
            addr: authed.addr.clone(),
            task_id: member_task,
            auth: Auth::None,
            status: 401,
            card: false,
        },
    ];

    let me = std::process::id().to_string();
    println!(
        "door_load: {secs}s per run, {reps} runs, wrk -t1, pinned: {pin}, load: {}",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    let chosen: Vec<&Variant> = match std::env::var("MUR_BENCH_VARIANTS") {
        // Exactly these, in this order (the order the variants take turns in).
        Ok(list) => list
            .split(',')
            .filter_map(|name| variants.iter().find(|v| v.name == name.trim()))
            .collect(),
        Err(_) => variants
            .iter()
            .filter(|v| filter.as_deref().is_none_or(|f| v.name.contains(f)))
            .collect(),
    };
    let modes: Vec<bool> = std::env::var("MUR_BENCH_MODES")
        .unwrap_or_else(|_| "keep-alive".into())
        .split(',')
        .filter_map(|m| match m.trim() {
            "keep-alive" => Some(false),
            "close" => Some(true),
            _ => None,
        })
        .collect();
    // One cell per variant and mode; the cells take turns as the variants did.
    let cells: Vec<(&Variant, bool)> = modes
        .iter()
        .flat_map(|&close| chosen.iter().map(move |v| (*v, close)))
        .collect();
    let label = |(v, close): (&Variant, bool)| {
        if close {
            format!("{} close", v.name)
        } else {
            v.name.to_string()
        }
    };
    if chosen.iter().any(|v| matches!(v.auth, Auth::EachFrom(_))) {
        let n_forged = 20_000;
        let forged: String = (0..n_forged)
            .map(|i| forger.mint(FRM, &format!("p{i}"), "coder") + "\n")
            .collect();
        write_private(&forged_path, &forged)?;
    }
    let mut scripts = Vec::new();
    for (i, &(v, close)) in cells.iter().enumerate() {
        let path = dir.path().join(format!("{i}-{}.lua", v.name));
        write_private(&path, &script(v, close))?;
        // Warm-up: first sight of the token, connection setup, allocator pools.
        if warmup > 0 {
            wrk(pin, &path, &v.addr, 16, warmup, v.status)?;
        }
        scripts.push(path);
    }
    let rss_start = rss_kib(&me);
    let mut rss_peak = rss_start;
    // runs[conns index][cell index]: the cells take turns within each repetition, so a change in
    // the machine's background load falls on all of them alike.
    let mut runs: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); cells.len()]; conns.len()];
    for (ci, &c) in conns.iter().enumerate() {
        for rep in 0..reps {
            // Forward on even repetitions, backward on odd ones (A B, B A, …): whichever variant
            // goes second in a pair does not always pay for what the first left behind.
            let mut order: Vec<usize> = (0..cells.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for vi in order {
                let (v, _) = cells[vi];
                let run = wrk(pin, &scripts[vi], &v.addr, c, secs, v.status)
                    .with_context(|| format!("{} at {c} connections", label(cells[vi])))?;
                runs[ci][vi].push(run);
                rss_peak = rss_peak.max(rss_kib(&me));
            }
        }
    }

    println!("| variant | conns | req/s median | req/s min–max | p50 µs | p99 µs | door CPU µs/req |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (vi, &cell) in cells.iter().enumerate() {
        for (ci, &c) in conns.iter().enumerate() {
            let r = &runs[ci][vi];
            let (m, lo, hi) = spread(r.iter().map(|x| x.rps).collect());
            println!(
                "| {} | {c} | {m:.0} | {lo:.0}–{hi:.0} | {:.0} | {:.0} | {:.1} |",
                label(cell),
                median(r.iter().map(|x| x.p50_us).collect()),
                median(r.iter().map(|x| x.p99_us).collect()),
                median(r.iter().map(|x| x.cpu_us_per_req).collect()),
            );
        }
    }
    // The remembered-token table is bounded: floods of forgeries must not grow memory.
    println!("\nprocess RSS: {rss_start} KiB after warm-up, peak {rss_peak} KiB over every run");

    let index = |name: &str, close: bool| cells.iter().position(|(v, c)| v.name == name && *c == close);
    if let (Some(p), Some(f)) = (index("public", false), index("formation", false)) {
        println!();
        println!("| conns | formation / public | operator / public | formation vs Murmur 0.8 |");
        println!("|---:|---:|---:|---:|");
        // Ratios of runs made back to back, then their median and range.
        let ratio = |ci: usize, vi: usize| {
            let (m, lo, hi) = spread(
                runs[ci][vi]
                    .iter()
                    .zip(&runs[ci][p])
                    .map(|(a, b)| 100.0 * a.rps / b.rps)
                    .collect(),
            );
            format!("{m:.1} % ({lo:.0}–{hi:.0})")
        };
        for (ci, &c) in conns.iter().enumerate() {
            let op = index("operator", false).map_or("—".into(), |o| ratio(ci, o));
            let fm = median(runs[ci][f].iter().map(|x| x.rps).collect());
            let reference = match c {
                1 => format!("{:.1}× (4.0 k)", fm / 4000.0),
                16 => format!("{:.1}× (5.7 k)", fm / 5700.0),
                _ => "—".into(),
            };
            println!("| {c} | {} | {op} | {reference} |", ratio(ci, f));
        }
    }
    // With `Connection: close`: each door against the better of the two floors, run by run (the
    // floors ran in the same repetition), and the formation door against the reference's close
    // figures on this machine.
    let floors: Vec<usize> = ["floor", "floor-hyper"].iter().filter_map(|n| index(n, true)).collect();
    if !floors.is_empty() {
        println!();
        println!("| conns | door (close) | / better floor, per repetition | vs Murmur 0.8 (close) |");
        println!("|---:|---|---:|---:|");
        for (ci, &c) in conns.iter().enumerate() {
            for name in ["public", "formation"] {
                let Some(d) = index(name, true) else { continue };
                let (m, lo, hi) = spread(
                    (0..reps)
                        .map(|rep| {
                            let best = floors.iter().map(|&fl| runs[ci][fl][rep].rps).fold(0.0, f64::max);
                            100.0 * runs[ci][d][rep].rps / best
                        })
                        .collect(),
                );
                let dm = median(runs[ci][d].iter().map(|x| x.rps).collect());
                let reference = match c {
                    1 => format!("{:.2}× (6.9 k)", dm / 6900.0),
                    16 => format!("{:.2}× (20.8 k)", dm / 20800.0),
                    _ => "—".into(),
                };
                println!("| {c} | {name} | {m:.1} % ({lo:.0}–{hi:.0}) | {reference} |");
            }
        }
    }
    drop((public, authed, floor, floor_hyper));
    // Give the doors' shutdown a moment to finish before the temp directory goes.
    std::thread::sleep(Duration::from_millis(50));
    Ok(())
}
