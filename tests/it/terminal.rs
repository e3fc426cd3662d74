//! A formation on a real terminal: ^C typed at it, and the terminal hanging up. The launcher (or
//! `mur demo`) runs as the session leader of a fresh pseudo-terminal, in its foreground process
//! group, as it would from a shell; the entry member shares that group, so the terminal's
//! signals reach it directly, as they reach the launcher.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use serde_json::Value;

use crate::faults::{all_members_gone, members_of_home, nothing_claims_to_run};
use crate::support::{Launcher, Sandbox, door_rpc, member_sessions, running_record, stderr, stdout, wait_until};

/// A process whose controlling terminal is a pseudo-terminal only this test holds the master of.
pub(crate) struct OnTerminal {
    child: Child,
    master: Option<File>,
    out: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl OnTerminal {
    /// Starts `cmd` with stdin, stdout and stderr on a new terminal, as the leader of a new
    /// session whose controlling terminal it is.
    pub(crate) fn start(mut cmd: Command) -> OnTerminal {
        // Both sides close-on-exec from the start: a copy of the master in any other process
        // (a parallel test's, or a member) would keep the terminal from hanging up.
        let pty = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC).expect("posix_openpt");
        nix::pty::grantpt(&pty).expect("grantpt");
        nix::pty::unlockpt(&pty).expect("unlockpt");
        let name = nix::pty::ptsname_r(&pty).expect("ptsname");
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_NOCTTY)
            .open(&name)
            .expect("open the terminal");
        // SAFETY: the descriptor comes straight from `into_raw_fd`, so this is its only owner.
        let master = unsafe { File::from_raw_fd(pty.into_raw_fd()) };
        cmd.stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave));
        // SAFETY: between fork and exec this calls only setsid(2) and ioctl(2), both
        // async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                if nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on the terminal");
        drop(cmd); // the parent's copies of the slave side
        let reading = master.try_clone().expect("dup master");
        let flags = OFlag::from_bits_truncate(
            fcntl(std::os::fd::AsRawFd::as_raw_fd(&reading), FcntlArg::F_GETFL).expect("getfl"),
        );
        fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&reading),
            FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK),
        )
        .expect("nonblocking");
        let out = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s) = (out.clone(), stop.clone());
        let reader = std::thread::spawn(move || {
            let mut reading = reading;
            let mut buf = [0u8; 4096];
            // The terminal is read all along, so nothing written to it ever blocks.
            while !s.load(Ordering::Acquire) {
                match reading.read(&mut buf) {
                    Ok(n) if n > 0 => o.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]),
                    // EIO: no process holds the terminal any more, and all it wrote has been read.
                    Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => break,
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        OnTerminal {
            child,
            master: Some(master),
            out,
            stop,
            reader: Some(reader),
        }
    }

    pub(crate) fn output(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Types `bytes` at the terminal, as a user at its keyboard.
    fn type_bytes(&mut self, bytes: &[u8]) {
        let master = self.master.as_mut().expect("the terminal is still there");
        master.write_all(bytes).expect("write to the terminal");
    }

    /// Closes the terminal's master side, as closing a terminal window does: the kernel hangs
    /// the terminal up.
    fn hang_up(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            r.join().expect("reader");
        }
        self.master = None;
    }

    /// The exit code (128 + N for signal N), failing the test after `limit`.
    pub(crate) fn wait(&mut self, limit: Duration) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                // Its last output is read once the reader has met the terminal's end (EIO).
                if let Some(r) = &self.reader {
                    while !r.is_finished() && start.elapsed() < limit {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                return s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0));
            }
            assert!(
                start.elapsed() < limit,
                "still running after {limit:?}; the terminal shows:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OnTerminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

fn types(recs: &[Value]) -> Vec<&str> {
    recs.iter().map(|r| r["event_type"].as_str().unwrap_or("")).collect()
}

/// A formation whose entry is busy until it is stopped: the lead spins on its `--task` task, and
/// an idle worker serves its door. (The entry does its own work, so no peer's wind-down can
/// reach its task before its own lifeline does.)
const BUSY_ROSTER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/spinner, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\n";
const BUSY_ARGS: [&str; 4] = ["run", "--roster", "--task", "in flight"];
const BUSY_ENV: (&str, &str) = ("MURMUR_TEST_TIMING", "component_task=60s");

fn busy_formation() -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_component("spinner", "actors/spin/capsule.wat", "");
    sb.install_actor("echo");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), BUSY_ROSTER).expect("roster");
    (sb, dir)
}

