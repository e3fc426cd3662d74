//! Debian's Rust for WebAssembly (the packages `mur build`'s hint installs): the system's own in
//! `/usr/bin` where every one of them is installed, else provisioned by the tests themselves
//! without installing anything: `apt-get download` of the packages, those built from the same
//! sources and the libraries this machine lacks ([`super::debian::plan`]), unpacked with
//! `dpkg-deb -x` under `target/test-rust/<tag>/`, once per machine. A Rust toolchain is relocatable (rustc finds its sysroot beside its own
//! binary); only the shared libraries need `LD_LIBRARY_PATH`, which small wrapper scripts in
//! `bin/` set before they exec the real `cargo`, `rustc`, `rustdoc` and `rust-lld`.
//!
//! Builds share a cargo home (the crates.io registry) and, through [`DebianRust::share_target`],
//! one target directory, so the standard library is compiled from its sources once, not in every
//! test. `MUR_TEST_RUST_BIN` names a directory that already holds such a `cargo` and `rustc`
//! (e.g. `/usr/bin` after `apt-get install`), used as is.

use super::debian::{Plan, facts, output, plan, run};
use super::toolchains::{lock_file, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use mur::scaffold::toolchain::RUST_DEBIAN_PACKAGES;

/// Serialises provisioning within this test binary; a lock file does so across processes.
static PROVISIONING: Mutex<()> = Mutex::new(());
static PROVISIONED: OnceLock<DebianRust> = OnceLock::new();

/// The programs the wrappers run, from the unpacked `usr/bin`.
const PROGRAMS: [&str; 4] = ["cargo", "rustc", "rustdoc", "rust-lld"];

/// A Rust toolchain that builds components from its standard library's sources.
#[derive(Debug, Clone)]
pub struct DebianRust {
    /// Holds `cargo` and `rustc`: put it first on `PATH`.
    pub bin: PathBuf,
    /// The `CARGO_HOME` builds share.
    pub cargo_home: PathBuf,
    /// The target directory builds share.
    target: PathBuf,
}

impl DebianRust {
    /// Makes `dir/target`, where `mur build` has cargo build the crate in `dir`, the shared target
    /// directory (a symbolic link), so the standard library and the dependencies built for
    /// earlier tests are reused. A second call for the same directory (a second build) finds it.
    pub fn share_target(&self, dir: &Path) {
        if std::fs::read_link(dir.join("target")).is_ok_and(|to| to == self.target) {
            return;
        }
        std::os::unix::fs::symlink(&self.target, dir.join("target")).expect("link the shared target directory");
    }
}

/// The toolchain, provisioned on first use.
pub fn debian_rust() -> DebianRust {
    PROVISIONED.get_or_init(provision).clone()
}

fn provision() -> DebianRust {
    let base = target_dir().join("test-rust");
    let shared = |root: &Path, bin: PathBuf| {
        let target = root.join("cargo-target");
        std::fs::create_dir_all(&target).expect("create the shared target directory");
        DebianRust {
            bin,
            cargo_home: base.join("cargo-home"),
            target,
        }
    };
    if let Some(bin) = std::env::var_os("MUR_TEST_RUST_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        let root = base.join("given");
        return shared(&root, bin);
    }
    let _guard = PROVISIONING.lock().unwrap_or_else(|e| e.into_inner());
    let named: Vec<&str> = RUST_DEBIAN_PACKAGES.split_whitespace().collect();
    let skip = |name: &str| name.starts_with("llvm-");
    if matches!(facts(&named).map(|f| plan(&named, &f, skip)), Ok(Plan::System)) {
        return shared(&base.join("system"), PathBuf::from("/usr/bin"));
    }
    let root = base.join(tag(RUST_DEBIAN_PACKAGES));
    let ready = |root: &Path| root.join("packages.txt").is_file();
    if ready(&root) {
        return shared(&root, root.join("bin"));
    }
    std::fs::create_dir_all(&base).expect("create target/test-rust");
    let _lock = lock_file(&root);
    if ready(&root) {
        return shared(&root, root.join("bin"));
    }
    let staging = root.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&staging);
    let debs = staging.join("debs");
    std::fs::create_dir_all(&debs).expect("create the download directory");
    eprintln!(
        "provisioning Debian's Rust ({RUST_DEBIAN_PACKAGES}) under {} (once; about 150 MB)",
        root.display()
    );
    if let Err(first) = download(&debs) {
        // Package lists older than the security updates that carry rustc-web 1.96 name files
        // the archive no longer has; root may refresh them.
        if !nix::unistd::Uid::effective().is_root() {
            panic!(
                "{first}\n(run `apt-get update` as root, or set MUR_TEST_RUST_BIN to a directory with Debian's cargo and rustc)"
            );
        }
        run(Command::new("apt-get").args(["update", "-q"]), "apt-get update");
        download(&debs).unwrap_or_else(|e| panic!("{e}"));
    }
    let unpacked = staging.join("root");
    let mut versions = String::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&debs)
        .expect("read the downloads")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    files.sort();
    for deb in &files {
        run(
            Command::new("dpkg-deb").arg("-x").arg(deb).arg(&unpacked),
            &format!("dpkg-deb -x {}", deb.display()),
        );
        versions.push_str(&output(
            Command::new("dpkg-deb")
                .args(["-f"])
                .arg(deb)
                .args(["Package", "Version"]),
        ));
    }
    let _ = std::fs::remove_dir_all(&debs);
    trim(&unpacked);
    // The wrappers name the final paths, so they are written before the rename publishes them.
    let final_usr = root.join("root/usr");
    let libs: Vec<String> = library_dirs(&unpacked.join("usr"))
        .into_iter()
        .map(|d| final_usr.join(d).display().to_string())
        .collect();
    let bin = staging.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin");
    for program in PROGRAMS {
        assert!(
            unpacked.join("usr/bin").join(program).exists(),
            "the unpacked packages have no usr/bin/{program}:\n{versions}"
        );
        write_script(
            &bin.join(program),
            &format!(
                "#!/bin/sh\nLD_LIBRARY_PATH='{}'${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} exec '{}' \"$@\"\n",
                libs.join(":"),
                final_usr.join("bin").join(program).display()
            ),
        );
    }
    assert!(
        !library_dirs(&unpacked.join("usr")).is_empty(),
        "the unpacked packages hold no shared libraries:\n{versions}"
    );
    let _ = std::fs::remove_dir_all(&root);
    std::fs::rename(&staging, &root).expect("publish the toolchain");
    // What a build from sources needs, checked through the wrappers.
    let sysroot = output(Command::new(root.join("bin/rustc")).args(["--print", "sysroot"]));
    let sysroot = PathBuf::from(sysroot.trim());
    assert!(
        sysroot.join("lib/rustlib/src/rust/library/std").is_dir(),
        "{} has no standard library sources",
        sysroot.display()
    );
    let linker = std::fs::read_dir(sysroot.join("lib/rustlib"))
        .expect("rustlib")
        .flatten()
        .any(|e| e.path().join("bin/wasm-component-ld").is_file());
    assert!(linker, "{} has no wasm-component-ld:\n{versions}", sysroot.display());
    output(Command::new(root.join("bin/cargo")).arg("--version"));
    output(Command::new(root.join("bin/rust-lld")).args(["-flavor", "wasm", "--version"]));
    std::fs::write(root.join("packages.txt"), versions).expect("record the packages");
    shared(&root, root.join("bin"))
}

