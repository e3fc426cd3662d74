//! The session's controller: the lifecycle of docs/reference/manifest.md#keys and the wind-down of
//! docs/reference/formation.md#how-a-member-ends, driven on the session's actix system from one
//! inbox (causes, executor events, the `--task` task's end, the idle wait).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::calls;
use crate::diag::{self, Diagnostic};
use crate::running;
use crate::tasks::{Board, TaskState};
use crate::timing::Timing;

use super::executor::ExecEvent;
use super::lifecycle::Policy;
use super::recorder::{Recorder, TaskNews};
use super::winddown::{self, Cause, Plan, Reaction, WindDown};
use super::{Session, retention, rfc3339_ms, secs_until};

/// An idle member's line, in its `logs/bootstrap.log`, when its formation ends.
const IDLE_AT_FORMATION_END: &str =
    "[capsule-runtime] formation lifeline closed — the formation has ended; ending the session (no task was running)";
/// What the controller waits on.
pub(super) struct Inbox {
    pub(super) causes: UnboundedReceiver<Cause>,
    pub(super) exec: UnboundedReceiver<ExecEvent>,
    pub(super) news: UnboundedReceiver<TaskNews>,
    pub(super) idle: UnboundedReceiver<()>,
}

/// The controller: the lifecycle of docs/reference/manifest.md#keys and the wind-down of
/// docs/reference/formation.md#how-a-member-ends on one task.
pub(super) struct Controller<'a> {
    pub(super) session: &'a Session,
    pub(super) board: &'a Arc<Board>,
    pub(super) recorder: &'a Arc<Recorder>,
    pub(super) policy: Policy,
    pub(super) deadline: Option<DateTime<Utc>>,
    pub(super) formation_id: Option<String>,
    /// `trace.retain`, for the session pass at the end (docs/reference/formation.md#retention).
    pub(super) retain: Option<crate::manifest::Retain>,
    /// The member calls, abandoned at wind-down.
    pub(super) calls: Option<calls::Calls>,
}

/// How the session is ending.
enum End {
    Normal,
    Wind(Plan),
}