/// Waits until the lead's door shows its task working, so the entry is busy.
fn until_the_entry_is_busy(sb: &Sandbox, shows: impl Fn() -> String) {
    let lead = running_record(sb, "lead");
    wait_until(Duration::from_secs(60), || {
        let listed = door_rpc(&lead, "ListTasks", serde_json::json!({}));
        listed["result"]["tasks"][0]["status"]["state"] == "TASK_STATE_WORKING"
    })
    .unwrap_or_else(|| panic!("the lead's task never ran; output:\n{}", shows()));
}

/// The busy formation, started on a terminal.
fn busy_formation_on_a_terminal() -> (Sandbox, PathBuf, OnTerminal) {
    let (sb, dir) = busy_formation();
    let mut cmd = sb.mur(&dir);
    cmd.args(BUSY_ARGS).env(BUSY_ENV.0, BUSY_ENV.1);
    let term = OnTerminal::start(cmd);
    until_the_entry_is_busy(&sb, || term.output());
    (sb, dir, term)
}

/// Every member wound down through its lifeline: the busy entry's trace has `formation_ended`,
/// then its task cancelled, then `session_end formation_ended`, and its result file the
/// `canceled:` line; the idle worker's has `formation_ended`, then `session_end ok`; nothing
/// runs or claims to.
fn assert_wound_down(sb: &Sandbox, dir: &Path, launcher: u32, what: &str) {
    all_members_gone(sb, launcher, Instant::now(), what);
    for (member, busy) in [("lead", true), ("worker", false)] {
        let sessions = member_sessions(sb, member);
        assert_eq!(sessions.len(), 1, "{what}: one session of {member}");
        let (records_dir, recs) = &sessions[0];
        let t = types(recs);
        let ended = t.iter().position(|e| *e == "formation_ended");
        assert!(
            ended.is_some(),
            "{what}: {member} wound down through its lifeline: {t:?}"
        );
        assert_eq!(t.last(), Some(&"session_end"), "{what}: {member}: {t:?}");
        let status = &recs.last().expect("records")["exit_status"];
        if busy {
            let canceled = t.iter().position(|e| *e == "task_canceled");
            assert!(canceled > ended, "{what}: {member}'s task was cancelled: {t:?}");
            assert_eq!(status, "formation_ended", "{what}: {member}");
            let result = std::fs::read_to_string(records_dir.join("out/result.txt"))
                .unwrap_or_else(|e| panic!("{what}: {member}'s out/result.txt: {e}"));
            assert!(
                result.lines().any(|l| l.starts_with("canceled: ")),
                "{what}: {member}: {result:?}"
            );
        } else {
            assert_eq!(status, "ok", "{what}: {member}");
        }
    }
    nothing_claims_to_run(sb, dir, what);
}

#[test]
fn ctrl_c_at_the_terminal_winds_every_member_down() {
    let (sb, dir, mut term) = busy_formation_on_a_terminal();
    term.type_bytes(b"\x03");
    let code = term.wait(Duration::from_secs(60));
    let shown = term.output();
    assert_eq!(code, 130, "{shown}");
    assert!(
        shown.contains("[mur run] SIGINT: the formation was stopped; stopped: lead (pid "),
        "{shown}"
    );
    assert!(
        !shown.contains("E-RUN-040"),
        "no member reports an error of its own: {shown}"
    );
    assert_wound_down(&sb, &dir, term.child.id(), "^C");
}

#[test]
fn a_terminal_that_hangs_up_winds_every_member_down() {
    let (sb, dir, mut term) = busy_formation_on_a_terminal();
    term.hang_up();
    let code = term.wait(Duration::from_secs(60));
    assert_eq!(code, 129, "the launcher ends as SIGHUP ends it");
    assert_wound_down(&sb, &dir, term.child.id(), "hangup");
}

