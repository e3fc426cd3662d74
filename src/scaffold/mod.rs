//! Files mur writes from what is built into it: the two-member formation `mur new --roster`
//! scaffolds (docs/reference/cli.md, the scaffold paragraph), the one capsule `mur new --capsule`
//! scaffolds in Python, JavaScript or Rust ([`capsule`]; `mur build` drives their toolchains with
//! [`toolchain`]), and the demo formation `mur demo` launches ([`demo`]). The call tree
//! `mur demo` prints is `crate::trace::formation::build`.
//!
//! Rendering is pure: names and provider words in, file bytes out. The commands do the file
//! system work, and check every file with our own parsers ([`check`]) before any is shown.

pub mod demo;
pub mod tool;
pub mod toolchain;

#[cfg(test)]
mod tests;

use crate::diag::{self, Diagnostic, shown};
use crate::manifest::{self, Language, Provider};
use crate::names::{self, NameError};
use crate::wire::provider::dialect;

/// The version both scaffolded members start at.
pub const VERSION: &str = "0.1.0";

/// The prebuilt components a component scaffold runs (Rust sources under
/// `actors/demo/scaffold/`, rebuilt by `actors/demo/build.sh`).
const LEAD_WASM: &[u8] = include_bytes!("../../actors/demo/scaffold/lead/capsule.wasm");
const WORKER_WASM: &[u8] = include_bytes!("../../actors/demo/scaffold/worker/capsule.wasm");

/// One file of a scaffold, by its path relative to the formation directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// What the members of a scaffold are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Members {
    /// WebAssembly components that run offline and answer deterministically (the default).
    Components,
    /// Model capsules of one provider.
    Models(ModelSettings),
    /// Component capsules written in one language, built from their sources by `mur build`.
    Sources(Language),
}

/// The `inference` block both model members declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSettings {
    pub provider: Provider,
    pub endpoint: String,
    pub model: String,
}

impl ModelSettings {
    /// The provider's defaults, overridden by `~/.murmur/config.yaml`'s `inference.endpoint` and
    /// `inference.model` when set (see [`config_defaults`]).
    pub fn new(provider: Provider, config: &ConfigDefaults) -> ModelSettings {
        ModelSettings {
            provider,
            endpoint: config
                .endpoint
                .clone()
                .unwrap_or_else(|| provider.default_endpoint().to_string()),
            model: config
                .model
                .clone()
                .unwrap_or_else(|| default_model(provider).to_string()),
        }
    }

    /// The scaffold's `inference.max_turns`: room for a task's tool and member calls, not for a loop.
    pub const SCAFFOLD_MAX_TURNS: u32 = 25;

    /// The scaffold's `inference.max_session_tokens`: a session's guard, written visibly so it is
    /// raised on purpose.
    pub const SCAFFOLD_SESSION_TOKENS: u64 = 1_000_000;

    /// The environment variable the members' `api_key` names.
    pub fn key_var(&self) -> &'static str {
        key_var(self.provider)
    }
}

/// The model a scaffold names when the configuration names none (the provider's
/// [`Dialect::default_model`](crate::wire::provider::Dialect::default_model)).
pub fn default_model(provider: Provider) -> &'static str {
    dialect(provider).default_model()
}

/// The scaffold's `inference.max_tokens`: the spec's default of 4096 leaves a reasoning model
/// too little room once it has reasoned, and a reply cut there fails the task.
pub const SCAFFOLD_MAX_TOKENS: u32 = 16000;

/// The scaffold's `inference.max_turns`: room for a task's tool and member calls, not for a loop.
pub const SCAFFOLD_MAX_TURNS: u32 = 25;

/// The scaffold's `inference.max_session_tokens`: a session's guard, written visibly so it is
/// raised on purpose.
pub const SCAFFOLD_SESSION_TOKENS: u64 = 1_000_000;

/// The environment variable the members' `api_key` names.
pub fn key_var(provider: Provider) -> &'static str {
    dialect(provider).key_var()
}

/// `inference.*` defaults read from `~/.murmur/config.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDefaults {
    pub endpoint: Option<String>,
    pub model: Option<String>,
}

