//! The table built at session start (docs/reference/capsules.md#tools): the runtime's tools,
//! then each `tools:` entry in manifest order. A WebAssembly tool is compiled through the
//! compiled-component cache (keyed by the archive and the tool's path in it) and describes
//! itself; an MCP server is reached, its protocol version agreed, and every tool of its `allow`
//! must be there. Any failure refuses the session: the member never reports ready, and the
//! launcher names it and the reason.
//!
//! The MCP sessions opened here only check the servers; they end before the session serves, and
//! the thread that runs the tasks opens its own (`pool`).

use std::sync::Arc;

use super::mcp::{McpEndpoint, McpLimits, McpServer};
use super::{Tool, ToolKind, Toolbox};
use crate::capsule::{CapsuleEngine, CompiledCache, Source, ToolGrant, WasmTool};
use crate::manifest::{ToolDecl, ToolSource};
use crate::runner::AllowList;
use crate::secret::Secret;
use crate::wire::model::ToolSpec;

/// Where a capsule's tools come from: its archive, as resolution checked it.
pub struct ArchiveRef<'a> {
    pub zip_path: &'a std::path::Path,
    pub sha256: &'a str,
}

/// The table for `decls`, beside the runtime tools of `callees`; `env` reads MCP keys. `Err`
/// names the tool and why.
pub async fn prepare(
    decls: &[ToolDecl],
    callees: &[String],
    archive: &ArchiveRef<'_>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Toolbox, String> {
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
            } => mcp_tools(decl, url, api_key_var.as_deref(), allow, &env).await?,
        };
        for t in tool {
            table = table.with(t);
        }
    }
    Ok(table)
}

async fn mcp_tools(
    decl: &ToolDecl,
    url: &str,
    key_var: Option<&str>,
    allow: &[String],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<Tool>, String> {
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
        .map(|t| Tool {
            spec: ToolSpec {
                name: decl.mcp_tool_name(&t.name),
                description: t.description.clone(),
                schema: t.input_schema.clone(),
            },
            kind: ToolKind::Mcp {
                server: Arc::clone(&shared),
                tool: t.name.clone(),
            },
        })
        .collect();
    server.close().await;
    Ok(tools)
}
