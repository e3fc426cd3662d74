//! Member wind-down (docs/reference/formation.md#how-a-member-ends): one listener takes the first
//! of SIGTERM, lifeline EOF and the inherited deadline, and that first cause alone decides how the
//! session ends.
//!
//! [`WindDown`] is the pure decision table; the session's controller feeds it causes and carries
//! out the [`Plan`] it returns. The lifeline reader and the teardown backstop live here too: both
//! run on plain threads, so nothing ever blocks an actix arbiter.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc::UnboundedSender;

use crate::diag::{self, Diagnostic};
use crate::paths::MurHome;
use crate::running;

use super::records::Console;

/// What can end a member from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Sigterm,
    LifelineEof,
    Deadline,
}

/// How the first cause ends the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The cause as taken: any cause taken at or after the deadline instant counts as the deadline.
    pub cause: Cause,
    /// A task was running when the cause arrived.
    pub was_running: bool,
}

impl Plan {
    /// Write `formation_ended` before anything else and print the lifeline line.
    pub fn formation_ended(&self) -> bool {
        self.cause == Cause::LifelineEof
    }

    /// Append `deadline_reached` and print E-RUN-053.
    pub fn deadline_reached(&self) -> bool {
        self.cause == Cause::Deadline
    }

    /// `session_end.exit_status` (docs/reference/formation.md#how-a-member-ends).
    pub fn exit_status(&self) -> &'static str {
        match (self.cause, self.was_running) {
            (Cause::LifelineEof, true) => "formation_ended",
            (Cause::Deadline, _) => "deadline_reached",
            (Cause::Sigterm, true) => "canceled",
            (Cause::LifelineEof, false) | (Cause::Sigterm, false) => "ok",
        }
    }

    /// The process exit code (docs/reference/formation.md#how-a-member-ends).
    pub fn exit_code(&self) -> u8 {
        match (self.cause, self.was_running) {
            (Cause::Deadline, _) | (Cause::Sigterm, true) => 1,
            _ => 0,
        }
    }

    /// The `reason` of `task_canceled` for the task this wind-down cancels [ours].
    pub fn cancel_reason(&self) -> &'static str {
        match self.cause {
            Cause::Sigterm => "sigterm",
            Cause::LifelineEof => "formation_ended",
            Cause::Deadline => "deadline_reached",
        }
    }
}

/// The controller's answer to a cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// The first cause: wind down as the plan says (and arm the teardown backstop).
    Begin(Plan),
    /// A later cause: the wind-down already under way goes on unchanged.
    Ignore,
    /// A SIGTERM when one was already received: exit 143 at once.
    ExitNow,
}

/// The decision table of docs/reference/formation.md#how-a-member-ends.
#[derive(Debug, Default)]
pub struct WindDown {
    begun: bool,
    sigterms: u32,
}

impl WindDown {
    pub fn new() -> WindDown {
        WindDown::default()
    }

    /// Whether a wind-down (or a normal end) is already under way.
    pub fn begun(&self) -> bool {
        self.begun
    }

    /// The session is ending on its own (its task is done): later causes change nothing, but a
    /// second SIGTERM still exits at once.
    pub fn ending_normally(&mut self) {
        self.begun = true;
    }

    /// Takes one cause. `past_deadline` says whether the inherited deadline instant has passed;
    /// `running` whether a task is running now.
    pub fn take(&mut self, cause: Cause, past_deadline: bool, running: bool) -> Reaction {
        if cause == Cause::Sigterm {
            self.sigterms += 1;
            if self.sigterms >= 2 {
                return Reaction::ExitNow;
            }
        }
        if self.begun {
            return Reaction::Ignore;
        }
        self.begun = true;
        let cause = if past_deadline { Cause::Deadline } else { cause };
        Reaction::Begin(Plan {
            cause,
            was_running: running,
        })
    }
}

/// Reads the lifeline on its own thread until EOF (or a read error, which counts as EOF), then
/// calls `on_eof` once with the error text, if any. Bytes read are discarded.
pub fn watch_lifeline(fd: OwnedFd, on_eof: impl FnOnce(Option<String>) + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new().name("lifeline".into()).spawn(move || {
        let mut buf = [0u8; 256];
        let error = loop {
            match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
                Ok(0) => break None,
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => break Some(e.to_string()),
            }
        };
        drop(fd);
        on_eof(error);
    })?;
    Ok(())
}

