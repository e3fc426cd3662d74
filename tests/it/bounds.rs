//! Bounded parsing and limits through the real `mur` binary (issue 14, "least privilege on a
//! shared machine"): a tiny archive whose manifest aliases a large scalar is refused in bounded
//! memory, and a running record's contents never name a file outside the running directory.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{Sandbox, stderr, stdout};

/// Peak resident memory `mur install -g` of the alias bomb may reach. Refusing it builds at most
/// the 4 MiB text budget (plus one anchor copy); before the budget it tried to build 3 GB.
const CEILING_KIB: i64 = 64 << 10;

/// Address space the command may map, so that a loader without the budget aborts instead of
/// taking the machine's memory.
const ADDRESS_SPACE: u64 = 1 << 30;

/// A `murmur.yaml` whose ~100 KB anchored scalar is aliased 30 000 times: 3 GB once expanded.
fn alias_bomb() -> String {
    format!(
        "name: bomb\nversion: 0.1.0\npad: &a {}\nmany: [{}]\n",
        "x".repeat(100_000),
        vec!["*a"; 30_000].join(", ")
    )
}

fn write_zip(path: &Path, entries: &[(&str, &[u8])]) {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        zip.start_file(*name, zip::write::SimpleFileOptions::default())
            .expect("zip entry");
        zip.write_all(data).expect("zip write");
    }
    std::fs::write(path, zip.finish().expect("zip").into_inner()).expect("write zip");
}

/// Runs `cmd` to its end under [`ADDRESS_SPACE`]; returns its exit code (or -signal), its stderr
/// and its peak resident set in KiB, as the kernel accounted it for this one child.
fn run_measured(mut cmd: Command) -> (i32, String, i64) {
    let err = tempfile::NamedTempFile::new().expect("stderr file");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err.reopen().expect("stderr file"));
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let limit = nix::libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if nix::libc::setrlimit(nix::libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped below by wait4, which `Child::wait` cannot replace: it reports no resource usage.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("spawn mur");
    let pid = child.id() as nix::libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    // wait4 reaps this child alone and reports its own peak RSS (ru_maxrss, KiB on Linux), which
    // no sampling of /proc can miss.
    let got = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if nix::libc::WIFEXITED(status) {
        nix::libc::WEXITSTATUS(status)
    } else {
        -nix::libc::WTERMSIG(status)
    };
    let text = std::fs::read_to_string(err.path()).unwrap_or_default();
    (code, text, usage.ru_maxrss)
}

#[test]
fn an_alias_bomb_archive_is_refused_in_bounded_memory() {
    let sb = Sandbox::new();
    let manifest = alias_bomb();
    let zip = sb.dir.path().join("bomb-0.1.0.mur.zip");
    write_zip(&zip, &[("murmur.yaml", manifest.as_bytes())]);
    let size = std::fs::metadata(&zip).expect("zip").len();
    assert!(size < 2048, "the archive is {size} bytes");

    let mut cmd = sb.mur(sb.dir.path());
    cmd.args(["install", "-g", zip.to_str().expect("utf-8 path")]);
    let (code, err, peak_kib) = run_measured(cmd);
    assert_eq!(code, 1, "stderr: {err}");
    assert!(
        err.starts_with("error[E-INS-001]: ")
            && err.contains("its packed murmur.yaml does not parse")
            && err.contains("expands to more than 4194304 bytes of text (aliases included)"),
        "{err}"
    );
    assert!(
        peak_kib < CEILING_KIB,
        "peak RSS {peak_kib} KiB, ceiling {CEILING_KIB} KiB"
    );
    assert!(!sb.home().join(".murmur/artifacts/local/bomb").exists());
}

/// Files to write: name and text.
type Files<'a> = &'a [(&'a str, &'a str)];

