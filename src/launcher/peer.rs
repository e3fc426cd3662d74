//! `PeerActor`: one member — its process, lifeline, registry entry, reaping and stop timer; for
//! a peer also its directory, process group, channel, output relay and readiness.
//!
//! A peer reports exactly one of `PeerReady`/`PeerFailed` to the formation during the launch.
//! The entry is started by [`PeerActor::start_entry`], which answers at once whether it runs,
//! and reports `EntryExited` when its process is reaped. Either role reports `PeerStopped`
//! once its process has been reaped after `CloseLifeline`.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::watch;

use super::news::{EntryExited, FormationInbox, PeerExited, PeerFailed, PeerReady, PeerStarted, PeerStopped};
use super::probe;
use super::registry;
use super::spawn::{self, MemberCommand, MemberPipes};
use crate::channel::DoorIdentity;
use crate::readiness::{self, Reported};
use crate::timing::Timing;

/// What differs for the entry member (docs/reference/formation.md#launch-sequence,
/// docs/reference/formation.md#lifelines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Its own directory (made here) and process group, piped and relayed output, and a
    /// readiness gate.
    Peer,
    /// Started last in the launcher's process group with the launcher's own stdout/stderr; its
    /// channel holds its callees' addresses before it starts; no readiness gate: its exit ends
    /// the formation.
    Entry,
}

/// Everything a member needs to start.
pub struct PeerSpec {
    pub role: Role,
    pub index: usize,
    pub name: String,
    pub formation_id: String,
    /// A peer's own directory, made before it starts (the entry runs in the project directory,
    /// which its command names).
    pub dir: PathBuf,
    pub command: MemberCommand,
    /// The channel lines written before it starts (the entry's include its callees' addresses).
    pub first_line: zeroize::Zeroizing<String>,
    pub pipes: MemberPipes,
    /// Where a peer serves its door as a Unix socket: the launcher probes it there, and vouches
    /// for it to the peer's callers (`peer_door`).
    pub socket: Option<PathBuf>,
    /// A restart of a peer whose process ended (docs/reference/formation.md#restarts): its
    /// directory, made at its first start, is its own and kept.
    pub restarted: bool,
}

pub struct PeerActor {
    spec: Option<PeerSpec>,
    role: Role,
    index: usize,
    name: String,
    formation: FormationInbox,
    pid: Option<u32>,
    /// Its registry entry: every signal to its process group (the entry: its pid) goes through
    /// it, and it is forgotten the moment the process exited, before it is reaped.
    member: Option<registry::Member>,
    lifeline: Option<OwnedFd>,
    channel: Option<OwnedFd>,
    exit: Option<watch::Receiver<Option<ExitStatus>>>,
    /// Its authority channel as the launcher serves it.
    authority: Option<super::budget::Serving>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stopping: bool,
    stopped_sent: bool,
}

/// How many stderr lines a failure report quotes.
const TAIL: usize = 20;

impl PeerActor {
    pub fn new(spec: PeerSpec, formation: FormationInbox) -> PeerActor {
        PeerActor {
            role: spec.role,
            index: spec.index,
            name: spec.name.clone(),
            spec: Some(spec),
            formation,
            pid: None,
            member: None,
            lifeline: None,
            channel: None,
            exit: None,
            authority: None,
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
            stopping: false,
            stopped_sent: false,
        }
    }

    fn fail(&self, reason: String) {
        self.formation.failed.do_send(PeerFailed {
            index: self.index,
            reason,
        });
    }

    /// Starts the entry member (docs/reference/formation.md#launch-sequence step 8) and answers at
    /// once: its pid, or why it could not start. Either way the actor then takes `CloseLifeline`
    /// like a peer's.
    pub fn start_entry(spec: PeerSpec, formation: FormationInbox) -> (Addr<PeerActor>, Result<u32, String>) {
        let mut started = Err(String::new());
        let addr = PeerActor::create(|ctx| {
            let mut act = PeerActor::new(spec, formation);
            started = act.spawn_process(ctx);
            act
        });
        (addr, started)
    }

