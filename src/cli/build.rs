//! `mur build DIR`: packs a capsule's sources into `DIR/<name>-<version>.mur.zip`.
//!
//! With `build.language`, the language's toolchain first makes the file `component:` names
//! ([`crate::scaffold::toolchain`]): it runs with a fixed argv, a minimal environment and no
//! stdin; its output is kept only as a bounded tail for the error; the component appears by
//! rename, so a failed build leaves the previous one in place.
//!
//! The archive holds `murmur.yaml` exactly as written and, for a component capsule, the file that
//! `component:` names, as root `capsule.wasm`; a model capsule's WebAssembly tools go at the paths
//! their `tools:` entries name, each built first from its sources when it has `build.language`.
//! A component written as WAT text is packed as is: wasmtime compiles component-model WAT text as
//! readily as the binary encoding, so no conversion happens here.
//!
//! A component built from sources is built again only when something it is made from changed:
//! its directory's input files, its build settings, the toolchain or mur itself
//! ([`crate::build_stamp`], a stamp per component under the capsule's `.murmur/build/`).
//! Otherwise the toolchain does not run, the component keeps its bytes and mtime, and stderr
//! says `Unchanged <component>`.

use std::path::Path;

use super::{BuildArgs, Outcome};
use crate::build_stamp;
use crate::diag::{self, Diagnostic};
use crate::manifest::{self, Kind, ToolSource};
use crate::paths::Project;
use crate::scaffold::toolchain::World;
use crate::store::archive;

mod toolchain;

pub fn run(a: &BuildArgs) -> Outcome {
    let project = Project::at(&a.dir);
    let manifest_path = project.manifest();
    let parsed = manifest::load_file(&manifest_path)?;
    for w in &parsed.warnings {
        w.eprint("");
    }
    let m = &parsed.manifest;
    // The packed manifest is the source bytes, so re-read them rather than re-serialising.
    let source = std::fs::read(&manifest_path).map_err(|e| io_error("read", &manifest_path, &e))?;
    if let Some((lang, rel)) = m.check_build()? {
        let stamp = build_stamp::stamp_path(rel).map(|s| a.dir.join(s));
        toolchain::build(lang, World::Capsule, &a.dir, rel, stamp.as_deref())?;
    }
    let component = match &m.kind {
        Kind::Component { path } => Some(read_component(&a.dir, path)?),
        Kind::Model | Kind::Remote | Kind::ManifestOnly => None,
    };
    let tools = build_tools(&a.dir, m)?;
    let extra: Vec<(&str, &[u8])> = tools.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
    let zip = archive::try_pack_with(&source, component.as_deref(), &extra)
        .map_err(|e| Diagnostic::new(diag::E_BLD_001, format!("cannot pack {}@{}: {e}", m.name, m.version)))?;
    let out = a.dir.join(format!("{}-{}.mur.zip", m.name, m.version));
    crate::file::write_atomic(&out, &zip, 0o666).map_err(|e| io_error("write", &out, &e))?;
    println!("Built {}@{}: {}", m.name, m.version, out.display());
    Ok(0)
}

/// Each WebAssembly tool's component, built first when its entry has `build.language` (in the
/// directory its `component:` path names, which the scaffold gives its sources), as
/// `(archive path, bytes)`.
fn build_tools(dir: &Path, m: &manifest::Manifest) -> Result<Vec<(String, Vec<u8>)>, Diagnostic> {
    let mut out = Vec::new();
    for tool in &m.tools {
        let ToolSource::Wasm { component, build, .. } = &tool.source else {
            continue;
        };
        if let Some(lang) = build {
            let rel = Path::new(component);
            let (Some(parent), Some(file)) = (rel.parent(), rel.file_name().and_then(|f| f.to_str())) else {
                continue;
            };
            let stamp = build_stamp::stamp_path(component).map(|s| dir.join(s));
            toolchain::build(*lang, World::Tool, &dir.join(parent), file, stamp.as_deref())?;
        }
        out.push((component.clone(), read_component(dir, component)?));
    }
    Ok(out)
}

fn io_error(verb: &str, path: &Path, e: &std::io::Error) -> Diagnostic {
    Diagnostic::new(diag::E_BLD_001, format!("cannot {verb} {}: {e}", path.display()))
        .with_hint("check that the directory exists and is readable and writable")
}

/// The hint of an E-BLD-001 for a component `component:` names but that is not there, from
/// `mur build` and `mur doctor` alike.
pub(super) const COMPONENT_MISSING_HINT: &str =
    "build the component first, or correct `component:` in murmur.yaml (a path relative to the source directory)";

/// Reads the component named by `component:` (relative to the source directory), capped at the
/// size an installed archive may hold.
fn read_component(dir: &Path, rel: &str) -> Result<Vec<u8>, Diagnostic> {
    let path = dir.join(rel);
    let missing = |why: String| {
        Diagnostic::new(diag::E_BLD_001, format!("component '{rel}' {why}")).with_hint(COMPONENT_MISSING_HINT)
    };
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => {
            if meta.len() > archive::MAX_ENTRY_BYTES {
                return Err(missing(format!(
                    "at {} is larger than {} bytes, the most an archive entry may hold",
                    path.display(),
                    archive::MAX_ENTRY_BYTES
                )));
            }
        }
        Ok(_) => return Err(missing(format!("at {} is not a file", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(missing(format!("not found at {}", path.display())));
        }
        Err(e) => {
            return Err(missing(format!("cannot be read at {}: {e}", path.display())));
        }
    }
    std::fs::read(&path).map_err(|e| missing(format!("cannot be read at {}: {e}", path.display())))
}
