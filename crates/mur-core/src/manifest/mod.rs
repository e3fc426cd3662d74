//! The capsule manifest, `murmur.yaml` (docs/reference/manifest.md#keys). Pure: no actix, HTTP or
//! processes.
//!
//! [`parse`] reads the subset this runtime uses through [`crate::yaml`], so `version: 1.10` keeps its
//! spelling. Wrong types and missing keys are E-MAN-001, rule conflicts E-MAN-003; unknown keys
//! only warn (W-SEC-019). Requirements that matter only to run a capsule (a provider, a model, a
//! component that loads) are left to session start, so `mur build`, `mur install` and admission
//! accept manifests written for the reference implementation.

pub mod endpoint;
mod parse;

use std::path::Path;

use crate::diag::{self, Diagnostic};

pub use parse::check_version;

/// `lifecycle.task_acceptance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    None,
    Single,
    Queue,
}

impl Acceptance {
    /// The manifest (and `--lifecycle-task-acceptance`) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Acceptance::None => "none",
            Acceptance::Single => "single",
            Acceptance::Queue => "queue",
        }
    }

    pub fn from_word(word: &str) -> Option<Acceptance> {
        match word {
            "none" => Some(Acceptance::None),
            "single" => Some(Acceptance::Single),
            "queue" => Some(Acceptance::Queue),
            _ => None,
        }
    }
}

/// `lifecycle.after_task`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterTask {
    Exit,
    Sleep,
}

impl AfterTask {
    pub fn as_str(self) -> &'static str {
        match self {
            AfterTask::Exit => "exit",
            AfterTask::Sleep => "sleep",
        }
    }

    pub fn from_word(word: &str) -> Option<AfterTask> {
        match word {
            "exit" => Some(AfterTask::Exit),
            "sleep" => Some(AfterTask::Sleep),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    pub task_acceptance: Acceptance,
    pub after_task: AfterTask,
    pub queue_depth: u32,
    pub delegation_deadline_secs: u64,
    /// `lifecycle.input_timeout_secs`: how long a task may wait for an answer to a question it
    /// asked (`request-input`); `None`, the capsule never asks.
    pub input_timeout_secs: Option<u64>,
    /// `lifecycle.repeatable_tasks` [ours]: a task that was running when its member restarted
    /// may be run again from its start (docs/reference/formation.md#tasks-across-a-restart).
    pub repeatable_tasks: bool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            task_acceptance: Acceptance::Single,
            after_task: AfterTask::Exit,
            queue_depth: 1,
            delegation_deadline_secs: DEFAULT_DELEGATION_DEADLINE_SECS,
            input_timeout_secs: None,
            repeatable_tasks: false,
        }
    }
}

/// Default bound of each `call-member` call (docs/reference/manifest.md#keys,
/// docs/reference/formation.md#timing).
pub const DEFAULT_DELEGATION_DEADLINE_SECS: u64 = 600;
/// Default `inference.max_tokens` (docs/reference/manifest.md#keys).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// `inference.provider`: the list of providers is the provider seam's (`wire::provider`).
pub use crate::wire::provider::Provider;

/// `inference.reasoning_effort`: the values OpenAI's Chat Completions API takes.
pub const REASONING_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// `inference.transport`. `process` parses but is refused when a session starts
/// (docs/reference/manifest.md#keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    #[default]
    Http,
    Process,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inference {
    pub provider: Option<Provider>,
    pub endpoint: Option<String>,
    pub model: Option<String>,
    /// `VAR` of `api_key: ${VAR}`; the key itself is never in the manifest.
    pub api_key_var: Option<String>,
    pub max_tokens: u32,
    pub max_turns: Option<u32>,
    /// The session's token budget (docs/reference/formation.md#budgets), input plus output over
    /// every turn of every task.
    pub max_session_tokens: Option<u64>,
    pub system_prompt: String,
    pub transport: Transport,
    /// One of [`REASONING_EFFORTS`]; sent as `reasoning_effort` (Chat Completions only).
    pub reasoning_effort: Option<String>,
}

