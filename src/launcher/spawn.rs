//! Starting one member process with exactly its own two inherited descriptors.
//!
//! Every pipe is created close-on-exec. A member's own channel and lifeline read ends (and its
//! compiled entry) lose that flag only while that one member is being started, under a lock that
//! every start in the launcher takes, so no member inherits a write end or another member's
//! descriptor (docs/reference/formation.md#member-environment). No code runs between fork and
//! exec, so std starts the member with `posix_spawn`, which glibc does with
//! `CLONE_VM | CLONE_VFORK`: the launcher's memory, large in a formation of hundreds (tokens of
//! every edge), is neither copied into each child nor torn down again at its exec.
//!
//! Nor does it inherit the launcher's environment: it starts from an empty one holding a short
//! fixed list, the variables its own manifest declares, and the formation variables
//! ([`member_env`]). A capsule can read, and send to its endpoint, only what it declared.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};

use crate::channel::line::MAX_LINE;

/// The two pipes of one member: the launcher keeps the write ends, the member inherits the reads.
pub struct MemberPipes {
    pub channel_read: OwnedFd,
    pub channel_write: OwnedFd,
    pub lifeline_read: OwnedFd,
    pub lifeline_write: OwnedFd,
    /// The member's authority channel (docs/reference/formation.md#the-authority-channel), which
    /// carries the budget lines when the formation keeps a budget: the member's end, the
    /// launcher's end and its keeper.
    pub budget: Option<(OwnedFd, OwnedFd, std::sync::Arc<super::budget::BudgetKeeper>)>,
}

impl MemberPipes {
    /// Creates both pipes close-on-exec.
    pub fn new() -> std::io::Result<MemberPipes> {
        let (channel_read, channel_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (lifeline_read, lifeline_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        // The lifeline carries no byte, only its end: one page instead of sixteen, so a
        // formation of hundreds stays within the kernel's per-user pipe quota
        // (fs.pipe-user-pages-soft, 16384 pages), past which every new pipe gets a single page
        // and a first line larger than that no longer fits its channel. Shrinking can only fail
        // on a full pipe, which a new one is not; the default size is harmless anyway.
        let _ = fcntl(lifeline_write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(4096));
        Ok(MemberPipes {
            channel_read,
            channel_write,
            lifeline_read,
            lifeline_write,
            budget: None,
        })
    }

    /// Adds the authority channel: a stream socket pair, both ends close-on-exec.
    pub fn with_budget(mut self, keeper: std::sync::Arc<super::budget::BudgetKeeper>) -> std::io::Result<MemberPipes> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (member, launcher) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)?;
        self.budget = Some((member, launcher, keeper));
        Ok(self)
    }
}

