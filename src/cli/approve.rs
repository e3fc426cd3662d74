//! `mur approve CAPSULE --capsule-version V`: records the definitions of a capsule's MCP tools,
//! as their servers state them now, as the approved ones (docs/reference/capsules.md#pinned-tools).
//!
//! It reaches each server as a session start does (the same keys from the environment, the same
//! bounds) and writes `tool-pins.json` beside the installed archive; a session then offers only
//! tools whose definitions are these.

use super::{ApproveArgs, Outcome};
use crate::diag::{self, Diagnostic};
use crate::manifest::ToolSource;
use crate::paths::MurHome;

pub fn run(a: &ApproveArgs) -> Outcome {
    let home = MurHome::from_env();
    let workdir = std::env::current_dir()
        .map_err(|e| Diagnostic::new(diag::E_RUN_002, format!("the current directory cannot be read: {e}")))?;
    let (stores, lock) = crate::session::startup::stores(&home, &workdir, None);
    let c = crate::session::startup::resolve_capsule(&a.capsule, &a.capsule_version, &stores, &lock, None)?;
    let capsule = format!("{}@{}", c.name, c.version);
    if !c
        .manifest
        .tools
        .iter()
        .any(|t| matches!(t.source, ToolSource::Mcp { .. }))
    {
        println!(
            "{capsule} has no MCP tools: nothing to approve (WebAssembly tools are pinned by its archive's sha256)"
        );
        return Ok(0);
    }
    let archive = crate::tools::ArchiveRef {
        zip_path: &c.resolved.zip_path,
        sha256: &c.resolved.sha256,
    };
    let pins = crate::tools::PinCheck {
        capsule: capsule.clone(),
        approve: true,
    };
    let prepared = actix_rt::System::new()
        .block_on(crate::tools::prepare(
            &c.manifest.tools,
            &[],
            &archive,
            |v| std::env::var(v).ok(),
            &pins,
        ))
        .map_err(|why| {
            Diagnostic::new(
                diag::E_RUN_002,
                format!("the MCP tools of '{capsule}' cannot be approved: {why}"),
            )
        })?;
    for n in &prepared.notices {
        n.eprint("");
    }
    if prepared
        .notices
        .iter()
        .any(|n| n.code.severity == diag::Severity::Warning)
    {
        return Ok(1);
    }
    println!(
        "Approved {} MCP tool(s) of {capsule}: {}",
        prepared.approved.len(),
        prepared.approved.join(", ")
    );
    println!(
        "  recorded in {}",
        crate::paths::tool_pins_beside(&c.resolved.zip_path).display()
    );
    Ok(0)
}
