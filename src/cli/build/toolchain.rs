//! Runs a language's toolchain for `mur build` (the plan is `crate::scaffold::toolchain`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::build_stamp::{self, Stamp, Verdict, Why};
use crate::diag::{self, Diagnostic};
use crate::manifest::Language;
use crate::scaffold::toolchain::{self as plan, RustToolchain, Sysroot, Toolchain, World};

/// The most of a tool's output kept for the error message: its last bytes.
const TAIL_BYTES: usize = 8 << 10;
/// The longest cargo JSON line read; longer lines (huge diagnostics) are skipped.
const MAX_LINE_BYTES: u64 = 1 << 20;

/// Builds `dir`'s `lang` sources of a `world` component into `dir/rel` (E-BLD-002 when the tool
/// is missing or fails). With `stamp` (the file [`mur_core::build_stamp`] keeps for this
/// component), the tool runs only when the component, its input files, its build settings or the
/// toolchain differ from what the stamp recorded, and a successful run records them.
pub fn build(lang: Language, world: World, dir: &Path, rel: &str, stamp: Option<&Path>) -> Result<(), Diagnostic> {
    // The tool runs in `dir`, so every path it is given is absolute.
    let dir = &std::path::absolute(dir)
        .map_err(|e| Diagnostic::new(diag::E_BLD_001, format!("cannot resolve {}: {e}", dir.display())))?;
    if !plan::output_inside(rel) {
        return Err(Diagnostic::new(
            diag::E_BLD_001,
            format!(
                "component: '{}' is not a path inside the capsule's directory, where mur build writes what the {} toolchain makes",
                diag::shown(rel),
                lang.as_str()
            ),
        )
        .with_hint("name a file inside the directory, e.g. `component: capsule.wasm`"));
    }
    let entry = dir.join(plan::entry(lang));
    if !entry.is_file() {
        return Err(Diagnostic::new(
            diag::E_BLD_001,
            format!(
                "build.language is {}, but its sources start from {}, which is not a file",
                lang.as_str(),
                entry.display()
            ),
        )
        .with_hint(format!(
            "write {} in the capsule's directory (`mur new --capsule NAME --lang {}` scaffolds one)",
            plan::entry(lang),
            lang.as_str()
        )));
    }
    let (program, toolchain) = find(lang, dir)?;
    let target = dir.join(rel);
    // What this build would use, and what the last one recorded.
    let recipe = recipe(lang, world, rel, &program, &toolchain);
    let before = stamp.and_then(|_| inputs(dir, rel));
    let why = match (stamp, &before) {
        (Some(stamp), Some(files)) => {
            let recorded = read_small(stamp);
            let output = read_small_bytes(&target).map(|b| crate::digest::sha256_hex(&b));
            match build_stamp::judge(recorded.as_deref(), &recipe, files, output.as_deref()) {
                Verdict::Unchanged => {
                    // Progress goes to stderr: stdout stays the one `Built …` line scripts read.
                    eprintln!(
                        "Unchanged {} (its sources, build settings and toolchain are as when it was built)",
                        target.display()
                    );
                    return Ok(());
                }
                Verdict::Build(Why::First) => None,
                Verdict::Build(why) => Some(why.describe()),
            }
        }
        _ => None,
    };
    let staged = staged_path(&target);
    let wit = WitDir::write(world)?;
    let args = plan::args(&toolchain, world, dir, &wit.0, &staged);
    // Progress goes to stderr: stdout stays the one `Built …` line scripts read.
    match why {
        Some(why) => eprintln!("Building {} with {} ({why})", entry.display(), program.display()),
        None => eprintln!("Building {} with {}", entry.display(), program.display()),
    }
    let started = std::time::Instant::now();
    let mut cmd = Command::new(&program);
    cmd.args(&args).current_dir(dir).env_clear().stdin(Stdio::null());
    for var in plan::PASSED_ENV {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.envs(plan::env(&toolchain));
    // On a terminal, the seconds a toolchain takes are counted in place (cleared when it ends).
    let spinner = crate::progress::Spinner::start("", format!("building {}", target.display()));
    let ran = run(lang, &program, cmd);
    drop(spinner);
    let result = ran.and_then(|artifact| {
        if let Some(a) = artifact {
            if !starts_as_component(&a) {
                return Err(failed(
                    lang,
                    &format!(
                        "{} is a core WebAssembly module, not a component (a linker set in the crate's or cargo's configuration may have replaced the one that makes components)",
                        a.display()
                    ),
                    "",
                ));
            }
            std::fs::copy(&a, &staged)
                .map_err(|e| failed(lang, &format!("its output {} cannot be copied: {e}", a.display()), ""))?;
        }
        if !staged.is_file() {
            return Err(failed(lang, "it exited successfully but wrote no component", ""));
        }
        std::fs::rename(&staged, &target).map_err(|e| {
            Diagnostic::new(diag::E_BLD_001, format!("cannot write {}: {e}", target.display()))
                .with_hint("check that the directory is writable")
        })
    });
    if result.is_err() {
        // Best effort: a partial output of ours, never the previous component.
        let _ = std::fs::remove_file(&staged);
        if let Some(stamp) = stamp {
            // The previous component stays, but it is no longer what the sources make.
            let _ = std::fs::remove_file(stamp);
        }
        return result;
    }
    eprintln!("Built {} in {:.1} s", target.display(), started.elapsed().as_secs_f64());
    if let (Some(stamp), Some(before)) = (stamp, before) {
        record(stamp, &target, recipe, &before, dir, rel);
    }
    result
}

/// Writes the stamp of a successful build, when its inputs held still while the tool ran;
/// otherwise removes the old one, so the next build runs. Never fails the build: a build without
/// a stamp only runs again next time.
fn record(stamp: &Path, target: &Path, recipe: String, before: &BTreeMap<String, String>, dir: &Path, rel: &str) {
    let written = (|| {
        let files = inputs(dir, rel)
            .and_then(|after| build_stamp::settled(before, after))
            .ok_or_else(|| "a source changed while it was built".to_string())?;
        let output = std::fs::read(target).map_err(|e| format!("{} cannot be read: {e}", target.display()))?;
        let text = Stamp::new(recipe, files, crate::digest::sha256_hex(&output)).render();
        if let Some(parent) = stamp.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        crate::file::write_atomic(stamp, text.as_bytes(), 0o644).map_err(|e| format!("{}: {e}", stamp.display()))
    })();
    if let Err(why) = written {
        tracing::debug!("no build stamp written, the next build runs again: {why}");
        let _ = std::fs::remove_file(stamp);
    }
}

/// The facts of a build besides its files: what is made, against which WIT, by which mur, and
/// the toolchain's identity (each program's path, size and modification time: an upgrade
/// rewrites them).
fn recipe(lang: Language, world: World, rel: &str, program: &Path, toolchain: &Toolchain) -> String {
    let wit: String = world
        .wit_files()
        .iter()
        .map(|(p, text)| format!("{p}\n{}\n", crate::digest::sha256_hex(text.as_bytes())))
        .collect();
    let wit = crate::digest::sha256_hex(wit.as_bytes());
    let mut facts = vec![
        ("mur", env!("CARGO_PKG_VERSION").to_string()),
        ("language", lang.as_str().to_string()),
        ("world", world.noun().to_string()),
        ("output", rel.to_string()),
        ("wit", wit),
        ("program", program.display().to_string()),
        ("program-file", file_identity(program)),
        ("toolchain", format!("{toolchain:?}")),
    ];
    if let Toolchain::Rust(rust) = toolchain {
        facts.push(("rustc-file", file_identity(&rust.rustc)));
    }
    let facts: Vec<(&str, &str)> = facts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    build_stamp::recipe(&facts)
}

/// A program's size and modification time (through links), or `absent`.
fn file_identity(p: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(p) {
        Ok(m) => format!("{} {}.{:09}", m.len(), m.mtime(), m.mtime_nsec()),
        Err(_) => "absent".to_string(),
    }
}

/// The stamp's text, if it is a small file.
fn read_small(p: &Path) -> Option<String> {
    const MAX: u64 = 4 << 20;
    let meta = std::fs::metadata(p).ok()?;
    (meta.is_file() && meta.len() <= MAX).then(|| std::fs::read_to_string(p).ok())?
}

/// The component's bytes, if it is a file an archive could hold.
fn read_small_bytes(p: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(p).ok()?;
    (meta.is_file() && meta.len() <= crate::store::archive::MAX_ENTRY_BYTES).then(|| std::fs::read(p).ok())?
}

/// The sha256 of every input file under `dir` ([`build_stamp::is_input`]) by its `/`-separated
/// relative path; a symlink counts as its target's name. `None` when the directory cannot be
/// read whole or holds more than the stamp compares ([`build_stamp::MAX_FILES`],
/// [`build_stamp::MAX_BYTES`]): the component is then built every time.
fn inputs(dir: &Path, rel: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut bytes: u64 = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(sub) = stack.pop() {
        for entry in std::fs::read_dir(dir.join(&sub)).ok()? {
            let entry = entry.ok()?;
            let rel_path = sub.join(entry.file_name());
            let kind = entry.file_type().ok()?;
            if !build_stamp::is_input(&rel_path, kind.is_dir(), rel) {
                continue;
            }
            let key = rel_path.to_str()?.to_string();
            let digest = if kind.is_dir() {
                stack.push(rel_path);
                continue;
            } else if kind.is_symlink() {
                let to = std::fs::read_link(entry.path()).ok()?;
                crate::digest::sha256_hex(format!("symlink {}", to.display()).as_bytes())
            } else if kind.is_file() {
                bytes += entry.metadata().ok()?.len();
                if bytes > build_stamp::MAX_BYTES {
                    return None;
                }
                crate::digest::sha256_hex(&std::fs::read(entry.path()).ok()?)
            } else {
                continue;
            };
            out.insert(key, digest);
            if out.len() > build_stamp::MAX_FILES {
                return None;
            }
        }
    }
    Some(out)
}

/// `<component>.tmp-<uuid>` beside the component, so the final rename stays on one file system.
fn staged_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", uuid::Uuid::new_v4()));
    target.with_file_name(name)
}

