//! The board observer: turns the task board's events into trace records, result files and the
//! `--task` task's answer on stdout (docs/reference/formation.md#how-a-member-ends,
//! docs/reference/formation.md#trace-records).
//!
//! It runs on whichever thread changed the board (a door worker, the executor, the controller),
//! right after the change, so records appear in the order tasks changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use crate::tasks::{Board, BoardEvent, Origin, REJECT_BUSY, REJECT_CLOSING, TaskState};

use super::journal::Journal;
use super::lifecycle::Ending;
use super::questions::Questions;
use super::records::{Console, Records};

/// What the recorder tells the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskNews {
    /// The `--task` task reached a terminal state.
    LocalEnded,
}

pub struct Recorder {
    journal: Journal,
    records: Records,
    console: Console,
    json: bool,
    news: UnboundedSender<TaskNews>,
    origins: Mutex<HashMap<String, Origin>>,
    local: Mutex<Option<(String, Ending)>>,
    /// The `--task` task's questions, put to the person who ran the session.
    questions: Arc<Questions>,
}

impl Recorder {
    pub fn new(
        journal: Journal,
        records: Records,
        console: Console,
        json: bool,
        news: UnboundedSender<TaskNews>,
        questions: Arc<Questions>,
    ) -> Arc<Recorder> {
        Arc::new(Recorder {
            journal,
            records,
            console,
            json,
            news,
            origins: Mutex::new(HashMap::new()),
            local: Mutex::new(None),
            questions,
        })
    }

    /// How the `--task` task ended, once it has.
    pub fn local_ending(&self) -> Option<(String, Ending)> {
        crate::sync::lock(&self.local).clone()
    }

    /// Installs this recorder as the board's observer.
    pub fn observe(self: &Arc<Self>, board: &Board) {
        let me = Arc::clone(self);
        board.set_observer(move |e| me.on_event(e));
    }

    fn on_event(&self, e: &BoardEvent) {
        match e {
            BoardEvent::Received {
                task_id,
                context_id,
                message_id,
                traceparent,
                caller_member,
                origin,
                ..
            } => {
                crate::sync::lock(&self.origins).insert(task_id.clone(), *origin);
                crate::otel::task_received(task_id, traceparent.as_deref());
                self.journal.task_received(
                    task_id,
                    context_id,
                    message_id,
                    traceparent.as_deref(),
                    caller_member.as_deref(),
                );
            }
            BoardEvent::Ended {
                task_id,
                state,
                no_answer,
                reason,
                answer,
            } => {
                let origin = crate::sync::lock(&self.origins).remove(task_id);
                if crate::otel::enabled() {
                    let status = match state {
                        TaskState::Completed => "completed",
                        TaskState::Canceled => "canceled",
                        TaskState::Rejected => "rejected",
                        _ if *no_answer => "no_answer",
                        _ => "failed",
                    };
                    crate::otel::task_ended(task_id, status);
                }
                self.ended(
                    task_id,
                    *state,
                    *no_answer,
                    reason.as_deref(),
                    answer.as_deref(),
                    origin == Some(Origin::Local),
                );
            }
            BoardEvent::InputRequested {
                task_id,
                asked_by,
                question_bytes,
                question,
            } => {
                crate::otel::input_requested(task_id, asked_by, *question_bytes);
                self.journal.input_requested(task_id, asked_by, *question_bytes);
                self.journal.step_text(task_id, "question", "", "question", question);
                if self.is_local(task_id) {
                    self.questions.asked(task_id, asked_by);
                }
            }
            BoardEvent::InputSettled {
                task_id,
                waited_ms,
                answer_bytes,
                outcome,
                answer,
            } => {
                crate::otel::input_received(task_id, outcome.as_str(), *waited_ms, *answer_bytes);
                self.journal
                    .input_received(task_id, *waited_ms, *answer_bytes, *outcome);
                if let Some(answer) = answer {
                    self.journal.step_text(task_id, "question", "", "answer", answer);
                }
                if self.is_local(task_id) {
                    self.questions.settled(task_id, *outcome);
                }
            }
        }
    }

    fn is_local(&self, task_id: &str) -> bool {
        crate::sync::lock(&self.origins).get(task_id) == Some(&Origin::Local)
    }

    /// Runs while the board still holds the ending mutation's state (`Board::mutate`): it must
    /// not read the board, so a completed task's answer comes with its event.
    fn ended(
        &self,
        task_id: &str,
        state: TaskState,
        no_answer: bool,
        reason: Option<&str>,
        answer: Option<&str>,
        local: bool,
    ) {
        let reason_text = reason.unwrap_or_default().to_string();
        let ending = match state {
            TaskState::Rejected if !matches!(reason, Some(REJECT_BUSY | REJECT_CLOSING)) => {
                // Taken, then refused where it was forwarded: it has a result like any task
                // that ran.
                self.journal.task_rejected(task_id, reason.unwrap_or("rejected"));
                Ending::Rejected(reason_text)
            }
            TaskState::Rejected => {
                self.journal.task_rejected(task_id, reason.unwrap_or("rejected"));
                if !local {
                    return;
                }
                // A `--task` task refused because the session is closing never ran: it ends as
                // cancelled for the operator who asked for it.
                Ending::Canceled
            }
            TaskState::Canceled => {
                self.journal.task_canceled(task_id, reason.unwrap_or("canceled"));
                Ending::Canceled
            }
            TaskState::Completed => Ending::Completed(answer.unwrap_or_default().to_string()),
            TaskState::Failed if no_answer => Ending::NoAnswer(reason_text),
            TaskState::Failed if self.journal.take_max_turns(task_id) => Ending::MaxTurns(reason_text),
            _ => Ending::Failed(reason_text),
        };
        if state != TaskState::Canceled && state != TaskState::Rejected {
            self.journal.task_end(task_id, ending.status());
        }
        if let Err(e) = self.records.write_result(task_id, !local, &ending.result_text()) {
            self.console.diag(&crate::diag::Diagnostic::new(
                crate::diag::W_RUN_009,
                format!("the result of task {task_id} cannot be written: {e}"),
            ));
        }
        if local {
            if self.json {
                self.console.out_line(&ending.answer_line(task_id));
            } else {
                self.console.out_text(&ending.result_text());
            }
            *crate::sync::lock(&self.local) = Some((task_id.to_string(), ending));
            let _ = self.news.send(TaskNews::LocalEnded);
        }
    }
}
