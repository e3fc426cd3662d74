//! JSON Schemas (draft 2020-12) for `roster.yaml` and `murmur.yaml`, for editors through
//! yaml-language-server. The checked-in `schemas/*.schema.json` are generated from here; tests
//! keep them in step and check, by probing the real parsers, that the schemas and the parsers
//! know exactly the same keys at every level (the parsers are hand-written over `crate::yaml`,
//! so this module is the one description of the documents' shape besides them).
//!
//! Pure: no process or HTTP code.

use serde_json::{Value, json};

const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

fn obj(description: &str, required: &[&str], props: Vec<(&str, Value)>) -> Value {
    let properties: serde_json::Map<String, Value> = props.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    json!({
        "type": "object",
        "description": description,
        "required": required,
        "properties": properties,
        // Unknown keys are refused (roster) or ignored with W-SEC-019 (manifest): flag them.
        "additionalProperties": false,
    })
}

fn text(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn words(description: &str, allowed: &[&str]) -> Value {
    json!({"type": "string", "enum": allowed, "description": description})
}

fn int(description: &str, minimum: u64) -> Value {
    json!({"type": "integer", "minimum": minimum, "description": description})
}

fn flag(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn list(description: &str, items: Value) -> Value {
    json!({"type": "array", "description": description, "items": items})
}

/// A version is read as text in its source spelling, so `1.10` written unquoted is fine.
fn version(description: &str) -> Value {
    json!({"type": ["string", "number"], "description": description})
}

/// Keys only Murmur 0.8 reads: known, accepted, ignored.
fn ignored() -> Value {
    json!({"description": "Read only by Murmur 0.8; this runtime ignores it."})
}

/// The schema of `roster.yaml` (docs/reference/roster.md#keys).
pub fn roster() -> Value {
    let member = obj(
        "One member of the formation.",
        &["name", "capsule", "version"],
        vec![
            (
                "name",
                text("The member's name in this roster: unique, [a-z0-9-], used by reachability and call-member."),
            ),
            (
                "capsule",
                text("The installed capsule it runs, as <scope>/<name> (e.g. local/planner)."),
            ),
            (
                "version",
                version("The exact installed version of the capsule (no aliases such as latest)."),
            ),
            (
                "entry",
                flag("true on exactly one member: the one that takes the formation's --task."),
            ),
        ],
    );
    let rule = obj(
        "Members `from` may call each member in `to`.",
        &["from", "to"],
        vec![
            ("from", text("The calling member.")),
            (
                "to",
                list(
                    "The members it may call (at least one, never itself).",
                    json!({"type": "string"}),
                ),
            ),
        ],
    );
    let mut root = obj(
        "A formation: its members and who may call whom.",
        &["roster_version", "members"],
        vec![
            (
                "roster_version",
                json!({"const": 1, "description": "The roster format; 1 is the only one."}),
            ),
            ("members", list("The formation's members, in roster order.", member)),
            (
                "reachability",
                json!({
                    "description": "Who may call whom: `all` (every consenting pair, never into the entry member), or a list of rules; absent means no member calls another.",
                    "oneOf": [{"const": "all"}, {"type": "null"}, list("Rules.", rule)],
                }),
            ),
        ],
    );
    head(&mut root, "roster.yaml");
    root
}

/// The schema of `murmur.yaml` (docs/reference/manifest.md#keys).
pub fn manifest() -> Value {
    let allow = |what: &str| {
        obj(
            &format!("{what}."),
            &[],
            vec![("allow", list(what, json!({"type": "string"})))],
        )
    };
    let mut root = obj(
        "A capsule's manifest.",
        &["name", "version"],
        vec![
            (
                "name",
                text("The capsule name: 1–100 characters of [a-z0-9-], not starting or ending in '-'."),
            ),
            ("version", version("The capsule version; it names a store directory.")),
            (
                "component",
                text("Path (relative to this directory) of the WebAssembly component; not with `inference`."),
            ),
            (
                "build",
                obj(
                    "How `mur build` makes the component from sources before packing it; needs `component`.",
                    &["language"],
                    vec![(
                        "language",
                        words(
                            "The sources' language: python (componentize-py), javascript (componentize-js), rust (cargo: wasm32-wasip2, or wasm32-unknown-unknown from the standard library's sources).",
                            crate::manifest::Language::WORDS,
                        ),
                    )],
                ),
            ),
            (
                "exports",
                obj(
                    "What the capsule offers others.",
                    &[],
                    vec![
                        (
                            "peer_tasks",
                            obj(
                                "Tasks from formation peers.",
                                &[],
                                vec![("accept", flag("Serve tasks other members send."))],
                            ),
                        ),
                        (
                            "skills",
                            list(
                                "The agent card's skills; without them the card carries one skill named after the capsule.",
                                obj(
                                    "One skill (A2A AgentSkill).",
                                    &["id", "name", "description"],
                                    vec![
                                        ("id", text("Unique among the skills.")),
                                        ("name", text("A human-readable name.")),
                                        ("description", text("What the skill does.")),
                                        ("tags", list("Keywords.", json!({"type": "string"}))),
                                        ("examples", list("Example prompts.", json!({"type": "string"}))),
                                    ],
                                ),
                            ),
                        ),
                        (
                            "input_modes",
                            list(
                                "Media types of file parts (raw or url) the capsule accepts, e.g. image/png or image/*; text and structured data are always accepted.",
                                json!({"type": "string", "pattern": "^[^/\\s]+/[^/\\s]+$"}),
                            ),
                        ),
                    ],
                ),
            ),
            (
                "network",
                obj(
                    "The capsule's door.",
                    &[],
                    vec![(
                        "authentication",
                        obj(
                            "Require a bearer token at the door (every member of a roster with peer traffic must).",
                            &["scheme"],
                            vec![("scheme", words("The only scheme.", &["bearer"]))],
                        ),
                    )],
                ),
            ),
            (
                "lifecycle",
                obj(
                    "How the capsule takes tasks.",
                    &[],
                    vec![
                        (
                            "task_acceptance",
                            words("How many tasks it takes at once.", &["none", "single", "queue"]),
                        ),
                        (
                            "after_task",
                            words("What it does when a task ends.", &["exit", "sleep"]),
                        ),
                        ("queue_depth", int("Tasks waiting at most (at least 1 with queue).", 0)),
                        ("delegation_deadline_secs", int("Seconds a delegated child may run.", 1)),
                        (
                            "input_timeout_secs",
                            int(
                                "Seconds a task may wait for an answer to its question; absent: it never asks.",
                                1,
                            ),
                        ),
                        (
                            "repeatable_tasks",
                            flag("A task running when its member restarted may run again from its start."),
                        ),
                    ],
                ),
            ),
            (
                "capabilities",
                obj(
                    "What the capsule may reach.",
                    &[],
                    vec![
                        ("network", allow("Hosts it may reach")),
                        ("spawn", allow("Capsules it may delegate to")),
                    ],
                ),
            ),
            (
                "inference",
                obj(
                    "Makes this a model capsule; not with `component`.",
                    &[],
                    vec![
                        ("transport", words("How the provider is reached.", &["http", "process"])),
                        (
                            "provider",
                            words(
                                "The API spoken: openai (current Chat Completions fields), openai-compatible (the older fields local servers know), anthropic.",
                                &crate::manifest::Provider::ALL.map(crate::manifest::Provider::as_str),
                            ),
                        ),
                        ("endpoint", text("The provider's base URL (http:// or https://).")),
                        ("model", text("The model name.")),
                        (
                            "api_key",
                            text("${ENV_VAR} naming the variable that holds the key; never the key itself."),
                        ),
                        ("max_tokens", int("Output tokens per turn.", 1)),
                        ("max_turns", int("Turns per task.", 1)),
                        (
                            "max_session_tokens",
                            int("The session's token budget: input plus output over every turn.", 1),
                        ),
                        ("system_prompt", text("The system prompt.")),
                        (
                            "reasoning_effort",
                            words(
                                "Sent as reasoning_effort to a reasoning model; openai and openai-compatible only.",
                                crate::manifest::REASONING_EFFORTS,
                            ),
                        ),
                        ("driver", ignored()),
                    ],
                ),
            ),
            (
                "tools",
                list(
                    "What a model capsule's model may call besides the runtime's tools: each a WebAssembly tool (component) or an MCP server (mcp), not both.",
                    obj(
                        "One tool.",
                        &["name"],
                        vec![
                            (
                                "name",
                                json!({"type": "string", "pattern": "^[a-z][a-z0-9-]{0,31}$", "description": "What the model calls it; an MCP server's tools are offered as <name>__<tool>."}),
                            ),
                            (
                                "component",
                                text("A WebAssembly tool: its .wasm file, relative to this directory."),
                            ),
                            (
                                "build",
                                obj(
                                    "mur build makes a WebAssembly tool's component from the sources in its directory first.",
                                    &["language"],
                                    vec![(
                                        "language",
                                        words("The sources' language.", &["python", "javascript", "rust"]),
                                    )],
                                ),
                            ),
                            (
                                "capabilities",
                                obj(
                                    "What a WebAssembly tool may reach: its own rules, never the capsule's.",
                                    &[],
                                    vec![("network", allow("Hosts it may reach"))],
                                ),
                            ),
                            (
                                "mcp",
                                text("An MCP server's Streamable HTTP URL (https://, or http:// to loopback)."),
                            ),
                            (
                                "api_key",
                                text("${ENV_VAR} holding the MCP server's bearer key; sent to that server only."),
                            ),
                            (
                                "allow",
                                list(
                                    "The MCP server's tools the model is offered (required for mcp).",
                                    json!({"type": "string"}),
                                ),
                            ),
                        ],
                    ),
                ),
            ),
            (
                "trace",
                obj(
                    "Trace retention.",
                    &[],
                    vec![(
                        "retain",
                        obj(
                            "Keep at most this many sessions and/or sessions this young (at least one of the two).",
                            &[],
                            vec![
                                ("max_sessions", int("Sessions kept.", 1)),
                                (
                                    "max_age",
                                    json!({
                                        "type": ["integer", "string"],
                                        "description": "Seconds, or a duration such as 90s, 30m, 12h or 7d.",
                                    }),
                                ),
                            ],
                        ),
                    )],
                ),
            ),
            (
                "remote",
                obj(
                    "Makes this a remote capsule: its door forwards each task to an A2A agent someone else runs; not with `inference` or `component`.",
                    &["url"],
                    vec![
                        (
                            "url",
                            text("The agent's card URL or JSON-RPC endpoint (https://, or http:// to loopback)."),
                        ),
                        (
                            "api_key",
                            text(
                                "${ENV_VAR} holding the agent's credential; sent to that agent only, as its card's security scheme asks.",
                            ),
                        ),
                        (
                            "timeout",
                            json!({"type": "integer", "minimum": 1, "maximum": crate::manifest::MAX_REMOTE_TIMEOUT_SECS, "description": "Seconds one forwarded task may take (default 300)."}),
                        ),
                        (
                            "card_key",
                            text(
                                "The Ed25519 public key (base64url) the agent's card must be signed with; without it a signed card is only checked for being whole.",
                            ),
                        ),
                    ],
                ),
            ),
            ("runtime", ignored()),
            ("execution", ignored()),
            ("artifacts", ignored()),
        ],
    );
    head(&mut root, "murmur.yaml");
    root
}

fn head(root: &mut Value, doc: &str) {
    if let Some(o) = root.as_object_mut() {
        o.insert("$schema".into(), json!(DRAFT));
        o.insert("title".into(), json!(doc));
    }
}

/// The checked-in file text: pretty JSON (for reading and diffs) and a final newline.
pub fn render(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests;
