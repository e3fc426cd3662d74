//! The session lifecycle of docs/reference/manifest.md#keys and the results of
//! docs/reference/formation.md#how-a-member-ends, as pure decisions.
//!
//! | acceptance + after_task | without `--task` | with `--task` |
//! |---|---|---|
//! | `queue` + `sleep` | takes tasks for ever | runs T, then ends |
//! | any other pair | waits the idle timeout for a first task, ends after it | runs T, then ends |
//!
//! A `--task` run ends with its task whatever the lifecycle, `queue` + `sleep` included
//! (docs/reference/manifest.md#keys, `lifecycle.after_task`; docs/reference/cli.md#mur-run): those
//! keys say how a capsule serves its callers, and a one-shot run of a capsule that serves its
//! callers must still end.

use crate::diag::{self, Diagnostic};
use crate::manifest::{Acceptance, AfterTask, Lifecycle};

/// The lifecycle a session runs: the manifest's keys, with the launcher's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub acceptance: Acceptance,
    pub after_task: AfterTask,
    pub queue_depth: u32,
    /// The session was started with `--task`.
    pub has_task: bool,
}

/// A bad `--lifecycle-*` value: a usage error (exit 2), like clap's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadOverride(pub String);

impl Policy {
    /// The manifest's lifecycle with `--lifecycle-task-acceptance` / `--lifecycle-after-task`.
    pub fn new(
        manifest: &Lifecycle,
        acceptance: Option<&str>,
        after_task: Option<&str>,
        has_task: bool,
    ) -> Result<Policy, BadOverride> {
        let acceptance = match acceptance {
            None => manifest.task_acceptance,
            Some(w) => Acceptance::from_word(w).ok_or_else(|| {
                BadOverride(format!(
                    "invalid value '{w}' for '--lifecycle-task-acceptance <none|single|queue>'"
                ))
            })?,
        };
        let after_task = match after_task {
            None => manifest.after_task,
            Some(w) => AfterTask::from_word(w)
                .ok_or_else(|| BadOverride(format!("invalid value '{w}' for '--lifecycle-after-task <exit|sleep>'")))?,
        };
        Ok(Policy {
            acceptance,
            after_task,
            queue_depth: manifest.queue_depth,
            has_task,
        })
    }

    /// `queue` + `sleep` without `--task`: the session serves until it is stopped.
    pub fn serves_for_ever(&self) -> bool {
        self.acceptance == Acceptance::Queue && self.after_task == AfterTask::Sleep && !self.has_task
    }

    /// Whether the session ends when nobody gives it a first task within the idle wait.
    pub fn idle_timeout(&self) -> bool {
        !self.serves_for_ever() && !self.has_task
    }

    /// Whether the session ends once a task has ended (the `--task` task, or the first door task).
    pub fn ends_after_task(&self) -> bool {
        !self.serves_for_ever()
    }
}

/// How a task ended, as the session records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Completed(String),
    Failed(String),
    NoAnswer(String),
    MaxTurns(String),
    /// Taken, then refused where it was forwarded (a remote capsule's agent would not take it).
    Rejected(String),
    Canceled,
}

impl Ending {
    /// What `out/result.txt` holds (docs/reference/formation.md#how-a-member-ends): the answer, or
    /// a `<status>: …` line.
    pub fn result_text(&self) -> String {
        match self {
            Ending::Completed(answer) => answer.clone(),
            Ending::Failed(m) | Ending::MaxTurns(m) => format!("failed: {m}"),
            Ending::NoAnswer(r) => format!("no_answer: {r}"),
            Ending::Rejected(m) => format!("rejected: {m}"),
            Ending::Canceled => super::records::CANCELED_RESULT.to_string(),
        }
    }