/// Checks NAME and the two capsule names made from it (E-NEW-002): each must be an artifact name
/// part (`[a-z0-9-]`, 1–100 characters, no leading or trailing `-`), which also makes NAME a
/// plain directory name.
pub fn check_name(name: &str) -> Result<(), Diagnostic> {
    let refuse = |what: String, e: NameError| {
        Diagnostic::new(
            diag::E_NEW_002,
            format!("'{}' cannot name a formation: {what} {e}", shown(name)),
        )
        .with_hint("a formation name is 1 to 93 lowercase letters, digits and '-', not starting or ending with '-'; its members' capsules are named <NAME>-lead and <NAME>-worker")
    };
    names::check_part(name).map_err(|e| refuse("the name".into(), e))?;
    for member in ["lead", "worker"] {
        let capsule = format!("{name}-{member}");
        names::check_part(&capsule).map_err(|e| refuse(format!("its {member}'s capsule name '{capsule}'"), e))?;
    }
    Ok(())
}

/// Reads `--inference PROVIDER` (E-NEW-004).
pub fn provider(word: &str) -> Result<Provider, Diagnostic> {
    match word {
        "openai" => Ok(Provider::OpenAi),
        "anthropic" => Ok(Provider::Anthropic),
        other => Err(Diagnostic::new(
            diag::E_NEW_004,
            format!(
                "'{}' is not an inference provider mur new can scaffold; it knows openai and anthropic",
                shown(other)
            ),
        )),
    }
}

/// The `inference.endpoint` and `inference.model` of `~/.murmur/config.yaml` that apply to
/// `provider`: all of them when the file names no `inference.provider`, none when it names
/// another one (a model of one provider means nothing to the other). `Err` says why the file
/// cannot be used.
pub fn config_defaults(bytes: &[u8], provider: Provider) -> Result<ConfigDefaults, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8".to_string())?;
    let root =
        crate::yaml::load(text, crate::yaml::Limits::default()).map_err(|e| format!("YAML syntax error at {e}"))?;
    if root.is_null() {
        return Ok(ConfigDefaults::default());
    }
    if root.as_map().is_none() {
        return Err(format!("it must be a mapping, found {}", root.shape()));
    }
    let Some(inf) = root.get("inference") else {
        return Ok(ConfigDefaults::default());
    };
    if inf.as_map().is_none() {
        return Err(format!("inference: must be a mapping, found {}", inf.shape()));
    }
    let text_of = |key: &str| -> Result<Option<String>, String> {
        match inf.get(key) {
            None => Ok(None),
            Some(n) => match n.as_scalar() {
                // A model such as `4` or an unquoted date still means its spelling.
                Some(s) if !s.text.trim().is_empty() && !s.text.contains(char::is_control) => Ok(Some(s.text.clone())),
                _ => Err(format!(
                    "inference.{key}: must be a one-line string, found {}",
                    n.shape()
                )),
            },
        }
    };
    if let Some(p) = text_of("provider")?
        && p != provider.as_str()
    {
        return Ok(ConfigDefaults::default());
    }
    Ok(ConfigDefaults {
        endpoint: text_of("endpoint")?,
        model: text_of("model")?,
    })
}

/// The JSON Schemas `schemas/` checks in (kept in step with the parsers by `schema`'s tests).
/// The scaffold carries its own copies so editors validate it offline.
const ROSTER_SCHEMA: &str = include_str!("../../schemas/roster.schema.json");
const MANIFEST_SCHEMA: &str = include_str!("../../schemas/murmur.schema.json");

/// The first line of each YAML file `mur new` writes: yaml-language-server reads it.
const ROSTER_SCHEMA_LINE: &str = "# yaml-language-server: $schema=.schemas/roster.schema.json\n";
const MANIFEST_SCHEMA_LINE: &str = "# yaml-language-server: $schema=../.schemas/murmur.schema.json\n";

/// Every file of the scaffold of formation `name`, in the order `mur new` lists them.
pub fn render(name: &str, members: &Members) -> Vec<File> {
    let mut files = render_documents(name, members);
    for f in &mut files {
        let line = match f.path.as_str() {
            "roster.yaml" => ROSTER_SCHEMA_LINE,
            p if p.ends_with("murmur.yaml") => MANIFEST_SCHEMA_LINE,
            _ => continue,
        };
        f.bytes.splice(0..0, line.bytes());
    }
    files.push(File {
        path: ".schemas/roster.schema.json".into(),
        bytes: ROSTER_SCHEMA.as_bytes().to_vec(),
    });
    files.push(File {
        path: ".schemas/murmur.schema.json".into(),
        bytes: MANIFEST_SCHEMA.as_bytes().to_vec(),
    });
    files
}

