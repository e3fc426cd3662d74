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

/// A temporary HOME and a project directory inside it, removed on drop.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::Builder::new().prefix("mur-it-").tempdir().expect("tempdir"),
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

    /// A `mur` command with this sandbox's HOME, run in `cwd`.
    pub fn mur(&self, cwd: &Path) -> Command {
        std::fs::create_dir_all(self.home()).expect("home");
        let mut c = Command::new(mur_bin());
        c.current_dir(cwd)
            .env("HOME", self.home())
            .env_remove("MURMUR_FORMATION_ID")
            .env_remove("MURMUR_FORMATION_CHANNEL")
            .env_remove("MURMUR_FORMATION_LIFELINE")
            .env_remove("MURMUR_FORMATION_PEERS")
            .env_remove("RUST_LOG");
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

/// The scripted model provider (runtime.md §16.3, Testing).
pub mod provider;
