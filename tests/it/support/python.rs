//! A Python with pinned third-party packages, provisioned by the tests themselves.
//!
//! Interop tests drive real doors with official clients written in Python. `cargo test
//! --workspace` must pass on a fresh machine with only `python3`, so the first test that needs
//! a package set creates a virtual environment for it under `target/`, once, and every later
//! test and run reuses it. `MUR_TEST_PYTHON` points at a Python that already has the packages.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A Python interpreter that can `import` every module in `imports`, with `requirements`
/// (pip specifiers, pinned) installed in a virtual environment of its own under `target/`.
pub fn python_with(requirements: &[&str], imports: &str) -> PathBuf {
    if let Some(p) = std::env::var_os("MUR_TEST_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let dir = env_dir(requirements);
    let python = dir.join("bin/python");
    // Used only once whole: pip writes for a while, and another test may look meanwhile.
    let done = dir.join(".provisioned");
    if !done.exists() {
        std::fs::create_dir_all(dir.parent().expect("target dir")).expect("create target/test-python");
        // One lock per environment, across threads and processes alike (each `flock` is of its
        // own open file), so different environments are installed at the same time.
        let _lock = lock_file(&dir);
        if !done.exists() {
            let _ = std::fs::remove_dir_all(&dir);
            run(
                Command::new("python3").args(["-m", "venv"]).arg(&dir),
                "create a virtual environment",
            );
            run(
                Command::new(&python)
                    .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                    .args(requirements),
                "install the interop test's Python packages",
            );
            std::fs::write(&done, requirements.join("\n")).expect("mark target/test-python provisioned");
        }
    }
    assert!(
        importable(&python, imports),
        "{} cannot import `{imports}` with {requirements:?} installed",
        python.display()
    );
    python
}

/// `target/test-python/<hash of the requirements>`: a change of pins gets a fresh environment.
fn env_dir(requirements: &[&str]) -> PathBuf {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(requirements.join("\n").as_bytes());
    let tag: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    target_dir().join("test-python").join(tag)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_root().join("target"))
}

fn importable(python: &Path, imports: &str) -> bool {
    python.exists()
        && Command::new(python)
            .args(["-c", &format!("import {imports}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An exclusive lock on `<dir>.lock`, released when the returned guard is dropped.
fn lock_file(dir: &Path) -> nix::fcntl::Flock<std::fs::File> {
    let path = dir.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("lock {}: {e}", path.display()))
}