fn render_documents(name: &str, members: &Members) -> Vec<File> {
    let mut files = vec![File {
        path: "roster.yaml".into(),
        bytes: roster(name).into_bytes(),
    }];
    match members {
        Members::Components => {
            files.push(File {
                path: "lead/murmur.yaml".into(),
                bytes: lead_component(name).into_bytes(),
            });
            files.push(File {
                path: "lead/capsule.wasm".into(),
                bytes: LEAD_WASM.to_vec(),
            });
            files.push(File {
                path: "worker/murmur.yaml".into(),
                bytes: worker_component(name).into_bytes(),
            });
            files.push(File {
                path: "worker/capsule.wasm".into(),
                bytes: WORKER_WASM.to_vec(),
            });
        }
        Members::Sources(lang) => {
            files.push(File {
                path: "lead/murmur.yaml".into(),
                bytes: member_sources(name, "lead", *lang).into_bytes(),
            });
            files.extend(sources(&format!("{name}-lead"), *lang, "lead/"));
            files.push(File {
                path: "worker/murmur.yaml".into(),
                bytes: member_sources(name, "worker", *lang).into_bytes(),
            });
            files.extend(sources(&format!("{name}-worker"), *lang, "worker/"));
        }
        Members::Models(m) => {
            files.push(File {
                path: "lead/murmur.yaml".into(),
                bytes: lead_model(name, m).into_bytes(),
            });
            files.push(File {
                path: "worker/murmur.yaml".into(),
                bytes: worker_model(name, m).into_bytes(),
            });
        }
    }
    files
}

/// Checks one written file with the parser that will read it: `roster.yaml` with the roster
/// parser and its structural checks, a `murmur.yaml` with the manifest parser (a warning counts
/// as a fault: the scaffold must be clean). Other files pass.
pub fn check(path: &str, bytes: &[u8]) -> Result<(), Diagnostic> {
    if path == "roster.yaml" {
        let roster = crate::roster::parse(bytes)?;
        crate::roster::check_structure(&roster)?;
    } else if path.ends_with("murmur.yaml") {
        let parsed = manifest::parse(bytes)?;
        if let Some(w) = parsed.warnings.into_iter().next() {
            return Err(w);
        }
    }
    Ok(())
}

/// The lines after the file list: how to build, install and run the scaffold.
pub fn next_steps(name: &str, members: &Members) -> Vec<String> {
    let mut out = Vec::new();
    if let Members::Sources(lang) = members {
        out.push(install_line(
            *lang,
            &[&format!("{name}/lead"), &format!("{name}/worker")],
        ));
    }
    for m in ["lead", "worker"] {
        out.push(format!(
            "mur build {name}/{m} && mur install -g {name}/{m}/{name}-{m}-{VERSION}.mur.zip"
        ));
    }
    if let Members::Models(s) = members {
        out.push(format!(
            "export {}=…   (the key both members send to {})",
            s.key_var(),
            s.endpoint
        ));
    }
    out.push(format!("mur run --roster {name} --task \"<your task>\""));
    out
}

fn roster(name: &str) -> String {
    format!(
        "# The formation {name}: lead takes each task and hands it to worker, the one member it may call.
# Build and install both members, then launch it:
#   mur build {name}/lead && mur install -g {name}/lead/{name}-lead-{VERSION}.mur.zip
#   mur build {name}/worker && mur install -g {name}/worker/{name}-worker-{VERSION}.mur.zip
#   mur run --roster {name} --task \"<your task>\"
roster_version: 1
members:
  - name: lead
    capsule: local/{name}-lead
    version: {VERSION}
    entry: true
  - name: worker
    capsule: local/{name}-worker
    version: {VERSION}
reachability:
  - from: lead
    to: [worker]
"
    )
}

