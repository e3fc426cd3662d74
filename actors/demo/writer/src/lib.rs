//! writer: asks `analyst` for the facts of its text with one member call, then writes a one-line
//! summary of the text that quotes those facts.

wit_bindgen::generate!({ world: "capsule", path: "../../../src/capsule/wit" });

use murmur::capsule::call_member::{CallStatus, await_all, start};

/// How many words of the text the summary quotes.
const HEADLINE_WORDS: usize = 6;

struct Writer;

impl Guest for Writer {
    fn run(task: String) -> Result<String, Failure> {
        start("analyst", &task).map_err(|e| Failure::Error(format!("writer could not call analyst: {e}")))?;
        let facts = match await_all().into_iter().find(|o| o.member == "analyst") {
            Some(o) if o.status == CallStatus::Completed => format!("analyst counted {}", o.output),
            Some(_) | None => "analyst gave no facts".to_string(),
        };
        Ok(format!("\"{}\" ({facts})", headline(&task)))
    }
}

export!(Writer);

/// The text's first words, with `…` when there are more.
fn headline(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() <= HEADLINE_WORDS {
        words.join(" ")
    } else {
        format!("{} …", words[..HEADLINE_WORDS].join(" "))
    }
}
