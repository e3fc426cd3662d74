//! worker, the member `mur new --roster` scaffolds to do the lead's work: answers every task
//! with its own roster name and the task's text. Replace it with a capsule that does real work.

wit_bindgen::generate!({ world: "capsule", path: "../../../../src/capsule/wit" });

use murmur::capsule::identity::member_name;

struct Worker;

impl Guest for Worker {
    fn run(task: String) -> Result<String, Failure> {
        let me = member_name().unwrap_or_else(|| "worker".to_string());
        Ok(format!("{me} handled: {task}"))
    }
}

export!(Worker);
