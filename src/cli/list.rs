//! `mur list`: installed artifacts, the project store's first, then the global store's.

use super::Outcome;
use crate::paths::{self, MurHome};
use crate::store::{Listed, Stores};

pub fn run(json: bool) -> Outcome {
    // An unreadable current directory only loses the project store; the global one still lists.
    let project = std::env::current_dir()
        .ok()
        .and_then(|cwd| paths::find_project_root(&cwd, &["murmur.yaml", "roster.yaml"]));
    let stores = Stores::new(project.map(|p| p.artifacts()), MurHome::from_env().artifacts());
    let listed = stores.list();
    if json {
        println!("{}", render_json(&listed));
        return Ok(0);
    }
    if listed.is_empty() {
        println!("No artifacts installed.");
    }
    for l in listed {
        let short = l.sha256.get(..12).unwrap_or(&l.sha256);
        println!("{}  {}  {}  {short}", l.name, l.version, l.store.as_str());
    }
    Ok(0)
}

/// `--json` [ours]: one compact line `{"artifacts":[…]}` in the table's order, keys sorted (§1.2),
/// with the full sha256.
pub fn render_json(listed: &[Listed]) -> String {
    let artifacts: Vec<serde_json::Value> = listed
        .iter()
        .map(|l| {
            serde_json::json!({
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
    use crate::store::StoreKind;

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
            render_json(&[l]),
            format!(
                r#"{{"artifacts":[{{"name":"local/echo","sha256":"{}","store":"global","version":"0.1.0"}}]}}"#,
                "ab".repeat(32)
            )
        );
    }
}
