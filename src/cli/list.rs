//! `mur list`: installed artifacts, the project store's first, then the global store's, and
//! whether what each one runs (a component capsule's component, a model capsule's WebAssembly
//! tools) is compiled for this runtime.

use super::Outcome;
use crate::capsule::{CapsuleEngine, CompiledCache, Source};
use crate::manifest::{self, ToolSource};
use crate::paths::{self, MurHome};
use crate::store::{self, Listed, StoreKind, Stores, archive};

/// Whether an artifact's component and WebAssembly tools are all in the compiled-component
/// cache [ours].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiled {
    Yes,
    No,
    /// Neither a component nor a WebAssembly tool (or its archive does not open): nothing to
    /// compile.
    NotApplicable,
}

impl Compiled {
    fn as_str(self) -> &'static str {
        match self {
            Compiled::Yes => "compiled",
            Compiled::No => "not-compiled",
            Compiled::NotApplicable => "-",
        }
    }

    fn json(self) -> serde_json::Value {
        match self {
            Compiled::Yes => true.into(),
            Compiled::No => false.into(),
            Compiled::NotApplicable => serde_json::Value::Null,
        }
    }
}

/// The sha256 of an installed artifact's archive and the paths in it of what a launch compiles:
/// its capsule.wasm and its WebAssembly tools. `None` when it holds none (or does not open).
/// The sha256 names the compiled entries (hashed here, like a launch does, not taken from the
/// sidecar).
fn components_of(stores: &Stores, l: &Listed) -> Option<(String, Vec<String>)> {
    let root = match l.store {
        StoreKind::Project => stores.project()?,
        StoreKind::Global => stores.global(),
    };
    let zip = paths::artifact_zip(root, &l.name.scope, &l.name.name, &l.version);
    let bytes = store::read_archive_file(&zip).ok()?;
    let index = archive::open_index(&bytes).ok()?;
    let mut entries: Vec<String> = Vec::new();
    if index.component.is_some() {
        entries.push(archive::COMPONENT_ENTRY.to_string());
    }
    if let Ok(parsed) = manifest::parse_packed(&index.manifest) {
        entries.extend(parsed.manifest.tools.iter().filter_map(|t| match &t.source {
            ToolSource::Wasm { component, .. } => Some(component.clone()),
            ToolSource::Mcp { .. } => None,
        }));
    }
    (!entries.is_empty()).then(|| (crate::digest::sha256_hex(&bytes), entries))
}

pub fn run(json: bool) -> Outcome {
    // An unreadable current directory only loses the project store; the global one still lists.
    let project = std::env::current_dir()
        .ok()
        .and_then(|cwd| paths::find_project_root(&cwd, &["murmur.yaml", "roster.yaml"]));
    let stores = Stores::new(project.map(|p| p.artifacts()), MurHome::from_env().artifacts());
    let listed = stores.list();
    // The engine is built only when some artifact holds a component; one that cannot start
    // leaves every component `not-compiled` (a run would compile it, or fail saying why).
    let mut engine = None;
    let cache = CompiledCache::user();
    let rows: Vec<(Listed, Compiled)> = listed
        .into_iter()
        .map(|l| {
            let compiled = match components_of(&stores, &l) {
                None => Compiled::NotApplicable,
                Some((sha, entries)) => match engine.get_or_insert_with(CapsuleEngine::new) {
                    Ok(e)
                        if entries.iter().all(|entry| {
                            cache.is_compiled_at(
                                e,
                                &Source {
                                    archive_sha256: &sha,
                                    entry,
                                },
                            )
                        }) =>
                    {
                        Compiled::Yes
                    }
                    _ => Compiled::No,
                },
            };
            (l, compiled)
        })
        .collect();
    if json {
        println!("{}", render_json(&rows));
        return Ok(0);
    }
    if rows.is_empty() {
        println!("No artifacts installed.");
    }
    print!("{}", render_table(&rows));
    Ok(0)
}

/// The table: name, version, store, the sha256's first 12 digits, compiled; each column as wide
/// as its widest cell, two spaces apart, the last one unpadded.
pub fn render_table(rows: &[(Listed, Compiled)]) -> String {
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|(l, compiled)| {
            [
                l.name.to_string(),
                l.version.clone(),
                l.store.as_str().to_string(),
                l.sha256.get(..12).unwrap_or(&l.sha256).to_string(),
                compiled.as_str().to_string(),
            ]
        })
        .collect();
    let mut widths = [0usize; 5];
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        for (i, c) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(c);
            } else {
                out.push_str(c);
                out.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.push('\n');
    }
    out
}

/// `--json` [ours]: one compact line `{"artifacts":[…]}` in the table's order, keys sorted
/// (docs/reference/cli.md#conventions), with the full sha256 and `compiled` (`true`/`false`,
/// `null` for a capsule without a component).
pub fn render_json(listed: &[(Listed, Compiled)]) -> String {
    let artifacts: Vec<serde_json::Value> = listed
        .iter()
        .map(|(l, compiled)| {
            serde_json::json!({
                "compiled": compiled.json(),
                "name": l.name.to_string(),
                "sha256": l.sha256,
                "store": l.store.as_str(),
                "version": l.version,
            })
        })
        .collect();
    serde_json::json!({ "artifacts": artifacts }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::ArtifactName;

    #[test]
    fn table_columns_line_up() {
        let row = |name: &str, version: &str, store: StoreKind, c: Compiled| {
            (
                Listed {
                    name: ArtifactName::parse(name).unwrap(),
                    version: version.into(),
                    store,
                    sha256: "0123456789abcdef".repeat(4),
                },
                c,
            )
        };
        let rows = [
            row("local/crew-reviewer", "0.1.0", StoreKind::Project, Compiled::Yes),
            row("local/echo", "10.20.30", StoreKind::Global, Compiled::NotApplicable),
        ];
        assert_eq!(
            render_table(&rows),
            "local/crew-reviewer  0.1.0     project  0123456789ab  compiled\n\
             local/echo           10.20.30  global   0123456789ab  -\n"
        );
        assert_eq!(render_table(&[]), "");
    }

    #[test]
    fn json_rows() {
        assert_eq!(render_json(&[]), r#"{"artifacts":[]}"#);
        let l = Listed {
            name: ArtifactName::parse("local/echo").unwrap(),
            version: "0.1.0".into(),
            store: StoreKind::Global,
            sha256: "ab".repeat(32),
        };
        assert_eq!(
            render_json(&[(l.clone(), Compiled::Yes), (l, Compiled::NotApplicable)]),
            format!(
                r#"{{"artifacts":[{{"compiled":true,"name":"local/echo","sha256":"{0}","store":"global","version":"0.1.0"}},{{"compiled":null,"name":"local/echo","sha256":"{0}","store":"global","version":"0.1.0"}}]}}"#,
                "ab".repeat(32)
            )
        );
    }
}