/// The keys both members share: a door that checks the formation's credentials.
const AUTHENTICATION: &str = "network:
  authentication:
    scheme: bearer
";

/// The lead calls worker's door on loopback, so its grant must reach localhost.
const LEAD_GRANT: &str = "capabilities:
  network:
    allow:
      - localhost
";

/// The worker waits for calls and serves them one after another.
const WORKER_SERVES: &str = "lifecycle:
  task_acceptance: queue
  after_task: sleep
exports:
  peer_tasks:
    accept: true
";

fn lead_component(name: &str) -> String {
    format!(
        "# lead, the entry member of {name}: hands each task to worker with one member call and answers
# with worker's answer. capsule.wasm is a prebuilt WebAssembly component of the world
# murmur:capsule/capsule@0.1.0; its Rust source is actors/demo/scaffold/lead in mur's repository.
# Replace it with your own component, then build and install again.
name: {name}-lead
version: {VERSION}
component: capsule.wasm
{AUTHENTICATION}{LEAD_GRANT}"
    )
}

fn worker_component(name: &str) -> String {
    format!(
        "# worker, the member of {name} that lead calls: answers each task with \"worker handled: <task>\".
# capsule.wasm is a prebuilt WebAssembly component of the world murmur:capsule/capsule@0.1.0;
# its Rust source is actors/demo/scaffold/worker in mur's repository. Replace it with your own
# component, then build and install again.
name: {name}-worker
version: {VERSION}
component: capsule.wasm
{WORKER_SERVES}{AUTHENTICATION}"
    )
}

fn member_sources(name: &str, member: &str, lang: Language) -> String {
    let what = match member {
        "lead" => format!(
            "# lead, the entry member of {name}: hands each task to worker with one member call and answers
# with worker's answer."
        ),
        _ => format!(
            "# worker, the member of {name} that lead calls: answers each task with \"worker handled: <task>\"."
        ),
    };
    let rest = if member == "lead" {
        format!("{AUTHENTICATION}{LEAD_GRANT}")
    } else {
        format!("{WORKER_SERVES}{AUTHENTICATION}")
    };
    format!(
        "{what}
{}
name: {name}-{member}
version: {VERSION}
component: capsule.wasm
build:
  language: {}
{rest}",
        built_from(lang),
        lang.as_str()
    )
}

/// The comment lines saying what `mur build` does with a capsule's sources.
fn built_from(lang: Language) -> String {
    let (entry, tool) = match lang {
        Language::Python => ("app.py", "componentize-py"),
        Language::JavaScript => ("app.js", "componentize-js"),
        Language::Rust => (
            "src/lib.rs",
            "cargo (for wasm32-wasip2, or wasm32-unknown-unknown from the std sources)",
        ),
    };
    format!(
        "# Written in {} ({entry}): mur build makes capsule.wasm from it with {tool}, then packs both.",
        match lang {
            Language::Python => "Python",
            Language::JavaScript => "JavaScript",
            Language::Rust => "Rust",
        }
    )
}

/// The first next step of a scaffold from sources: the install command of `lang`'s toolchain,
/// once per directory it applies to (JavaScript's lives in each capsule's `node_modules`, the
/// others are installed once), and what it is for.
fn install_line(lang: Language, dirs: &[&str]) -> String {
    let hint = toolchain::install_hint(lang);
    let command = match lang {
        Language::JavaScript => dirs
            .iter()
            .map(|d| format!("(cd {d} && {hint})"))
            .collect::<Vec<_>>()
            .join(" && "),
        Language::Python | Language::Rust => hint,
    };
    format!("{command}   (once: the toolchain mur build runs)")
}

/// Checks the name of `mur new --capsule NAME` (E-NEW-002).
pub fn check_capsule_name(name: &str) -> Result<(), Diagnostic> {
    names::check_part(name).map_err(|e| {
        Diagnostic::new(
            diag::E_NEW_002,
            format!("'{}' cannot name a capsule: the name {e}", shown(name)),
        )
        .with_hint("a capsule name is 1 to 100 lowercase letters, digits and '-', not starting or ending with '-'")
    })
}

