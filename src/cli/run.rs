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
            restart: a.restart.clone(),
            max_turns: a.max_turns.clone(),
        });
    }
    if a.capsule.is_some() {
        let h = &a.hidden;
        // --deadline and --max-tokens mean for one session what they mean for a formation: it
        // ends at the deadline, and its model turns together spend at most the budget.
        let max_tokens = limit(a.max_tokens.as_deref(), "--max-tokens", crate::guard::parse_tokens)?;
        let max_turns = limit(a.max_turns.as_deref(), "--max-turns", crate::guard::parse_turns)?;
        let deadline = match a.deadline.map(|secs| (secs, deadline_from_now(secs))) {
            Some((secs, None)) => {
                eprintln!(
                    "error: invalid value '{secs}' for '--deadline <SECS>': more than {} seconds (100 years) away\n\nFor more information, try '--help'.",
                    crate::launcher::MAX_DEADLINE_SECS
                );
                return Ok(2);
            }
            Some((_, at)) => at,
            None => None,
        };
        let inherited_deadline = match (h.inherited_deadline, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
            inherited_deadline,
            max_tokens,
            max_turns,
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

/// `--max-tokens` / `--max-turns` as written (a number, or `unlimited`), or E-BUD-003.
fn limit(
    text: Option<&str>,
    flag: &str,
    parse: fn(&str) -> Result<crate::guard::Limit, String>,
) -> Result<crate::guard::Limit, super::Failure> {
    let Some(text) = text else {
        return Ok(crate::guard::Limit::Default);
    };
    parse(text).map_err(|why| super::Failure {
        prefix: "",
        diag: crate::diag::Diagnostic::new(crate::diag::E_BUD_003, format!("{flag} {why}")),
    })
}

/// `--deadline SECS` as the instant (Unix ms) the session ends; `None` for one no date can hold
/// (more than 100 years away, as the formation's).
fn deadline_from_now(secs: u64) -> Option<u64> {
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    (secs <= crate::launcher::MAX_DEADLINE_SECS)
        .then(|| now.checked_add(secs.checked_mul(1000)?))
        .flatten()
}
