//! planner, the demo's entry member: splits its task in two, hands the first part to `analyst`
//! and the rest to `writer` with two member calls that run at the same time, waits for both,
//! and answers with a short report naming which member said what.

wit_bindgen::generate!({ world: "capsule", path: "../../../src/capsule/wit" });

use murmur::capsule::call_member::{CallOutcome, CallStatus, await_all, start};

struct Planner;

impl Guest for Planner {
    fn run(task: String) -> Result<String, Failure> {
        let (facts_part, summary_part) = split(&task);
        // Both calls are started before either is awaited, so the two members work at once.
        let calls = [("analyst", facts_part), ("writer", summary_part)];
        for (member, part) in &calls {
            start(member, part).map_err(|e| Failure::Error(format!("planner could not call {member}: {e}")))?;
        }
        let outcomes = await_all();
        let mut report = String::from("planner split the task in two:");
        for (member, part) in &calls {
            let said = match outcomes.iter().find(|o| o.member == *member) {
                Some(o) => said(o),
                None => "no answer (the call has no outcome)".to_string(),
            };
            report.push_str(&format!("\n- {member}, on \"{part}\": {said}"));
        }
        Ok(report)
    }
}

export!(Planner);

/// The first sentence and the rest; with one sentence, the text before and after its first
/// " and "; with neither, the whole task twice.
fn split(task: &str) -> (String, String) {
    let task = task.trim();
    let sentence_end = task
        .char_indices()
        .find(|&(i, c)| matches!(c, '.' | '!' | '?') && task[i + 1..].starts_with(char::is_whitespace))
        .map(|(i, _)| i + 1);
    let (first, rest) = match sentence_end {
        Some(end) => (&task[..end], &task[end..]),
        None => match task.find(" and ") {
            Some(i) => (&task[..i], &task[i + " and ".len()..]),
            None => (task, task),
        },
    };
    (first.trim().to_string(), rest.trim().to_string())
}

/// What a member said: its answer, or why there is none.
fn said(o: &CallOutcome) -> String {
    match o.status {
        CallStatus::Completed => o.output.clone(),
        other => format!("no answer ({}: {})", status_word(other), o.output),
    }
}

/// The trace's spelling of a call status.
fn status_word(s: CallStatus) -> &'static str {
    match s {
        CallStatus::Completed => "completed",
        CallStatus::Failed => "failed",
        CallStatus::Canceled => "canceled",
        CallStatus::Rejected => "rejected",
        CallStatus::TimedOut => "timed_out",
        CallStatus::Unreachable => "unreachable",
        CallStatus::Abandoned => "abandoned",
        CallStatus::NoAnswer => "no_answer",
    }
}
