//! The nemesis (docs/reliability.md#nemesis-runs): formations of component and model capsules
//! serve tasks while faults chosen by a seeded generator are injected, and invariants are checked
//! after every fault and at the end. Shared by the CI form (`tests/it/nemesis.rs`) and the long
//! form (`benches/nemesis.rs`).
//!
//! Everything is real: the `mur` binary, its processes, signals, sockets on 127.0.0.1, the
//! scripted provider on loopback, `prlimit`, and a tmpfs in a private mount namespace for the
//! full disk. A broken invariant panics with the seed (replay with `MUR_NEMESIS_SEED`) and the
//! last faults injected.

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::provider::{Piece, Provider, Reply, Request, Step, fenced_answers, openai};
use super::{Launcher, Sandbox, formation_pids, wait_until};

/// The provider key the model member is handed; it must appear nowhere but in the environments
/// that are meant to hold it.
pub const KEY_VAR: &str = "MUR_NEMESIS_KEY";
pub const KEY: &str = "sk-nemesis-5c1f0e9a77d3";
/// The key of the MCP server the model member's `calc` tool reaches: the same rules.
pub const MCP_KEY_VAR: &str = "MUR_NEMESIS_MCP_KEY";
pub const MCP_KEY: &str = "mcp-nemesis-81b2c4d6e0";

/// Sessions and formations the entry manifests keep (`trace.retain.max_sessions`).
pub const MAX_SESSIONS: usize = 3;

/// The page's bound for a formation's processes after its launcher is gone.
pub const GONE_BOUND: Duration = Duration::from_secs(30);

/// Short bounds so retries and door bounds happen in test time (values are clamped to the
/// spec's, never lengthened). The wind-down's own bounds keep the spec's teardown (20 s) and a
/// launcher grace well above a wind-down's waits (answer linger, door grace, cancels), so a
/// member that winds down slowly under load is never cut short and taken for one that hung.
const TIMING: &str = "launcher_grace=10s,answer_poll=100ms,door_head=2s,door_write_stall=2s,\
inference_retry=50ms,inference_retry_after_cap=200ms,answer_linger=1s";

/// What the launcher prints when SIGTERM (or `mur stop`) ends a formation that runs.
const STOPPED: &str = "[mur run] SIGTERM: the formation was stopped; stopped: ";

/// How many faults the log keeps for a failure's message.
const LAST_FAULTS: usize = 8;

// ---------------------------------------------------------------------------------------------
// The generator.

/// splitmix64: tiny, and the same sequence on every machine for a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// `MUR_NEMESIS_SEED` (decimal or `0x…`), when set.
pub fn seed_from_env() -> Option<u64> {
    let v = std::env::var("MUR_NEMESIS_SEED").ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A seed nobody chose: the clock and the pid, mixed.
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64()
}

// ---------------------------------------------------------------------------------------------
// Faults.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    KillPeer,
    StopContPeer,
    KillEntry,
    KillLauncher,
    StopContLauncher,
    ProviderStall,
    ProviderReset,
    Provider500,
    Provider429,
    StopRacingLaunch,
    NofileLimit,
    DoorNotReading,
    FullDisk,
}

impl Fault {
    pub const ALL: [Fault; 13] = [
        Fault::KillPeer,
        Fault::StopContPeer,
        Fault::KillEntry,
        Fault::KillLauncher,
        Fault::StopContLauncher,
        Fault::ProviderStall,
        Fault::ProviderReset,
        Fault::Provider500,
        Fault::Provider429,
        Fault::StopRacingLaunch,
        Fault::NofileLimit,
        Fault::DoorNotReading,
        Fault::FullDisk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillPeer => "SIGKILL of a peer",
            Fault::StopContPeer => "SIGSTOP/SIGCONT of a peer",
            Fault::KillEntry => "SIGKILL of the entry",
            Fault::KillLauncher => "SIGKILL of the launcher",
            Fault::StopContLauncher => "SIGSTOP/SIGCONT of the launcher",
            Fault::ProviderStall => "provider stalls",
            Fault::ProviderReset => "provider cuts the connection",
            Fault::Provider500 => "provider answers 500",
            Fault::Provider429 => "provider answers 429 + retry-after",
            Fault::StopRacingLaunch => "mur stop racing a launch",
            Fault::NofileLimit => "exhausted open-file limit",
            Fault::DoorNotReading => "a client that stops reading",
            Fault::FullDisk => "full disk under the records",
        }
    }
}

/// What the provider does to its next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderMode {
    Stall,
    /// The connection reset before any reply (retried).
    Reset,
    /// A streamed reply cut after its head (never retried once begun: the task fails).
    CutStream,
    Error500,
    TooMany,
}

/// The provider's fault switch: the next `n` requests get `mode`.
#[derive(Debug, Default)]
pub struct ProviderFaults(Mutex<Option<(ProviderMode, u32)>>);

impl ProviderFaults {
    pub fn set(&self, mode: ProviderMode, n: u32) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((mode, n));
    }

    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn take(&self) -> Option<ProviderMode> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (mode, n) = (*g)?;
        *g = if n > 1 { Some((mode, n - 1)) } else { None };
        Some(mode)
    }
}

/// The planner: call `worker` with the task, wait, then answer with the fenced answers.
fn plan(req: &Request) -> Reply {
    let body = req.json();
    let last_is_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    if last_is_tool {
        return Reply::json(openai::text("Waiting for the worker."));
    }
    let text = req.last_user_text().unwrap_or_default();
    if text.contains("<untrusted-content source=member:") {
        let parts: Vec<String> = fenced_answers(&text)
            .into_iter()
            .map(|(m, o)| format!("{m} => {o}"))
            .collect();
        return Reply::json(openai::text(&format!("Plan done. {}", parts.join(" | "))));
    }
    Reply::json(openai::tool_calls(&[
        ("c1", "call-member", json!({"member": "worker", "task": text})),
        ("c2", "calc__echo", json!({"text": text})),
    ]))
}

