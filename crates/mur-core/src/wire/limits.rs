//! The limits extension [ours] (docs/reference/formation.md#limits-across-the-formations-edge):
//! how a task's deadline and token budget cross the formation's edge, as an A2A extension. A
//! client outside the formation (the operator, a declared client credential) may send them with
//! a new task, and they only narrow what the launcher grants it; a remote member sends its task's
//! own to the agent it forwards to.
//!
//! ```text
//! header                 A2A-Extensions: urn:mur:a2a:limits:v1
//! message.metadata       {"urn:mur:a2a:limits:v1": {"budgetTokens": N, "deadlineMs": N}}
//! ```
//!
//! Both fields are optional whole numbers: `deadlineMs` Unix milliseconds, `budgetTokens` at
//! least 1; other fields are ignored, so a later version may add some. Pure: no I/O.

use serde_json::Value;

/// The extension's URI, as a card declares it and a message's metadata keys it.
pub const URI: &str = "urn:mur:a2a:limits:v1";

/// The A2A v1.0 header a client activates extensions with.
pub const HEADER: &str = "A2A-Extensions";

/// The largest number either field takes: what a JSON number holds exactly everywhere (2^53 - 1).
pub const MAX_VALUE: u64 = (1 << 53) - 1;

/// A task's deadline (Unix ms) and token budget, each optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub deadline_ms: Option<u64>,
    pub budget: Option<u64>,
}

impl Limits {
    pub fn is_none(&self) -> bool {
        self.deadline_ms.is_none() && self.budget.is_none()
    }

    /// The extension's value: compact JSON, keys in ascending byte order, absent fields omitted.
    pub fn to_json(&self) -> String {
        let mut fields = Vec::new();
        if let Some(b) = self.budget {
            fields.push(format!("\"budgetTokens\":{b}"));
        }
        if let Some(d) = self.deadline_ms {
            fields.push(format!("\"deadlineMs\":{d}"));
        }
        format!("{{{}}}", fields.join(","))
    }
}

/// The limits a message's `metadata` carries under [`URI`]: `Ok(None)` when it carries none,
/// `Err(why)` (naming the field) when they are malformed.
pub fn read(metadata: Option<&Value>) -> Result<Option<Limits>, String> {
    let Some(value) = metadata.and_then(|m| m.get(URI)) else {
        return Ok(None);
    };
    let Some(object) = value.as_object() else {
        return Err(format!("message.metadata[\"{URI}\"] must be an object"));
    };
    let field = |name: &str, least: u64| -> Result<Option<u64>, String> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if (least..=MAX_VALUE).contains(&n) => Ok(Some(n)),
                _ => Err(format!(
                    "message.metadata[\"{URI}\"].{name} must be a whole number from {least} to {MAX_VALUE}"
                )),
            },
        }
    };
    let limits = Limits {
        deadline_ms: field("deadlineMs", 0)?,
        budget: field("budgetTokens", 1)?,
    };
    Ok((!limits.is_none()).then_some(limits))
}

/// The card's entry for the extension (`capabilities.extensions[]`), keys in ascending order. Its
/// words avoid what card scanners read as a credential (the A2A TCK flags any "token" in a public
/// card), so the card's text names the budget only.
pub fn card_entry() -> Value {
    serde_json::json!({
        "description": "a task's deadline (Unix ms) and budget; they only narrow what the formation grants",
        "required": false,
        "uri": URI,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_a_message_carries_is_read_or_refused_naming_the_field() {
        let ok = |d, b| {
            Ok(Some(Limits {
                deadline_ms: d,
                budget: b,
            }))
        };
        type Row = (Option<Value>, Result<Option<Limits>, &'static str>);
        let table: Vec<Row> = vec![
            (None, Ok(None)),
            (Some(json!({})), Ok(None)),
            (Some(json!({"other": 1})), Ok(None)),
            (Some(json!({URI: {}})), Ok(None)),
            (Some(json!({URI: {"deadlineMs": null}})), Ok(None)),
            (Some(json!({URI: {"deadlineMs": 5}})), ok(Some(5), None)),
            (Some(json!({URI: {"budgetTokens": 7, "later": "x"}})), ok(None, Some(7))),
            (
                Some(json!({URI: {"budgetTokens": 7, "deadlineMs": 9}})),
                ok(Some(9), Some(7)),
            ),
            (Some(json!({URI: "soon"})), Err("must be an object")),
            (Some(json!({URI: {"budgetTokens": 0}})), Err(".budgetTokens must be")),
            (Some(json!({URI: {"budgetTokens": -3}})), Err(".budgetTokens must be")),
            (Some(json!({URI: {"budgetTokens": 1.5}})), Err(".budgetTokens must be")),
            (Some(json!({URI: {"deadlineMs": "1"}})), Err(".deadlineMs must be")),
            (
                Some(json!({URI: {"deadlineMs": MAX_VALUE + 1}})),
                Err(".deadlineMs must be"),
            ),
        ];
        for (i, (metadata, want)) in table.into_iter().enumerate() {
            let got = read(metadata.as_ref());
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "row {i}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "row {i}: {g}"),
                (g, w) => panic!("row {i}: got {g:?}, want {w:?}"),
            }
        }
    }

    #[test]
    fn the_value_sent_is_compact_sorted_and_read_back_alike() {
        let table = [
            (Limits::default(), "{}"),
            (
                Limits {
                    deadline_ms: Some(12),
                    budget: None,
                },
                r#"{"deadlineMs":12}"#,
            ),
            (
                Limits {
                    deadline_ms: Some(12),
                    budget: Some(3),
                },
                r#"{"budgetTokens":3,"deadlineMs":12}"#,
            ),
        ];
        for (limits, want) in table {
            assert_eq!(limits.to_json(), want);
            let value: Value = serde_json::from_str(want).expect("json");
            let back = read(Some(&json!({URI: value}))).expect("read");
            assert_eq!(back.unwrap_or_default(), limits);
        }
    }
}