impl Default for Inference {
    fn default() -> Self {
        Inference {
            provider: None,
            endpoint: None,
            model: None,
            api_key_var: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            max_turns: None,
            max_session_tokens: None,
            system_prompt: String::new(),
            transport: Transport::Http,
            reasoning_effort: None,
        }
    }
}

impl Inference {
    /// The `host[:port]` that receives this capsule's requests, and with them its API key: the
    /// endpoint's, else the provider's default. `None` with neither.
    pub fn receiver(&self) -> Option<&str> {
        let url = self
            .endpoint
            .as_deref()
            .or_else(|| self.provider.map(Provider::default_endpoint))?;
        endpoint::split(url).map(|e| e.authority)
    }
}

/// `build.language`: the language a component capsule's sources are written in, which decides
/// the toolchain `mur build` runs to make the file `component:` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    JavaScript,
    Rust,
}

impl Language {
    pub const WORDS: &[&str] = &["python", "javascript", "rust"];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::Rust => "rust",
        }
    }

    pub fn from_word(word: &str) -> Option<Language> {
        match word {
            "python" => Some(Language::Python),
            "javascript" => Some(Language::JavaScript),
            "rust" => Some(Language::Rust),
            _ => None,
        }
    }
}

/// `trace.retain`; at least one of the two is set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Retain {
    pub max_sessions: Option<u32>,
    pub max_age_secs: Option<u64>,
}

/// What a capsule runs (docs/reference/manifest.md#keys, Kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `inference:` is declared: the runtime runs the agent loop.
    Model,
    /// `component:` names a WebAssembly component, relative to the source directory; packed as
    /// root `capsule.wasm`.
    Component { path: String },
    /// `remote:` names an A2A agent someone else runs: the member's door forwards each task to
    /// it (docs/reference/capsules.md#remote-capsules).
    Remote,
    /// Neither: builds, installs and is admitted, but there is nothing to run.
    ManifestOnly,
}

/// `remote:`: the A2A agent a remote capsule forwards its tasks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The agent card's URL, or the agent's JSON-RPC endpoint (whose card is at
    /// `/.well-known/agent-card.json` of its origin); `https://`, or `http://` to loopback.
    pub url: String,
    /// `VAR` of `api_key: ${VAR}`: sent to that agent only, as its card's scheme asks.
    pub api_key_var: Option<String>,
    /// `remote.timeout` in seconds: the bound of one forwarded task.
    pub timeout_secs: u64,
    /// `remote.card_key` [ours]: the Ed25519 key (base64url, 43 characters) the agent's card must
    /// be signed with; without it a signed card is checked only for being whole.
    pub card_key: Option<String>,
}

/// Default `remote.timeout`, seconds.
pub const DEFAULT_REMOTE_TIMEOUT_SECS: u64 = 300;
/// Largest `remote.timeout`, seconds (a day): a forwarded task is still bounded.
pub const MAX_REMOTE_TIMEOUT_SECS: u64 = 86_400;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    /// As written: `1.10` stays `1.10`.
    pub version: String,
    pub kind: Kind,
    /// `build.language`: `mur build` makes the component from sources first. Only with
    /// `component:`, which names where the built component goes.
    pub build: Option<Language>,
    /// `exports.peer_tasks.accept`.
    pub peer_tasks_accept: bool,
    /// `network.authentication` is declared: the door requires a bearer token.
    pub authentication: bool,
    pub lifecycle: Lifecycle,
    pub network_allow: Vec<String>,
    pub spawn_allow: Vec<String>,
    pub inference: Option<Inference>,
    pub retain: Option<Retain>,
    /// `exports.skills`: what the agent card advertises; empty means one skill derived from
    /// the capsule's name and description.
    pub skills: Vec<Skill>,
    /// `exports.input_modes`: media types of file parts (`raw`/`url`) the capsule accepts
    /// beyond text and structured data, e.g. `image/png` or `image/*`.
    pub input_modes: Vec<String>,
    /// `tools`: what a model capsule's model may call besides the runtime's tools.
    pub tools: Vec<ToolDecl>,
    /// `remote`: the agent a remote capsule forwards to (with [`Kind::Remote`]).
    pub remote: Option<Remote>,
}