#[test]
fn sighup_to_the_launchers_process_group_winds_every_member_down() {
    // A shell whose terminal closes sends SIGHUP to each of its jobs' process groups: the
    // launcher and the entry get it at once.
    let (sb, dir) = busy_formation();
    let launch = Launcher::start(&sb, &dir, &BUSY_ARGS[2..], &[BUSY_ENV]);
    until_the_entry_is_busy(&sb, || launch.stderr());
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(launch.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP to the launcher's group");
    let pid = launch.pid();
    let (code, out, err) = launch.wait(Duration::from_secs(60));
    assert_eq!(code, 129, "{err}");
    assert!(
        err.contains("[mur run] SIGHUP: the formation was stopped; stopped: lead (pid "),
        "{err}"
    );
    assert!(
        out.starts_with("canceled: "),
        "the entry reports its cancelled task: {out}"
    );
    assert_wound_down(&sb, &dir, pid, "SIGHUP to the group");
}

#[test]
fn ctrl_c_during_mur_demo_leaves_nothing_behind() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let tmp = sb.path("tmp");
    let mut cmd = sb.mur(&cwd);
    cmd.arg("demo").env("TMPDIR", &tmp);
    let mut term = OnTerminal::start(cmd);
    // ^C as soon as the demo has made its private home: while it builds, or launches.
    wait_until(Duration::from_secs(60), || {
        term.output().contains("mur demo: private home ")
    })
    .unwrap_or_else(|| panic!("no private home line:\n{}", term.output()));
    term.type_bytes(b"\x03");
    let code = term.wait(Duration::from_secs(120));
    let shown = term.output();
    assert_eq!(code, 130, "{shown}");
    let private = shown
        .lines()
        .find_map(|l| l.strip_prefix("mur demo: private home "))
        .and_then(|l| l.split(' ').next())
        .expect("the private home's path")
        .to_string();
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}\n{shown}");
    let home = Path::new(&private).join("home");
    assert!(
        wait_until(Duration::from_secs(30), || members_of_home(&home, 0).is_empty()).is_some(),
        "demo members still running: {:?}",
        members_of_home(&home, 0)
    );
}

