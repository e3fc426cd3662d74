//! lead, the entry member `mur new --roster` scaffolds: hands each task to `worker` with one
//! member call and answers with the worker's answer.

wit_bindgen::generate!({ world: "capsule", path: "../../../../src/capsule/wit" });

use murmur::capsule::call_member::{CallStatus, await_all, start};

/// The member the task goes to, as the scaffold's roster names it.
const WORKER: &str = "worker";

struct Lead;

impl Guest for Lead {
    fn run(task: String) -> Result<String, Failure> {
        start(WORKER, &task).map_err(|e| Failure::Error(format!("lead could not call {WORKER}: {e}")))?;
        match await_all().into_iter().find(|o| o.member == WORKER) {
            Some(o) if o.status == CallStatus::Completed => Ok(o.output),
            Some(o) => Err(Failure::Error(format!("{WORKER} gave no answer: {}", o.output))),
            None => Err(Failure::Error(format!("the call to {WORKER} has no outcome"))),
        }
    }
}

export!(Lead);