    /// Spawns the process and takes charge of it: its lifeline, registry entry and reaping.
    fn spawn_process(&mut self, ctx: &mut Context<Self>) -> Result<u32, String> {
        let peer = self.role == Role::Peer;
        let Some(spec) = self.spec.take() else {
            return Err("it was started twice".into());
        };
        let (channel_failed, spawn_failed, untracked) = if peer {
            if spec.restarted {
                keep_member_dir(&spec.dir)?;
            } else {
                make_member_dir(&spec.dir)?;
            }
            if let Some(dir) = spec.socket.as_deref().and_then(std::path::Path::parent) {
                make_socket_dir(dir)?;
            }
            (
                "its process could not be started: its channel could not be written",
                "its process could not be started",
                "its process could not be started: the launcher cannot track another member",
            )
        } else {
            (
                "the entry member's channel could not be written",
                "the entry member could not be started",
                "the entry member could not be tracked by the launcher",
            )
        };
        if let Err(e) = spawn::prefill_channel(&spec.pipes.channel_write, &spec.first_line) {
            return Err(format!("{channel_failed}: {e}"));
        }
        let mut child = spec.command.spawn().map_err(|e| format!("{spawn_failed}: {e}"))?;
        let MemberPipes {
            channel_read,
            channel_write,
            lifeline_read,
            lifeline_write,
            budget,
        } = spec.pipes;
        if let Some((member_end, launcher_end, keeper)) = budget {
            drop(member_end);
            self.authority = Some(keeper.serve(self.index, launcher_end));
        }
        // The member holds its read ends now; the launcher keeps only the write ends: the
        // channel's for the lines that withdraw a callee whose process ended (the entry's too).
        drop(channel_read);
        drop(lifeline_read);
        // Non-blocking since the prefill: an address line never stalls the launcher.
        self.channel = Some(channel_write);
        self.lifeline = Some(lifeline_write);
        let pid = child.id().unwrap_or(0);
        // A peer leads its own process group; the entry stays in the launcher's.
        let Some(member) = registry::register(pid, peer) else {
            // Untracked, it could never be signalled safely: end it now (it is not reaped yet).
            let _ = child.start_kill();
            actix::spawn(async move {
                let _ = child.wait().await;
            });
            return Err(untracked.into());
        };
        self.pid = Some(pid);
        self.member = Some(member);
        let (exit_tx, exit_rx) = watch::channel(None);
        self.exit = Some(exit_rx);
        let stderr = child.stderr.take();
        let stdout = child.stdout.take();
        let me = ctx.address();
        actix::spawn(async move {
            let status = reap(child, member, peer).await;
            let _ = exit_tx.send(status);
            me.do_send(Exited);
        });
        if peer {
            self.formation.started.do_send(PeerStarted { index: self.index, pid });
            self.watch_peer(stdout, stderr, pid, spec.formation_id, spec.socket, ctx);
        }
        Ok(pid)
    }

    fn start(&mut self, ctx: &mut Context<Self>) {
        if self.role != Role::Peer {
            return; // the entry was started by `start_entry`
        }
        if let Err(reason) = self.spawn_process(ctx) {
            self.fail(reason);
        }
    }

    /// Relays a peer's output and gates it on its readiness line and door probe.
    fn watch_peer(
        &mut self,
        stdout: Option<tokio::process::ChildStdout>,
        stderr: Option<tokio::process::ChildStderr>,
        pid: u32,
        formation_id: String,
        socket: Option<PathBuf>,
        ctx: &mut Context<Self>,
    ) {
        let (Some(member), Some(exit_rx)) = (self.member, self.exit.clone()) else {
            return;
        };

        if let Some(stderr) = stderr {
            actix::spawn(relay(
                stderr,
                format!("[{}] ", self.name),
                Some(self.stderr_tail.clone()),
            ));
        }
        let Some(stdout) = stdout else {
            return self.fail("its process could not be started: no stdout pipe".into());
        };
        let tail = self.stderr_tail.clone();
        let prefix = format!("[{}] ", self.name);
        let deadline = Instant::now() + Timing::get().peer_readiness;
        let door = socket.map(|s| DoorIdentity {
            socket: s.display().to_string(),
            pid,
            start: crate::procinfo::process_start(pid).unwrap_or_default(),
        });
        let fut = async move {
            let ready = await_ready(
                stdout,
                exit_rx,
                member,
                &formation_id,
                door.as_ref(),
                deadline,
                tail,
                prefix,
            )
            .await;
            ready.map(|(r, card_key)| (r, door, card_key))
        };
        ctx.spawn(fut.into_actor(self).map(move |outcome, act, _| match outcome {
            Ok((readiness, door, card_key)) => act.formation.ready.do_send(PeerReady {
                index: act.index,
                readiness,
                pid,
                door,
                card_key,
            }),
            Err(reason) => act.fail(reason),
        }));
    }

