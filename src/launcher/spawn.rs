//! Starting one member process with exactly its own two inherited descriptors.
//!
//! Every pipe is created close-on-exec; in the child only (between fork and exec) the member's
//! own channel and lifeline read ends lose that flag, so no member inherits a write end or
//! another member's descriptor (runtime.md §9.2).

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
}

impl MemberPipes {
    /// Creates both pipes close-on-exec.
    pub fn new() -> std::io::Result<MemberPipes> {
        let (channel_read, channel_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (lifeline_read, lifeline_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        Ok(MemberPipes {
            channel_read,
            channel_write,
            lifeline_read,
            lifeline_write,
        })
    }
}

/// Writes channel lines in full before the member starts. The pipe is enlarged when the lines
/// exceed its capacity, so the write never waits for a reader that does not exist yet.
pub fn prefill_channel(write_end: &OwnedFd, lines: &str) -> std::io::Result<()> {
    if lines.len() > 60 * 1024 {
        let want = lines.len().min(2 * MAX_LINE + 4096) as i32;
        fcntl(write_end.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(want)).map_err(std::io::Error::from)?;
    }
    let mut rest = lines.as_bytes();
    while !rest.is_empty() {
        let n = nix::unistd::write(write_end, rest).map_err(std::io::Error::from)?;
        rest = &rest[n..];
    }
    Ok(())
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
}

/// Variables a member must not inherit from the launcher (§9.2).
const REMOVED_ENV: [&str; 3] = ["MURMUR_FORMATION_PEERS", "MURMUR_SPAWNER", "MURMUR_SPAWNER_LIFELINE"];

impl MemberCommand {
    pub fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .env("MURMUR_FORMATION_ID", &self.formation_id)
            .env("MURMUR_FORMATION_CHANNEL", self.channel_fd.to_string())
            .env("MURMUR_FORMATION_LIFELINE", self.lifeline_fd.to_string())
            .env("MURMUR_HOST_WARNINGS_REPORTED", "1")
            .stdin(Stdio::null())
            .kill_on_drop(false);
        for var in REMOVED_ENV {
            cmd.env_remove(var);
        }
        if self.peer {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        } else {
            cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        }
        let keep = [self.channel_fd, self.lifeline_fd];
        // SAFETY: the closure runs in the forked child before exec and calls only fcntl(2), which
        // is async-signal-safe; it allocates nothing and touches no locks.
        unsafe {
            cmd.pre_exec(move || {
                for fd in keep {
                    let flags = libc_fcntl_getfd(fd)?;
                    libc_fcntl_setfd(fd, flags & !FdFlag::FD_CLOEXEC.bits())?;
                }
                Ok(())
            });
        }
        cmd.spawn()
    }
}

fn libc_fcntl_getfd(fd: RawFd) -> std::io::Result<i32> {
    fcntl(fd, FcntlArg::F_GETFD).map_err(std::io::Error::from)
}

fn libc_fcntl_setfd(fd: RawFd, flags: i32) -> std::io::Result<()> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::from_bits_truncate(flags)))
        .map(drop)
        .map_err(std::io::Error::from)
}