impl Controller<'_> {
    pub(super) async fn run(self, mut inbox: Inbox) -> u8 {
        let mut wd = WindDown::new();
        let mut started_any = false;
        let mut end: Option<End> = None;
        loop {
            tokio::select! {
                Some(cause) = inbox.causes.recv() => {
                    let past = self.deadline.is_some_and(|d| Utc::now() >= d);
                    let running = self.running_task();
                    match wd.take(cause, past, running.is_some()) {
                        Reaction::Begin(plan) => {
                            self.begin_wind_down(plan, running.as_deref());
                            end = Some(End::Wind(plan));
                        }
                        Reaction::Ignore => {}
                        Reaction::ExitNow => {
                            running::remove(&self.session.home, &self.session.id);
                            std::process::exit(143);
                        }
                    }
                }
                Some(ev) = inbox.exec.recv() => match ev {
                    ExecEvent::Started { .. } => started_any = true,
                    ExecEvent::Done { .. } => {
                        // Without --task, the first task's end ends a session that does not
                        // serve for ever.
                        if !self.policy.has_task && self.policy.ends_after_task() && !wd.begun() {
                            wd.ending_normally();
                            end = Some(End::Normal);
                            self.board.close();
                        }
                    }
                    ExecEvent::Gone => break,
                },
                Some(TaskNews::LocalEnded) = inbox.news.recv() => {
                    if self.policy.ends_after_task() && !wd.begun() {
                        wd.ending_normally();
                        end = Some(End::Normal);
                        self.board.close();
                    }
                }
                Some(()) = inbox.idle.recv() => {
                    let anything = started_any || self.board.all().iter().any(|t| t.state != TaskState::Rejected);
                    if !anything && !wd.begun() {
                        wd.ending_normally();
                        end = Some(End::Normal);
                        self.board.close();
                    }
                }
                else => break,
            }
        }
        if matches!(end, Some(End::Normal)) {
            // The task's open questions were cancelled at their callees as it ended: those
            // cancels reach them before this session, and so the formation, winds down.
            tokio::select! {
                () = crate::calls::cancels_sent(Timing::get().answer_request.min(std::time::Duration::from_secs(2))) => {}
                Some(_) = inbox.causes.recv() => {}
            }
        }
        if matches!(end, Some(End::Normal)) && !self.policy.has_task {
            // Ended after a door task: its caller may still be about to read the end (a poll
            // after a SubscribeToTask that found it over). A signal or the lifeline cuts it short.
            tokio::select! {
                () = self.board.await_ends_shown(Timing::get().answer_linger) => {}
                Some(_) = inbox.causes.recv() => {}
            }
        }
        self.finish(end)
    }

    /// The task running now, if any.
    fn running_task(&self) -> Option<String> {
        self.board
            .all()
            .into_iter()
            .find(|t| t.state == TaskState::Working)
            .map(|t| t.id)
    }

    /// docs/reference/formation.md#how-a-member-ends for the first cause: formation_ended first,
    /// the lifeline line, deadline_reached, then cancel the running task, reject the queued ones,
    /// and arm the teardown backstop.
    fn begin_wind_down(&self, plan: Plan, running: Option<&str>) {
        let s = self.session;
        let (home, id) = (s.home.clone(), s.id.clone());
        winddown::arm_backstop(Timing::get().member_teardown, move || running::remove(&home, &id));
        if plan.formation_ended() {
            // Callees are members of the same formation: they hear its end themselves.
            crate::calls::formation_over();
            if let Some(frm) = &self.formation_id {
                s.journal.formation_ended(&s.session_start, frm);
            }
            // An idle member's end is the formation's ordinary end: said in its log only, so a
            // run that succeeded does not end on lines that read like failures.
            match running {
                Some(task) => s.console.note(&format!(
                    "formation lifeline closed — the formation has ended; cancelling task {task}, still running, and ending the session"
                )),
                None => s.console.log_only(IDLE_AT_FORMATION_END),
            }
        }
        if plan.deadline_reached()
            && let Some(d) = self.deadline
        {
            s.journal.deadline_reached(&rfc3339_ms(d), secs_until(s.started_at, d));
        }
        if let Some(task) = running {
            self.board.cancel(task, plan.cancel_reason());
        }
        self.board.close();
        if let Some(c) = &self.calls {
            c.finish_all();
        }
    }

    /// Writes `session_end`, prints the closing diagnostic, and returns the exit code.
    fn finish(&self, end: Option<End>) -> u8 {
        let s = self.session;
        let local = self.recorder.local_ending();
        let (status, code) = match end {
            Some(End::Wind(plan)) => {
                if plan.deadline_reached()
                    && let Some(d) = self.deadline
                {
                    s.console.diag(&Diagnostic::new(
                        diag::E_RUN_053,
                        format!(
                            "the session reached the deadline it inherited, at {}, from the formation or the capsule that launched it",
                            rfc3339_ms(d)
                        ),
                    ));
                } else if plan.cause == Cause::Sigterm && plan.was_running {
                    s.console.diag(&Diagnostic::new(
                        diag::E_RUN_040,
                        "SIGTERM arrived while a task was running: the task was cancelled, and the session ended canceled",
                    ));
                }
                (plan.exit_status(), plan.exit_code())
            }
            Some(End::Normal) | None => match (self.policy.has_task, &local) {
                (true, Some((task_id, ending))) => {
                    match ending.task_not_completed_error(task_id, &s.records.dir().join("out/result.txt")) {
                        Some(d) => {
                            s.console.diag(&d);
                            (ending.status(), 1)
                        }
                        None => ("ok", 0),
                    }
                }
                _ => ("ok", 0),
            },
        };
        s.journal.session_end(s.duration_ms(), status);
        if let (Some(retain), Some(group)) = (&self.retain, s.records.dir().parent()) {
            retention::run(&s.home, group, &s.id, &s.capsule, retain, &s.console);
        }
        code
    }
}
