//! A Docker Engine of the test's own (Debian's `docker.io`, as root), for the tests that build
//! the formation image and run its containers.
//!
//! The engine's state, runtime directory and socket live under `target/test-docker/`, so it never
//! meets the machine's own engine (if any) or another checkout's. It starts with
//! `--iptables=false --ip-forward=false --ip-masq=false --bridge=none`: it adds no firewall rule,
//! no NAT and no default bridge, and leaves forwarding off, so the host's network and the other
//! tests' namespaces are left alone. The one network a test creates is a bridge with no route
//! anywhere but between its containers and this host. Dropping the [`Engine`] removes every
//! container, the network and the daemon (and the containerd it started).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::toolchains::{lock_file, target_dir};
use super::wait_until;

/// Debian's client and daemon (never a client elsewhere on PATH).
pub const DOCKER: &str = "/usr/bin/docker";
const DOCKERD: &str = "/usr/sbin/dockerd";

/// What the container tests need from Debian: the engine, and what the formation image is made
/// of besides mur (`deploy/formation-image.sh`).
const PACKAGES: [&str; 3] = ["docker.io", "socat", "busybox-static"];

/// Installs [`PACKAGES`] when one is missing (`apt-get`, once per machine, under a lock).
pub fn provision() {
    let present = || {
        Path::new(DOCKERD).exists()
            && Path::new(DOCKER).exists()
            && Path::new("/usr/bin/socat").exists()
            && Path::new("/bin/busybox").exists()
    };
    if present() {
        return;
    }
    let _lock = lock_file(&target_dir().join("test-docker-apt"));
    if present() {
        return;
    }
    let o = Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .expect("run apt-get");
    assert!(
        o.status.success(),
        "apt-get install {}: {}",
        PACKAGES.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        present(),
        "{} installed but not all of their programs",
        PACKAGES.join(" ")
    );
}

/// A running `dockerd` with everything under one directory.
pub struct Engine {
    dir: PathBuf,
    daemon: Option<Child>,
    networks: Vec<String>,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl Engine {
    /// Starts the engine of this checkout (one at a time: a lock is held while it lives) and
    /// waits until it answers.
    pub fn start() -> Engine {
        let dir = target_dir().join("test-docker");
        let lock = lock_file(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir test-docker");
        // A daemon a killed test run left behind holds the data root: end it first.
        if let Some(pid) = live_pid(&dir.join("docker.pid")) {
            stop_pid(pid);
        }
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("dockerd.log");
        let daemon = Command::new(DOCKERD)
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("--host")
            .arg(format!("unix://{}", dir.join("docker.sock").display()))
            .args([
                "--iptables=false",
                "--ip-forward=false",
                "--ip-masq=false",
                "--bridge=none",
                "--userland-proxy=false",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        let engine = Engine {
            dir,
            daemon: Some(daemon),
            networks: Vec::new(),
            _lock: lock,
        };
        let up = wait_until(Duration::from_secs(60), || {
            engine
                .docker()
                .args(["version", "--format", "{{.Server.Version}}"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        if up.is_none() {
            let log = std::fs::read_to_string(engine.dir.join("dockerd.log")).unwrap_or_default();
            panic!("dockerd did not answer within 60 s:\n{log}");
        }
        engine
    }

    /// `DOCKER_HOST` for this engine.
    pub fn host(&self) -> String {
        format!("unix://{}", self.dir.join("docker.sock").display())
    }

    /// The directory its state, runtime files and socket are under.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A `docker` client command for this engine.
    pub fn docker(&self) -> Command {
        let mut c = Command::new(DOCKER);
        c.env("DOCKER_HOST", self.host()).stdin(Stdio::null());
        c
    }

    /// Runs `docker args…` and asserts that it succeeded; returns its stdout, trimmed.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.docker().args(args).output().expect("run docker");
        assert!(
            o.status.success(),
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Creates a bridge network `name` on `subnet` (removed with the engine): its containers
    /// reach each other and this host's address on it, nothing else (no forwarding, no NAT).
    pub fn network(&mut self, name: &str, subnet: &str, bridge: &str) {
        self.ok(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--subnet",
            subnet,
            "-o",
            &format!("com.docker.network.bridge.name={bridge}"),
            "-o",
            "com.docker.network.bridge.enable_ip_masquerade=false",
            name,
        ]);
        self.networks.push(name.to_string());
    }

    /// The containers the engine knows of, running or not.
    pub fn containers(&self) -> Vec<String> {
        self.ok(&["ps", "-aq"]).lines().map(String::from).collect()
    }

    /// Removes every container and network, then ends the daemon. Idempotent.
    pub fn shut_down(&mut self) {
        let Some(mut daemon) = self.daemon.take() else {
            return;
        };
        let ids = self.containers_quietly();
        if !ids.is_empty() {
            let _ = self.docker().args(["rm", "-f", "-v"]).args(&ids).output();
        }
        for n in std::mem::take(&mut self.networks) {
            let _ = self.docker().args(["network", "rm", &n]).output();
        }
        let pid = nix::unistd::Pid::from_raw(daemon.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let ended = wait_until(Duration::from_secs(30), || daemon.try_wait().is_ok_and(|s| s.is_some()));
        if ended.is_none() {
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
    }

    fn containers_quietly(&self) -> Vec<String> {
        self.docker()
            .args(["ps", "-aq"])
            .output()
            .map(|o: Output| String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect())
            .unwrap_or_default()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Processes whose command line names `dir`: what an engine under it left running (its daemon,
/// its containerd, a container's shim).
pub fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(&needle) {
            found.push(format!("{pid}: {}", text.trim()));
        }
    }
    found
}

/// Whether a process `pid` exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The pid in `pidfile`, if that process still runs.
fn live_pid(pidfile: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

fn stop_pid(pid: u32) {
    let p = nix::unistd::Pid::from_raw(pid as i32);
    let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGTERM);
    if wait_until(Duration::from_secs(30), || !alive(pid)).is_none() {
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
    }
}
