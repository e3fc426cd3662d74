//! Shared harness: a private HOME per test, the real `mur` binary, and helpers to build and
//! install the sample capsules under `actors/`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `mur` binary cargo built for these tests.
pub fn mur_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mur"))
}

/// The repository root (where `actors/` lives).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What a `mur` under test keeps from the test runner's environment: the search path (wrapper
/// scripts run `sh`, `sleep`), the temp directory the sandboxes live in, and a coverage run's
/// profile path.
const PASSED_FROM_SHELL: [&str; 3] = ["PATH", "TMPDIR", "LLVM_PROFILE_FILE"];

/// A temporary HOME and a project directory inside it, removed on drop.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    /// Whether its HOME's compiled-component cache takes part in the run's shared one
    /// ([`shared_compiled`]).
    shares_compiled: bool,
}

impl Sandbox {
    /// A sandbox whose compiled-component cache starts with what earlier sandboxes of this build
    /// compiled of the large (Python, JavaScript) components, and hands on what it compiles.
    pub fn new() -> Sandbox {
        let mut sb = Sandbox::unshared();
        if let Some(shared) = shared_compiled::dir() {
            sb.shares_compiled = shared_compiled::seed(&shared, &sb.home().join(".murmur/compiled")).is_ok();
        }
        sb
    }

    /// A sandbox whose HOME starts empty, for the tests of the cache itself and of what a first
    /// run leaves in HOME.
    pub fn unshared() -> Sandbox {
        warm::begin();
        Sandbox {
            dir: tempfile::Builder::new().prefix("mur-it-").tempdir().expect("tempdir"),
            shares_compiled: false,
        }
    }

    /// The HOME every `mur` process of this sandbox sees.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// A fresh directory under the sandbox (created).
    pub fn path(&self, rel: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(&p).expect("mkdir");
        p
    }

    /// A `mur` command with this sandbox's HOME, run in `cwd`, in an environment of its own: no
    /// MURMUR_*, RUST_LOG, OTEL_* or provider key of the shell running the tests reaches it, so
    /// a test sees the same runtime wherever it runs. Tests add what they mean to set.
    pub fn mur(&self, cwd: &Path) -> Command {
        std::fs::create_dir_all(self.home()).expect("home");
        let mut c = Command::new(mur_bin());
        c.current_dir(cwd).env_clear();
        for var in PASSED_FROM_SHELL {
            if let Some(v) = std::env::var_os(var) {
                c.env(var, v);
            }
        }
        c.env("HOME", self.home());
        c
    }

    /// Runs `mur args…` in `cwd` to completion.
    pub fn run(&self, cwd: &Path, args: &[&str]) -> Output {
        self.mur(cwd).args(args).output().expect("spawn mur")
    }