/// A slow step shows progress on a terminal and nothing when piped: `mur install` compiling a
/// component says what it compiles and how long it took; the same install into another home with
/// stderr piped prints no progress at all. Before, both printed nothing.
#[test]
fn compiling_at_install_shows_progress_on_a_terminal_and_nothing_when_piped() {
    let sb = Sandbox::new();
    let zip = sb.build_component("echo", "actors/echo/capsule.wat", "");
    let on_terminal = |args: &[&str], cwd: &Path| {
        let mut cmd = sb.mur(cwd);
        cmd.args(args).env("TERM", "xterm");
        let mut t = OnTerminal::start(cmd);
        assert_eq!(t.wait(Duration::from_secs(60)), 0, "{}", t.output());
        t.output()
    };
    let shown = on_terminal(&["install", "-g", zip.to_str().expect("utf-8 path")], sb.dir.path());
    assert!(shown.contains("compiling local/echo@0.1.0 ("), "{shown:?}");
    assert!(shown.contains("compiled local/echo@0.1.0 in "), "{shown:?}");

    // A model capsule's WebAssembly tool is compiled at install too, and says so.
    let counter = sb.path("src/counter");
    std::fs::create_dir_all(counter.join("tools/words")).expect("tool dir");
    std::fs::copy(
        crate::support::repo_root().join("src/capsule/testdata/words-tool.wat"),
        counter.join("tools/words/tool.wat"),
    )
    .expect("tool");
    std::fs::write(
        counter.join("murmur.yaml"),
        "name: counter\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: http://127.0.0.1:9/v1\n  \
         model: test-model\ntools:\n  - name: words\n    component: tools/words/tool.wat\n",
    )
    .expect("manifest");
    let out = sb.run(&counter, &["build", "."]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let zip = counter.join("counter-0.1.0.mur.zip");
    let shown = on_terminal(&["install", "-g", zip.to_str().expect("utf-8 path")], sb.dir.path());
    assert!(
        shown.contains("compiling local/counter@0.1.0 tool words ("),
        "{shown:?}"
    );
    assert!(
        shown.contains("compiled local/counter@0.1.0 tool words in "),
        "{shown:?}"
    );

    // A toolchain's run is counted in place on a terminal, then cleared for the line saying it
    // was built; built again unchanged, nothing runs.
    let out = sb.run(sb.dir.path(), &["new", "--capsule", "probe", "--lang", "python"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bin = sb.path("fake-bin");
    let tool = bin.join("componentize-py");
    std::fs::write(
        &tool,
        "#!/bin/sh\nwhile [ \"$1\" != -o ]; do shift; done; printf '(component)' > \"$2\"\n",
    )
    .expect("fake tool");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let build = || {
        let mut cmd = sb.mur(sb.dir.path());
        cmd.args(["build", "probe"])
            .env("TERM", "xterm")
            .env("PATH", crate::support::toolchains::path_with(&bin));
        let mut t = OnTerminal::start(cmd);
        assert_eq!(t.wait(Duration::from_secs(60)), 0, "{}", t.output());
        t.output()
    };
    let shown = build();
    assert!(
        shown.contains(" building ") && shown.contains("/probe/capsule.wasm 0s"),
        "{shown:?}"
    );
    assert!(shown.contains("\r\x1b[2KBuilt "), "{shown:?}");
    let shown = build();
    assert!(
        shown.contains("Unchanged ") && !shown.contains(" building "),
        "{shown:?}"
    );

    // A cold lone run and a cold launch compile too, and say so.
    let compiled = sb.home().join(".murmur/compiled");
    std::fs::remove_dir_all(&compiled).expect("empty the compiled cache");
    let work = sb.path("work");
    let shown = on_terminal(
        &[
            "run",
            "--capsule",
            "local/echo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ],
        &work,
    );
    assert!(
        shown.contains("[capsule-runtime] compiled local/echo@0.1.0 in "),
        "{shown:?}"
    );
    std::fs::remove_dir_all(&compiled).expect("empty the compiled cache");
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: solo, capsule: local/echo, version: 0.1.0, entry: true}\n",
    )
    .expect("roster");
    let shown = on_terminal(&["run", "--roster", "--task", "hi"], &dir);
    assert!(shown.contains("[mur run] compiled local/echo@0.1.0 in "), "{shown:?}");

    let piped = Sandbox::new();
    let zip = piped.build_component("echo", "actors/echo/capsule.wat", "");
    let out = piped.run(piped.dir.path(), &["install", "-g", zip.to_str().expect("utf-8 path")]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "no progress when stderr is not a terminal"
    );
}

/// Waits until the terminal shows `text`.
fn until_shown(term: &OnTerminal, text: &str) {
    wait_until(Duration::from_secs(60), || term.output().contains(text))
        .unwrap_or_else(|| panic!("the terminal never showed {text:?}; it shows:\n{}", term.output()));
}

#[test]
fn a_capsule_run_at_a_terminal_prints_the_question_and_takes_the_typed_answer() {
    use crate::answer::{KEY, KEY_VAR, answers_seen, ask, install_asker, paint_with_answers};
    let sb = Sandbox::new();
    let provider = crate::support::provider::Provider::start(vec![ask("c1", "Which colour?"), paint_with_answers()]);
    install_asker(&sb, "painter", provider.url(), 120, "");
    let mut cmd = sb.mur(&sb.path("work"));
    cmd.args([
        "run",
        "--capsule",
        "local/painter",
        "--capsule-version",
        "0.1.0",
        "--task",
        "paint the fence",
    ])
    .env(KEY_VAR, KEY);
    let mut term = OnTerminal::start(cmd);
    until_shown(&term, "your answer (one line, Enter sends it): ");
    let shown = term.output();
    assert!(shown.contains("[mur run] local/painter asks (task tsk_"), "{shown}");
    assert!(shown.contains("Which colour?"), "{shown}");
    assert!(!shown.contains("waits for input;"), "a terminal needs no hint: {shown}");
    // An empty line is asked again; the next line answers.
    term.type_bytes(b"\n");
    until_shown(&term, "an empty line is no answer");
    term.type_bytes(b"green\n");
    assert_eq!(term.wait(Duration::from_secs(60)), 0, "{}", term.output());
    assert!(term.output().contains("Painted green"), "{}", term.output());
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        answers_seen(&reqs[1]),
        ["green"],
        "the model was handed the typed answer, fenced"
    );
}

#[test]
fn a_formation_at_a_terminal_puts_its_entrys_question_to_the_person_there() {
    use crate::answer::{KEY, KEY_VAR, answers_seen, ask, asking_formation, paint_with_answers};
    let (sb, dir, provider) = asking_formation(vec![ask("c1", "Which colour?"), paint_with_answers()]);
    let mut cmd = sb.mur(&dir);
    cmd.args(["run", "--roster", "--task", "paint the fence"])
        .env(KEY_VAR, KEY);
    let mut term = OnTerminal::start(cmd);
    until_shown(&term, "your answer (one line, Enter sends it): ");
    let shown = term.output();
    assert!(shown.contains("[mur run] lead asks (task tsk_"), "{shown}");
    assert!(shown.contains("Which colour?"), "{shown}");
    term.type_bytes(b"blue\n");
    assert_eq!(term.wait(Duration::from_secs(60)), 0, "{}", term.output());
    assert!(term.output().contains("Painted blue"), "{}", term.output());
    assert_eq!(answers_seen(&provider.requests()[1]), ["blue"]);
    let launcher = term.child.id();
    all_members_gone(&sb, launcher, Instant::now(), "after the answered formation");
    nothing_claims_to_run(&sb, &dir, "after the answered formation");
    // `mur trace show` lists the question: who asked, how it ended, the sizes only.
    let output = term.output();
    let frm = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("formation: "))
        .map(|f| f.trim().to_string())
        .unwrap_or_else(|| panic!("no formation line:\n{output}"));
    let shown = crate::support::stdout(&sb.run(&dir, &["trace", "show", &frm]));
    let line = shown
        .lines()
        .skip_while(|l| *l != "questions:")
        .nth(1)
        .unwrap_or_else(|| panic!("no questions in:\n{shown}"));
    assert!(line.starts_with("  tsk_"), "{line}");
    assert!(
        line.contains("  lead asks  answered  waited ") && line.ends_with("  question 13 B  answer 4 B"),
        "{line}"
    );
    let json: serde_json::Value = serde_json::from_str(&crate::support::stdout(
        &sb.run(&dir, &["trace", "show", &frm, "--json"]),
    ))
    .expect("json");
    assert_eq!(json["questions"][0]["asked_by"], serde_json::json!(["lead"]));
    assert_eq!(json["questions"][0]["outcome"], "answered");
}

