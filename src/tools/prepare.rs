//! The table built at session start (docs/reference/capsules.md#tools): the runtime's tools,
//! then each `tools:` entry in manifest order. A WebAssembly tool is compiled through the
//! compiled-component cache (keyed by the archive and the tool's path in it) and describes
//! itself; an MCP server is reached, its protocol version agreed, and every tool of its `allow`
//! must be there. Any failure refuses the session: the member never reports ready, and the
//! launcher names it and the reason.
//!
//! The MCP sessions opened here only check the servers; they end before the session serves, and
//! the thread that runs the tasks opens its own (`pool`).
//!
//! Each MCP tool's definition is judged against the capsule's pins (`tool_pins`, beside its
//! archive): one that is not the approved one is left out of the table with an E-RUN-055; an
//! entry never approved is recorded as it is now (its first start).

use std::sync::Arc;

use super::mcp::{McpEndpoint, McpLimits, McpServer};
use super::{Tool, ToolKind, Toolbox};
use crate::capsule::{CapsuleEngine, CompiledCache, Source, ToolGrant, WasmTool};
use crate::diag::{self, Diagnostic};
use crate::manifest::{ToolDecl, ToolSource};
use crate::runner::AllowList;
use crate::secret::Secret;
use crate::tool_pins::{Judgement, Pins, ToolPin};
use crate::wire::model::ToolSpec;

/// Where a capsule's tools come from: its archive, as resolution checked it.
pub struct ArchiveRef<'a> {
    pub zip_path: &'a std::path::Path,
    pub sha256: &'a str,
}

/// How the MCP tools' definitions are held to their pins.
pub struct PinCheck {
    /// `<scope>/<name>@<version>`, as the re-approving command names it.
    pub capsule: String,
    /// Record every listed definition as approved (`mur approve`), rather than judge them.
    pub approve: bool,
}

/// The table, and what start-up says about it.
pub struct Prepared {
    pub toolbox: Toolbox,
    /// A tool left out because its definition changed (E-RUN-055), or pins that could not be
    /// written (W-RUN-011).
    pub notices: Vec<Diagnostic>,
    /// The MCP tools recorded as approved now, `<entry>.<tool>`: at a first start, or by
    /// `mur approve`.
    pub approved: Vec<String>,
}

/// The table for `decls`, beside the runtime tools of `callees`; `env` reads MCP keys. `Err`
/// names the tool and why.
pub async fn prepare(
    decls: &[ToolDecl],
    callees: &[String],
    archive: &ArchiveRef<'_>,
    env: impl Fn(&str) -> Option<String>,
    pins: &PinCheck,
) -> Result<Prepared, String> {
    let pins_path = crate::paths::tool_pins_beside(archive.zip_path);
    let mut book = read_pins(&pins_path)?;
    let recorded = book.clone();
    let mut notices = Vec::new();
    let mut approved = Vec::new();
    let mut table = Toolbox::runtime(callees);
    let mut engine: Option<CapsuleEngine> = None;
    for decl in decls {
        let tool = match &decl.source {
            ToolSource::Wasm {
                component,
                network_allow,
                ..
            } => {
                let engine = match &engine {
                    Some(e) => e.clone(),
                    None => engine.insert(CapsuleEngine::new()?).clone(),
                };
                let source = Source {
                    archive_sha256: archive.sha256,
                    entry: component,
                };
                let mut read = || {
                    crate::store::read_entry_checked(archive.zip_path, archive.sha256, component)
                        .map_err(|e| format!("it cannot be read from the archive: {e}"))
                };
                let loaded = WasmTool::load(
                    &engine,
                    &source,
                    &mut read,
                    &CompiledCache::user(),
                    &decl.name,
                    &ToolGrant::default(),
                )
                .await
                .map_err(|why| format!("its tool '{}' ({component}) cannot be used: {why}", decl.name))?;
                let d = loaded.description().clone();
                vec![Tool {
                    spec: ToolSpec {
                        name: decl.name.clone(),
                        description: d.description,
                        schema: d.input_schema,
                    },
                    kind: ToolKind::Wasm {
                        tool: loaded,
                        allow: AllowList::parse(network_allow),
                    },
                }]
            }
            ToolSource::Mcp {
                url,
                api_key_var,
                allow,
            } => {
                let listed = mcp_tools(decl, url, api_key_var.as_deref(), allow, &env).await?;
                held_to_pins(decl, listed, &mut book, pins, &mut notices, &mut approved)
            }
        };
        for t in tool {
            table = table.with(t);
        }
    }
    if book != recorded
        && let Err(e) = crate::file::write_atomic(&pins_path, book.render().as_bytes(), 0o600)
    {
        notices.push(Diagnostic::new(
            diag::W_RUN_011,
            format!(
                "the approved definitions of {}'s MCP tools could not be recorded in {}: {e}; they are checked again at the next start",
                pins.capsule,
                pins_path.display()
            ),
        ));
    }
    Ok(Prepared {
        toolbox: table,
        notices,
        approved,
    })
}

