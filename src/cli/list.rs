//! `mur list`: installed artifacts, the project store's first, then the global store's.

use super::Outcome;
use crate::paths::{self, MurHome};
use crate::store::Stores;

pub fn run() -> Outcome {
    // An unreadable current directory only loses the project store; the global one still lists.
    let project = std::env::current_dir()
        .ok()
        .and_then(|cwd| paths::find_project_root(&cwd, &["murmur.yaml", "roster.yaml"]));
    let stores = Stores::new(project.map(|p| p.artifacts()), MurHome::from_env().artifacts());
    let listed = stores.list();
    if listed.is_empty() {
        println!("No artifacts installed.");
    }
    for l in listed {
        let short = l.sha256.get(..12).unwrap_or(&l.sha256);
        println!("{}  {}  {}  {short}", l.name, l.version, l.store.as_str());
    }
    Ok(0)
}