#[test]
fn a_workers_question_passed_up_by_the_lead_is_answered_at_the_terminal() {
    use crate::asking::{KEY, KEY_VAR, relay_formation};
    let (sb, dir, lead, worker) = relay_formation();
    let mut cmd = sb.mur(&dir);
    cmd.args(["run", "--roster", "--task", "Paint the shed"])
        .env(KEY_VAR, KEY);
    let mut term = OnTerminal::start(cmd);
    until_shown(&term, "your answer (one line, Enter sends it): ");
    let shown = term.output();
    // Who asked, and through whom: the worker's question, passed up by the entry.
    assert!(
        shown.contains("[mur run] worker asks (through lead) (task tsk_"),
        "{shown}"
    );
    assert!(shown.contains("The worker asks: which colour?"), "{shown}");
    term.type_bytes(b"blue\n");
    assert_eq!(term.wait(Duration::from_secs(60)), 0, "{}", term.output());
    assert!(
        term.output().contains("Done: worker => Painted it blue"),
        "{}",
        term.output()
    );
    assert_eq!((lead.requests().len(), worker.requests().len()), (6, 2));
    all_members_gone(&sb, term.child.id(), Instant::now(), "after the relayed answer");
    nothing_claims_to_run(&sb, &dir, "after the relayed answer");
}

/// What a hostile model answers: a window title (OSC 0), a screen clear (CSI 2 J) and a
/// clipboard write (OSC 52).
const HOSTILE: &str = "\u{1b}]0;owned\u{7}title \u{1b}[2J cleared \u{1b}]52;c;aGk=\u{7} copied";
/// The same text as a terminal must show it: every control character made visible.
const HOSTILE_SHOWN: &str = "\\u{1b}]0;owned\\u{7}title \\u{1b}[2J cleared \\u{1b}]52;c;aGk=\\u{7} copied";
/// A provider's own words in the trace: its model's name and why it stopped.
const MODEL: &str = "scripted\u{1b}]0;model\u{7}";
const MODEL_SHOWN: &str = "scripted\\u{1b}]0;model\\u{7}";
const STOPPED: &str = "stop\u{1b}[2J";
const STOPPED_SHOWN: &str = "stop\\u{1b}[2J";

