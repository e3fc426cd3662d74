//! @NAME@: a tool for a mur model capsule, written in Rust. The model sees the name, description
//! and input schema `describe` returns, and calls the tool with a JSON object matching the
//! schema; a fresh instance runs each call. This one counts the words of `text`. An `Err` is
//! shown to the model as a failed call; the task goes on.

wit_bindgen::generate!({ world: "tool", path: "wit" });

const SCHEMA: &str = r#"{"type":"object","properties":{"text":{"type":"string","description":"The text whose words are counted."}},"required":["text"]}"#;

struct Tool;

impl Guest for Tool {
    fn describe() -> Descriptor {
        Descriptor {
            name: "@NAME@".into(),
            description: "Counts the words of a text: the number of whitespace-separated words in `text`.".into(),
            input_schema: SCHEMA.into(),
        }
    }

    fn call(input: String) -> Result<String, String> {
        let args: serde_json::Value =
            serde_json::from_str(&input).map_err(|e| format!("the input is not JSON: {e}"))?;
        let text = args["text"].as_str().ok_or("`text` must be a string")?;
        Ok(text.split_whitespace().count().to_string())
    }
}

export!(Tool);