    fn finish_if_exited(&mut self) {
        let exited = self.exit.as_ref().is_some_and(|rx| rx.borrow().is_some());
        if exited && self.stopping && !self.stopped_sent {
            // Its group was swept and forgotten when it exited (see `reap`): nothing to signal.
            self.stopped_sent = true;
            self.formation.stopped.do_send(PeerStopped { index: self.index });
        }
    }
}

impl Actor for PeerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.start(ctx);
    }
}

/// Makes a peer's work folder at 0700. A path already there is never reused (the page: the peer
/// is refused with E-RUN-045 naming it); the error is that refusal's reason text.
pub fn make_member_dir(dir: &std::path::Path) -> Result<(), String> {
    std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| {
        let p = dir.display();
        format!("its directory {p} could not be made: {p}: {e}")
    })
}

/// Finds a restarted peer's work folder as its first start made it: a directory of this user's
/// that nobody else may enter (made again, 0700, if it was removed meanwhile).
fn keep_member_dir(dir: &std::path::Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => make_member_dir(dir),
        _ if crate::peer_door::usable_dir(dir) => Ok(()),
        _ => {
            let p = dir.display();
            Err(format!(
                "its directory {p} is no longer an owner-only directory of this user's, so it is not used again"
            ))
        }
    }
}

/// Makes the formation's owner-only directory of door sockets, or finds it made by an earlier
/// peer of this launch; the error is the peer's E-RUN-045 reason text.
fn make_socket_dir(dir: &std::path::Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && crate::peer_door::usable_dir(dir) => Ok(()),
        Err(e) => {
            let p = dir.display();
            Err(format!("its door socket directory {p} could not be made: {p}: {e}"))
        }
    }
}

/// The process was reaped.
#[derive(Message)]
#[rtype(result = "()")]
struct Exited;

impl Handler<Exited> for PeerActor {
    type Result = ();
    fn handle(&mut self, _: Exited, _: &mut Context<Self>) {
        let status = self.exit.as_ref().and_then(|rx| *rx.borrow());
        match self.role {
            Role::Entry => self.formation.entry_exited.do_send(EntryExited(status)),
            // A peer that ends while the formation goes on: its callers must learn it is gone.
            Role::Peer if !self.stopping => self.formation.exited.do_send(PeerExited {
                index: self.index,
                status: status.map(|s| status_code(&s)),
            }),
            Role::Peer => {}
        }
        self.finish_if_exited();
    }
}

/// Send the peer its callees' door URLs.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SendAddresses(pub String);

impl Handler<SendAddresses> for PeerActor {
    type Result = ();
    fn handle(&mut self, msg: SendAddresses, ctx: &mut Context<Self>) {
        let Some(channel) = &self.channel else {
            return;
        };
        let name = self.name.clone();
        // Its own descriptor, so the write may outlive a CloseLifeline that drops the actor's.
        let fd = match channel.try_clone() {
            Ok(fd) => fd,
            Err(e) => {
                address_line_unwritten(&name, e);
                return;
            }
        };
        // `wait`, not `spawn`: this actor's later messages queue behind the write, so two lines
        // never interleave, while the arbiter's thread stays free for every other peer.
        ctx.wait(
            async move {
                if let Err(e) = write_all_nonblocking(&fd, msg.0.as_bytes()).await {
                    address_line_unwritten(&name, e);
                }
            }
            .into_actor(self),
        );
    }
}

/// Close the lifeline; SIGKILL the process group (the entry: its pid) if it has not exited
/// within the grace.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CloseLifeline;

