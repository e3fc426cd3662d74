//! The component toolchains of Python and JavaScript capsules, provisioned by the tests
//! themselves under `target/` (pinned, once per machine), and the capsules built with them.
//!
//! Building a capsule costs tens of seconds, so each is built once per change of its scaffold:
//! the first test that needs it scaffolds it with the real `mur new`, builds it with the real
//! `mur build` and the real toolchain, and keeps the archive and component under
//! `target/test-capsules/<hash of the scaffold and the pins>/`; later tests and runs reuse them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::python::python_with;
use super::{Sandbox, stderr};

/// The pins the tests build with, the versions `mur build`'s hints name.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";

/// The directory holding `componentize-py`.
pub fn componentize_py_dir() -> PathBuf {
    let python = python_with(&[COMPONENTIZE_PY], "componentize_py");
    let dir = python.parent().expect("venv bin").to_path_buf();
    assert!(
        dir.join("componentize-py").exists(),
        "{} has no componentize-py",
        dir.display()
    );
    dir
}

/// The directory holding `componentize-js`: the pinned package under `target/test-node/`.
pub fn componentize_js_dir() -> PathBuf {
    node_with(&[COMPONENTIZE_JS]).join("node_modules/.bin")
}

/// A Node.js prefix holding exactly `packages` (npm specs, pinned by the caller):
/// `npm install --prefix target/test-node/<hash of the specs>`, once per machine and set of
/// specs, under a cross-process lock. Returns the prefix (its `node_modules/` is beside).
pub fn node_with(packages: &[&str]) -> PathBuf {
    // The layout's version is part of the name: a prefix an earlier layout installed (with no
    // `.provisioned` mark) is never installed over, which npm does not always leave whole.
    let mut parts = vec!["node_with 2"];
    parts.extend_from_slice(packages);
    let prefix = target_dir().join("test-node").join(tag(&parts));
    let done = prefix.join(".provisioned");
    if done.exists() {
        return prefix;
    }
    std::fs::create_dir_all(&prefix).expect("create target/test-node");
    // Per prefix, across threads and processes (each `flock` is of its own open file).
    let _lock = lock_file(&prefix);
    if done.exists() {
        return prefix;
    }
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
        .args(packages)
        .stdin(Stdio::null())
        .output()
        .expect("run npm");
    assert!(
        out.status.success(),
        "npm install {packages:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&done, packages.join("\n")).expect("mark target/test-node provisioned");
    prefix
}

/// A capsule built from the scaffold of `mur new --capsule <name> --lang <lang>`.
#[derive(Debug, Clone)]
pub struct Built {
    /// The `.mur.zip` `mur build` wrote.
    pub zip: PathBuf,
    /// The component the toolchain made.
    pub wasm: PathBuf,
}

static PYTHON: OnceLock<Built> = OnceLock::new();
static JAVASCRIPT: OnceLock<Built> = OnceLock::new();

/// The Python capsule `py-capsule`, built once.
pub fn python_capsule() -> Built {
    PYTHON
        .get_or_init(|| build("py-capsule", "python", &componentize_py_dir(), COMPONENTIZE_PY))
        .clone()
}

/// The JavaScript capsule `js-capsule`, built once.
pub fn javascript_capsule() -> Built {
    JAVASCRIPT
        .get_or_init(|| build("js-capsule", "javascript", &componentize_js_dir(), COMPONENTIZE_JS))
        .clone()
}

/// `PATH` with `dir` first.
pub fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// A Python capsule `name` whose `app.py` is `app` instead of the scaffold's, built once per
/// distinct source (the scaffold's other files and the toolchain as `mur new` gives them).
pub fn python_capsule_with(name: &str, app: &str) -> Built {
    build_with(
        name,
        "python",
        &componentize_py_dir(),
        COMPONENTIZE_PY,
        &[("app.py", app)],
    )
}

fn build(name: &str, lang: &str, tool_dir: &Path, pin: &str) -> Built {
    build_with(name, lang, tool_dir, pin, &[])
}

/// `mur new --capsule name --lang lang`, its files replaced by `files` (path, text), built by
/// `mur build` with the toolchain in `tool_dir` and kept under `target/` by a digest of them all.
fn build_with(name: &str, lang: &str, tool_dir: &Path, pin: &str, files: &[(&str, &str)]) -> Built {
    let sb = Sandbox::new();
    let out = sb.run(sb.dir.path(), &["new", "--capsule", name, "--lang", lang]);
    assert!(out.status.success(), "mur new --capsule {name}: {}", stderr(&out));
    let src = sb.dir.path().join(name);
    for (path, text) in files {
        std::fs::write(src.join(path), text).expect("replace a scaffold file");
    }
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    collect(&src, &src, &mut files);
    files.sort();
    let mut parts: Vec<String> = vec![pin.to_string(), lang.to_string()];
    for (p, bytes) in &files {
        parts.push(p.clone());
        parts.push(String::from_utf8_lossy(bytes).into_owned());
    }
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let cache = target_dir()
        .join("test-capsules")
        .join(format!("{name}-{}", tag(&parts)));
    let built = Built {
        zip: cache.join(format!("{name}-0.1.0.mur.zip")),
        wasm: cache.join("capsule.wasm"),
    };
    if built.zip.exists() && built.wasm.exists() {
        return built;
    }
    std::fs::create_dir_all(cache.parent().expect("parent")).expect("create target/test-capsules");
    let _lock = lock_file(&cache);
    if built.zip.exists() && built.wasm.exists() {
        return built;
    }
    let out = sb
        .mur(sb.dir.path())
        .env("PATH", path_with(tool_dir))
        .args(["build", name])
        .output()
        .expect("spawn mur build");
    assert!(out.status.success(), "mur build {name}: {}", stderr(&out));
    let staging = cache.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).expect("staging");
    for f in [format!("{name}-0.1.0.mur.zip"), "capsule.wasm".to_string()] {
        std::fs::copy(src.join(&f), staging.join(&f)).expect("keep the build");
    }
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::rename(&staging, &cache).expect("publish the build");
    built
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).expect("read scaffold").flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else {
            let rel = p.strip_prefix(root).expect("under root").display().to_string();
            out.push((rel, std::fs::read(&p).expect("read")));
        }
    }
}

/// A short digest of `parts`: a cache directory's name changes whenever one of them does.
pub(crate) fn tag(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(parts.join("\n\0").as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_root().join("target"))
}

/// An exclusive lock on `<dir>.lock`, released when the returned guard is dropped.
pub(crate) fn lock_file(dir: &Path) -> nix::fcntl::Flock<std::fs::File> {
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
