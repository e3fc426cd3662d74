//! `mur demo [TASK]`: builds the demo formation built into this binary (`actors/demo/`),
//! installs it into a private home under the system temp directory, launches it with the task,
//! and prints the formation's answer and its call tree.
//!
//! The user's own `~/.murmur` is never read or written: the launch runs this same binary as
//! `mur run --roster` with `HOME` set to the private home, and the private home is removed at the
//! end. The launcher stops every member before it exits, so nothing is left running.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use super::{DemoArgs, Outcome};
use crate::diag::{self, Diagnostic};
use crate::manifest::{self, Kind};
use crate::names::ArtifactName;
use crate::paths::MurHome;
use crate::scaffold::demo;
use crate::store::{self, archive};
use crate::trace::formation as calltree;

pub fn run(a: &DemoArgs) -> Outcome {
    let task = match a.task.as_deref() {
        None => demo::DEFAULT_TASK,
        Some(t) if t.trim().is_empty() => {
            return Err(fail("the task is blank".into())
                .with_hint("give the formation a task in words, or none for the demo's own")
                .into());
        }
        Some(t) => t,
    };
    // From here on a signal is noted, not fatal, so the private home is always removed.
    note_signals()?;
    let root = PrivateDir::create()?;
    eprintln!(
        "mur demo: private home {} (removed when the demo ends)",
        root.path.display()
    );
    let outcome = launch(&root.path, task);
    root.remove();
    outcome.map_err(Into::into)
}

fn fail(msg: String) -> Diagnostic {
    Diagnostic::new(diag::E_DEMO_001, msg)
}

fn io_fail(what: &str, path: &Path, e: &std::io::Error) -> Diagnostic {
    fail(format!("cannot {what} {}: {e}", path.display()))
        .with_hint("the demo works in the system temp directory ($TMPDIR or /tmp); check that it is writable")
}

/// `<temp>/mur-demo-<uuid>`: made owner-only and fresh, removed by [`PrivateDir::remove`].
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create() -> Result<PrivateDir, Diagnostic> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("mur-demo-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| io_fail("make the private home", &path, &e))?;
        Ok(PrivateDir { path })
    }

    fn remove(self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("mur demo: could not remove {}: {e}", self.path.display());
        }
    }
}

/// Everything between making the private home and removing it; returns the launch's exit code.
fn launch(root: &Path, task: &str) -> Result<u8, Diagnostic> {
    let home = root.join("home");
    let project = root.join("demo");
    for (rel, bytes) in demo::FILES {
        let path = project.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io_fail("make", dir, &e))?;
        }
        std::fs::write(&path, bytes).map_err(|e| io_fail("write", &path, &e))?;
    }
    std::fs::create_dir_all(&home).map_err(|e| io_fail("make", &home, &e))?;
    let mur_home = MurHome::at_home(&home);
    let mut installed = Vec::new();
    for member in demo::MEMBERS {
        installed.push(build_and_install(&project.join(member), &mur_home.artifacts())?);
    }
    eprintln!("mur demo: built and installed {}", installed.join(", "));

    // The task goes in a file: a task that happened to name a file would otherwise be read as one.
    let task_file = root.join("task.txt");
    std::fs::write(&task_file, task).map_err(|e| io_fail("write", &task_file, &e))?;
    if let Some(code) = interrupted_before_launch() {
        return Ok(code);
    }
    let exe = std::env::current_exe()
        .map_err(|e| fail(format!("cannot find this mur binary to launch the formation: {e}")))?;
    eprintln!(
        "mur demo: mur run --roster {} --task {}",
        project.display(),
        shell_quoted(task)
    );
    let status = run_formation(&exe, root, &home, &project)?;

    print_calls(&mur_home);
    Ok(exit_code(status))
}

/// Packs a member's sources as `mur build` does and installs the archive into `store` as `mur
/// install -g` does. Returns `local/<name>@<version>`.
fn build_and_install(dir: &Path, store_root: &Path) -> Result<String, Diagnostic> {
    let manifest_path = dir.join("murmur.yaml");
    let m = manifest::load_file(&manifest_path)?.manifest;
    let source = std::fs::read(&manifest_path).map_err(|e| io_fail("read", &manifest_path, &e))?;
    let component = match &m.kind {
        Kind::Component { path } => {
            let p = dir.join(path);
            Some(std::fs::read(&p).map_err(|e| io_fail("read", &p, &e))?)
        }
        Kind::Model | Kind::Remote | Kind::ManifestOnly => None,
    };
    let zip = archive::try_pack(&source, component.as_deref())
        .map_err(|e| fail(format!("cannot pack {}@{}: {e}", m.name, m.version)))?;
    let name = ArtifactName::local(&m.name);
    store::install(store_root, &name, &m.version, &zip).map_err(|e| {
        fail(format!(
            "cannot install {name}@{} in {}: {e}",
            m.version,
            store_root.display()
        ))
    })?;
    Ok(format!("{name}@{}", m.version))
}

/// The last signal received while the formation runs; the wait loop passes it on.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_signal(sig: nix::libc::c_int) {
    // Only an atomic store: all a signal handler may safely do.
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Notes SIGINT, SIGTERM and SIGHUP instead of dying of them: before the launch `mur demo` stops
/// and cleans up, during it they are passed on to the launcher, which stops the formation.
fn note_signals() -> Result<(), Diagnostic> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(SigHandler::Handler(note_signal), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores into an atomic. A handler (not SIG_IGN) is reset to
        // the default in the child at exec, so the launcher installs its own as usual.
        unsafe { sigaction(sig, &action) }.map_err(|e| fail(format!("cannot set up signal handling: {e}")))?;
    }
    Ok(())
}

