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
        Sandbox { dir: tempfile::Builder::new().prefix("mur-it-").tempdir().expect("tempdir") }
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