    /// The task's outcome as a session status (`session_end.exit_status` of a `--task` session,
    /// `task_end.exit_status`).
    pub fn status(&self) -> &'static str {
        match self {
            Ending::Completed(_) => "ok",
            // The session statuses have no `rejected`: the task did not do its work.
            Ending::Failed(_) | Ending::Rejected(_) => "failed",
            Ending::NoAnswer(_) => "no_answer",
            Ending::MaxTurns(_) => "max_turns_reached",
            Ending::Canceled => "canceled",
        }
    }

    /// The A2A state of the task.
    pub fn state(&self) -> &'static str {
        match self {
            Ending::Completed(_) => "TASK_STATE_COMPLETED",
            Ending::Canceled => "TASK_STATE_CANCELED",
            Ending::Rejected(_) => "TASK_STATE_REJECTED",
            _ => "TASK_STATE_FAILED",
        }
    }

    pub fn answer(&self) -> Option<&str> {
        match self {
            Ending::Completed(a) => Some(a),
            _ => None,
        }
    }

    /// The `--json` answer line of a `--task` task (docs/reference/formation.md#how-a-member-ends),
    /// keys sorted.
    pub fn answer_line(&self, task_id: &str) -> String {
        serde_json::json!({ "answer": self.answer(), "state": self.state(), "task_id": task_id }).to_string()
    }

    /// E-RUN-030 for a `--task` task that ended other than completed [ours]; the hint names
    /// `result`, the file that holds the task's result.
    pub fn task_not_completed_error(&self, task_id: &str, result: &std::path::Path) -> Option<Diagnostic> {
        let detail = match self {
            Ending::Completed(_) => return None,
            Ending::Failed(m) | Ending::MaxTurns(m) => format!("failed: {m}"),
            Ending::NoAnswer(r) => format!("no_answer: {r}"),
            Ending::Rejected(m) => format!("rejected: {m}"),
            Ending::Canceled => "canceled".to_string(),
        };
        Some(
            Diagnostic::new(diag::E_RUN_030, format!("the task {task_id} ended {detail}"))
                .with_hint(format!("{} holds the task's result", result.display())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_table_of_6_4() {
        use Acceptance::*;
        use AfterTask::*;
        // (acceptance, after_task, --task) → (serves for ever, idle timeout, ends after a task)
        let table = [
            (Queue, Sleep, false, true, false, false),
            (Queue, Sleep, true, false, false, true),
            (Queue, Exit, false, false, true, true),
            (Queue, Exit, true, false, false, true),
            (Single, Sleep, false, false, true, true),
            (Single, Exit, false, false, true, true),
            (Single, Exit, true, false, false, true),
            (None, Exit, false, false, true, true),
            (None, Sleep, true, false, false, true),
        ];
        for (a, t, has_task, forever, idle, ends) in table {
            let p = Policy {
                acceptance: a,
                after_task: t,
                queue_depth: 1,
                has_task,
            };
            assert_eq!(
                (p.serves_for_ever(), p.idle_timeout(), p.ends_after_task()),
                (forever, idle, ends),
                "{p:?}"
            );
        }
    }

    #[test]
    fn overrides_replace_the_manifest_keys() {
        let m = Lifecycle::default();
        let p = Policy::new(&m, Some("queue"), Some("sleep"), false).unwrap();
        assert_eq!((p.acceptance, p.after_task), (Acceptance::Queue, AfterTask::Sleep));
        let p = Policy::new(&m, None, None, true).unwrap();
        assert_eq!(
            (p.acceptance, p.after_task, p.has_task),
            (Acceptance::Single, AfterTask::Exit, true)
        );
        assert_eq!(
            Policy::new(&m, Some("many"), None, false),
            Err(BadOverride(
                "invalid value 'many' for '--lifecycle-task-acceptance <none|single|queue>'".into()
            ))
        );
        assert!(Policy::new(&m, None, Some("nap"), false).is_err());
    }

    #[test]
    fn results_and_answer_lines() {
        let table = [
            (
                Ending::Completed("hi".into()),
                "hi",
                "ok",
                r#"{"answer":"hi","state":"TASK_STATE_COMPLETED","task_id":"tsk_1"}"#,
            ),
            (
                Ending::Failed("boom".into()),
                "failed: boom",
                "failed",
                r#"{"answer":null,"state":"TASK_STATE_FAILED","task_id":"tsk_1"}"#,
            ),
            (
                Ending::NoAnswer("nobody".into()),
                "no_answer: nobody",
                "no_answer",
                r#"{"answer":null,"state":"TASK_STATE_FAILED","task_id":"tsk_1"}"#,
            ),
            (
                Ending::Canceled,
                "canceled: the task was canceled before it completed, so it has no result",
                "canceled",
                r#"{"answer":null,"state":"TASK_STATE_CANCELED","task_id":"tsk_1"}"#,
            ),
        ];
        for (e, text, status, line) in table {
            assert_eq!(e.result_text(), text);
            assert_eq!(e.status(), status);
            assert_eq!(e.answer_line("tsk_1"), line);
        }
        assert!(
            Ending::Completed("x".into())
                .task_not_completed_error("tsk_1", std::path::Path::new("/r/out/result.txt"))
                .is_none()
        );
        let d = Ending::Failed("boom".into())
            .task_not_completed_error("tsk_1", std::path::Path::new("/r/out/result.txt"))
            .expect("a refusal");
        assert_eq!(d.message, "the task tsk_1 ended failed: boom");
        assert_eq!(d.hint(), Some("/r/out/result.txt holds the task's result"));
    }
}