/// A signal that arrived before the launcher was started: the demo ends there, with 128 + N.
fn interrupted_before_launch() -> Option<u8> {
    let sig = nix::sys::signal::Signal::try_from(PENDING_SIGNAL.load(Ordering::SeqCst)).ok()?;
    if sig == nix::sys::signal::Signal::SIGHUP {
        crate::launcher::silence_a_hung_up_terminal();
    }
    eprintln!("mur demo: {sig} arrived before the formation was launched; nothing was started");
    u8::try_from(128 + sig as i32).ok()
}

/// Runs `mur run --roster <project> --task task.txt` in the private home with our stdio, and
/// waits for it, passing on each signal `mur demo` receives meanwhile to the launcher.
fn run_formation(exe: &Path, root: &Path, home: &Path, project: &Path) -> Result<ExitStatus, Diagnostic> {
    use nix::sys::signal::{Signal, kill};

    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg("--roster")
        .arg(project)
        .arg("--task")
        .arg("task.txt")
        .current_dir(root)
        .env("HOME", home)
        // The launcher then runs its own executable, this one, for every member: a
        // MURMUR_MUR_BINARY left in the user's shell must not swap the demo's members.
        .env_remove("MURMUR_MUR_BINARY")
        // The demo is a formation of its own, whatever environment it was started from.
        .env_remove("MURMUR_FORMATION_ID")
        .env_remove("MURMUR_FORMATION_CHANNEL")
        .env_remove("MURMUR_FORMATION_LIFELINE")
        .env_remove("MURMUR_FORMATION_PEERS")
        .stdin(Stdio::null());

    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot start {}: {e}", exe.display())))?;
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(e) => return Err(fail(format!("cannot wait for the formation's launcher: {e}"))),
        }
        let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if let Ok(sig) = Signal::try_from(sig) {
            if sig == Signal::SIGHUP {
                // What follows the launch must not fail on a terminal that hung up.
                crate::launcher::silence_a_hung_up_terminal();
            }
            let _ = kill(pid, sig);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The launcher's exit code, or 128+N when a signal N ended it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Prints the call tree of the formation the private home holds, from its members' traces.
fn print_calls(home: &MurHome) {
    let formation = formation_id(home);
    let mut traces = Vec::new();
    find_traces(&home.records(), 0, &mut traces);
    let sessions: Vec<_> = traces
        .iter()
        .filter_map(|p| crate::trace::read_records(p).ok())
        .collect();
    let lines = calltree::build(&sessions, formation.as_deref());
    println!();
    match &formation {
        Some(f) => println!("Calls in formation {f}:"),
        None => println!("Calls:"),
    }
    if lines.is_empty() {
        println!("  none recorded");
    }
    for line in &lines {
        println!("  {}", line.render());
    }
}

/// The formation launched in the private home: the newest `frm_` directory under
/// `formations/` (there is one, as the demo has peers).
fn formation_id(home: &MurHome) -> Option<String> {
    std::fs::read_dir(home.formations())
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| crate::ids::is(crate::ids::IdKind::Formation, n))
        .max()
}

/// Every `trace.jsonl` below `dir`; records directories sit a bounded depth below `records/`.
fn find_traces(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    const MAX_DEPTH: usize = 64;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() && depth < MAX_DEPTH => find_traces(&path, depth + 1, out),
            Ok(t) if t.is_file() && entry.file_name() == "trace.jsonl" => out.push(path),
            _ => {}
        }
    }
}

/// The task as a shell would need it, for the echo of the command line.
fn shell_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn exit_codes_follow_the_launcher() {
        // Raw wait statuses: an exit code sits in the second byte, a signal in the first.
        let table = [(0, 0u8), (1 << 8, 1), (143 << 8, 143), (15, 143), (9, 137), (2, 130)];
        for (raw, want) in table {
            assert_eq!(exit_code(ExitStatus::from_raw(raw)), want, "raw {raw}");
        }
    }

    #[test]
    fn the_echoed_task_is_shell_quoted() {
        assert_eq!(shell_quoted("plain"), "'plain'");
        assert_eq!(shell_quoted("the callee's door"), r"'the callee'\''s door'");
    }

    #[test]
    fn traces_are_found_at_any_depth_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let deep = dir.path().join("records/tmp/x/.murmur/formations/frm_1/analyst/ses_1");
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::write(deep.join("trace.jsonl"), "{}\n").expect("write");
        std::fs::write(deep.join("task.md"), "t").expect("write");
        let top = dir.path().join("records/proj/ses_2");
        std::fs::create_dir_all(&top).expect("mkdir");
        std::fs::write(top.join("trace.jsonl"), "{}\n").expect("write");
        let mut found = Vec::new();
        find_traces(&dir.path().join("records"), 0, &mut found);
        found.sort();
        assert_eq!(found, [top.join("trace.jsonl"), deep.join("trace.jsonl")]);
        let mut none = Vec::new();
        find_traces(&dir.path().join("absent"), 0, &mut none);
        assert!(none.is_empty());
    }
}