    /// Writes `text` to `rel` under the sandbox, creating parents.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

impl Sandbox {
    /// Copies `actors/<name>` into the sandbox, builds it with the real `mur build` and installs
    /// it into the global store of this sandbox's HOME. Returns the source copy's path.
    pub fn install_actor(&self, name: &str) -> PathBuf {
        let src = repo_root().join("actors").join(name);
        let dst = self.dir.path().join("src").join(name);
        copy_dir(&src, &dst);
        let out = self.run(self.dir.path(), &["build", dst.to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "mur build {name}: {}", stderr(&out));
        let built = stdout(&out);
        let zip = built
            .trim()
            .rsplit(": ")
            .next()
            .expect("Built line names the zip")
            .to_string();
        let out = self.run(self.dir.path(), &["install", "-g", &zip]);
        assert!(out.status.success(), "mur install {name}: {}", stderr(&out));
        dst
    }

    /// Writes a capsule source directory with only a manifest, builds and installs it globally.
    pub fn install_manifest(&self, dir_name: &str, manifest: &str) {
        let dir = self.dir.path().join("src").join(dir_name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("murmur.yaml"), manifest).expect("write manifest");
        let out = self.run(self.dir.path(), &["build", dir.to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "mur build {dir_name}: {}", stderr(&out));
        let zip = stdout(&out).trim().rsplit(": ").next().expect("zip").to_string();
        let out = self.run(self.dir.path(), &["install", "-g", &zip]);
        assert!(out.status.success(), "mur install {dir_name}: {}", stderr(&out));
    }
}

impl Sandbox {
    /// Builds a component capsule `name@0.1.0` from a WAT file of the repository (`wat`, relative
    /// to its root) with an authenticating door and the manifest lines `extra`, and installs it
    /// globally.
    pub fn install_component(&self, name: &str, wat: &str, extra: &str) {
        let zip = self.build_component(name, wat, extra);
        let out = self.run(
            zip.parent().expect("capsule dir"),
            &["install", "-g", zip.to_str().expect("utf-8 path")],
        );
        assert!(out.status.success(), "mur install {name}: {}", stderr(&out));
    }

    /// Builds the capsule [`Sandbox::install_component`] installs, in `src/<name>`, and returns
    /// its archive's path.
    pub fn build_component(&self, name: &str, wat: &str, extra: &str) -> PathBuf {
        let dir = self.path(&format!("src/{name}"));
        std::fs::copy(repo_root().join(wat), dir.join("capsule.wat")).expect("copy wat");
        let manifest = format!(
            "name: {name}\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  authentication:\n    scheme: bearer\n{extra}"
        );
        std::fs::write(dir.join("murmur.yaml"), manifest).expect("manifest");
        let out = self.run(&dir, &["build", "."]);
        assert!(out.status.success(), "mur build {name}: {}", stderr(&out));
        dir.join(format!("{name}-0.1.0.mur.zip"))
    }
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for entry in std::fs::read_dir(src).expect("read actor dir") {
        let entry = entry.expect("entry");
        let to = dst.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &to);
        } else if !entry.file_name().to_string_lossy().ends_with(".mur.zip") {
            std::fs::copy(entry.path(), &to).expect("copy");
        }
    }
}

/// Pids of every process whose environment places it in `formation_id`.
pub fn formation_pids(formation_id: &str) -> Vec<u32> {
    let needle = format!("MURMUR_FORMATION_ID={formation_id}");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) && !is_zombie(pid) {
            out.push(pid);
        }
    }
    out
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Waits until `cond` holds or `limit` passes; returns how long it took, or `None` on timeout.
pub fn wait_until(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> Option<std::time::Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond().then(|| start.elapsed())
}

/// A `mur run --roster` running in the background, in a process group of its own, with its
/// stdout and stderr collected line by line. Dropping it kills the launcher.
pub struct Launcher {
    pub child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<String>>,
    err: std::sync::Arc<std::sync::Mutex<String>>,
    readers: [std::thread::JoinHandle<()>; 2],
}

/// How long, once a process has exited, its output readers are given to reach the end of its
/// pipes: they end when every holder is gone, which a peer still winding down may be a moment.
pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

