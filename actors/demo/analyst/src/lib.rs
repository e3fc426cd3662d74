//! analyst: answers with facts about its text that anyone can check by hand: how many words and
//! letters it has, and its longest word. No calls, no clock, no randomness, so the same text
//! always gets the same answer.

wit_bindgen::generate!({ world: "capsule", path: "../../../src/capsule/wit" });

struct Analyst;

impl Guest for Analyst {
    fn run(task: String) -> Result<String, Failure> {
        Ok(facts(&task))
    }
}

export!(Analyst);

/// `13 words, 57 letters, longest word "recorded"`. Words are split on whitespace with the
/// punctuation around them trimmed; on a tie the first longest word wins.
fn facts(text: &str) -> String {
    let words: Vec<&str> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .collect();
    let letters = text.chars().filter(|c| c.is_alphabetic()).count();
    let mut longest = "";
    for w in &words {
        if w.chars().count() > longest.chars().count() {
            longest = w;
        }
    }
    match words.len() {
        0 => "no words".to_string(),
        1 => format!("1 word, {letters} letters, longest word \"{longest}\""),
        n => format!("{n} words, {letters} letters, longest word \"{longest}\""),
    }
}