/// Whether the file at `path` begins with a component's header.
fn starts_as_component(path: &Path) -> bool {
    let mut header = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok_and(|()| plan::is_component(&header))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The program to run and the toolchain it is: the first candidate that is an executable file;
/// for Rust, the first `cargo` whose toolchain can build a component.
fn find(lang: Language, dir: &Path) -> Result<(PathBuf, Toolchain), Diagnostic> {
    let path = std::env::var_os("PATH");
    let candidates = plan::candidates(lang, dir, path.as_deref());
    let missing = |what: String| {
        let hint = match lang {
            // npm installs into the directory it runs in; mur build looks in the capsule's.
            Language::JavaScript => format!(
                "run it inside the capsule's directory, where mur build looks for node_modules/.bin: `(cd {} && {})`",
                dir.display(),
                plan::install_hint(lang)
            ),
            Language::Rust => plan::rust_missing_hint(),
            Language::Python => plan::install_hint(lang),
        };
        Diagnostic::new(
            diag::E_BLD_002,
            format!("{what}; mur build needs it to build this {} capsule", lang.as_str()),
        )
        .with_hint(hint)
    };
    let (toolchain, what) = match lang {
        Language::Python => (Toolchain::Python, "componentize-py is not in .venv/bin or on PATH"),
        Language::JavaScript => (
            Toolchain::JavaScript,
            "componentize-js is not in node_modules/.bin or on PATH",
        ),
        Language::Rust => return find_rust(&candidates, dir).map_err(missing),
    };
    match candidates.into_iter().find(|p| is_executable(p)) {
        Some(program) => Ok((program, toolchain)),
        None => Err(missing(what.to_string())),
    }
}

/// The first `cargo` of `candidates` whose toolchain can build a component, or what was found
/// instead.
fn find_rust(candidates: &[PathBuf], dir: &Path) -> Result<(PathBuf, Toolchain), String> {
    let mut unusable: Vec<String> = Vec::new();
    for cargo in candidates.iter().filter(|p| is_executable(p)) {
        let rustc = plan::rustc_beside(cargo);
        let Some((root, facts)) = is_executable(&rustc).then(|| sysroot(&rustc, dir)).flatten() else {
            unusable.push(format!("{} (no working rustc beside it)", cargo.display()));
            continue;
        };
        match plan::rust_build(&facts) {
            Some(build) => return Ok((cargo.clone(), Toolchain::Rust(RustToolchain { rustc, build }))),
            None => unusable.push(format!("{} (sysroot {})", cargo.display(), root.display())),
        }
    }
    if unusable.is_empty() {
        return Err("cargo is not on PATH".to_string());
    }
    Err(format!(
        "no Rust toolchain on PATH has the {} target's library, nor the standard library's sources and wasm-component-ld to build for {}: {}",
        plan::RUST_TARGET,
        plan::RUST_SOURCE_TARGET,
        unusable.join(", ")
    ))
}

/// The sysroot of `rustc` as it runs in `dir` (a rustup proxy honours the directory's
/// toolchain file), and what it holds.
fn sysroot(rustc: &Path, dir: &Path) -> Option<(PathBuf, Sysroot)> {
    let mut cmd = Command::new(rustc);
    cmd.args(["--print", "sysroot"])
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::null());
    for var in plan::PASSED_ENV {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !root.is_absolute() {
        return None;
    }
    let rustlib = root.join("lib/rustlib");
    // The host's tools directory holds the linker; a sysroot has one host, read it off the
    // listing rather than asking rustc again.
    let mut hosts: Vec<PathBuf> = std::fs::read_dir(&rustlib)
        .map(|d| d.flatten().map(|e| e.path().join("bin/wasm-component-ld")).collect())
        .unwrap_or_default();
    hosts.sort();
    let facts = Sysroot {
        wasip2_std: rustlib.join(plan::RUST_TARGET).is_dir(),
        std_sources: rustlib.join("src/rust/library/std").is_dir(),
        component_ld: hosts.into_iter().find(|p| is_executable(p)),
    };
    Some((root, facts))
}

fn failed(lang: Language, why: &str, tail: &str) -> Diagnostic {
    let mut msg = format!("{} could not build the component: {why}", plan::program(lang));
    if !tail.trim().is_empty() {
        msg.push_str("; its last output:\n");
        msg.push_str(tail.trim_end());
    }
    Diagnostic::new(diag::E_BLD_002, msg).with_hint(format!(
        "fix what the output above names in {}, then run mur build again",
        plan::entry(lang)
    ))
}

/// Runs the tool to its end; for Rust, the `.wasm` cargo reported.
fn run(lang: Language, program: &Path, mut cmd: Command) -> Result<Option<PathBuf>, Diagnostic> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(lang, &format!("{} cannot be started: {e}", program.display()), ""))?;
    let stderr = child.stderr.take();
    let err_tail = std::thread::spawn(move || stderr.map(tail).unwrap_or_default());
    let stdout = child.stdout.take();
    let (artifact, out_tail) = match (lang, stdout) {
        (Language::Rust, Some(s)) => (cargo_lines(s), String::new()),
        (_, Some(s)) => (None, tail(s)),
        (_, None) => (None, String::new()),
    };
    let status = child
        .wait()
        .map_err(|e| failed(lang, &format!("waiting for it failed: {e}"), ""))?;
    let err_tail = err_tail.join().unwrap_or_default();
    if !status.success() {
        let both = format!("{out_tail}{err_tail}");
        let last = crate::text::tail(&both, TAIL_BYTES);
        return Err(failed(lang, &format!("it exited with {status}"), last));
    }
    if lang == Language::Rust && artifact.is_none() {
        return Err(failed(
            lang,
            "cargo reported no .wasm; is the crate a cdylib?",
            &err_tail,
        ));
    }
    Ok(artifact)
}

