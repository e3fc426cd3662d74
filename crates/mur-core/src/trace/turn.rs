//! One model turn, as the trace records it (`inference`, the reference's record name) and as an
//! OpenTelemetry span describes it (the GenAI semantic conventions' attribute names).
//!
//! A turn is one provider request, its retries included. Only what describes the request goes in:
//! provider, model, timing, the token counts the provider reported (absent when it reported none,
//! never guessed), the finish reason and the number of retries. Never prompt text, answer text or
//! a credential: nothing here can carry them.

use serde_json::Value;

/// One provider request and how it went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelTurn {
    pub task_id: String,
    /// 1 for a task's first turn.
    pub turn: u32,
    /// `inference.provider` as the manifest spells it (`openai`, `openai-compatible`, `anthropic`).
    pub provider: String,
    /// The model asked for (`inference.model`).
    pub model: String,
    /// The model the provider says answered, when it said.
    pub response_model: Option<String>,
    /// From sending the first attempt to the end of the reply (retry waits included).
    pub duration_ms: u64,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// The provider's own word (`stop`, `end_turn`, `tool_calls`, `length`, …), when it gave one.
    pub finish_reason: Option<String>,
    pub retries: u32,
    /// The reply came as server-sent events.
    pub streamed: bool,
    /// `false` when the request failed (no usable reply); the task's failure says why.
    pub ok: bool,
    /// What the turn reserved from its budgets before it was sent (docs/reference/formation.md#budgets);
    /// `None` when no budget is kept.
    pub budget_reserved: Option<u64>,
    /// What settling charged: the provider's reported input plus output, the reservation when it
    /// reported none, nothing when no reply came.
    pub budget_charged: Option<u64>,
    /// The budget left after the settlement: the formation's when it has one, else the session's.
    pub budget_left: Option<i64>,
}

/// The trace record's name, as the reference implementation names it.
pub const RECORD: &str = "inference";

impl ModelTurn {
    /// The `inference` record's fields, in order; the optional ones only when known.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut f: Vec<(&'static str, Value)> = vec![
            ("task_id", self.task_id.as_str().into()),
            ("turn", self.turn.into()),
            ("provider", self.provider.as_str().into()),
            ("model", self.model.as_str().into()),
        ];
        if let Some(m) = &self.response_model {
            f.push(("response_model", m.as_str().into()));
        }
        f.push(("duration_ms", self.duration_ms.into()));
        if let Some(n) = self.input_tokens {
            f.push(("input_tokens", n.into()));
        }
        if let Some(n) = self.output_tokens {
            f.push(("output_tokens", n.into()));
        }
        if let Some(r) = &self.finish_reason {
            f.push(("finish_reason", r.as_str().into()));
        }
        f.push(("retries", self.retries.into()));
        f.push(("streamed", self.streamed.into()));
        f.push(("status", if self.ok { "ok" } else { "failed" }.into()));
        if let Some(n) = self.budget_reserved {
            f.push(("budget_reserved", n.into()));
        }
        if let Some(n) = self.budget_charged {
            f.push(("budget_charged", n.into()));
        }
        if let Some(n) = self.budget_left {
            f.push(("budget_left", n.into()));
        }
        f
    }

    /// The span's name under the GenAI conventions: `{gen_ai.operation.name} {gen_ai.request.model}`.
    pub fn span_name(&self) -> String {
        format!("chat {}", self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(t: &ModelTurn) -> Vec<&'static str> {
        t.fields().into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn optional_fields_appear_only_when_known() {
        let base = ModelTurn {
            task_id: "tsk_1".into(),
            turn: 1,
            provider: "openai".into(),
            model: "gpt-x".into(),
            duration_ms: 12,
            ok: true,
            ..ModelTurn::default()
        };
        let full = ModelTurn {
            response_model: Some("gpt-x-2025".into()),
            input_tokens: Some(10),
            output_tokens: Some(0),
            finish_reason: Some("stop".into()),
            retries: 2,
            streamed: true,
            ..base.clone()
        };
        let cases: [(&ModelTurn, &[&str]); 2] = [
            (
                &base,
                &[
                    "task_id",
                    "turn",
                    "provider",
                    "model",
                    "duration_ms",
                    "retries",
                    "streamed",
                    "status",
                ],
            ),
            (
                &full,
                &[
                    "task_id",
                    "turn",
                    "provider",
                    "model",
                    "response_model",
                    "duration_ms",
                    "input_tokens",
                    "output_tokens",
                    "finish_reason",
                    "retries",
                    "streamed",
                    "status",
                ],
            ),
        ];
        for (turn, want) in cases {
            assert_eq!(keys(turn), want);
        }
        let f: serde_json::Map<String, Value> = full.fields().into_iter().map(|(k, v)| (k.into(), v)).collect();
        assert_eq!(f["output_tokens"], 0, "a reported zero is kept");
        assert_eq!(f["retries"], 2);
        assert_eq!(f["status"], "ok");
    }

    #[test]
    fn span_names_follow_the_conventions() {
        for (provider, model, name) in [
            ("openai", "gpt-x", "chat gpt-x"),
            ("anthropic", "claude-y", "chat claude-y"),
            ("openai-compatible", "llama", "chat llama"),
        ] {
            let t = ModelTurn {
                provider: provider.into(),
                model: model.into(),
                ..ModelTurn::default()
            };
            assert_eq!(t.span_name(), name);
        }
    }
}
