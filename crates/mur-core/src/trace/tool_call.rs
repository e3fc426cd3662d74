//! One call of a model capsule's tool, as the trace records it (`tool_call`) and as an
//! OpenTelemetry `execute_tool` span describes it (docs/reference/capsules.md#tools).
//!
//! Only what describes the call goes in: which tool, its kind and server, how long, how it
//! ended, and the sizes of its input and output. Never their content, never a credential:
//! nothing here can carry them.

use serde_json::Value;

/// The trace record's name.
pub const RECORD: &str = "tool_call";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallRecord {
    pub task_id: String,
    /// The provider's id of the call (`gen_ai.tool.call.id`).
    pub call_id: String,
    /// The name the model called.
    pub tool: String,
    /// `wasm` or `mcp`; `unknown` for a name no tool has (refused).
    pub kind: String,
    /// An MCP tool's server, `host[:port]`.
    pub server: Option<String>,
    pub duration_ms: u64,
    /// `ok`, `error`, `timeout`, `failed`, `canceled`; `refused` when no tool has the name.
    pub status: String,
    pub input_bytes: u64,
    pub output_bytes: u64,
}

impl ToolCallRecord {
    /// The record's fields, in order; `server` only for an MCP tool.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut f: Vec<(&'static str, Value)> = vec![
            ("task_id", self.task_id.as_str().into()),
            ("call_id", self.call_id.as_str().into()),
            ("tool", self.tool.as_str().into()),
            ("kind", self.kind.as_str().into()),
        ];
        if let Some(s) = &self.server {
            f.push(("server", s.as_str().into()));
        }
        f.push(("duration_ms", self.duration_ms.into()));
        f.push(("status", self.status.as_str().into()));
        f.push(("input_bytes", self.input_bytes.into()));
        f.push(("output_bytes", self.output_bytes.into()));
        f
    }

    /// The span's name under the GenAI conventions: `execute_tool {gen_ai.tool.name}`.
    pub fn span_name(&self) -> String {
        format!("execute_tool {}", self.tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_the_call_and_never_its_content() {
        let mut r = ToolCallRecord {
            task_id: "t".into(),
            call_id: "c".into(),
            tool: "calc__add".into(),
            kind: "mcp".into(),
            server: Some("127.0.0.1:9000".into()),
            duration_ms: 3,
            status: "ok".into(),
            input_bytes: 13,
            output_bytes: 1,
        };
        let keys: Vec<&str> = r.fields().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "task_id",
                "call_id",
                "tool",
                "kind",
                "server",
                "duration_ms",
                "status",
                "input_bytes",
                "output_bytes"
            ]
        );
        r.server = None;
        assert!(!r.fields().iter().any(|(k, _)| *k == "server"));
        assert_eq!(r.span_name(), "execute_tool calc__add");
    }
}