/// The pins beside the archive; none yet is an empty book. A file that cannot be read as pins
/// refuses the start: what was approved is unknown.
fn read_pins(path: &std::path::Path) -> Result<Pins, String> {
    let bytes = match crate::yaml::read_capped(path, crate::tool_pins::MAX_FILE_BYTES) {
        Ok(b) => b,
        Err(crate::yaml::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Pins::default()),
        Err(e) => {
            return Err(format!(
                "its approved MCP tools ({}) cannot be read: {e}",
                path.display()
            ));
        }
    };
    Pins::parse(&bytes).map_err(|why| {
        format!(
            "its approved MCP tools ({}) cannot be read: {why}; remove the file and approve its tools again with `mur approve`",
            path.display()
        )
    })
}

/// The tools of MCP entry `decl` that its pins allow: at the entry's first start (or with
/// `approve`) all of them, recorded; else those whose definitions are the approved ones, each
/// other one left out with an E-RUN-055.
fn held_to_pins(
    decl: &ToolDecl,
    listed: Vec<(String, Tool)>,
    book: &mut Pins,
    pins: &PinCheck,
    notices: &mut Vec<Diagnostic>,
    approved: &mut Vec<String>,
) -> Vec<Tool> {
    let now: Vec<(String, ToolPin)> = listed
        .iter()
        .map(|(name, t)| (name.clone(), ToolPin::of(&t.spec.description, &t.spec.schema)))
        .collect();
    let judgement = if pins.approve {
        Judgement::FirstUse
    } else {
        crate::tool_pins::judge(book.tools.get(&decl.name), &now)
    };
    match judgement {
        Judgement::FirstUse => {
            book.approve(&decl.name, &now);
            approved.extend(now.iter().map(|(name, _)| format!("{}.{name}", decl.name)));
            listed.into_iter().map(|(_, t)| t).collect()
        }
        Judgement::Pinned { withheld } => {
            for (name, change) in &withheld {
                notices.push(
                    Diagnostic::new(
                        diag::E_RUN_055,
                        format!(
                            "the MCP tool '{name}' of '{}' (server of tools entry '{}') is not offered to the model: {}",
                            pins.capsule,
                            decl.name,
                            change.said()
                        ),
                    )
                    .with_hint(format!(
                        "if you trust the server's new definition, approve it with `mur approve {}`",
                        pins.capsule.replacen('@', " --capsule-version ", 1)
                    )),
                );
            }
            listed
                .into_iter()
                .filter(|(name, _)| !withheld.iter().any(|(w, _)| w == name))
                .map(|(_, t)| t)
                .collect()
        }
    }
}

/// The tools an MCP server lists (of its entry's `allow`), each with its name on the server.
async fn mcp_tools(
    decl: &ToolDecl,
    url: &str,
    key_var: Option<&str>,
    allow: &[String],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, Tool)>, String> {
    let bearer = match key_var {
        None => None,
        Some(var) => match env(var).filter(|k| !k.is_empty()) {
            Some(k) => Some(Secret::new(k)),
            None => {
                return Err(format!(
                    "its tool '{}' names ${{{var}}} as the MCP server's key, and {var} is not set in this environment",
                    decl.name
                ));
            }
        },
    };
    let endpoint = McpEndpoint {
        name: decl.name.clone(),
        url: url.to_string(),
        bearer,
        allow: allow.to_vec(),
    };
    let server = McpServer::connect(endpoint.clone(), McpLimits::default())
        .await
        .map_err(|why| format!("its tool '{}' cannot be used: {why}", decl.name))?;
    let shared = Arc::new(endpoint);
    let tools = server
        .tools()
        .iter()
        .map(|t| {
            let tool = Tool {
                spec: ToolSpec {
                    name: decl.mcp_tool_name(&t.name),
                    description: t.description.clone(),
                    schema: t.input_schema.clone(),
                },
                kind: ToolKind::Mcp {
                    server: Arc::clone(&shared),
                    tool: t.name.clone(),
                },
            };
            (t.name.clone(), tool)
        })
        .collect();
    server.close().await;
    Ok(tools)
}