/// A Chat Completions reply of `text`, with the provider's model name and finish reason
/// carrying control sequences too.
fn hostile_reply(text: &str) -> crate::support::provider::Step {
    crate::support::provider::Reply::json(serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "finish_reason": STOPPED, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
    .into()
}

/// No raw control sequence of [`HOSTILE`], [`MODEL`] or [`STOPPED`] reached the terminal.
fn assert_none_raw(shown: &str, what: &str) {
    for raw in ["\u{1b}]0;", "\u{1b}[2J", "\u{1b}]52;", "\u{7}"] {
        assert!(
            !shown.contains(raw),
            "{what}: {raw:?} reached the terminal raw:\n{shown:?}"
        );
    }
}

/// `mur run --task`: the answer and the failure text a model gave reach a terminal with their
/// control characters made visible, and a pipe as the very bytes the model sent.
#[test]
fn a_models_control_sequences_reach_a_terminal_made_visible_and_a_pipe_unchanged() {
    use crate::answer::{KEY, KEY_VAR, install_asker, task_run};
    let failure = format!("inference failed: 400 {HOSTILE}");
    for name in ["answers", "fails"] {
        let step = || match name {
            "answers" => hostile_reply(HOSTILE),
            _ => crate::support::provider::Reply::status(400, HOSTILE).into(),
        };
        // On a terminal.
        let sb = Sandbox::new();
        let provider = crate::support::provider::Provider::start(vec![step(), step(), step()]);
        install_asker(&sb, name, provider.url(), 60, "");
        let mut cmd = sb.mur(&sb.path("work"));
        cmd.args([
            "run",
            "--capsule",
            &format!("local/{name}"),
            "--capsule-version",
            "0.1.0",
        ])
        .args(["--task", "say it"])
        .env(KEY_VAR, KEY);
        let mut term = OnTerminal::start(cmd);
        let code = term.wait(Duration::from_secs(60));
        let shown = term.output();
        assert_eq!(code, if name == "answers" { 0 } else { 1 }, "{shown}");
        assert_none_raw(&shown, name);
        let want = if name == "answers" {
            HOSTILE_SHOWN.to_string()
        } else {
            format!("ended failed: inference failed: 400 {HOSTILE_SHOWN}")
        };
        assert!(shown.contains(&want), "{name}: {want:?} not on the terminal:\n{shown}");

        // Piped: the same bytes the model sent.
        let out = task_run(&sb, name, "say it").output().expect("mur run");
        if name == "answers" {
            assert_eq!(out.stdout, format!("{HOSTILE}\n").into_bytes());
        } else {
            assert_eq!(out.status.code(), Some(1));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(&format!("ended failed: {failure}")), "{err:?}");
        }

        // A formation whose entry it is, on a terminal: the answer is the entry's own output, the
        // failure comes through the launcher's relay of the entry's stderr.
        let dir = sb.path("formation");
        let roster = format!(
            "roster_version: 1\nmembers:\n  - {{name: lead, capsule: local/{name}, version: 0.1.0, entry: true}}\n"
        );
        std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
        let mut cmd = sb.mur(&dir);
        cmd.args(["run", "--roster", "--task", "say it"]).env(KEY_VAR, KEY);
        let mut term = OnTerminal::start(cmd);
        term.wait(Duration::from_secs(60));
        let shown = term.output();
        assert_none_raw(&shown, &format!("{name} in a formation"));
        assert!(
            shown.contains(&want),
            "{name} in a formation: {want:?} not on the terminal:\n{shown}"
        );
    }
}