impl Handler<CloseLifeline> for PeerActor {
    type Result = ();
    fn handle(&mut self, _: CloseLifeline, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.spec = None;
        self.lifeline = None;
        self.channel = None;
        if self.pid.is_none() {
            // Never started (e.g. its directory could not be made).
            self.stopped_sent = true;
            self.formation.stopped.do_send(PeerStopped { index: self.index });
            return;
        }
        ctx.run_later(Timing::get().launcher_grace, move |act, _| {
            // A peer already reaped is forgotten, so this never reaches a reused group id.
            if !act.stopped_sent
                && let Some(m) = act.member
            {
                registry::kill(m);
            }
        });
        self.finish_if_exited();
    }
}

/// The peer's process ended and it is started again by a new actor
/// (docs/reference/formation.md#restarts): this one lets go of everything of the old process —
/// kills its group if it still runs (a restart that never became ready), waits for it to be
/// reaped, and ends its authority channel, returning what it held — then stops. It reports
/// nothing more to the formation.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retire;

impl Handler<Retire> for PeerActor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _: Retire, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.stopped_sent = true;
        self.spec = None;
        self.lifeline = None;
        self.channel = None;
        let mut exit = self.exit.clone();
        if let (Some(m), Some(rx)) = (self.member, exit.as_ref())
            && rx.borrow().is_none()
        {
            // Still registered until it is reaped, so the group is still its own.
            registry::kill(m);
        }
        let authority = self.authority.take();
        Box::pin(
            async move {
                if let Some(exit) = exit.as_mut() {
                    let _ = exit.wait_for(|s| s.is_some()).await;
                }
                if let Some(authority) = authority {
                    authority.end().await;
                }
            }
            .into_actor(self)
            .map(|(), _, ctx| ctx.stop()),
        )
    }
}

