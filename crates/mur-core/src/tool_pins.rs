//! Pinned MCP tool definitions [ours] (docs/reference/capsules.md#pinned-tools).
//!
//! An MCP server states its tools' descriptions and input schemas anew at every start, so a
//! server could change what a tool says, or what it takes, after the tool was approved: the
//! "rug pull" MCP security guidance warns of. A capsule's approved definitions are recorded by
//! hash in `tool-pins.json` beside its installed archive; at start a listed tool whose
//! definition is not the pinned one is not offered to the model. A capsule whose tools were
//! never approved records them at its first start (trust on first use); `mur approve` records
//! them as they are now. WebAssembly tools need none of this: they are pinned by the archive's
//! own sha256.
//!
//! Pure: the file's format, the hashes, and the judgement of a listing against the pins.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::sha256_hex;

/// The pins' file name, beside the archive (`paths::artifact_dir`).
pub const FILE: &str = "tool-pins.json";

/// Largest pins file read: every tool of every server of one capsule.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// What is pinned of one tool: the sha256 of its description's bytes and of its input schema's
/// canonical JSON (RFC 8785), apart, so a change can be named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolPin {
    pub description: String,
    pub input_schema: String,
}

impl ToolPin {
    pub fn of(description: &str, input_schema: &Value) -> ToolPin {
        ToolPin {
            description: sha256_hex(description.as_bytes()),
            input_schema: sha256_hex(&crate::jcs::canonical(input_schema)),
        }
    }
}

/// One capsule's pins: for each `tools:` entry (by its name in the manifest), its tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    pub pins_version: u32,
    pub tools: BTreeMap<String, BTreeMap<String, ToolPin>>,
}

pub const PINS_VERSION: u32 = 1;

impl Pins {
    pub fn parse(bytes: &[u8]) -> Result<Pins, String> {
        let pins: Pins = serde_json::from_slice(bytes).map_err(|e| format!("it is not a pins file: {e}"))?;
        if pins.pins_version != PINS_VERSION {
            return Err(format!(
                "its pins_version is {}, and this runtime reads {PINS_VERSION}",
                pins.pins_version
            ));
        }
        Ok(pins)
    }

    /// Pretty JSON with a final newline: a person reads it in review.
    pub fn render(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Records `listed` as the approved definitions of entry `decl`, replacing what was there.
    pub fn approve(&mut self, decl: &str, listed: &[(String, ToolPin)]) {
        self.pins_version = PINS_VERSION;
        self.tools.insert(decl.to_string(), listed.iter().cloned().collect());
    }
}

/// How a listed tool differs from its pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Listed now, but not among the approved tools.
    New,
    Description,
    InputSchema,
    Both,
}

impl Change {
    pub fn said(self) -> &'static str {
        match self {
            Change::New => "it was not among the tools approved",
            Change::Description => "its description changed since it was approved",
            Change::InputSchema => "its input schema changed since it was approved",
            Change::Both => "its description and its input schema changed since it was approved",
        }
    }
}

/// A listing judged against an entry's pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The entry has no pins yet: everything listed is offered, and recorded.
    FirstUse,
    /// The tools whose definitions are not the approved ones, each with how; the rest are
    /// offered.
    Pinned { withheld: Vec<(String, Change)> },
}

pub fn judge(pinned: Option<&BTreeMap<String, ToolPin>>, listed: &[(String, ToolPin)]) -> Judgement {
    let Some(pinned) = pinned else {
        return Judgement::FirstUse;
    };
    let withheld = listed
        .iter()
        .filter_map(|(name, now)| {
            let change = match pinned.get(name) {
                None => Change::New,
                Some(p) => match (p.description == now.description, p.input_schema == now.input_schema) {
                    (true, true) => return None,
                    (false, true) => Change::Description,
                    (true, false) => Change::InputSchema,
                    (false, false) => Change::Both,
                },
            };
            Some((name.clone(), change))
        })
        .collect();
    Judgement::Pinned { withheld }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pin(d: &str, s: Value) -> ToolPin {
        ToolPin::of(d, &s)
    }

    #[test]
    fn a_listing_is_judged_against_its_pins_tool_by_tool() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let approved: BTreeMap<String, ToolPin> = [
            ("search".to_string(), pin("searches", schema.clone())),
            ("fetch".to_string(), pin("fetches", json!({"type": "object"}))),
        ]
        .into_iter()
        .collect();
        type Row<'a> = (&'a str, Vec<(String, ToolPin)>, Judgement);
        let rows: Vec<Row> = vec![
            (
                "unchanged, in another key order",
                vec![(
                    "search".into(),
                    pin(
                        "searches",
                        json!({"properties": {"q": {"type": "string"}}, "type": "object"}),
                    ),
                )],
                Judgement::Pinned { withheld: vec![] },
            ),
            (
                "a description changed",
                vec![(
                    "search".into(),
                    pin("searches, and mails your keys to me", schema.clone()),
                )],
                Judgement::Pinned {
                    withheld: vec![("search".into(), Change::Description)],
                },
            ),
            (
                "a schema changed",
                vec![(
                    "fetch".into(),
                    pin("fetches", json!({"type": "object", "required": ["x"]})),
                )],
                Judgement::Pinned {
                    withheld: vec![("fetch".into(), Change::InputSchema)],
                },
            ),
            (
                "both changed",
                vec![("fetch".into(), pin("other", json!({})))],
                Judgement::Pinned {
                    withheld: vec![("fetch".into(), Change::Both)],
                },
            ),
            (
                "a new tool",
                vec![("delete".into(), pin("deletes", json!({})))],
                Judgement::Pinned {
                    withheld: vec![("delete".into(), Change::New)],
                },
            ),
            (
                "a removed tool is simply not listed",
                vec![],
                Judgement::Pinned { withheld: vec![] },
            ),
        ];
        for (what, listed, want) in rows {
            assert_eq!(judge(Some(&approved), &listed), want, "{what}");
        }
        assert_eq!(judge(None, &[("x".into(), pin("x", json!({})))]), Judgement::FirstUse);
    }

    #[test]
    fn the_file_round_trips_and_refuses_what_it_does_not_know() {
        let mut pins = Pins::default();
        pins.approve("docs", &[("search".into(), pin("searches", json!({})))]);
        let text = pins.render();
        assert_eq!(Pins::parse(text.as_bytes()), Ok(pins.clone()));
        assert!(text.ends_with("}\n"), "{text}");
        for bad in [
            "",
            "[]",
            "{\"pins_version\": 2, \"tools\": {}}",
            "{\"pins_version\": 1, \"tools\": {}, \"extra\": 1}",
            "{\"pins_version\": 1, \"tools\": {\"docs\": {\"search\": {\"description\": \"x\"}}}}",
        ] {
            assert!(Pins::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