/// One entry of `tools` (docs/reference/manifest.md#keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDecl {
    /// What the model calls a WebAssembly tool, and the prefix of an MCP server's tools
    /// (`<name>__<tool>`).
    pub name: String,
    pub source: ToolSource,
}

/// Where a tool runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// A WebAssembly component of world `murmur:tool/tool`, at this path of the source directory
    /// and of the archive, with its own network rules (never the capsule's).
    Wasm {
        component: String,
        /// `build.language`: `mur build` makes the component from the sources in its directory.
        build: Option<Language>,
        network_allow: Vec<String>,
    },
    /// An MCP server over Streamable HTTP; the model is offered exactly the tools in `allow`.
    Mcp {
        url: String,
        /// `VAR` of `api_key: ${VAR}`: sent as `Authorization: Bearer` to this server only.
        api_key_var: Option<String>,
        allow: Vec<String>,
    },
}

impl ToolDecl {
    /// The name the model sees for `tool`, one of an MCP entry's allowed tools.
    pub fn mcp_tool_name(&self, tool: &str) -> String {
        format!("{}{MCP_NAME_SEPARATOR}{tool}", self.name)
    }
}

/// The names of the tools the runtime itself gives a model (`call-member`, `end-without-answer`,
/// `request-input`); no manifest tool may take one.
pub const RUNTIME_TOOL_NAMES: &[&str] = &["call-member", "end-without-answer", "request-input"];

/// Between an MCP entry's name and its server's tool name, in what the model sees. Entry names
/// hold no `_`, so the split is unambiguous.
pub const MCP_NAME_SEPARATOR: &str = "__";

/// The longest tool name both providers take.
pub const MAX_MODEL_TOOL_NAME: usize = 64;

/// Whether `name` can name a `tools` entry: 1–32 bytes of `[a-z0-9-]`, starting with a letter,
/// not ending in `-`, without `--`.
pub fn tool_name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Whether `tool`, a tool of MCP entry `entry`, can be offered to a model: `[A-Za-z0-9_-]`, and
/// `<entry>__<tool>` within [`MAX_MODEL_TOOL_NAME`] (the providers' own rule for tool names).
pub fn mcp_tool_name_ok(entry: &str, tool: &str) -> bool {
    !tool.is_empty()
        && entry.len() + MCP_NAME_SEPARATOR.len() + tool.len() <= MAX_MODEL_TOOL_NAME
        && tool
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// One skill of the agent card (A2A v1.0 `AgentSkill`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub examples: Vec<String>,
}

impl Manifest {
    /// A manifest-only capsule with every default; handy for tests and fixtures.
    pub fn minimal(name: &str, version: &str) -> Manifest {
        Manifest {
            name: name.into(),
            version: version.into(),
            kind: Kind::ManifestOnly,
            build: None,
            peer_tasks_accept: false,
            authentication: false,
            lifecycle: Lifecycle::default(),
            network_allow: Vec::new(),
            spawn_allow: Vec::new(),
            inference: None,
            retain: None,
            skills: Vec::new(),
            input_modes: Vec::new(),
            tools: Vec::new(),
            remote: None,
        }
    }

    /// What `mur build` needs before it runs a toolchain (E-MAN-003): `build.language` makes the
    /// file `component:` names, so a capsule without `component:` has nowhere to put it. Left
    /// out of [`parse`] so that install and admission accept such a manifest, as they accept
    /// every run-only requirement unchecked.
    pub fn check_build(&self) -> Result<Option<(Language, &str)>, Diagnostic> {
        let Some(lang) = self.build else {
            return Ok(None);
        };
        match &self.kind {
            Kind::Component { path } => Ok(Some((lang, path.as_str()))),
            Kind::Model | Kind::Remote | Kind::ManifestOnly => Err(Diagnostic::new(
                diag::E_MAN_003,
                format!(
                    "build.language: needs component: beside it, and no inference: mur build compiles the {} sources into the file component: names, and packs that file",
                    lang.as_str()
                ),
            )
            .with_hint("add `component: capsule.wasm` (and remove `inference`), or remove the build block")),
        }
    }