/// Writes `buf` to the channel's non-blocking write end, yielding while the pipe is full, for at
/// most 2 s (a member that never reads its channel cannot hold the launcher).
async fn write_all_nonblocking(fd: &OwnedFd, mut buf: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !buf.is_empty() {
        match nix::unistd::write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(nix::errno::Errno::EAGAIN) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits for a started member's process to exit, then reaps it and returns how it ended.
///
/// Its pid, and a peer's process group id, stay the launcher's only until the reap: the member is
/// waited for without reaping (`WNOWAIT`), a peer's group is swept with SIGKILL while its exited
/// leader still holds the number (anything left in it goes with it), the registry forgets it, and
/// only then is it reaped. No signal path can reach that number afterwards.
pub(super) async fn reap(
    mut child: tokio::process::Child,
    member: registry::Member,
    sweep_group: bool,
) -> Option<ExitStatus> {
    exited(member.pid()).await;
    if sweep_group {
        registry::kill(member);
    }
    registry::forget(member);
    child.wait().await.ok()
}

/// Returns once process `pid` (a child of ours) has exited, leaving it unreaped.
async fn exited(pid: u32) {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(raw) = i32::try_from(pid) else { return };
    let pid = nix::unistd::Pid::from_raw(raw);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    // Listening before the first look, so an exit between the two is not missed.
    let mut sigchld = signal(SignalKind::child()).ok();
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
            // Exited (unreaped), or not a child to wait for: nothing more to wait for either way.
            _ => return,
        }
        match sigchld.as_mut() {
            Some(s) => {
                tokio::select! {
                    _ = s.recv() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The warning of an address line that did not reach peer `name`'s channel.
fn address_line_unwritten(name: &str, e: impl std::fmt::Display) {
    err_line(&format!(
        "[mur run] warning: the address line for '{name}' could not be written: {e}"
    ));
}

/// One line on the launcher's stderr. A terminal that hung up fails every write; that must not
/// end the launcher before it has stopped its members.
fn err_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Relays lines from a member's pipe to the launcher's stderr behind `prefix`, remembering the
/// most recent ones for failure reports. A member's line may quote a model's or a remote agent's
/// text: on a terminal its control characters are made visible (`question::for_stream`).
pub async fn relay<R: AsyncRead + Unpin>(r: R, prefix: String, tail: Option<Arc<Mutex<VecDeque<String>>>>) {
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        err_line(&format!("{prefix}{}", crate::question::for_stream(&line, terminal)));
        if let Some(tail) = &tail
            && let Ok(mut t) = tail.lock()
        {
            if t.len() == TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
}

/// The process's exit code (128 + N for signal N) if it is reaped within `grace`.
async fn exit_within(exit: &mut watch::Receiver<Option<ExitStatus>>, grace: Duration) -> Option<i32> {
    match tokio::time::timeout(grace, exit.wait_for(|s| s.is_some())).await {
        Ok(Ok(s)) => s.map(|s| status_code(&s)),
        _ => None,
    }
}

fn status_code(s: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    let lines: Vec<String> = tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    if lines.is_empty() {
        "; it wrote nothing to stderr".to_string()
    } else {
        let mut s = "; its last stderr lines were:".to_string();
        for l in lines {
            s.push_str("\n  ");
            s.push_str(&l);
        }
        s
    }
}

/// Reads the readiness line, then probes the door until it answers as the reported session:
/// through `door`'s socket, served by the peer's own process, when the peer serves one. Also
/// returns the key its card is signed with, learned from that process (see `probe`).
#[allow(clippy::too_many_arguments)]
async fn await_ready(
    stdout: tokio::process::ChildStdout,
    mut exit: watch::Receiver<Option<ExitStatus>>,
    member: registry::Member,
    formation_id: &str,
    door: Option<&DoorIdentity>,
    deadline: Instant,
    tail: Arc<Mutex<VecDeque<String>>>,
    prefix: String,
) -> Result<(Reported, Option<String>), String> {
    let t = Timing::get();
    let budget = t.peer_readiness.as_secs();
    let mut reader = BufReader::new(stdout);
    let mut first = Vec::new();
    let read = tokio::time::timeout_at(deadline.into(), async {
        let mut limited = (&mut reader).take(crate::channel::line::MAX_LINE as u64);
        limited.read_until(b'\n', &mut first).await
    })
    .await;
    match read {
        Err(_) => return Err(format!("it did not report within {budget}s")),
        Ok(Err(e)) => {
            return Err(format!(
                "its first line is not a readiness line: it could not be read ({e})"
            ));
        }
        Ok(Ok(0)) => {
            // stdout closed before a line: give the process a moment to exit, else kill its
            // group (docs/reference/formation.md#how-the-launcher-waits) rather than leave it to
            // the stop grace.
            let mut status = exit_within(&mut exit, t.exit_grace_after_eof).await;
            if status.is_none() {
                registry::kill(member);
                status = exit_within(&mut exit, t.exit_grace_after_eof).await;
            }
            let code = status.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into());
            // Let the stderr relay drain what the process wrote last.
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Err(format!(
                "its process exited with status {code} before reporting{}",
                tail_text(&tail)
            ));
        }
        Ok(Ok(_)) => {}
    }
    let line = String::from_utf8_lossy(&first).into_owned();
    let ready = readiness::parse(&line, formation_id)?;
    // From here on the peer's stdout is relayed like its stderr.
    actix::spawn(relay(reader, prefix, None));

    // The probe carries the operator token: over the socket, only the peer's process gets it.
    let client = crate::outbound::Client::door(
        door,
        &ready.url,
        crate::outbound::Bounds {
            connect: t.probe_connect,
            request: Some(t.probe_read),
            keep_alive: None,
        },
    );
    let mut last = String::from("no probe completed");
    loop {
        if let Some(s) = *exit.borrow() {
            return Err(format!(
                "its process reported and then exited with status {} before its door answered",
                status_code(&s)
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "its door at {} did not answer as session {} within {budget}s; the last probe said: {last}",
                ready.url, ready.session_id
            ));
        }
        match probe::probe_once(&client, &ready, t.probe_read).await {
            Ok(probe::Probed::Ready(card_key)) => return Ok((ready, card_key)),
            Ok(probe::Probed::Other) => last = "it answered as another session".into(),
            Err(e) => last = e,
        }
        tokio::select! {
            _ = tokio::time::sleep(t.probe_interval) => {}
            _ = exit.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_member_directory_is_made_owner_only_and_never_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("coder");
        make_member_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let again = make_member_dir(&dir).unwrap_err();
        let p = dir.display();
        assert_eq!(
            again,
            format!("its directory {p} could not be made: {p}: File exists (os error 17)")
        );
        // A dangling symlink is "already there" too.
        let link = tmp.path().join("linked");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
        assert!(make_member_dir(&link).is_err());
    }
}