/// The source files of a capsule named `name` in `lang`, under `prefix` (`""` or `"lead/"`).
fn sources(name: &str, lang: Language, prefix: &str) -> Vec<File> {
    let fill = |t: &str| t.replace("@NAME@", name).into_bytes();
    let files: Vec<(&str, Vec<u8>)> = match lang {
        Language::Python => vec![
            ("app.py", fill(PYTHON_APP)),
            (
                ".gitignore",
                b"__pycache__/\n.venv/\ncapsule.wasm\n*.mur.zip\n.murmur/\n".to_vec(),
            ),
        ],
        Language::JavaScript => vec![
            ("app.js", fill(JAVASCRIPT_APP)),
            ("package.json", fill(JAVASCRIPT_PACKAGE)),
            (
                ".gitignore",
                b"node_modules/\ncapsule.wasm\n*.mur.zip\n.murmur/\n".to_vec(),
            ),
        ],
        Language::Rust => vec![
            ("Cargo.toml", fill(RUST_CARGO)),
            ("src/lib.rs", fill(RUST_LIB)),
            ("wit/capsule.wit", CAPSULE_WIT.as_bytes().to_vec()),
            (
                ".gitignore",
                b"target/\nCargo.lock\ncapsule.wasm\n*.mur.zip\n.murmur/\n".to_vec(),
            ),
        ],
    };
    files
        .into_iter()
        .map(|(path, bytes)| File {
            path: format!("{prefix}{path}"),
            bytes,
        })
        .collect()
}

const PYTHON_APP: &str = include_str!("templates/python/app.py");
const JAVASCRIPT_APP: &str = include_str!("templates/javascript/app.js");
const JAVASCRIPT_PACKAGE: &str = include_str!("templates/javascript/package.json");
const RUST_CARGO: &str = include_str!("templates/rust/Cargo.toml");
const RUST_LIB: &str = include_str!("templates/rust/src/lib.rs");
const CAPSULE_WIT: &str = include_str!("../capsule/wit/capsule.wit");

/// Every file of `mur new --capsule NAME --lang LANG`, in the order it lists them: a capsule that
/// serves calls, calls the members its roster lets it call, and (Python, JavaScript) fetches URLs.
pub fn capsule(name: &str, lang: Language) -> Vec<File> {
    let manifest = format!(
        "# yaml-language-server: $schema=.schemas/murmur.schema.json
# {name}: a component capsule. {}
#   mur build {name} && mur install -g {name}/{name}-{VERSION}.mur.zip
name: {name}
version: {VERSION}
component: capsule.wasm
build:
  language: {}
# As a formation member it serves the tasks other members send, one after another.
{WORKER_SERVES}{AUTHENTICATION}# Calls to other members reach their doors on loopback. Add \"host\" or \"host:port\" for
# each address it fetches.
{LEAD_GRANT}",
        built_from(lang).trim_start_matches("# "),
        lang.as_str()
    );
    let mut files = vec![File {
        path: "murmur.yaml".into(),
        bytes: manifest.into_bytes(),
    }];
    files.extend(sources(name, lang, ""));
    files.push(File {
        path: ".schemas/murmur.schema.json".into(),
        bytes: MANIFEST_SCHEMA.as_bytes().to_vec(),
    });
    files
}

/// The variable a scaffolded remote capsule reads its agent's key from: `FAR_AGENT_API_KEY` for
/// `far-agent`.
pub fn remote_key_var(name: &str) -> String {
    format!("{}_API_KEY", name.to_ascii_uppercase().replace('-', "_"))
}

