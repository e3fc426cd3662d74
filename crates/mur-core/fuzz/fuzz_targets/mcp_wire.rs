//! Fuzzes how a model capsule's runtime reads an MCP tool server's answers (`wire::mcp`): a whole
//! JSON reply or one event of a stream (`read_json_body`, `response_for`), and the results of
//! `initialize`, `tools/list` and `tools/call`. The tool server controls every byte.
//!
//! Input: the first byte picks the request id (low 2 bits, so fuzzed replies often carry it) and
//! the bound on a call result's text (0..=63 bytes); the rest is the reply body. Properties:
//! - no panic;
//! - the reply's response is exactly that of a plain reading: the first message (of a batch, one
//!   level) that is an object with our numeric id, no method, and a result or an error;
//!   `read_json_body` answers as `response_for` on the parsed body, and quotes a bounded error;
//! - an accepted `initialize` names a supported version, and a server name cut from its own;
//! - a `tools/list` page keeps only tools with a 1 to `MAX_TOOL_NAME`-byte name, in the order
//!   listed, each with its description cut to `MAX_DESCRIPTION` and an object schema within
//!   `MAX_SCHEMA`; a cursor it keeps is within `MAX_CURSOR`;
//! - a call result's text under a bound is the unbounded text's first bytes (cut at a character)
//!   with a note naming both lengths, or the whole text when it fits;
//! - a `tools/call` request built from the reply reads back to its name and arguments.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::text::head;
use mur_core::wire::mcp;
use serde_json::{Value, json};

/// The longest error text: a code, and a message cut to `MAX_ERROR_TEXT`.
const MAX_ERROR: usize = "error -9223372036854775808: ".len() + mcp::MAX_ERROR_TEXT;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let id = u64::from(mode & 0x03);
    let max_text = usize::from(mode >> 2);

    let read = mcp::read_json_body(body, id);
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        let e = read.expect_err("not JSON");
        assert!(e.starts_with("the reply is not JSON: "), "{e}");
        // The quoted head is 200 bytes, each escaped to at most 6 characters.
        assert!(e.len() <= "the reply is not JSON: \"\"".len() + 6 * 200, "{e}");
        return;
    };
    let found = mcp::response_for(&message, id);
    let plain = plain_response(&message, id);
    assert_eq!(found.as_ref().map(|r| r.as_ref().ok().cloned()), plain.map(|r| r.ok()));
    match (&found, &read) {
        (Some(r), _) => assert_eq!(r, &read),
        (None, Err(e)) => assert_eq!(e, &format!("the reply holds no response to request {id}")),
        (None, Ok(_)) => panic!("a result with no response"),
    }
    if let Some(Err(e)) = &found {
        assert!(e.len() <= MAX_ERROR, "{e}");
    }

    // What a result may be: the response's, or the body itself read as one.
    let mut results = vec![&message];
    if let Some(Ok(r)) = &found {
        results.push(r);
    }
    for result in results {
        initialized(result);
        listed(result);
        called(result, max_text);
    }

    let name = String::from_utf8_lossy(body);
    match mcp::tools_call_request(id, &name, &message) {
        Ok(request) => {
            let request: Value = serde_json::from_str(&request).expect("a request is JSON");
            let arguments = if message.is_null() { json!({}) } else { message.clone() };
            assert_eq!(request["id"], json!(id));
            assert_eq!(request["method"], "tools/call");
            assert_eq!(request["params"], json!({"name": name, "arguments": arguments}));
        }
        Err(_) => assert!(!message.is_object() && !message.is_null()),
    }
});

/// The response to `id` read plainly: `Some(Ok(result))`, `Some(Err(error))`, or `None`.
fn plain_response(message: &Value, id: u64) -> Option<Result<Value, Value>> {
    let candidates: Vec<&Value> = match message {
        Value::Array(batch) => batch.iter().collect(),
        one => vec![one],
    };
    candidates.into_iter().find_map(|m| {
        let m = m.as_object()?;
        if m.contains_key("method") || m.get("id")?.as_u64()? != id {
            return None;
        }
        match (m.get("result"), m.get("error")) {
            (Some(r), _) => Some(Ok(r.clone())),
            (None, Some(e)) => Some(Err(e.clone())),
            (None, None) => None,
        }
    })
}

fn initialized(result: &Value) {
    match mcp::initialize_result(result) {
        Ok(init) => {
            assert_eq!(result["protocolVersion"].as_str(), Some(init.protocol_version));
            assert!(mcp::SUPPORTED_VERSIONS.contains(&init.protocol_version));
            let name = result.pointer("/serverInfo/name").and_then(Value::as_str).unwrap_or("");
            assert_eq!(init.server_name, head(name, mcp::MAX_ERROR_TEXT));
        }
        // A version quoted is cut to 64 bytes, each escaped to at most 6 characters.
        Err(e) => assert!(e.len() <= 150 + 6 * 64, "{e}"),
    }
}

fn listed(result: &Value) {
    let Ok(page) = mcp::tools_page(result) else {
        return;
    };
    let entries = result["tools"].as_array().expect("a page has a tools array");
    assert!(page.tools.len() + page.unusable.len() <= entries.len());
    // Each tool kept is a later entry than the one before, of the same name.
    let mut rest = entries.iter();
    for tool in &page.tools {
        assert!(!tool.name.is_empty() && tool.name.len() <= mcp::MAX_TOOL_NAME);
        let entry = rest
            .by_ref()
            .find(|e| e["name"].as_str() == Some(&tool.name) && e["inputSchema"] == tool.input_schema)
            .expect("a tool is one listed, in order");
        let description = entry["description"].as_str().unwrap_or("");
        assert_eq!(tool.description, head(description, mcp::MAX_DESCRIPTION));
        assert!(tool.input_schema.is_object());
        assert!(tool.input_schema.to_string().len() <= mcp::MAX_SCHEMA);
    }
    for u in &page.unusable {
        assert!(!u.name.is_empty() && u.name.len() <= mcp::MAX_TOOL_NAME);
    }
    if let Some(c) = &page.next_cursor {
        assert!(!c.is_empty() && c.len() <= mcp::MAX_CURSOR);
    }
}

fn called(result: &Value, max_text: usize) {
    let (Ok(cut), Ok(whole)) = (mcp::call_result(result, max_text), mcp::call_result(result, usize::MAX)) else {
        assert!(!result.is_object());
        return;
    };
    assert_eq!(cut.is_error, whole.is_error);
    if whole.text.len() <= max_text {
        assert_eq!(cut.text, whole.text);
    } else {
        let kept = head(&whole.text, max_text);
        let note = format!(
            "\n[the result was {} bytes; cut to the first {}]",
            whole.text.len(),
            kept.len()
        );
        assert_eq!(cut.text, format!("{kept}{note}"));
    }
}