fn scripted(faults: &ProviderFaults, req: &Request) -> Reply {
    match faults.take() {
        None => plan(req),
        Some(ProviderMode::Stall) => plan(req).delayed(Duration::from_millis(1500)),
        Some(ProviderMode::Reset) => Reply::reset(),
        Some(ProviderMode::CutStream) => Reply::pieces(vec![Piece::Drop]),
        Some(ProviderMode::Error500) => Reply::status(500, r#"{"error":{"message":"nemesis: internal error"}}"#),
        Some(ProviderMode::TooMany) => {
            Reply::status(429, r#"{"error":{"message":"nemesis: slow down"}}"#).header("retry-after", "1")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The world: one sandbox, the capsules, the provider, the projects.

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";

fn retain() -> String {
    format!("trace:\n  retain:\n    max_sessions: {MAX_SESSIONS}\n")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// relay (component) → echo (component).
    Component,
    /// planner (model, the scripted provider) → echo (component).
    Model,
}

pub struct World {
    pub sb: Sandbox,
    pub provider: Provider,
    pub faults: Arc<ProviderFaults>,
    /// The official MCP Python SDK's server, the model member's `calc` tool.
    pub mcp: super::mcp::SdkServer,
}

impl World {
    /// Installs the capsules and writes one project per use.
    pub fn new() -> World {
        // Its capsules are small (WAT and the model member), so it shares no compiled cache: the
        // file checks read every byte of HOME after each fault, and the run's shared Python and
        // JavaScript entries (hundreds of MB by then) would be read each time for nothing.
        let sb = Sandbox::unshared();
        let faults = Arc::new(ProviderFaults::default());
        // The script is a function of each request; it is long enough for any run's requests.
        let script: Vec<Step> = (0..200_000)
            .map(|_| {
                let f = Arc::clone(&faults);
                Step::func(move |req| scripted(&f, req))
            })
            .collect();
        let provider = Provider::start(script);
        let mcp = super::mcp::SdkServer::start(MCP_KEY, &[]);
        sb.install_actor("echo");
        sb.install_component(
            "relay",
            "src/capsule/testdata/relay.wat",
            &format!("{GRANT}{}", retain()),
        );
        let planner = format!(
            "name: planner\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  system_prompt: You plan.\n  max_turns: 5\n{GRANT}network:\n  authentication:\n    scheme: bearer\n{}\
             tools:\n  - name: calc\n    mcp: {}\n    api_key: ${{{MCP_KEY_VAR}}}\n    allow: [echo]\n",
            provider.url(),
            retain(),
            mcp.url()
        );
        sb.install_manifest("planner", &planner);
        for (project, lead) in [
            ("comp", "relay"),
            ("model", "planner"),
            ("race", "relay"),
            ("disk", "relay"),
        ] {
            let dir = sb.path(project);
            let roster = format!(
                "roster_version: 1\nmembers:\n  - {{name: lead, capsule: local/{lead}, version: 0.1.0, entry: true}}\n  \
                 - {{name: worker, capsule: local/echo, version: 0.1.0}}\nreachability:\n  - {{from: lead, to: [worker]}}\n"
            );
            std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
        }
        World {
            sb,
            provider,
            faults,
            mcp,
        }
    }

    fn project(&self, kind: Kind) -> PathBuf {
        self.sb.dir.path().join(match kind {
            Kind::Component => "comp",
            Kind::Model => "model",
        })
    }

    fn env(&self) -> Vec<(&'static str, &'static str)> {
        vec![(KEY_VAR, KEY), (MCP_KEY_VAR, MCP_KEY), ("MURMUR_TEST_TIMING", TIMING)]
    }
}

impl Default for World {
    fn default() -> World {
        World::new()
    }
}

// ---------------------------------------------------------------------------------------------
// A running formation.

#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub pid: u32,
    pub session: String,
    pub records_dir: PathBuf,
    pub url: String,
    pub token: String,
}

pub struct Live {
    pub kind: Kind,
    pub project: PathBuf,
    pub launcher: Launcher,
    pub frm: String,
    pub members: Vec<Member>,
    /// Sessions the nemesis itself killed: their traces may lack `session_end`.
    pub killed: Vec<String>,
    /// How long after the launcher's end each member's process was gone.
    pub gone: BTreeMap<u32, Duration>,
}

impl Live {
    pub fn member(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }
}

/// The live running record of `member` in formation `frm`, once it exists.
fn member_record(sb: &Sandbox, frm: &str, member: &str, limit: Duration) -> Option<Value> {
    let mut found = None;
    wait_until(limit, || {
        found = super::running_records(sb)
            .into_iter()
            .find(|r| r["formation_id"] == frm && r["formation_member"] == member);
        found.is_some()
    });
    found
}

fn to_member(name: &str, r: &Value) -> Member {
    Member {
        name: name.to_string(),
        pid: r["pid"].as_u64().unwrap_or(0) as u32,
        session: r["session_id"].as_str().unwrap_or_default().to_string(),
        records_dir: PathBuf::from(r["records_dir"].as_str().unwrap_or_default()),
        url: r["url"].as_str().unwrap_or_default().to_string(),
        token: r["door_token"].as_str().unwrap_or_default().to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Door calls that report instead of panicking: a fault may take the door away.

fn agent() -> ureq::Agent {
    // No pooled connections, so the descriptor counts of the door are its own.
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .max_idle_connections(0)
        .build()
}

pub fn rpc(m: &Member, method: &str, params: Value) -> Result<Value, String> {
    let body = json!({"id": 1, "jsonrpc": "2.0", "method": method, "params": params});
    let resp = agent()
        .post(&format!("http://{}/", m.url))
        .set("authorization", &format!("Bearer {}", m.token))
        .set("a2a-version", "1.0")
        .set("content-type", "application/json")
        .send_string(&body.to_string())
        .map_err(|e| format!("{method} at {}'s door: {e}", m.name))?;
    let text = resp
        .into_string()
        .map_err(|e| format!("{method}: reading the reply: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{method}: the reply is not JSON ({e}): {text}"))
}

fn send(m: &Member, text: &str) -> Result<String, String> {
    let reply = rpc(
        m,
        "SendMessage",
        json!({"configuration": {"returnImmediately": true}, "message": {"messageId": format!("msg-{}", text.chars().take(40).collect::<String>()), "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}}),
    )?;
    reply["result"]["task"]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("SendMessage gave no task: {reply}"))
}

const TERMINAL: [&str; 4] = [
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
];

fn terminal(m: &Member, id: &str, limit: Duration) -> Result<Value, String> {
    let mut task = Value::Null;
    let mut last_err = String::new();
    wait_until(limit, || match rpc(m, "GetTask", json!({"id": id})) {
        Ok(v) => {
            task = v["result"].clone();
            TERMINAL.contains(&task["status"]["state"].as_str().unwrap_or(""))
        }
        Err(e) => {
            last_err = e;
            false
        }
    })
    .map(|_| task.clone())
    .ok_or_else(|| format!("task {id} did not end within {limit:?}: {task} {last_err}"))
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("")
}

fn status_text(task: &Value) -> String {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every text part of a task's artifacts, joined.
fn answer_text(task: &Value) -> String {
    let mut out = String::new();
    for a in task["artifacts"].as_array().into_iter().flatten() {
        for p in a["parts"].as_array().into_iter().flatten() {
            out.push_str(p["text"].as_str().unwrap_or_default());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Process inspection.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fds {
    pub total: usize,
    pub pipes: usize,
}

pub fn fds(pid: u32) -> Option<Fds> {
    let mut total = 0;
    let mut pipes = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        total += 1;
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("pipe:")) {
            pipes += 1;
        }
    }
    Some(Fds { total, pipes })
}

fn fd_listing(pid: u32) -> String {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.display().to_string())
        .collect();
    v.sort();
    v.join(", ")
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 1..].trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

fn signal(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// Processes (not zombies) whose environment holds `HOME=<home>`, but `except`.
pub fn processes_of_home(home: &Path, except: &[u32]) -> Vec<u32> {
    let home_kv = format!("HOME={}", home.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == home_kv.as_bytes()) && alive(pid) && !except.contains(&pid) {
            out.push(pid);
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Where a secret shows in `bytes`, if anywhere: token text or the provider key.
fn secret_in(bytes: &[u8], key_allowed: bool) -> Option<&'static str> {
    if contains(bytes, b"mft1.") {
        Some("an mft1 token")
    } else if contains(bytes, b"mdt1.") {
        Some("an mdt1 token")
    } else if !key_allowed && contains(bytes, KEY.as_bytes()) {
        Some("the provider key")
    } else if !key_allowed && contains(bytes, MCP_KEY.as_bytes()) {
        Some("the MCP server's key")
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// The figures a run reports.

#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub faults: BTreeMap<&'static str, u64>,
    pub skipped: BTreeMap<&'static str, u64>,
    pub checks: u64,
    pub tasks_sent: u64,
    pub tasks_completed: u64,
    pub formations: u64,
    /// Longest time from a launcher's end to its formation's last process gone.
    pub max_gone: Duration,
}

impl Figures {
    pub fn faults_total(&self) -> u64 {
        self.faults.values().sum()
    }

    pub fn report(&self) -> String {
        let mut s = String::new();
        for (k, n) in &self.faults {
            s.push_str(&format!("  {k}: {n}\n"));
        }
        for (k, n) in &self.skipped {
            s.push_str(&format!("  {k}: {n} skipped\n"));
        }
        s.push_str(&format!(
            "  faults {}, invariant checks {}, tasks sent {} (completed {}), formations {}, longest launcher-gone-to-last-process {:?}\n",
            self.faults_total(),
            self.checks,
            self.tasks_sent,
            self.tasks_completed,
            self.formations,
            self.max_gone
        ));
        s
    }
}

// ---------------------------------------------------------------------------------------------
// The nemesis.

pub struct Nemesis<'w> {
    pub world: &'w World,
    pub seed: u64,
    rng: Rng,
    deck: Vec<Fault>,
    log: VecDeque<String>,
    pub figures: Figures,
    live: Vec<Live>,
    task_no: u64,
    round: u64,
    /// The kinds the deck holds (all when `None`).
    only: Option<Vec<Fault>>,
}

type Check = Result<(), String>;

impl<'w> Nemesis<'w> {
    pub fn new(world: &'w World, seed: u64) -> Nemesis<'w> {
        eprintln!("nemesis: seed {seed:#x} (replay: MUR_NEMESIS_SEED={seed:#x})");
        Nemesis {
            world,
            seed,
            rng: Rng::new(seed),
            deck: Vec::new(),
            log: VecDeque::new(),
            figures: Figures::default(),
            live: Vec::new(),
            task_no: 0,
            round: 0,
            only: None,
        }
    }

    /// Injects only these kinds (a focused test, or a replay).
    pub fn only(mut self, kinds: &[Fault]) -> Nemesis<'w> {
        self.only = Some(kinds.to_vec());
        self
    }

    /// The next fault: every kind once per shuffled deck, so a run of `Fault::ALL.len()` rounds
    /// injects each kind exactly once, in the seed's order.
    pub fn next_fault(&mut self) -> Fault {
        if self.deck.is_empty() {
            self.deck = self.only.clone().unwrap_or_else(|| Fault::ALL.to_vec());
            // `MUR_NEMESIS_ONLY=FullDisk,KillPeer` narrows a replay to some kinds.
            if let Ok(only) = std::env::var("MUR_NEMESIS_ONLY") {
                self.deck
                    .retain(|f| only.split(',').any(|o| o.trim() == format!("{f:?}")));
            }
            self.rng.shuffle(&mut self.deck);
        }
        self.deck.pop().unwrap_or(Fault::KillPeer)
    }

    fn note(&mut self, what: String) {
        eprintln!("nemesis[{:#x}] round {}: {what}", self.seed, self.round);
        self.log.push_back(format!("round {}: {what}", self.round));
        while self.log.len() > LAST_FAULTS {
            self.log.pop_front();
        }
    }

    fn fail(&self, why: &str) -> ! {
        let faults: Vec<&str> = self.log.iter().map(String::as_str).collect();
        panic!(
            "nemesis: invariant broken with seed {:#x} (replay: MUR_NEMESIS_SEED={:#x}):\n{why}\nlast faults injected:\n  {}",
            self.seed,
            self.seed,
            faults.join("\n  ")
        );
    }

    fn check(&mut self, r: Check) {
        self.figures.checks += 1;
        if let Err(e) = r {
            self.fail(&e);
        }
    }

    /// One round: a fault, its checks.
    pub fn round(&mut self) {
        self.round += 1;
        let fault = self.next_fault();
        *self.figures.faults.entry(fault.name()).or_default() += 1;
        self.note(format!("inject {}", fault.name()));
        let r = self.inject(fault);
        self.check(r);
    }

    /// Runs `rounds` rounds, then ends what still runs and checks the end.
    pub fn run(&mut self, rounds: usize) -> Figures {
        for _ in 0..rounds {
            self.round();
        }
        self.finish()
    }

    /// Runs rounds until `limit` has passed.
    pub fn run_for(&mut self, limit: Duration) -> Figures {
        let start = Instant::now();
        while start.elapsed() < limit {
            self.round();
        }
        self.finish()
    }

    pub fn finish(&mut self) -> Figures {
        while let Some(live) = self.live.pop() {
            let r = self.end_by_stop(live);
            self.check(r);
        }
        let r = self.final_checks();
        self.check(r);
        // The model member's tool calls reached the MCP server.
        self.figures.checks += 1;
        let calls = self.world.mcp.log().iter().filter(|l| *l == "call echo").count();
        if calls == 0 && self.world.provider.wait_requests(1, Duration::ZERO) {
            self.fail("the MCP server never saw a call of calc__echo");
        }
        eprintln!("nemesis[{:#x}] figures:\n{}", self.seed, self.figures.report());
        self.figures.clone()
    }

    // -- formations ------------------------------------------------------------------------

    fn take_live(&mut self, kind: Kind) -> Result<Live, String> {
        if let Some(i) = self.live.iter().position(|l| l.kind == kind) {
            return Ok(self.live.remove(i));
        }
        self.launch(kind, &self.world.project(kind))
    }

    fn launch(&mut self, kind: Kind, project: &Path) -> Result<Live, String> {
        let env = self.world.env();
        let launcher = Launcher::start(&self.world.sb, project, &[], &env);
        self.adopt(kind, project, launcher)
    }

    /// Waits for a started launcher's formation line and its members' records.
    fn adopt(&mut self, kind: Kind, project: &Path, launcher: Launcher) -> Result<Live, String> {
        let ok = wait_until(Duration::from_secs(60), || {
            launcher.stderr().contains("  entry  ") || launcher.stderr().contains("error[")
        });
        let err = launcher.stderr();
        let frm = err
            .lines()
            .find_map(|l| l.strip_prefix("formation: "))
            .map(|s| s.trim().to_string())
            .filter(|_| ok.is_some() && err.contains("  entry  "))
            .ok_or_else(|| format!("the formation did not come up; stderr:\n{err}"))?;
        let mut members = Vec::new();
        for name in ["lead", "worker"] {
            let r = member_record(&self.world.sb, &frm, name, Duration::from_secs(30))
                .ok_or_else(|| format!("{frm}: no running record for {name}"))?;
            members.push(to_member(name, &r));
        }
        self.figures.formations += 1;
        let live = Live {
            kind,
            project: project.to_path_buf(),
            launcher,
            frm,
            members,
            killed: Vec::new(),
            gone: BTreeMap::new(),
        };
        self.secrets_while_running(&live)?;
        Ok(live)
    }

    /// Sends a task and waits for its end; a completed task must carry its answer and have it
    /// recorded in the entry's records.
    /// A task refused as busy (the queue is full of others' tasks) is sent again, as a client
    /// would, a few times.
    fn task(&mut self, live: &Live) -> Result<Value, String> {
        let mut tries = 0;
        loop {
            let id = self.send_task(live)?;
            let task = self.settle(live, &id.0, &id.1, Duration::from_secs(30))?;
            tries += 1;
            if state(&task) != "TASK_STATE_REJECTED" || !status_text(&task).contains("busy") || tries == 50 {
                return Ok(task);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send_task(&mut self, live: &Live) -> Result<(String, String), String> {
        self.task_no += 1;
        let text = format!("t{}-{:x}", self.task_no, self.seed & 0xffff);
        self.figures.tasks_sent += 1;
        let id = send(live.member("lead"), &text)?;
        Ok((id, text))
    }

    fn settle(&mut self, live: &Live, id: &str, text: &str, limit: Duration) -> Result<Value, String> {
        let lead = live.member("lead");
        let task = terminal(lead, id, limit)?;
        if state(&task) == "TASK_STATE_COMPLETED" {
            self.figures.tasks_completed += 1;
            self.answer_recorded(lead, id, text, &task)?;
        }
        Ok(task)
    }

    fn answer_recorded(&mut self, lead: &Member, id: &str, text: &str, task: &Value) -> Check {
        self.figures.checks += 1;
        let answer = answer_text(task);
        let _ = text;
        let file = lead.records_dir.join("out").join(format!("result_{id}.txt"));
        let recorded = std::fs::read_to_string(&file).map_err(|e| {
            format!(
                "task {id} was reported completed but its answer is not recorded ({}: {e})",
                file.display()
            )
        })?;
        if answer.is_empty() || !recorded.contains(&answer) {
            return Err(format!(
                "task {id}: {} holds {recorded:?}, not the answer {answer:?}",
                file.display()
            ));
        }
        Ok(())
    }

    fn expect_completed(&mut self, live: &Live, what: &str) -> Check {
        let task = self.task(live)?;
        if state(&task) != "TASK_STATE_COMPLETED" {
            return Err(format!("{what}: a task did not complete: {task}"));
        }
        // A healthy formation answers with the worker's answer to the task's text.
        let text = task["history"][0]["parts"][0]["text"].as_str().unwrap_or_default();
        if text.is_empty() || !answer_text(&task).contains(text) {
            return Err(format!("{what}: the answer is not the worker's: {task}"));
        }
        Ok(())
    }

    // -- invariants -----------------------------------------------------------------------

    /// Descriptor counts of the launcher and every member not killed.
    fn baseline(&self, live: &Live) -> Vec<(String, u32, Fds)> {
        let mut out = Vec::new();
        if let Some(f) = fds(live.launcher.pid()) {
            out.push(("launcher".to_string(), live.launcher.pid(), f));
        }
        for m in &live.members {
            if let Some(f) = fds(m.pid) {
                out.push((m.name.clone(), m.pid, f));
            }
        }
        out
    }

    /// No survivor holds more descriptors than before the fault once things settled (a few more
    /// for connections still closing), nor more pipes.
    fn no_fd_leak(&mut self, before: &[(String, u32, Fds)], what: &str) -> Check {
        const SLACK: usize = 6;
        for (name, pid, base) in before {
            self.figures.checks += 1;
            if !alive(*pid) {
                continue;
            }
            let mut now = None;
            let settled = wait_until(Duration::from_secs(6), || {
                now = fds(*pid);
                now.is_none_or(|n| n.total <= base.total + SLACK && n.pipes <= base.pipes)
            });
            if settled.is_none() {
                return Err(format!(
                    "{what}: {name} (pid {pid}) holds {:?} descriptors, {:?} before the fault: {}",
                    now,
                    base,
                    fd_listing(*pid)
                ));
            }
        }
        Ok(())
    }

    /// No token in any formation process's argv or environment; the key only in the
    /// environment of the launcher (the operator's shell put it there) and of the model member
    /// whose manifest names it, never in an argv.
    fn secrets_while_running(&self, live: &Live) -> Check {
        let mut pids = formation_pids(&live.frm);
        pids.push(live.launcher.pid());
        for pid in pids {
            let model_member = live.kind == Kind::Model && pid == live.member("lead").pid;
            let key_ok = model_member || pid == live.launcher.pid();
            if let Ok(argv) = std::fs::read(format!("/proc/{pid}/cmdline"))
                && let Some(what) = secret_in(&argv, false)
            {
                return Err(format!("{}: {what} in the argv of pid {pid}", live.frm));
            }
            if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
                && let Some(what) = secret_in(&env, key_ok)
            {
                return Err(format!("{}: {what} in the environment of pid {pid}", live.frm));
            }
        }
        Ok(())
    }

    /// Every regular file under HOME (the running records too when `running` is false, i.e.
    /// nothing runs) holds no token and no key, nor does what the launcher printed.
    fn no_secret_in_files(&mut self, skip_running: bool) -> Check {
        self.figures.checks += 1;
        let home = self.world.sb.home();
        let mut stack = vec![home.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    if !(skip_running && p == home.join(".murmur/running")) {
                        stack.push(p);
                    }
                } else if ft.is_file() {
                    let Ok(bytes) = std::fs::read(&p) else { continue };
                    if let Some(what) = secret_in(&bytes, false) {
                        return Err(format!("{what} in {}", p.display()));
                    }
                }
            }
        }
        Ok(())
    }

    /// No temporary file is left under `~/.murmur` (a `*.tmp` of an atomic write).
    fn no_tmp_files(&mut self) -> Check {
        self.figures.checks += 1;
        let mut stack = vec![self.world.sb.home().join(".murmur")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(p);
                } else if name.ends_with(".tmp") || name.contains(".tmp.") {
                    return Err(format!("a temporary file was left: {}", p.display()));
                }
            }
        }
        Ok(())
    }

    /// Every trace of the formation's sessions is JSON lines, whole lines only, and ends with
    /// `session_end` unless the nemesis killed that session. A record is one `write` of a whole
    /// line, and a signal lands between system calls, so even a killed writer leaves whole
    /// lines: a cut line is a failure in every case.
    fn traces_valid(&mut self, live: &Live) -> Check {
        for m in &live.members {
            self.figures.checks += 1;
            let path = m.records_dir.join("trace.jsonl");
            trace_valid(&path, live.killed.contains(&m.session)).map_err(|e| {
                let log = std::fs::read_to_string(m.records_dir.join("logs/bootstrap.log")).unwrap_or_default();
                let events: Vec<String> = std::fs::read_to_string(&path)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .map(|r| format!("{} {}", r["event_type"].as_str().unwrap_or("?"), r["timestamp"]))
                    .collect();
                format!(
                    "{} {} ({}): {e}\nits records: {events:?}\nits logs/bootstrap.log:\n{log}\nits process was gone {:?} after the launcher's end\nthe launcher's stderr:\n{}",
                    live.frm,
                    m.name,
                    m.session,
                    live.gone.get(&m.pid),
                    live.launcher.stderr()
                )
            })?;
        }
        Ok(())
    }

    /// The entry's `trace.retain.max_sessions` bounds the project's formation directories once
    /// a launcher ended on its own (a killed launcher runs no pass; the next one catches up).
    fn retention_bounds(&mut self, project: &Path) -> Check {
        self.figures.checks += 1;
        let canonical = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
        let mut ours = Vec::new();
        for e in std::fs::read_dir(self.world.sb.home().join(".murmur/formations"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let marker = e.path().join("formation.json");
            let Ok(text) = std::fs::read_to_string(&marker) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if v["project_dir"].as_str().map(PathBuf::from) == Some(canonical.clone()) {
                ours.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        if ours.len() > MAX_SESSIONS {
            return Err(format!(
                "{} formation directories of {} are kept, past max_sessions {MAX_SESSIONS}: {ours:?}",
                ours.len(),
                project.display()
            ));
        }
        // The entry's session pass: its capsule's sessions in the project's records group.
        let group = self
            .world
            .sb
            .home()
            .join(".murmur/records")
            .join(canonical.strip_prefix("/").unwrap_or(&canonical));
        let first = |dir: &Path| -> Value {
            std::fs::read_to_string(dir.join("trace.jsonl"))
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| serde_json::from_str(l).ok()))
                .unwrap_or(Value::Null)
        };
        let sessions: Vec<Value> = std::fs::read_dir(&group)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| first(&e.path()))
            .collect();
        let entry_capsule = sessions
            .iter()
            .filter(|r| r["formation_member"] == "lead")
            .find_map(|r| r["capsule_name"].as_str().map(str::to_string));
        if let Some(capsule) = entry_capsule {
            self.figures.checks += 1;
            let kept = sessions
                .iter()
                .filter(|r| r["capsule_name"] == capsule.as_str())
                .count();
            if kept > MAX_SESSIONS {
                return Err(format!(
                    "{kept} sessions of {capsule} are kept in {}, past max_sessions {MAX_SESSIONS}",
                    group.display()
                ));
            }
        }
        Ok(())
    }

    /// After the launcher exited: no process of the formation within the page's 30 s, measured.
    fn processes_gone(&mut self, live: &mut Live, since: Instant) -> Check {
        self.figures.checks += 1;
        let pids: Vec<u32> = live.members.iter().map(|m| m.pid).collect();
        let mut times = BTreeMap::new();
        let gone = wait_until(GONE_BOUND, || {
            for pid in &pids {
                if !alive(*pid) {
                    times.entry(*pid).or_insert_with(|| since.elapsed());
                }
            }
            formation_pids(&live.frm).is_empty()
        });
        live.gone = times;
        let took = since.elapsed();
        match gone {
            Some(_) => {
                self.figures.max_gone = self.figures.max_gone.max(took);
                Ok(())
            }
            None => Err(format!(
                "{}: processes still running {GONE_BOUND:?} after the launcher was gone: {:?}",
                live.frm,
                formation_pids(&live.frm)
            )),
        }
    }

    /// Once the formation is gone: no running record of it is left (after `mur ps` pruned the
    /// records of processes the nemesis killed, which cannot remove their own).
    fn no_running_record(&mut self, live: &Live) -> Check {
        self.figures.checks += 1;
        if !live.killed.is_empty() {
            let _ = self.world.sb.run(&live.project, &["ps"]);
        }
        let left: Vec<Value> = super::running_records(&self.world.sb)
            .into_iter()
            .filter(|r| r["formation_id"] == live.frm.as_str())
            .collect();
        if !left.is_empty() {
            return Err(format!("{}: running records left: {left:?}", live.frm));
        }
        Ok(())
    }

    fn no_panic(&mut self, live: &Live) -> Check {
        self.figures.checks += 1;
        let err = live.launcher.stderr();
        let out = live.launcher.stdout();
        if err.contains("panicked") || out.contains("panicked") {
            return Err(format!("{}: a panic was printed:\n{err}", live.frm));
        }
        for (what, text) in [("stdout", &out), ("stderr", &err)] {
            if let Some(s) = secret_in(text.as_bytes(), false) {
                return Err(format!("{}: {s} on the launcher's {what}", live.frm));
            }
        }
        Ok(())
    }

    /// Waits for the launcher's exit, checks its status, then the formation's end.
    /// `want_line`: one of these on the launcher's stderr (none when empty).
    fn ended(&mut self, mut live: Live, want_code: i32, want_line: &[&str], since: Instant) -> Check {
        use std::os::unix::process::ExitStatusExt;
        let frm = live.frm.clone();
        let start = Instant::now();
        let code = loop {
            if let Some(status) = live.launcher.child.try_wait().map_err(|e| e.to_string())? {
                live.launcher.drained(crate::support::DRAIN);
                break status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "{frm}: the launcher (pid {}) still runs 60 s on:\n{}",
                    live.launcher.pid(),
                    live.launcher.stderr()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = live.launcher.stderr();
        self.figures.checks += 1;
        if code != want_code {
            return Err(format!(
                "{frm}: the launcher exited {code}, the page says {want_code}; stderr:\n{err}"
            ));
        }
        if !want_line.is_empty() {
            self.figures.checks += 1;
            if !want_line.iter().any(|l| err.contains(l)) {
                return Err(format!(
                    "{frm}: the launcher reported none of {want_line:?}; stderr:\n{err}"
                ));
            }
        }
        self.processes_gone(&mut live, since)?;
        if live.members.is_empty() {
            // A launch stopped early: its sessions are found by their traces.
            live.members = sessions_of(&self.world.sb, &frm);
        }
        self.no_panic(&live)?;
        self.traces_valid(&live)?;
        self.no_running_record(&live)?;
        self.no_tmp_files()?;
        self.no_secret_in_files(!self.live.is_empty())?;
        if want_code != 137 {
            self.retention_bounds(&live.project)?;
        }
        Ok(())
    }

    /// Ends a serving formation by SIGTERM or `mur stop`, as the seed decides: exit 143 and the
    /// page's stop line either way.
    fn end_by_stop(&mut self, live: Live) -> Check {
        let since = Instant::now();
        if self.rng.chance(1, 2) {
            self.note(format!("end {} by mur stop", live.frm));
            let out = self.world.sb.run(&live.project, &["stop", &live.frm]);
            self.figures.checks += 1;
            if out.status.code() != Some(0) {
                return Err(format!(
                    "mur stop {}: exit {:?}: {}",
                    live.frm,
                    out.status.code(),
                    super::stderr(&out)
                ));
            }
        } else {
            self.note(format!("end {} by SIGTERM", live.frm));
            signal(live.launcher.pid(), Signal::SIGTERM);
        }
        self.ended(live, 143, &[STOPPED], since)
    }

    /// Keeps a serving formation for a later round, or ends it, as the seed decides.
    fn keep_or_end(&mut self, live: Live) -> Check {
        if self.rng.chance(1, 3) {
            self.end_by_stop(live)
        } else {
            self.live.push(live);
            Ok(())
        }
    }

    fn final_checks(&mut self) -> Check {
        self.no_tmp_files()?;
        self.no_secret_in_files(false)?;
        self.figures.checks += 1;
        let left = processes_of_home(&self.world.sb.home(), &[]);
        if !left.is_empty() {
            return Err(format!("processes of the sandbox still run at the end: {left:?}"));
        }
        Ok(())
    }

    // -- the faults -------------------------------------------------------------------------

    fn inject(&mut self, fault: Fault) -> Check {
        match fault {
            Fault::KillPeer => self.kill_peer(),
            Fault::StopContPeer => self.stop_cont(false),
            Fault::KillEntry => self.kill_entry(),
            Fault::KillLauncher => self.kill_launcher(),
            Fault::StopContLauncher => self.stop_cont(true),
            Fault::ProviderStall => self.provider(ProviderMode::Stall),
            Fault::ProviderReset => self.provider(ProviderMode::Reset),
            Fault::Provider500 => self.provider(ProviderMode::Error500),
            Fault::Provider429 => self.provider(ProviderMode::TooMany),
            Fault::StopRacingLaunch => self.stop_racing_launch(),
            Fault::NofileLimit => self.nofile_limit(),
            Fault::DoorNotReading => self.door_not_reading(),
            Fault::FullDisk => self.full_disk(),
        }
    }

    fn any_kind(&mut self) -> Kind {
        if self.rng.chance(1, 2) {
            Kind::Component
        } else {
            Kind::Model
        }
    }

    /// A formation of `kind` that has just completed a task.
    fn warmed(&mut self, kind: Kind) -> Result<Live, String> {
        let live = self.take_live(kind)?;
        self.expect_completed(&live, "before the fault")?;
        Ok(live)
    }

    fn kill_peer(&mut self) -> Check {
        let kind = self.any_kind();
        let mut live = self.warmed(kind)?;
        let before = self.baseline(&live);
        let worker = live.member("worker").clone();
        self.note(format!("{}: SIGKILL worker pid {}", live.frm, worker.pid));
        signal(worker.pid, Signal::SIGKILL);
        live.killed.push(worker.session.clone());
        // The page: the formation goes on, and the launcher withdraws the dead peer.
        let notice = format!(
            "[mur run] member 'worker' exited with status 137 while formation {} runs",
            live.frm
        );
        self.figures.checks += 1;
        wait_until(Duration::from_secs(30), || live.launcher.stderr().contains(&notice)).ok_or_else(|| {
            format!(
                "{}: no withdrawal notice; stderr:\n{}",
                live.frm,
                live.launcher.stderr()
            )
        })?;
        let task = self.task(&live)?;
        self.figures.checks += 1;
        match kind {
            Kind::Component
                if state(&task) != "TASK_STATE_FAILED" || !status_text(&task).contains("could not be reached") =>
            {
                return Err(format!("{}: a call to the dead peer: {task}", live.frm));
            }
            _ if !TERMINAL.contains(&state(&task)) => return Err(format!("{}: {task}", live.frm)),
            _ => {}
        }
        let before: Vec<_> = before.into_iter().filter(|(n, _, _)| n != "worker").collect();
        self.no_fd_leak(&before, "after a peer's SIGKILL")?;
        self.end_by_stop(live)
    }

    fn stop_cont(&mut self, launcher: bool) -> Check {
        let kind = self.any_kind();
        let live = self.warmed(kind)?;
        let before = self.baseline(&live);
        let (who, pid) = if launcher {
            ("launcher", live.launcher.pid())
        } else {
            ("worker", live.member("worker").pid)
        };
        let pause = Duration::from_millis(100 + self.rng.below(700));
        self.note(format!("{}: SIGSTOP {who} pid {pid} for {pause:?}", live.frm));
        signal(pid, Signal::SIGSTOP);
        let in_flight = self.send_task(&live);
        std::thread::sleep(pause);
        signal(pid, Signal::SIGCONT);
        let (id, text) = in_flight?;
        let task = self.settle(&live, &id, &text, Duration::from_secs(30))?;
        self.figures.checks += 1;
        if state(&task) != "TASK_STATE_COMPLETED" {
            return Err(format!("{}: a task sent while the {who} was stopped: {task}", live.frm));
        }
        self.expect_completed(&live, "after SIGCONT")?;
        self.no_fd_leak(&before, &format!("after SIGSTOP/SIGCONT of the {who}"))?;
        self.keep_or_end(live)
    }

    fn kill_entry(&mut self) -> Check {
        let kind = self.any_kind();
        let mut live = self.warmed(kind)?;
        let lead = live.member("lead").clone();
        self.note(format!("{}: SIGKILL lead pid {}", live.frm, lead.pid));
        signal(lead.pid, Signal::SIGKILL);
        live.killed.push(lead.session.clone());
        // The page: the entry's end ends the formation, and its exit status is the formation's.
        self.ended(live, 137, &[], Instant::now())
    }

    fn kill_launcher(&mut self) -> Check {
        let kind = self.any_kind();
        let live = self.warmed(kind)?;
        // A task in flight when the launcher dies: it ends canceled with the formation.
        let _ = self.send_task(&live);
        self.note(format!("{}: SIGKILL launcher pid {}", live.frm, live.launcher.pid()));
        live.launcher.signal(Signal::SIGKILL);
        let since = Instant::now();
        // The processes-gone bound is measured from the kill.
        self.ended(live, 137, &[], since)
    }

    fn provider(&mut self, mode: ProviderMode) -> Check {
        let live = self.warmed(Kind::Model)?;
        let before = self.baseline(&live);
        // Within the client's retries (1 + 4 attempts), or past them.
        let mut mode = mode;
        if mode == ProviderMode::Reset && self.rng.chance(1, 3) {
            mode = ProviderMode::CutStream;
        }
        let n = match mode {
            ProviderMode::Stall | ProviderMode::CutStream => 1 + self.rng.below(2) as u32,
            _ => [1, 2, 7][self.rng.below(3) as usize],
        };
        self.note(format!("{}: provider {mode:?} for the next {n} request(s)", live.frm));
        self.world.faults.set(mode, n);
        let task = self.task(&live);
        self.world.faults.clear();
        let task = task?;
        self.figures.checks += 1;
        // A stream that broke off is not retried (capsules.md): the turn fails, and says why.
        let completes = n <= 2 && mode != ProviderMode::CutStream;
        let why = status_text(&task);
        match (completes, state(&task)) {
            (true, "TASK_STATE_COMPLETED") => {}
            (false, "TASK_STATE_FAILED") if why.starts_with("inference failed") => {}
            _ => return Err(format!("{}: provider {mode:?} × {n}: {task}", live.frm)),
        }
        self.expect_completed(&live, "after the provider recovered")?;
        self.no_fd_leak(&before, &format!("after provider {mode:?}"))?;
        self.keep_or_end(live)
    }

    fn stop_racing_launch(&mut self) -> Check {
        let project = self.world.sb.dir.path().join("race");
        let env = self.world.env();
        let formations = self.world.sb.home().join(".murmur/formations");
        let known: Vec<std::ffi::OsString> = std::fs::read_dir(&formations)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        let launcher = Launcher::start(&self.world.sb, &project, &[], &env);
        let started = Instant::now();
        let pid = launcher.pid();
        // Either as soon as the formation's directory exists (before any member runs, `mur stop`
        // refuses with E-RUN-022: nothing of it runs yet, so it is asked again), or once its
        // first member's running record is there.
        let early = self.rng.chance(1, 2);
        let mut frm = None;
        wait_until(Duration::from_secs(60), || {
            frm = if early {
                std::fs::read_dir(&formations)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name())
                    .find(|n| !known.contains(n))
                    .map(|n| n.to_string_lossy().into_owned())
            } else {
                super::running_records(&self.world.sb).into_iter().find_map(|r| {
                    (r["formation_launcher"]["pid"].as_u64() == Some(u64::from(pid)))
                        .then(|| r["formation_id"].as_str().map(str::to_string))
                        .flatten()
                })
            };
            frm.is_some()
        });
        let frm = frm.ok_or_else(|| format!("the launch made no formation; stderr:\n{}", launcher.stderr()))?;
        let at = started.elapsed();
        let since = Instant::now();
        let mut refused = 0;
        loop {
            let out = self.world.sb.run(&project, &["stop", &frm]);
            self.figures.checks += 1;
            match out.status.code() {
                Some(0) => break,
                _ if super::stderr(&out).contains("error[E-RUN-022]: no member of formation")
                    && refused < 2000
                    && launcher.stderr().matches("error[").count() == 0 =>
                {
                    refused += 1;
                }
                code => {
                    return Err(format!(
                        "mur stop {frm} racing its launch: {code:?}: {}",
                        super::stderr(&out)
                    ));
                }
            }
        }
        self.note(format!(
            "{frm}: mur stop {at:?} after the launch ({}), refused {refused} time(s) before a member ran",
            if early {
                "at its directory"
            } else {
                "at its first record"
            }
        ));
        // The members are found by their traces once the launcher is gone.
        let members = Vec::new();
        self.figures.formations += 1;
        let live = Live {
            kind: Kind::Component,
            project,
            launcher,
            frm,
            members,
            killed: Vec::new(),
            gone: BTreeMap::new(),
        };
        // Before every member is ready the launch is interrupted instead (formation.md#launch-sequence).
        self.ended(
            live,
            143,
            &[
                STOPPED,
                "[mur run] the formation launch was interrupted by SIGTERM before every member was ready\n  stopped: ",
            ],
            since,
        )
    }

    fn nofile_limit(&mut self) -> Check {
        let kind = self.any_kind();
        let live = self.warmed(kind)?;
        let before = self.baseline(&live);
        let target = if self.rng.chance(1, 2) { "lead" } else { "worker" };
        let pid = live.member(target).pid;
        let open = fds(pid).map(|f| f.total).unwrap_or(0) as u64;
        let (soft, hard) = nofile(pid).ok_or_else(|| format!("no limits of pid {pid}"))?;
        let low = open + self.rng.below(3);
        self.note(format!(
            "{}: open-file limit of {target} pid {pid} to {low} ({open} open)",
            live.frm
        ));
        prlimit(pid, low, hard)?;
        // Under the limit, a task ends some way or its request is refused; nothing panics.
        let attempt = self.task(&live);
        let seen = match &attempt {
            Ok(t) => state(t).to_string(),
            Err(e) => text_head(e),
        };
        self.note(format!("{}: under the limit: {seen}", live.frm));
        prlimit(pid, soft, hard)?;
        self.figures.checks += 1;
        if !alive(pid) {
            return Err(format!("{}: {target} died of an exhausted open-file limit", live.frm));
        }
        self.expect_completed(&live, "after the open-file limit was restored")?;
        self.no_fd_leak(&before, "after an exhausted open-file limit")?;
        self.no_panic(&live)?;
        self.keep_or_end(live)
    }

    fn door_not_reading(&mut self) -> Check {
        let kind = self.any_kind();
        let live = self.warmed(kind)?;
        let lead = live.member("lead").clone();
        let before = self.baseline(&live);
        let n = 2 + self.rng.below(4) as usize;
        self.note(format!("{}: {n} clients stop reading at the lead's door", live.frm));
        let mut held = Vec::new();
        for i in 0..n {
            let mut s = TcpStream::connect(&lead.url).map_err(|e| format!("connect {}: {e}", lead.url))?;
            if i % 2 == 0 {
                // A head never finished.
                let _ = s.write_all(b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n");
            } else {
                // A whole streaming request whose reply is never read.
                let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendStreamingMessage",
                    "params": {"message": {"messageId": format!("stuck-{i}"), "role": "ROLE_USER", "parts": [{"text": format!("stuck {i}")}]}}})
                .to_string();
                let req = format!(
                    "POST / HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\na2a-version: 1.0\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    lead.token,
                    body.len()
                );
                let _ = s.write_all(req.as_bytes());
            }
            held.push(s);
        }
        // Others are served meanwhile.
        self.expect_completed(&live, "while clients stopped reading")?;
        // The door closes its side of each stuck connection within its bounds, though the
        // clients keep theirs open.
        self.no_fd_leak(&before, "with clients that stopped reading")?;
        let closed = held.iter_mut().map(closed_by_peer).filter(|c| *c).count();
        self.figures.checks += 1;
        if closed < n {
            return Err(format!(
                "{}: the door kept {} of {n} stuck connections",
                live.frm,
                n - closed
            ));
        }
        drop(held);
        self.keep_or_end(live)
    }

    fn full_disk(&mut self) -> Check {
        let name = Fault::FullDisk.name();
        match full_disk_round(self) {
            Ok(true) => Ok(()),
            Ok(false) => {
                // Fails the test unless the run skips what needs root on purpose.
                let why = Some("unshare could not make a private mount namespace".to_string());
                super::needs::skip_for_want_of("root", why);
                *self.figures.skipped.entry(name).or_default() += 1;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// The sessions whose running record or trace names `frm`, found in the records.
fn sessions_of(sb: &Sandbox, frm: &str) -> Vec<Member> {
    let mut out = Vec::new();
    let mut stack = vec![sb.home().join(".murmur/records")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.ends_with("trace.jsonl") {
                let first = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|t| t.lines().next().and_then(|l| serde_json::from_str::<Value>(l).ok()));
                if let Some(first) = first.filter(|f| f["formation_id"] == frm) {
                    out.push(Member {
                        name: first["formation_member"].as_str().unwrap_or("?").to_string(),
                        pid: 0,
                        session: first["session_id"].as_str().unwrap_or_default().to_string(),
                        records_dir: dir.clone(),
                        url: String::new(),
                        token: String::new(),
                    });
                }
            }
        }
    }
    out
}

/// A trace is whole JSON lines and ends in `session_end` unless `killed`.
pub fn trace_valid(path: &Path, killed: bool) -> Check {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if bytes.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    if bytes.last() != Some(&b'\n') {
        return Err(format!("{} ends in a cut line", path.display()));
    }
    let text = String::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8: {e}", path.display()))?;
    let mut last = Value::Null;
    for (i, line) in text.lines().enumerate() {
        last = serde_json::from_str(line)
            .map_err(|e| format!("{} line {}: {e}: {}", path.display(), i + 1, text_head(line)))?;
    }
    if !killed && last["event_type"] != "session_end" {
        return Err(format!("{} ends with {last}, not session_end", path.display()));
    }
    Ok(())
}

fn text_head(s: &str) -> String {
    s.chars().take(160).collect()
}

fn closed_by_peer(s: &mut TcpStream) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// `RLIMIT_NOFILE` of `pid`: (soft, hard).
fn nofile(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line.split_whitespace().filter_map(|w| w.parse::<u64>().ok());
    Some((nums.next()?, nums.next()?))
}

fn prlimit(pid: u32, soft: u64, hard: u64) -> Check {
    let out = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:{hard}"))
        .output()
        .map_err(|e| format!("prlimit: {e}"))?;
    if !out.status.success() && alive(pid) {
        return Err(format!("prlimit --pid={pid}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// The tmpfs the full-disk round mounts over `~/.murmur/records`: room for the sessions' starts,
/// not for one task's results.
const DISK_SIZE: &str = "160k";
/// What it is grown to once full: room for the tasks after it.
const DISK_GROWN: &str = "4m";
/// A task text that fills it: the relay and the echo each record it twice.
const DISK_TASK_BYTES: usize = 48 * 1024;

/// Runs `argv` inside the mount namespace `ns` holds (`nsenter`), as the test process sees it.
fn in_namespace(ns: &std::fs::File, argv: &[&str]) -> Result<std::process::Output, String> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/{}/fd/{}", std::process::id(), ns.as_raw_fd());
    std::process::Command::new("nsenter")
        .arg(format!("--mount={path}"))
        .arg("--")
        .args(argv)
        .output()
        .map_err(|e| format!("nsenter: {e}"))
}

/// The full-disk round: a formation launched in a private mount namespace whose
/// `~/.murmur/records` is a small tmpfs, tasks until it is full, space freed, then a stop.
/// `Ok(false)` when no private mount namespace can be made here.
fn full_disk_round(n: &mut Nemesis<'_>) -> Result<bool, String> {
    use std::os::unix::process::CommandExt;
    let sb = &n.world.sb;
    let project = sb.path("disk");
    let records = sb.home().join(".murmur/records");
    std::fs::create_dir_all(&records).map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new("unshare");
    cmd.current_dir(&project).env_clear();
    for var in ["PATH", "TMPDIR", "LLVM_PROFILE_FILE"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.env("HOME", sb.home())
        .envs(n.world.env())
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg("mount -t tmpfs -o size=\"$3\",mode=0700 nemesis \"$2\" || exit 97; exec \"$1\" run --roster")
        .arg("sh")
        .arg(super::mur_bin())
        .arg(&records)
        .arg(DISK_SIZE)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let mut launcher = Launcher::spawn(cmd);
    let up = wait_until(Duration::from_secs(60), || {
        launcher.stderr().contains("  entry  ") || launcher.child.try_wait().ok().flatten().is_some()
    });
    if up.is_none() || !launcher.stderr().contains("  entry  ") {
        let status = launcher.child.try_wait().ok().flatten();
        let err = launcher.stderr();
        if status.is_some_and(|s| s.code() == Some(97)) || err.contains("unshare failed") {
            return Ok(false);
        }
        return Err(format!(
            "the formation on a small disk did not come up ({status:?}):\n{err}"
        ));
    }
    let pid = launcher.pid();
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt")).map_err(|e| format!("the namespace: {e}"))?;
    let mut live = n.adopt(Kind::Component, &project, launcher)?;
    // The records are seen through each member's own root while it runs.
    for m in &mut live.members {
        m.records_dir = PathBuf::from(format!("/proc/{}/root{}", m.pid, m.records_dir.display()));
    }
    n.note(format!(
        "{}: records on a {DISK_SIZE} tmpfs; tasks of {DISK_TASK_BYTES} bytes",
        live.frm
    ));
    let lead = live.member("lead").clone();
    let mut full = false;
    for i in 0..6 {
        n.task_no += 1;
        n.figures.tasks_sent += 1;
        let text = format!("d{}-{i}-{}", n.task_no, "x".repeat(DISK_TASK_BYTES));
        let id = send(&lead, &text)?;
        let task = terminal(&lead, &id, Duration::from_secs(30))?;
        let err = live.launcher.stderr();
        if state(&task) == "TASK_STATE_COMPLETED" {
            n.figures.tasks_completed += 1;
            // Recorded, or its loss reported: a full disk cannot hold it.
            let file = lead.records_dir.join(format!("out/result_{id}.txt"));
            let recorded = std::fs::read_to_string(&file).is_ok_and(|t| t == answer_text(&task));
            n.figures.checks += 1;
            // The warning was written before the task could be seen completed; the test's reader
            // of the launcher's stderr may lag behind the pipe, so it gets a moment to catch up.
            let lost = format!("warning[W-RUN-009]: the result of task {id} cannot be written");
            if !recorded && wait_until(Duration::from_secs(5), || live.launcher.stderr().contains(&lost)).is_none() {
                return Err(format!(
                    "{}: task {id} completed, its answer is neither recorded nor reported lost:\n{err}",
                    live.frm
                ));
            }
        }
        if err.contains("No space left on device") {
            full = true;
            break;
        }
    }
    n.figures.checks += 1;
    if !full {
        return Err(format!(
            "{}: the small disk never filled:\n{}",
            live.frm,
            live.launcher.stderr()
        ));
    }
    // The operator frees space; the members go on recording. The worker's task store keeps
    // the tasks it took on the same disk (they are its to answer for), so deleting old results
    // is not room enough: the disk is grown as well.
    let _ = in_namespace(
        &ns,
        &[
            "find",
            &records.display().to_string(),
            "-name",
            "result*.txt",
            "-size",
            "+8k",
            "-delete",
        ],
    )?;
    let grown = in_namespace(
        &ns,
        &[
            "mount",
            "-o",
            &format!("remount,size={DISK_GROWN}"),
            &records.display().to_string(),
        ],
    )?;
    if !grown.status.success() {
        return Err(format!(
            "{}: the disk could not be grown: {}",
            live.frm,
            String::from_utf8_lossy(&grown.stderr)
        ));
    }
    n.expect_completed(&live, "once space was freed")?;
    n.note(format!("{}: space freed, end by SIGTERM", live.frm));
    signal(live.launcher.pid(), Signal::SIGTERM);
    let since = Instant::now();
    wait_until(Duration::from_secs(60), || {
        live.launcher.child.try_wait().ok().flatten().is_some()
    })
    .ok_or_else(|| format!("{}: the launcher did not end", live.frm))?;
    // Copy the records out of the namespace before it goes, and check the copy.
    let copy = sb.path(&format!("disk-records-{}", live.frm));
    let out = in_namespace(
        &ns,
        &[
            "cp",
            "-a",
            &format!("{}/.", records.display()),
            &copy.display().to_string(),
        ],
    )?;
    if !out.status.success() {
        return Err(format!(
            "copying the records out: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    drop(ns);
    for m in &mut live.members {
        let inside = PathBuf::from(format!("/proc/{}/root", m.pid));
        let path = Path::new("/").join(m.records_dir.strip_prefix(&inside).unwrap_or(&m.records_dir));
        if let Ok(rel) = path.strip_prefix(&records) {
            m.records_dir = copy.join(rel);
        }
    }
    n.figures.checks += 1;
    let err = live.launcher.stderr();
    let Some(reported) = err
        .lines()
        .find(|l| l.contains("warning[W-RUN-009]: ") && l.contains("cannot be written"))
    else {
        return Err(format!("{}: no member reported the full disk:\n{err}", live.frm));
    };
    n.note(format!("{}: reported: {}", live.frm, text_head(reported)));
    n.ended(live, 143, &[STOPPED], since)?;
    Ok(true)
}
