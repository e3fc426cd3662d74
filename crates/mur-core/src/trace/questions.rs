//! The questions a session's tasks asked, from its `input_requested` / `input_received` records
//! (docs/reference/formation.md#trace-records): who asked, how it ended, how long it waited, and
//! the sizes only, as the records hold them. `mur trace show frm_…` lists them per member.

use serde_json::Value;

/// One question, as one session's trace recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuestionSummary {
    /// The session's roster name (`-` outside a formation).
    pub member: String,
    pub task_id: String,
    /// Innermost first: the member that asked, then each it came up through.
    pub asked_by: Vec<String>,
    pub question_bytes: u64,
    /// `answered`, `timed_out`, `abandoned`; `None` while the trace shows it open.
    pub outcome: Option<String>,
    pub waited_ms: Option<u64>,
    pub answer_bytes: Option<u64>,
}

/// Each `input_requested` of `records`, joined with the `input_received` for the same task that
/// follows it (a task asks one question at a time).
pub fn of_records(records: &[Value], member: &str) -> Vec<QuestionSummary> {
    let mut out: Vec<QuestionSummary> = Vec::new();
    for r in records {
        let task_id = r["task_id"].as_str().unwrap_or_default();
        match r["event_type"].as_str() {
            Some("input_requested") => out.push(QuestionSummary {
                member: member.to_string(),
                task_id: task_id.to_string(),
                asked_by: r["asked_by"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default(),
                question_bytes: r["question_bytes"].as_u64().unwrap_or(0),
                ..QuestionSummary::default()
            }),
            Some("input_received") => {
                if let Some(q) = out
                    .iter_mut()
                    .rev()
                    .find(|q| q.task_id == task_id && q.outcome.is_none())
                {
                    q.outcome = Some(r["outcome"].as_str().unwrap_or("?").to_string());
                    q.waited_ms = r["waited_ms"].as_u64();
                    q.answer_bytes = r["answer_bytes"].as_u64();
                }
            }
            _ => {}
        }
    }
    out
}

impl QuestionSummary {
    /// `tsk_…  worker asks (through lead)  answered  waited 1200 ms  question 42 B  answer 3 B`.
    pub fn render(&self) -> String {
        let mut line = format!(
            "{}  {}  {}",
            self.task_id,
            crate::question::who_asks(&self.asked_by, &self.member),
            self.outcome.as_deref().unwrap_or("open")
        );
        if let Some(ms) = self.waited_ms {
            line.push_str(&format!("  waited {ms} ms"));
        }
        line.push_str(&format!("  question {} B", self.question_bytes));
        if let Some(b) = self.answer_bytes {
            line.push_str(&format!("  answer {b} B"));
        }
        line
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "member": self.member,
            "task_id": self.task_id,
            "asked_by": self.asked_by,
            "question_bytes": self.question_bytes,
            "outcome": self.outcome,
            "waited_ms": self.waited_ms,
            "answer_bytes": self.answer_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asked(task: &str, by: &[&str], bytes: u64) -> Value {
        json!({"event_type": "input_requested", "task_id": task, "asked_by": by, "question_bytes": bytes})
    }

    fn got(task: &str, outcome: &str, waited: u64, answer: Option<u64>) -> Value {
        json!({"event_type": "input_received", "task_id": task, "outcome": outcome, "waited_ms": waited, "answer_bytes": answer})
    }

    #[test]
    fn questions_are_joined_with_their_ends_and_rendered() {
        let cases: Vec<(Vec<Value>, Vec<&str>)> = vec![
            (vec![], vec![]),
            (
                vec![asked("tsk_a", &["lead"], 42), got("tsk_a", "answered", 1200, Some(3))],
                vec!["tsk_a  lead asks  answered  waited 1200 ms  question 42 B  answer 3 B"],
            ),
            (
                vec![asked("tsk_a", &["worker", "lead"], 9)],
                vec!["tsk_a  worker asks (through lead)  open  question 9 B"],
            ),
            (
                // Two questions of one task, and another task's between them.
                vec![
                    asked("tsk_a", &[], 5),
                    asked("tsk_b", &["lead"], 6),
                    got("tsk_a", "timed_out", 300, None),
                    asked("tsk_a", &[], 7),
                    got("tsk_a", "abandoned", 10, None),
                ],
                vec![
                    "tsk_a  lead asks  timed_out  waited 300 ms  question 5 B",
                    "tsk_b  lead asks  open  question 6 B",
                    "tsk_a  lead asks  abandoned  waited 10 ms  question 7 B",
                ],
            ),
            (
                // An end without its question is skipped.
                vec![got("tsk_z", "answered", 1, Some(1))],
                vec![],
            ),
        ];
        for (records, want) in cases {
            let got: Vec<String> = of_records(&records, "lead")
                .iter()
                .map(QuestionSummary::render)
                .collect();
            assert_eq!(got, want, "{records:?}");
        }
    }
}