impl Launcher {
    /// Starts `mur run --roster args…` in `dir` with `env` added.
    pub fn start(sb: &Sandbox, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Launcher {
        use std::os::unix::process::CommandExt;
        let mut cmd = sb.mur(dir);
        cmd.arg("run")
            .arg("--roster")
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        Launcher::spawn(cmd)
    }

    /// Spawns a prepared command (stdout and stderr must be piped).
    pub fn spawn(mut cmd: Command) -> Launcher {
        let mut child = cmd.spawn().expect("spawn launcher");
        let out = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let readers = [
            collect_lines(child.stdout.take().expect("stdout piped"), out.clone()),
            collect_lines(child.stderr.take().expect("stderr piped"), err.clone()),
        ];
        Launcher {
            child,
            out,
            err,
            readers,
        }
    }

    /// Waits (at most `limit`) until the launcher's stdout and stderr are read to their end;
    /// whether they were.
    pub fn drained(&self, limit: std::time::Duration) -> bool {
        wait_until(limit, || self.readers.iter().all(std::thread::JoinHandle::is_finished)).is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn stderr(&self) -> String {
        self.err.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The formation id from the formation line on stderr, once every peer is ready (60 s at most).
    pub fn formation_id(&self) -> String {
        wait_until(std::time::Duration::from_secs(60), || {
            self.stderr().contains("  entry  ")
        })
        .unwrap_or_else(|| panic!("no formation line; stderr:\n{}", self.stderr()));
        self.stderr()
            .lines()
            .find_map(|l| l.strip_prefix("formation: "))
            .expect("formation line")
            .trim()
            .to_string()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig).expect("signal the launcher");
    }

    /// Waits for the launcher to exit; returns its exit code (128 + N for signal N), stdout and
    /// stderr. Panics (killing it) after `limit`.
    pub fn wait(mut self, limit: std::time::Duration) -> (i32, String, String) {
        use std::os::unix::process::ExitStatusExt;
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.drained(DRAIN);
                let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                return (code, self.stdout(), self.stderr());
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!("launcher still running after {limit:?}; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn collect_lines(
    r: impl std::io::Read + Send + 'static,
    into: std::sync::Arc<std::sync::Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
            let mut s = into.lock().unwrap_or_else(|e| e.into_inner());
            s.push_str(&line);
            s.push('\n');
        }
    })
}

/// Every running record under this sandbox's HOME that parses, live or not.
pub fn running_records(sb: &Sandbox) -> Vec<serde_json::Value> {
    std::fs::read_dir(sb.home().join(".murmur/running"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect()
}

/// The running record of formation member `member`, once it exists (30 s at most).
pub fn running_record(sb: &Sandbox, member: &str) -> serde_json::Value {
    let mut found = None;
    wait_until(std::time::Duration::from_secs(30), || {
        found = running_records(sb)
            .into_iter()
            .find(|r| r["formation_member"] == member);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no running record for {member}"))
}

/// The running record of the process `pid` once it exists (30 s at most): a restarted
/// member's, where the old process's may remain.
pub fn running_record_of_pid(sb: &Sandbox, pid: u32) -> serde_json::Value {
    let mut found = None;
    wait_until(std::time::Duration::from_secs(30), || {
        found = running_records(sb)
            .into_iter()
            .find(|r| r["pid"].as_u64() == Some(u64::from(pid)));
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no running record of pid {pid}"))
}

/// One JSON-RPC call at the door a running record names, with its operator token.
pub fn door_rpc(rec: &serde_json::Value, method: &str, params: serde_json::Value) -> serde_json::Value {
    let url = format!("http://{}/", rec["url"].as_str().expect("url"));
    let body = serde_json::json!({"id": 1, "jsonrpc": "2.0", "method": method, "params": params});
    let resp = ureq::post(&url)
        .set(
            "authorization",
            &format!("Bearer {}", rec["door_token"].as_str().expect("door token")),
        )
        .set("a2a-version", "1.0")
        .set("content-type", "application/json")
        .send_string(&body.to_string())
        .unwrap_or_else(|e| panic!("{method} at {url}: {e}"));
    serde_json::from_str(&resp.into_string().expect("body")).expect("JSON-RPC reply")
}

/// Every session trace of formation member `member` under this sandbox, one record list per
/// session.
pub fn member_traces(sb: &Sandbox, member: &str) -> Vec<Vec<serde_json::Value>> {
    member_sessions(sb, member).into_iter().map(|(_, recs)| recs).collect()
}

/// Every session of formation member `member` under this sandbox: its records directory and its
/// trace's records.
pub fn member_sessions(sb: &Sandbox, member: &str) -> Vec<(PathBuf, Vec<serde_json::Value>)> {
    let mut out = Vec::new();
    let mut stack = vec![sb.home().join(".murmur/records")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.ends_with("trace.jsonl") {
                let recs: Vec<serde_json::Value> = std::fs::read_to_string(&p)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                if recs.first().is_some_and(|r| r["formation_member"] == member) {
                    out.push((dir.clone(), recs));
                }
            }
        }
    }
    out
}

/// The scripted model provider (docs/reference/capsules.md#model-capsules, Testing).
/// A model entry `lead` (`local/planner`) that may call one component peer, `coder`
/// (`local/echo`).
pub const PLANNER_CALLS_CODER: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/planner
    version: 0.1.0
    entry: true
  - name: coder
    capsule: local/echo
    version: 0.1.0
reachability:
  - from: lead
    to: [coder]
";

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.shares_compiled
            && let Some(shared) = shared_compiled::dir()
        {
            shared_compiled::harvest(&self.home().join(".murmur/compiled"), &shared);
        }
    }
}

pub mod chromium;
pub mod debian;
pub mod debian_rust;
pub mod engine;
pub mod foreign;
pub mod kubernetes;
pub mod mcp;
pub mod needs;
pub mod nemesis;
pub mod pins;
pub mod provider;
pub mod python;
pub mod restart_nemesis;
pub mod shared_compiled;
pub mod toolchains;
pub mod ui_records;
pub mod ui_server;
pub mod warm;