/// `mur send`, `mur answer` and `mur trace show` print what a member, its model and its
/// provider said: on a terminal with control characters made visible, piped unchanged.
#[test]
fn send_answer_and_trace_show_make_control_sequences_visible_on_a_terminal_only() {
    use crate::answer::{KEY, KEY_VAR, ask, install_asker, task_in};
    let sb = Sandbox::new();
    let provider = crate::support::provider::Provider::start(vec![
        hostile_reply(HOSTILE),
        hostile_reply(HOSTILE),
        ask("c1", "Which colour?"),
        hostile_reply(HOSTILE),
    ]);
    install_asker(
        &sb,
        "teller",
        provider.url(),
        60,
        "  task_acceptance: queue\n  queue_depth: 4\n  after_task: sleep\n",
    );
    let dir = sb.path("work");
    let mut serve = sb.mur(&dir);
    serve
        .args([
            "run",
            "--capsule",
            "local/teller",
            "--capsule-version",
            "0.1.0",
            "--json",
        ])
        .env(KEY_VAR, KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let session = Launcher::spawn(serve);
    wait_until(Duration::from_secs(60), || session.stdout().lines().next().is_some())
        .unwrap_or_else(|| panic!("no readiness line:\n{}", session.stderr()));
    let ready: Value = serde_json::from_str(session.stdout().lines().next().unwrap_or("")).expect("readiness line");
    let id = ready["session_id"].as_str().expect("session id").to_string();
    let on_terminal = |args: &[&str]| {
        let mut cmd = sb.mur(&dir);
        cmd.args(args);
        let mut term = OnTerminal::start(cmd);
        let code = term.wait(Duration::from_secs(60));
        (code, term.output())
    };

    let (code, shown) = on_terminal(&["send", &id, "one"]);
    assert_eq!(code, 0, "{shown}");
    assert_none_raw(&shown, "mur send");
    assert!(shown.contains(HOSTILE_SHOWN), "{shown}");

    let out = sb.mur(&dir).args(["send", &id, "two"]).output().expect("mur send");
    assert_eq!(out.stdout, format!("{HOSTILE}\n").into_bytes(), "{}", stderr(&out));

    let out = sb.mur(&dir).args(["send", &id, "three"]).output().expect("mur send");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let task = task_in(&stderr(&out)).expect("the asking task's id");
    let (code, shown) = on_terminal(&["answer", &task, "green"]);
    assert_eq!(code, 0, "{shown}");
    assert_none_raw(&shown, "mur answer");
    assert!(shown.contains(HOSTILE_SHOWN), "{shown}");

    let (code, shown) = on_terminal(&["trace", "show", &id]);
    assert_eq!(code, 0, "{shown}");
    assert_none_raw(&shown, "mur trace show");
    for want in [
        format!("finish_reason={STOPPED_SHOWN}"),
        format!("response_model={MODEL_SHOWN}"),
    ] {
        assert!(shown.contains(&want), "{want:?} not on the terminal:\n{shown}");
    }
    let out = sb
        .mur(&dir)
        .args(["trace", "show", &id])
        .output()
        .expect("mur trace show");
    let piped = stdout(&out);
    for want in [format!("finish_reason={STOPPED}"), format!("response_model={MODEL}")] {
        assert!(piped.contains(&want), "{want:?} not piped as it came:\n{piped:?}");
    }
}

/// A member that is not the entry speaks through the launcher, which relays its stderr and
/// quotes its last lines when it cannot start: text a server sent it (here an MCP server's
/// refusal) reaches the terminal with its control characters made visible.
#[test]
fn a_peers_relayed_lines_reach_a_terminal_made_visible() {
    // The same refusal to the `server/discover` probe (which falls back to the handshake) and to
    // `initialize`, whose failure is the one reported.
    let refusal = || crate::support::provider::Reply::status(500, HOSTILE).into();
    let mcp = crate::support::provider::Provider::start(vec![refusal(), refusal()]);
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_manifest(
        "toolish",
        &format!(
            "name: toolish\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: http://127.0.0.1:9/v1\n  model: m\n\
             tools:\n  - name: calc\n    mcp: {}/mcp\n    allow: [add]\n",
            mcp.url()
        ),
    );
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/toolish, version: 0.1.0}\n",
    )
    .expect("roster");
    let mut cmd = sb.mur(&dir);
    cmd.args(["run", "--roster", "--task", "hi"]);
    let mut term = OnTerminal::start(cmd);
    let code = term.wait(Duration::from_secs(60));
    let shown = term.output();
    assert_ne!(code, 0, "{shown}");
    assert_none_raw(&shown, "a peer's lines");
    assert!(
        shown.contains("[worker] ") && shown.contains(HOSTILE_SHOWN),
        "the peer's refusal is not on the terminal:\n{shown}"
    );
}
