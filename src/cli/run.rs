//! `mur run`: one capsule (`--capsule`, the member runtime) or a formation (`--roster`, the
//! launcher).
use super::{Outcome, RunArgs};

pub fn run(a: &RunArgs) -> Outcome {
    if a.roster.is_some() {
        return crate::launcher::run_roster(a);
    }
    if a.capsule.is_some() {
        return crate::session::run(a);
    }
    // Project mode (`mur run` alone) is out of scope (runtime.md §1): a usage error, like clap's.
    eprintln!(
        "error: `mur run` needs --capsule <scope>/<name> --capsule-version <version>, or --roster [PATH]\n\nFor more information, try '--help'."
    );
    Ok(2)
}
