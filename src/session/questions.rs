//! The `--task` task's questions, put to the person who ran `mur run` (docs/reference/door.md#asking).
//!
//! The `--task` task is the operator's own (`Origin::Local`), so its questions are theirs to
//! answer. On a terminal (stdin and stderr both), the question is printed and one typed line
//! answers it through the board, as an answer at the door would. Without one, the question is
//! printed and, once per session, how to answer it: `mur answer`, or SendMessage at the door with
//! the operator token. A formation's entry is started on the launcher's terminal when there is
//! one, so this serves `mur run --roster --task` too.
//!
//! The question text goes to stderr only, never to `logs/bootstrap.log`: logs hold no prompt or
//! answer. A question another way answered (or that timed out) closes what the terminal waits for.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::question::{self, MAX_TERMINAL_ANSWER};
use crate::tasks::{Board, InputOutcome};

use super::records::Console;

/// What the person at the terminal reads this behind (the command they ran).
const PREFIX: &str = "[mur run] ";

pub struct Questions {
    board: OnceLock<Weak<Board>>,
    console: Console,
    terminal: bool,
    /// Who asks when the session is no formation member: its capsule.
    capsule: String,
    /// The door's `http://127.0.0.1:port` and the running record's path, for the hint.
    door: OnceLock<(String, String)>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The task whose question the terminal's next line answers.
    open: Option<String>,
    hinted: bool,
    reading: bool,
}

impl Questions {
    pub fn new(console: Console, capsule: String) -> Arc<Questions> {
        Arc::new(Questions {
            board: OnceLock::new(),
            console,
            terminal: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            capsule,
            door: OnceLock::new(),
            state: Mutex::new(State::default()),
        })
    }

    pub fn set_board(&self, board: &Arc<Board>) {
        let _ = self.board.set(Arc::downgrade(board));
    }

    /// The door serves: where a person without the terminal answers.
    pub fn set_door(&self, url: &str, running_record: &str) {
        let _ = self.door.set((format!("http://{url}"), running_record.to_string()));
    }

    fn board(&self) -> Option<Arc<Board>> {
        self.board.get().and_then(Weak::upgrade)
    }

    /// The `--task` task asked; runs on the thread that changed the board, so it never blocks.
    pub fn asked(self: &Arc<Self>, task_id: &str, asked_by: &[String]) {
        let question = self
            .board()
            .and_then(|b| b.get(task_id))
            .and_then(|t| t.status_text)
            .unwrap_or_default();
        let who = question::who_asks(asked_by, &self.capsule);
        let mut st = crate::sync::lock(&self.state);
        st.open = Some(task_id.to_string());
        eprint_now(&format!(
            "{PREFIX}{who} (task {task_id}):\n{}\n",
            question::printable(&question)
        ));
        if self.terminal {
            eprint_now(&format!("{PREFIX}your answer (one line, Enter sends it): "));
            if !st.reading {
                st.reading = true;
                let me = Arc::clone(self);
                let started = std::thread::Builder::new()
                    .name("terminal-answers".into())
                    .spawn(move || me.read_answers());
                if started.is_err() {
                    st.reading = false;
                    self.console
                        .note("the terminal cannot be read for the answer; answer with `mur answer` instead");
                }
            }
        } else if !st.hinted {
            st.hinted = true;
            let (url, record) = self
                .door
                .get()
                .cloned()
                .unwrap_or_else(|| ("its door".into(), "its running record".into()));
            self.console.note(&format!(
                "task {task_id} waits for input; {}",
                question::how_to_answer(task_id, &url, &record)
            ));
        }
    }

    /// The question is over, however it ended.
    pub fn settled(&self, task_id: &str, outcome: InputOutcome) {
        let mut st = crate::sync::lock(&self.state);
        if st.open.as_deref() != Some(task_id) {
            return;
        }
        st.open = None;
        if self.terminal {
            // The prompt line stays open otherwise.
            let why = match outcome {
                InputOutcome::Answered => "answered from elsewhere (the door)",
                InputOutcome::TimedOut => "no answer came in time",
                InputOutcome::Abandoned => "the task no longer waits",
            };
            eprint_now(&format!("\n{PREFIX}{why}\n"));
        }
    }

    /// One line per answer, for as long as the terminal stays open.
    fn read_answers(&self) {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            // Bounded: a line longer than an answer may be is read no further, then skipped.
            let limit = MAX_TERMINAL_ANSWER as u64 + 2;
            match (&mut stdin).take(limit).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') && line.len() as u64 >= limit {
                let mut rest = Vec::new();
                loop {
                    rest.clear();
                    match (&mut stdin).take(limit).read_until(b'\n', &mut rest) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if rest.last() == Some(&b'\n') => break,
                        Ok(_) => {}
                    }
                }
            }
            self.typed(&String::from_utf8_lossy(&line));
        }
    }

    fn typed(&self, line: &str) {
        let mut st = crate::sync::lock(&self.state);
        let Some(task_id) = st.open.clone() else {
            eprint_now(&format!(
                "{PREFIX}no task waits for input now; that line went nowhere\n"
            ));
            return;
        };
        let text = match question::typed_answer(line) {
            Ok(t) => t,
            Err(why) => {
                eprint_now(&format!(
                    "{PREFIX}{why}\n{PREFIX}your answer (one line, Enter sends it): "
                ));
                return;
            }
        };
        // Cleared first: the board's event for this very answer must not read as another's.
        st.open = None;
        drop(st);
        let Some(board) = self.board() else { return };
        let message_id = format!("msg_{}", uuid::Uuid::new_v4().simple());
        // The session's own task: the person who ran it may answer it.
        if board.answer(&task_id, text, &message_id, |_| true).is_err() {
            eprint_now(&format!(
                "{PREFIX}task {task_id} waits for no answer any more; that line went nowhere\n"
            ));
        }
    }
}

/// Stderr, flushed, never the log (the text may be a question).
fn eprint_now(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}
