//! `mur run`: one capsule (`--capsule`, the member runtime) or a formation (`--roster`, the
//! launcher).
use super::{Outcome, RunArgs};

pub fn run(a: &RunArgs) -> Outcome {
    if let Some(roster) = &a.roster {
        return crate::launcher::run_roster(&crate::launcher::LaunchOptions {
            roster: roster.clone(),
            task: a.task.clone(),
            json: a.json,
            deadline: a.deadline,
            max_tokens: a.max_tokens.clone(),
        });
    }
    if a.capsule.is_some() {
        let h = &a.hidden;
        return crate::session::run(&crate::session::SessionOptions {
            capsule: a.capsule.clone(),
            capsule_version: a.capsule_version.clone(),
            task: a.task.clone(),
            json: a.json,
            bind: a.bind.clone(),
            workdir: a.workdir.clone(),
            resume: a.resume.clone(),
            capsule_sha256: h.capsule_sha256.clone(),
            store_root: h.store_root.clone(),
            readiness_tokens: h.readiness_tokens,
            inherited_deadline: h.inherited_deadline,
            lifecycle_task_acceptance: h.lifecycle_task_acceptance.clone(),
            lifecycle_after_task: h.lifecycle_after_task.clone(),
        });
    }
    // Project mode (`mur run` alone) is out of scope (docs/reference/cli.md#conventions): a usage
    // error, like clap's.
    eprintln!(
        "error: `mur run` needs --capsule <scope>/<name> --capsule-version <version>, or --roster [PATH]\n\nFor more information, try '--help'."
    );
    Ok(2)
}