/// `mur new --capsule NAME --remote URL`: a remote capsule's `murmur.yaml`
/// (docs/reference/capsules.md#remote-capsules), checked by the manifest's own parser, so a URL
/// the runtime would refuse is refused here with the same code and text.
pub fn remote_capsule(name: &str, url: &str) -> Result<Vec<File>, Diagnostic> {
    let var = remote_key_var(name);
    // A JSON string is a YAML string: the URL is written exactly, whatever it holds.
    let quoted = serde_json::to_string(url).unwrap_or_default();
    let manifest = format!(
        "# yaml-language-server: $schema=.schemas/murmur.schema.json
# {name}: a remote capsule. Its door forwards each task it accepts to the A2A agent below, which
# someone else runs; the roster still decides who may call it.
#   mur build {name} && mur install -g {name}/{name}-{VERSION}.mur.zip
name: {name}
version: {VERSION}
remote:
  url: {quoted}
  # The agent's credential, read from this variable when the member starts (never written here).
  # Remove the line if the agent needs none.
  api_key: ${{{var}}}
  timeout: 300
# As a formation member it serves the tasks other members send, up to four waiting.
lifecycle:
  task_acceptance: queue
  queue_depth: 4
  after_task: sleep
exports:
  peer_tasks:
    accept: true
{AUTHENTICATION}"
    );
    let parsed = crate::manifest::parse(manifest.as_bytes())?;
    debug_assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    Ok(vec![
        File {
            path: "murmur.yaml".into(),
            bytes: manifest.into_bytes(),
        },
        File {
            path: ".schemas/murmur.schema.json".into(),
            bytes: MANIFEST_SCHEMA.as_bytes().to_vec(),
        },
    ])
}

/// The lines after the file list of `mur new --capsule NAME --remote URL`.
pub fn remote_next_steps(name: &str) -> Vec<String> {
    vec![
        format!("mur build {name} && mur install -g {name}/{name}-{VERSION}.mur.zip"),
        format!("export {}=<the remote agent's key>", remote_key_var(name)),
        format!("mur run --capsule local/{name} --capsule-version {VERSION} --task \"<your task>\""),
    ]
}

/// The lines after the file list of `mur new --capsule`.
pub fn capsule_next_steps(name: &str, lang: Language) -> Vec<String> {
    vec![
        install_line(lang, &[name]),
        format!("mur build {name} && mur install -g {name}/{name}-{VERSION}.mur.zip"),
        format!("mur run --capsule local/{name} --capsule-version {VERSION} --task \"<your task>\""),
    ]
}

fn inference_block(m: &ModelSettings, prompt: &str) -> String {
    format!(
        "inference:
  provider: {}
  endpoint: {}
  model: {}
  api_key: ${{{}}}
  # Output tokens per turn; a reasoning model's reasoning counts toward them.
  max_tokens: {SCAFFOLD_MAX_TOKENS}
  # Guards against a model that loops: model turns per task, and tokens (in + out) over the
  # whole session. Raise them as the work needs; mur run --roster --max-tokens caps a formation.
  max_turns: {SCAFFOLD_MAX_TURNS}
  max_session_tokens: {SCAFFOLD_SESSION_TOKENS}
  system_prompt: {}
",
        m.provider.as_str(),
        yaml_scalar(&m.endpoint),
        yaml_scalar(&m.model),
        m.key_var(),
        yaml_scalar(prompt),
    )
}

fn lead_model(name: &str, m: &ModelSettings) -> String {
    let prompt = "You lead a formation of two members. Hand every task you receive to the member `worker` \
with the call-member tool, stating the task in full, then end your turn. When worker's answer arrives, \
answer with it.";
    format!(
        "# lead, the entry member of {name}: a model capsule that hands each task to worker with
# call-member and answers with worker's answer. The key is read from ${} when a session starts.
name: {name}-lead
version: {VERSION}
{}{AUTHENTICATION}{LEAD_GRANT}",
        m.key_var(),
        inference_block(m, prompt)
    )
}

fn worker_model(name: &str, m: &ModelSettings) -> String {
    let prompt =
        "You are the worker of a formation. Another member hands you a task; do it and answer with the result.";
    format!(
        "# worker, the member of {name} that lead calls: a model capsule that does the task it is handed.
# The key is read from ${} when a session starts.
name: {name}-worker
version: {VERSION}
{}{WORKER_SERVES}{AUTHENTICATION}",
        m.key_var(),
        inference_block(m, prompt)
    )
}

/// A one-line YAML scalar for `s`: serde_yaml_ng's own rendering (plain, or quoted when the
/// text would read as something else), or a double-quoted one when that rendering spans lines.
fn yaml_scalar(s: &str) -> String {
    match serde_yaml_ng::to_string(s) {
        Ok(out) if out.trim_end_matches('\n').lines().count() == 1 => out.trim_end_matches('\n').to_string(),
        // A JSON string is a valid YAML double-quoted scalar.
        _ => serde_json::Value::String(s.to_string()).to_string(),
    }
}