/// Whether this member's formation has ended, read from the lifeline itself rather than from the
/// listener's news: a pipe whose write end is closed polls as hung up at once, while the
/// listener thread may not have run yet. The launcher closes the entry's lifeline before any
/// peer's (and the kernel closes them all at once when the launcher dies), so once a callee has
/// wound down and told this member so, this probe already says the formation ended.
#[derive(Debug)]
pub struct LifelineProbe(OwnedFd);

impl LifelineProbe {
    /// A probe on its own duplicate of `lifeline` (close-on-exec), so the listener may drop its
    /// descriptor without this one naming a reused number.
    pub fn of(lifeline: &OwnedFd) -> Option<LifelineProbe> {
        lifeline.try_clone().ok().map(LifelineProbe)
    }

    /// True once the lifeline has closed, waiting for it at most `grace`: the launcher's
    /// descriptors close one after another as it dies. Polled, since the probe's descriptor
    /// shares its blocking mode with the listener's.
    pub async fn closes_within(&self, grace: Duration) -> bool {
        let until = tokio::time::Instant::now() + grace;
        loop {
            if self.has_closed() {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// True once the launcher's end of the lifeline is closed.
    pub fn has_closed(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(n) if n > 0 => fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
            _ => false,
        }
    }
}

/// Arms the teardown backstop: after `after`, `last_words` runs (remove the running record) and
/// the process exits with status 143, wherever the wind-down is.
pub fn arm_backstop(after: Duration, last_words: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("teardown-backstop".into())
        .spawn(move || {
            std::thread::sleep(after);
            last_words();
            std::process::exit(143);
        });
    if spawned.is_err() {
        // No thread for the timer: the wind-down still ends the process, just without a backstop.
        tracing::warn!("teardown backstop could not be armed");
    }
}

/// Wires the three causes of docs/reference/formation.md#how-a-member-ends into one channel:
/// SIGTERM, lifeline EOF, the deadline.
///
/// A second SIGTERM is handled here, not by the controller: it exits 143 at once (after removing
/// the running record), wherever the session is.
pub fn listen(
    tx: &UnboundedSender<Cause>,
    lifeline: Option<OwnedFd>,
    deadline: Option<DateTime<Utc>>,
    console: &Console,
    home: MurHome,
    session_id: &str,
) -> Result<(), Diagnostic> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Diagnostic::new(diag::E_IO_003, format!("SIGTERM handling could not be set up: {e}")))?;
    let t = tx.clone();
    let id = session_id.to_string();
    actix_rt::spawn(async move {
        let mut seen = 0u32;
        while term.recv().await.is_some() {
            seen += 1;
            // A second SIGTERM exits at once, wherever the session is — even after the
            // controller is done and the door is draining
            // (docs/reference/formation.md#how-a-member-ends).
            if seen >= 2 {
                running::remove(&home, &id);
                std::process::exit(143);
            }
            let _ = t.send(Cause::Sigterm);
        }
    });
    if let Some(fd) = lifeline {
        let t = tx.clone();
        let c = console.clone();
        let raw = fd.as_raw_fd();
        watch_lifeline(fd, move |err| {
            if let Some(e) = err {
                c.note(&format!(
                    "the formation lifeline (descriptor {raw}) could not be read ({e}); it counts as closed"
                ));
            }
            let _ = t.send(Cause::LifelineEof);
        })
        .map_err(|e| Diagnostic::new(diag::E_IO_003, format!("the lifeline cannot be watched: {e}")))?;
    }
    if let Some(d) = deadline {
        let t = tx.clone();
        let wait = (d - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        actix_rt::spawn(async move {
            actix_rt::time::sleep(wait).await;
            let _ = t.send(Cause::Deadline);
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(cause: Cause, was_running: bool) -> Reaction {
        Reaction::Begin(Plan { cause, was_running })
    }

    #[test]
    fn the_probe_sees_the_launchers_end_close_even_after_the_listener_let_go() {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        let probe = LifelineProbe::of(&read).expect("dup");
        assert!(!probe.has_closed(), "open lifeline");
        drop(read); // the listener's descriptor goes; the probe keeps its own
        assert!(!probe.has_closed(), "still open at the launcher's end");
        drop(write);
        assert!(probe.has_closed(), "closed by the launcher");
        assert!(probe.has_closed(), "and stays so");
    }

    #[test]
    fn the_exit_table_of_13_3() {
        // (cause, running) → (exit_status, exit code, formation_ended, deadline_reached)
        let table = [
            (Cause::LifelineEof, true, "formation_ended", 0, true, false),
            (Cause::LifelineEof, false, "ok", 0, true, false),
            (Cause::Deadline, true, "deadline_reached", 1, false, true),
            (Cause::Deadline, false, "deadline_reached", 1, false, true),
            (Cause::Sigterm, true, "canceled", 1, false, false),
            (Cause::Sigterm, false, "ok", 0, false, false),
        ];
        for (cause, running, status, code, fe, dr) in table {
            let p = Plan {
                cause,
                was_running: running,
            };
            assert_eq!(p.exit_status(), status, "{p:?}");
            assert_eq!(p.exit_code(), code, "{p:?}");
            assert_eq!(p.formation_ended(), fe, "{p:?}");
            assert_eq!(p.deadline_reached(), dr, "{p:?}");
        }
    }

    /// One cause as taken: (cause, past the deadline, a task running).
    type Taken = (Cause, bool, bool);

    #[test]
    fn only_the_first_cause_counts() {
        let table: Vec<(Vec<Taken>, Vec<Reaction>)> = vec![
            (vec![(Cause::Sigterm, false, false)], vec![begin(Cause::Sigterm, false)]),
            (
                vec![(Cause::Sigterm, false, true), (Cause::LifelineEof, false, true)],
                vec![begin(Cause::Sigterm, true), Reaction::Ignore],
            ),
            (
                vec![(Cause::LifelineEof, false, true), (Cause::Sigterm, false, true)],
                vec![begin(Cause::LifelineEof, true), Reaction::Ignore],
            ),
            (
                vec![
                    (Cause::LifelineEof, false, true),
                    (Cause::Sigterm, false, true),
                    (Cause::Sigterm, false, true),
                ],
                vec![begin(Cause::LifelineEof, true), Reaction::Ignore, Reaction::ExitNow],
            ),
            (
                vec![(Cause::Sigterm, false, true), (Cause::Sigterm, false, true)],
                vec![begin(Cause::Sigterm, true), Reaction::ExitNow],
            ),
            (
                vec![
                    (Cause::Deadline, true, false),
                    (Cause::Sigterm, true, false),
                    (Cause::LifelineEof, true, false),
                ],
                vec![begin(Cause::Deadline, false), Reaction::Ignore, Reaction::Ignore],
            ),
            // A lifeline that closes a moment after the deadline is the deadline.
            (
                vec![(Cause::LifelineEof, true, true)],
                vec![begin(Cause::Deadline, true)],
            ),
            (vec![(Cause::Sigterm, true, true)], vec![begin(Cause::Deadline, true)]),
        ];
        for (seq, want) in table {
            let mut w = WindDown::new();
            let got: Vec<Reaction> = seq.iter().map(|&(c, past, run)| w.take(c, past, run)).collect();
            assert_eq!(got, want, "{seq:?}");
        }
    }

    #[test]
    fn a_normal_end_ignores_a_first_sigterm_but_not_a_second() {
        let mut w = WindDown::new();
        w.ending_normally();
        assert_eq!(w.take(Cause::LifelineEof, false, false), Reaction::Ignore);
        assert_eq!(w.take(Cause::Sigterm, false, false), Reaction::Ignore);
        assert_eq!(w.take(Cause::Sigterm, false, false), Reaction::ExitNow);
    }

    #[test]
    fn lifeline_eof_is_reported_once() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        watch_lifeline(r, move |err| tx.send(err).unwrap()).unwrap();
        nix::unistd::write(&w, b"ignored").unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "bytes are not EOF"
        );
        drop(w);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
    }
}