/// The last [`TAIL_BYTES`] of a stream, read to its end.
fn tail(mut r: impl Read) -> String {
    let mut keep: Vec<u8> = Vec::with_capacity(TAIL_BYTES);
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                keep.extend_from_slice(&buf[..n]);
                if keep.len() > 2 * TAIL_BYTES {
                    keep.drain(..keep.len() - TAIL_BYTES);
                }
            }
        }
    }
    if keep.len() > TAIL_BYTES {
        keep.drain(..keep.len() - TAIL_BYTES);
    }
    String::from_utf8_lossy(&keep).into_owned()
}

/// Reads cargo's JSON lines to the end and returns the last component it reported.
fn cargo_lines(r: impl Read) -> Option<PathBuf> {
    let mut reader = BufReader::new(r);
    let mut found = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.ends_with(b"\n") => {
                if let Some(p) = plan::cargo_artifact(&String::from_utf8_lossy(&line)) {
                    found = Some(p);
                }
            }
            // An overlong line: skip the rest of it.
            Ok(_) => {
                let mut rest = Vec::new();
                if reader.read_until(b'\n', &mut rest).is_err() {
                    break;
                }
            }
        }
    }
    found
}

/// A fresh owner-only directory holding the runtime's WIT, removed when dropped.
struct WitDir(PathBuf);

impl WitDir {
    fn write(world: World) -> Result<WitDir, Diagnostic> {
        use std::os::unix::fs::DirBuilderExt;
        let root = std::env::temp_dir().join(format!("mur-build-wit-{}", uuid::Uuid::new_v4()));
        let io = |p: &Path, e: std::io::Error| {
            Diagnostic::new(diag::E_BLD_001, format!("cannot write {}: {e}", p.display()))
                .with_hint("check that the temporary directory (TMPDIR) is writable")
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(|e| io(&root, e))?;
        let dir = WitDir(root);
        for (rel, text) in world.wit_files() {
            let p = dir.0.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            std::fs::write(&p, text).map_err(|e| io(&p, e))?;
        }
        Ok(dir)
    }
}

impl Drop for WitDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