    /// Every variable this capsule reads from its environment, in manifest order, each once:
    /// `inference.api_key`'s, then each MCP tool's `api_key`, then `remote.api_key`'s. A
    /// formation member is passed exactly these (docs/reference/formation.md#member-environment).
    pub fn key_vars(&self) -> Vec<String> {
        let model = self.inference.as_ref().and_then(|i| i.api_key_var.clone());
        let remote = self.remote.as_ref().and_then(|r| r.api_key_var.clone());
        let tools = self.tools.iter().filter_map(|t| match &t.source {
            ToolSource::Mcp { api_key_var, .. } => api_key_var.clone(),
            ToolSource::Wasm { .. } => None,
        });
        let mut out: Vec<String> = Vec::new();
        for v in model.into_iter().chain(tools).chain(remote) {
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// How many tasks the capsule holds at once: none 0, single 1, queue `queue_depth + 1`.
    pub fn holds(&self) -> u32 {
        match self.lifecycle.task_acceptance {
            Acceptance::None => 0,
            Acceptance::Single => 1,
            Acceptance::Queue => self.lifecycle.queue_depth.saturating_add(1),
        }
    }
}

/// Whether `m` is a media range a capsule may declare: `type/subtype` or `type/*` (RFC 9110
/// tokens, no parameters), or `*/*`.
pub fn media_range_ok(m: &str) -> bool {
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match m.split_once('/') {
        Some(("*", "*")) => true,
        Some((t, "*")) => token(t),
        Some((t, s)) => token(t) && token(s),
        None => false,
    }
}

/// Whether a part of media type `media` (parameters ignored, case-insensitive) falls in one of
/// the declared `ranges`.
pub fn accepts_media(ranges: &[String], media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let Some((t, sub)) = essence.split_once('/') else {
        return false;
    };
    if t.is_empty() || sub.is_empty() {
        return false;
    }
    ranges.iter().any(|r| {
        let r = r.to_ascii_lowercase();
        r == "*/*" || r == essence || r.strip_suffix("/*").is_some_and(|rt| rt == t)
    })
}

/// A parsed manifest and the W-SEC-019 warnings its unknown keys raised (a block's own keys in
/// document order, then its sub-blocks', in the order of docs/reference/manifest.md#keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub manifest: Manifest,
    pub warnings: Vec<Diagnostic>,
}

/// Parses `murmur.yaml` bytes: E-MAN-001 for unreadable YAML, wrong types and missing keys,
/// E-MAN-003 for conflicting rules.
pub fn parse(bytes: &[u8]) -> Result<Parsed, Diagnostic> {
    parse::parse(bytes)
}

/// Parses the `murmur.yaml` packed in an archive. `Err` is the reason `mur install` (E-INS-001),
/// admission (E-ROS-007) and a session (E-RUN-002) all give for one whose manifest does not parse.
pub fn parse_packed(bytes: &[u8]) -> Result<Parsed, String> {
    parse(bytes).map_err(|d| format!("its packed murmur.yaml does not parse: {}", d.message))
}

/// The largest `murmur.yaml` read (the YAML loader's own cap).
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// Reads and parses the `murmur.yaml` at `path` (E-MAN-001 when absent or unreadable).
pub fn load_file(path: &Path) -> Result<Parsed, Diagnostic> {
    let bytes = crate::yaml::read_capped(path, MAX_MANIFEST_BYTES).map_err(|e| match e {
        crate::yaml::ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            Diagnostic::new(diag::E_MAN_001, format!("murmur.yaml not found at {}", path.display()))
                .with_hint("point it at a capsule's source directory, the one holding murmur.yaml")
        }
        other => Diagnostic::new(
            diag::E_MAN_001,
            format!("failed to read murmur.yaml at {}: {other}", path.display()),
        ),
    })?;
    parse(&bytes)
}

#[cfg(test)]
mod tests;