/// Writes channel lines in full before the member starts, and leaves the write end non-blocking.
///
/// Nothing reads the pipe yet, so a write that does not fit would wait forever, holding the
/// launcher's thread: the pipe is enlarged first when the lines exceed its capacity (a single
/// page when the user is over the kernel's pipe quota), and a write that still does not fit is an
/// error, never a wait.
pub fn prefill_channel(write_end: &OwnedFd, lines: &str) -> std::io::Result<()> {
    set_nonblocking(write_end)?;
    let fd = write_end.as_raw_fd();
    let capacity = fcntl(fd, FcntlArg::F_GETPIPE_SZ).map_err(std::io::Error::from)?;
    if lines.len() > usize::try_from(capacity).unwrap_or(0) {
        let want = lines.len().min(2 * MAX_LINE + 4096) as i32;
        fcntl(fd, FcntlArg::F_SETPIPE_SZ(want)).map_err(std::io::Error::from)?;
    }
    let mut rest = lines.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(write_end, rest) {
            Ok(n) => rest = &rest[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                return Err(std::io::Error::other(format!(
                    "{} bytes do not fit its pipe",
                    lines.len()
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Makes every descriptor the launcher was started with, beyond stdin, stdout and stderr,
/// close-on-exec: whatever its parent left open (a build tool's jobserver pipe, a shell's extra
/// redirection) is the launcher's, never a member's.
pub fn keep_inherited_descriptors_from_members() {
    // close_range(2) with CLOSE_RANGE_CLOEXEC (Linux 5.11) does it in one call; before that,
    // each open descriptor /proc lists.
    // SAFETY: a raw syscall taking plain integers; it only sets a flag on descriptors.
    let done = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_close_range,
            3u32,
            u32::MAX,
            nix::libc::CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if done {
        return;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let open: Vec<RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in open {
        if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFD) {
            let _ = fcntl(
                fd,
                FcntlArg::F_SETFD(FdFlag::from_bits_truncate(flags) | FdFlag::FD_CLOEXEC),
            );
        }
    }
}

/// Makes a write end non-blocking, so a later address line never stalls the launcher.
pub fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// How one member process is started.
pub struct MemberCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub formation_id: String,
    pub channel_fd: RawFd,
    pub lifeline_fd: RawFd,
    /// Peers run in a process group of their own with piped output; the entry shares the
    /// launcher's group and its stdout/stderr.
    pub peer: bool,
    /// The variables the member's own manifest declares (its `inference.api_key: ${VAR}`).
    pub declared_env: Vec<String>,
    /// The formation span's W3C `traceparent`, as `TRACEPARENT`: the entry's only, when spans
    /// are exported, so its `--task` task joins the formation's trace.
    pub traceparent: Option<String>,
    /// The launcher's checked compiled entry of the member's component (its descriptor, open in
    /// the launcher, and its key id), handed over as `MURMUR_COMPILED_FD`/`MURMUR_COMPILED_KEY`.
    pub compiled: Option<(RawFd, String)>,
    /// The member's end of its authority channel, as `MURMUR_FORMATION_AUTHORITY`, and also as
    /// `MURMUR_FORMATION_BUDGET` when the formation keeps a budget and the member is a model.
    pub budget_fd: Option<RawFd>,
    pub budget_kept: bool,
    /// The entry reads the launcher's stdin, when that is a terminal: the person there answers
    /// the `--task` task's questions (docs/reference/door.md#asking). Every other member reads
    /// nothing.
    pub terminal_stdin: bool,
}

/// The environment a member starts with, apart from the formation variables the launcher sets
/// itself: the `member_env::PASSED` names, `LC_*` and the OpenTelemetry exporter's variables
/// (`otel_env::FORWARDED`, only those set) present in `launcher_env`, then the variables
/// `declared` names, then the test timing when one is in effect (clamped, `timing`). Never a
/// `MURMUR_*` variable beyond those: the formation variables are set by [`MemberCommand::spawn`],
/// and `MURMUR_MUR_BINARY` or `MURMUR_FORMATION_PEERS`
/// (docs/reference/formation.md#member-environment) must not reach a member.
pub fn member_env(
    launcher_env: impl IntoIterator<Item = (OsString, OsString)>,
    declared: &[String],
    test_timing: Option<&str>,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = launcher_env
        .into_iter()
        .filter(|(k, _)| {
            let Some(k) = k.to_str() else { return false };
            crate::member_env::PASSED.contains(&k)
                || k.starts_with("LC_")
                || crate::trace::otel_env::FORWARDED.contains(&k)
                || (declared.iter().any(|d| d == k) && !k.starts_with("MURMUR_"))
        })
        .collect();
    if let Some(t) = test_timing {
        out.push(("MURMUR_TEST_TIMING".into(), t.into()));
    }
    out
}

impl MemberCommand {
    pub fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .envs(member_env(
                std::env::vars_os(),
                &self.declared_env,
                crate::timing::Timing::test_overrides(),
            ))
            .env("MURMUR_FORMATION_ID", &self.formation_id)
            .env("MURMUR_FORMATION_CHANNEL", self.channel_fd.to_string())
            .env("MURMUR_FORMATION_LIFELINE", self.lifeline_fd.to_string())
            .env("MURMUR_HOST_WARNINGS_REPORTED", "1")
            .stdin(if self.terminal_stdin && !self.peer {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .kill_on_drop(false);
        if let Some(tp) = &self.traceparent {
            cmd.env("TRACEPARENT", tp);
        }
        if let Some((fd, key)) = &self.compiled {
            cmd.env("MURMUR_COMPILED_FD", fd.to_string())
                .env("MURMUR_COMPILED_KEY", key);
        }
        if let Some(fd) = self.budget_fd {
            cmd.env("MURMUR_FORMATION_AUTHORITY", fd.to_string());
            if self.budget_kept {
                cmd.env("MURMUR_FORMATION_BUDGET", fd.to_string());
            }
        }
        if self.peer {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        } else {
            cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        }
        // The compiled entry's descriptor is close-on-exec in the launcher: only the members of
        // its component inherit it.
        let mut keep = vec![self.channel_fd, self.lifeline_fd];
        keep.extend(self.compiled.as_ref().map(|(fd, _)| *fd));
        keep.extend(self.budget_fd);
        let _one_start_at_a_time = crate::sync::lock(&STARTING);
        let _inheritable = Inheritable::clear_cloexec(&keep)?;
        cmd.spawn()
    }
}

/// Held while one member starts: its descriptors are inheritable for that long, so no other
/// process may start from the launcher meanwhile. [`MemberCommand::spawn`] is the launcher's
/// only way of starting a process.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Descriptors made inheritable for one start; dropping it makes them close-on-exec again, also
/// when the start failed.
struct Inheritable(Vec<RawFd>);

impl Inheritable {
    fn clear_cloexec(fds: &[RawFd]) -> std::io::Result<Inheritable> {
        let mut done = Inheritable(Vec::with_capacity(fds.len()));
        for &fd in fds {
            let flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD)?);
            fcntl(fd, FcntlArg::F_SETFD(flags - FdFlag::FD_CLOEXEC))?;
            done.0.push(fd);
        }
        Ok(done)
    }
}

impl Drop for Inheritable {
    fn drop(&mut self) {
        for &fd in &self.0 {
            // F_SETFD on a descriptor that is open cannot fail; these stay open until the
            // launcher drops the member's pipes.
            let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifeline_takes_one_pipe_page_and_a_channel_the_default() {
        // 256 members hold 4 pipes each; the per-user quota is 16 384 pages (64 per member at the
        // default 16), past which new pipes get one page: the lifeline carries no byte.
        let pipes = MemberPipes::new().unwrap();
        let size = |fd: &OwnedFd| fcntl(fd.as_raw_fd(), FcntlArg::F_GETPIPE_SZ).unwrap();
        assert_eq!(size(&pipes.lifeline_write), 4096);
        assert_eq!(size(&pipes.channel_write), 65536);
    }

    #[test]
    fn prefilling_a_small_pipe_enlarges_it_instead_of_waiting() {
        // A pipe of one page, as a user over the kernel's pipe quota gets, and lines that do
        // not fit it: with nothing reading yet, a blocking write would never return.
        let pipes = MemberPipes::new().unwrap();
        let fd = pipes.channel_write.as_raw_fd();
        fcntl(fd, FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
        let lines = format!("{}\n", "x".repeat(10_000));
        let (tx, rx) = std::sync::mpsc::channel();
        let want = lines.clone();
        std::thread::spawn(move || {
            let r = prefill_channel(&pipes.channel_write, &want);
            let _ = tx.send((r.map_err(|e| e.to_string()), pipes));
        });
        let (r, pipes) = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the prefill returned");
        assert_eq!(r, Ok(()));
        drop(pipes.channel_write);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(pipes.channel_read), &mut got).unwrap();
        assert_eq!(got, lines);
    }

    #[test]
    fn a_member_gets_the_short_list_its_declared_key_and_nothing_else() {
        let launcher: Vec<(OsString, OsString)> = [
            ("HOME", "/home/u"),
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("RUST_LOG", "debug"),
            ("MURMUR_A2A_TIMEOUT_SECS", "5"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k"),
            ("OPENAI_API_KEY", "sk-lead"),
            ("ANTHROPIC_API_KEY", "sk-other"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("GITHUB_TOKEN", "ghp"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("LD_PRELOAD", "/tmp/x.so"),
            ("MURMUR_MUR_BINARY", "/tmp/other-mur"),
            ("MURMUR_TEST_TIMING", "launcher_grace=99999s"),
            ("MURMUR_FORMATION_PEERS", "{}"),
            ("MURMUR_SPAWNER", "x"),
            ("MURMUR_SPAWNER_LIFELINE", "3"),
            ("MURMUR_FORMATION_ID", "frm_other"),
            ("OTEL_PYTHON_LOG_LEVEL", "debug"),
            ("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let names = |declared: &[&str], timing: Option<&str>| -> Vec<String> {
            let declared: Vec<String> = declared.iter().map(|s| s.to_string()).collect();
            member_env(launcher.clone(), &declared, timing)
                .into_iter()
                .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                .collect()
        };
        // The exporter's variables pass; another OTEL_ one, and the launcher's own TRACEPARENT
        // (the launcher sets the entry's), do not.
        let base = [
            "HOME=/home/u",
            "PATH=/usr/bin",
            "LC_ALL=C.UTF-8",
            "RUST_LOG=debug",
            "MURMUR_A2A_TIMEOUT_SECS=5",
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318",
            "OTEL_EXPORTER_OTLP_HEADERS=x-collector-key=k",
        ];
        let table: [(&[&str], Option<&str>, Vec<&str>); 4] = [
            (&[], None, base.to_vec()),
            (
                &["OPENAI_API_KEY"],
                None,
                [&base[..], &["OPENAI_API_KEY=sk-lead"]].concat(),
            ),
            // A declared name never lets the runtime's own variables through.
            (&["MURMUR_MUR_BINARY", "MURMUR_FORMATION_PEERS"], None, base.to_vec()),
            (
                &[],
                Some("launcher_grace=300ms"),
                [&base[..], &["MURMUR_TEST_TIMING=launcher_grace=300ms"]].concat(),
            ),
        ];
        for (declared, timing, want) in table {
            assert_eq!(names(declared, timing), want, "{declared:?} {timing:?}");
        }
    }
}