/// The same bomb as a roster, a source manifest and a lock: each file the loader reads refuses it
/// with its own code, in the same bounded memory.
#[test]
fn every_yaml_file_refuses_an_alias_bomb_with_its_code() {
    let sb = Sandbox::new();
    let bomb = alias_bomb();
    let good = sb.dir.path().join("good-0.1.0.mur.zip");
    write_zip(&good, &[("murmur.yaml", b"name: good\nversion: 0.1.0\n")]);
    let good = good.to_str().expect("utf-8 path");
    // (directory, files in it, command, the refusal's start)
    let cases: &[(&str, Files, &[&str], &str)] = &[
        (
            "formation",
            &[("roster.yaml", &bomb)],
            &["doctor"],
            "[mur doctor] error[E-ROS-001]: ",
        ),
        (
            "member",
            &[("murmur.yaml", &bomb)],
            &["doctor"],
            "[mur doctor] error[E-MAN-001]: ",
        ),
        (
            "project",
            &[("murmur.yaml", "name: p\nversion: 0.1.0\n"), ("murmur.lock", &bomb)],
            &["install", good],
            "error[E-RUN-003]: ",
        ),
    ];
    for (dir, files, args, want) in cases {
        let dir = sb.path(dir);
        for (name, text) in *files {
            std::fs::write(dir.join(name), text).expect("write");
        }
        let mut cmd = sb.mur(&dir);
        cmd.args(*args);
        let (code, err, peak_kib) = run_measured(cmd);
        assert_eq!(code, 1, "{args:?} in {}: {err}", dir.display());
        assert!(
            err.starts_with(want) && err.contains("expands to more than 4194304 bytes of text"),
            "{err}"
        );
        assert!(
            peak_kib < CEILING_KIB,
            "{args:?}: peak RSS {peak_kib} KiB, ceiling {CEILING_KIB} KiB"
        );
    }
}

const SES: &str = "ses_019ad5c0f00070008000000000000001";
const FRM: &str = "frm_019ad5c0f00070008000000000000002";

/// Writes `running/<file>.json` holding a record that names `session_id`, for process `pid` with
/// start token `start`, in formation `FRM`.
fn write_record(sb: &Sandbox, file: &str, session_id: &str, pid: u32, start: &str) -> std::path::PathBuf {
    let dir = sb.home().join(".murmur/running");
    std::fs::create_dir_all(&dir).expect("running dir");
    let rec = serde_json::json!({
        "capsule_name": "local/echo",
        "capsule_version": "0.1.0",
        "formation_id": FRM,
        "formation_member": "m",
        "pid": pid,
        "process_start": start,
        "records_dir": sb.dir.path().join("records").to_str().expect("utf-8"),
        "session_id": session_id,
        "started_at": "2026-01-01T00:00:00.000Z",
        "url": "localhost:1",
        "workdir": sb.dir.path().to_str().expect("utf-8"),
    });
    let path = dir.join(format!("{file}.json"));
    std::fs::write(&path, rec.to_string()).expect("record");
    path
}

/// A dead record whose `session_id` is `../../victim` is pruned by its own file name: the file
/// that id would reach (`~/victim.json`) survives `mur ps` and `mur stop`.
#[test]
fn a_running_record_never_names_a_file_outside_its_directory() {
    let sb = Sandbox::new();
    let victim = sb.home().join("victim.json");
    let cases: &[(&str, &[&str], i32)] = &[
        ("ps", &["ps"], 0),
        ("ps --json", &["ps", "--json"], 0),
        ("stop a session", &["stop", SES], 1),
        ("stop a formation", &["stop", FRM], 1),
    ];
    for (what, args, want) in cases {
        std::fs::create_dir_all(sb.home()).expect("home");
        std::fs::write(&victim, "keep").expect("victim");
        // Our own pid with a start token that is not its own: a process that is gone.
        let record = write_record(&sb, SES, "../../victim", std::process::id(), "1");
        let o = sb.run(sb.dir.path(), args);
        assert_eq!(o.status.code(), Some(*want), "{what}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(
            std::fs::read_to_string(&victim).ok().as_deref(),
            Some("keep"),
            "{what} removed the file the record's session_id names"
        );
        assert!(!record.exists(), "{what} left the dead record");
    }

    // A live process behind a misnamed record: not listed, not signalled, and nothing removed.
    let mut sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
    let start = mur::procinfo::process_start(sleeper.id()).expect("start token");
    let record = write_record(&sb, SES, "../../victim", sleeper.id(), &start);
    let o = sb.run(sb.dir.path(), &["stop", FRM]);
    let alive = sleeper.try_wait().expect("try_wait").is_none();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        stderr(&o).starts_with("error[E-RUN-022]: no member of formation"),
        "{}",
        stderr(&o)
    );
    assert!(alive, "a process named by a misnamed record was signalled");
    assert!(record.exists());
    assert_eq!(std::fs::read_to_string(&victim).ok().as_deref(), Some("keep"));
    let ps = sb.run(sb.dir.path(), &["ps", "--json"]);
    assert_eq!(stdout(&ps), "{\"sessions\":[]}\n");
}
