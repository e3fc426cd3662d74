//! A session's records directory (docs/reference/formation.md#directories) and its console.
//!
//! `~/.murmur/records/<group>/<ses_id>/` at 0700 holds `trace.jsonl`, `logs/bootstrap.log`,
//! `out/result.txt` (+ `out/result_<tsk_id>.txt` per door task), `task.md`, `tmp/` and `home/`.
//! The runtime writes nothing into the work folder.
//!
//! The [`Console`] is how the session talks to the operator: every diagnostic goes to stderr *and*
//! to `logs/bootstrap.log`, because once a launcher is gone the log is all that remains. Writes to
//! stdout/stderr never panic: members ignore SIGPIPE, and a closed pipe must not stop a wind-down.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::diag::Diagnostic;

/// The prefix of everything the member runtime prints on stderr (docs/reference/codes.md).
pub const PREFIX: &str = "[capsule-runtime] ";

/// The text `out/result.txt` holds for a cancelled task [compatible].
pub const CANCELED_RESULT: &str = "canceled: the task was canceled before it completed, so it has no result";

/// One session's records directory, created with its fixed layout.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// Makes `dir` (0700, parents too) and its `logs/`, `out/`, `tmp/`, `home/`.
    pub fn create(dir: PathBuf) -> io::Result<Records> {
        let mut b = DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(&dir)?;
        // A directory that already existed keeps its mode from DirBuilder; make it owner-only.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        for sub in ["logs", "out", "tmp", "home"] {
            b.create(dir.join(sub))?;
        }
        Ok(Records { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn trace_path(&self) -> PathBuf {
        self.dir.join("trace.jsonl")
    }

    pub fn bootstrap_log(&self) -> PathBuf {
        self.dir.join("logs").join("bootstrap.log")
    }

    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// `task.md`: the `--task` text.
    pub fn write_task(&self, text: &str) -> io::Result<()> {
        write_private(&self.dir.join("task.md"), text.as_bytes())
    }

    /// Records a task's result: `out/result_<tsk>.txt` for a door task, and `out/result.txt`,
    /// which always holds the result of the last task that ran (the `--task` task's, when the
    /// session has one and it ran last).
    pub fn write_result(&self, task_id: &str, door_task: bool, text: &str) -> io::Result<()> {
        let out = self.dir.join("out");
        if door_task {
            write_private(&out.join(format!("result_{task_id}.txt")), text.as_bytes())?;
        }
        write_private(&out.join("result.txt"), text.as_bytes())
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// Stderr plus `logs/bootstrap.log` (once the records directory exists), and a non-panicking
/// stdout. Cheap to clone; shared by every part of the session.
#[derive(Debug, Clone, Default)]
pub struct Console {
    log: Arc<Mutex<LogState>>,
}

/// Lines printed before the records directory exists are kept, then written first.
#[derive(Debug, Default)]
struct LogState {
    file: Option<File>,
    pending: Vec<String>,
}

impl Console {
    pub fn new() -> Console {
        Console::default()
    }

    /// From now on, stderr lines are also appended to `path`; lines printed before are written first.
    pub fn attach_log(&self, path: &Path) -> io::Result<()> {
        let mut f = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        let mut st = crate::sync::lock(&self.log);
        for line in st.pending.drain(..) {
            let _ = writeln!(f, "{line}");
        }
        st.file = Some(f);
        Ok(())
    }

    /// A line on stderr (no prefix added) and in the log. A line may quote a member's, a model's
    /// or a remote agent's text (a failure): on a terminal its control characters are made
    /// visible (`question::for_stream`); a pipe and the log get it as given.
    pub fn err_line(&self, line: &str) {
        let mut stderr = io::stderr().lock();
        let terminal = stderr.is_terminal();
        let _ = writeln!(stderr, "{}", crate::question::for_stream(line, terminal));
        let _ = stderr.flush();
        self.log_only(line);
    }

    /// A line for the log only (e.g. a component's own output).
    pub fn log_only(&self, line: &str) {
        let mut st = crate::sync::lock(&self.log);
        match st.file.as_mut() {
            Some(f) => {
                let _ = writeln!(f, "{line}");
            }
            None => st.pending.push(line.to_string()),
        }
    }

    /// A diagnostic behind the member runtime's prefix, on stderr and in the log.
    pub fn diag(&self, d: &Diagnostic) {
        self.err_line(&d.render(PREFIX));
    }

    /// A runtime notice: `[capsule-runtime] <text>`.
    pub fn note(&self, text: &str) {
        self.err_line(&format!("{PREFIX}{text}"));
    }

    /// One line on stdout, flushed; a closed stdout is ignored.
    pub fn out_line(&self, line: &str) {
        let mut stdout = io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }

    /// A task's answer or failure text on stdout, as [`Console::out_line`]: on a terminal its
    /// control characters are made visible (`question::for_stream`); piped, its bytes are
    /// unchanged.
    pub fn out_text(&self, text: &str) {
        let terminal = io::stdout().is_terminal();
        self.out_line(&crate::question::for_stream(text, terminal));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn layout_and_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("records/srv/proj/ses_1");
        let r = Records::create(dir.clone()).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("records/srv")), 0o700, "parents are private too");
        for sub in ["logs", "out", "tmp", "home"] {
            assert!(dir.join(sub).is_dir(), "{sub}");
        }
        r.write_task("do it").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("task.md")).unwrap(), "do it");
        assert_eq!(mode(&dir.join("task.md")), 0o600);
        assert_eq!(r.trace_path(), dir.join("trace.jsonl"));
        assert_eq!(r.bootstrap_log(), dir.join("logs/bootstrap.log"));
    }

    #[test]
    fn results_go_to_the_task_file_and_result_txt() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Records::create(tmp.path().join("s")).unwrap();
        r.write_result("tsk_a", false, "first").unwrap();
        assert_eq!(
            std::fs::read_to_string(r.dir().join("out/result.txt")).unwrap(),
            "first"
        );
        assert!(!r.dir().join("out/result_tsk_a.txt").exists());
        r.write_result("tsk_b", true, CANCELED_RESULT).unwrap();
        assert_eq!(
            std::fs::read_to_string(r.dir().join("out/result.txt")).unwrap(),
            CANCELED_RESULT
        );
        assert_eq!(
            std::fs::read_to_string(r.dir().join("out/result_tsk_b.txt")).unwrap(),
            CANCELED_RESULT
        );
    }

    #[test]
    fn console_copies_stderr_lines_to_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("bootstrap.log");
        let c = Console::new();
        c.note("before the log exists");
        c.attach_log(&log).unwrap();
        c.diag(&Diagnostic::new(crate::diag::W_RUN_007, "w"));
        c.log_only("quiet");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "[capsule-runtime] before the log exists\n[capsule-runtime] warning[W-RUN-007]: w\nquiet\n"
        );
    }
}