/// The packages, those built from the same sources and the dependencies this machine lacks, into
/// `debs`; rust-web-llvm only for its wasm-component-ld and rust-lld, so not its LLVM tools
/// (`llvm-*`).
fn download(debs: &Path) -> Result<(), String> {
    let named: Vec<&str> = RUST_DEBIAN_PACKAGES.split_whitespace().collect();
    match plan(&named, &facts(&named)?, |name| name.starts_with("llvm-")) {
        Plan::Unpack(packages) => super::debian::download(&packages, debs),
        Plan::System => Err("every package is installed: nothing to unpack".into()),
    }
}

/// Removes what a build never reads: the compiler's own sources beside the library's (about 370
/// MB of the 430 MB `rust-web-src` unpacks to), and the documentation.
fn trim(root: &Path) {
    let _ = std::fs::remove_dir_all(root.join("usr/share/doc"));
    let Ok(srcs) = std::fs::read_dir(root.join("usr/src")) else {
        return;
    };
    for src in srcs.flatten().map(|e| e.path()) {
        if src.join("library/std").is_dir() {
            for unused in ["src", "compiler", "tests"] {
                let _ = std::fs::remove_dir_all(src.join(unused));
            }
        }
    }
}

/// The directories under `usr` the unpacked shared libraries are in, relative to it:
/// `lib/<multiarch>` (libLLVM, rustc's driver, cargo's libgit2) and `lib/llvm-*/lib`.
fn library_dirs(usr: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(usr.join("lib")) else {
        return out;
    };
    for dir in entries.flatten().map(|e| e.path()) {
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let candidate = if name.starts_with("llvm-") {
            dir.join("lib")
        } else if name.ends_with("-linux-gnu") {
            dir
        } else {
            continue;
        };
        let has_libraries = std::fs::read_dir(&candidate)
            .is_ok_and(|d| d.flatten().any(|e| e.file_name().to_string_lossy().contains(".so")));
        if has_libraries {
            out.push(candidate.strip_prefix(usr).expect("under usr").to_path_buf());
        }
    }
    out.sort();
    out
}

fn write_script(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, script).expect("write a wrapper");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod a wrapper");
}

/// A change of the package list gets a fresh directory.
fn tag(packages: &str) -> String {
    // The layout's version is part of the name: a tree an earlier rule unpacked without the
    // packages built from the same sources is never used again.
    super::toolchains::tag(&[packages, "2"])
}
