//! What a command, the launcher or a member session hands back: an exit code, or a refusal to
//! render behind its prefix. It sits below the CLI so the runtime never imports the CLI.

use crate::diag::Diagnostic;

/// An exit code, or a refusal to render with its prefix.
pub type Outcome = Result<u8, Failure>;

/// A refusal and the prefix it prints behind (e.g. `[mur run] `).
#[derive(Debug)]
pub struct Failure {
    pub prefix: &'static str,
    pub diag: Diagnostic,
}

impl From<Diagnostic> for Failure {
    fn from(diag: Diagnostic) -> Self {
        Failure { prefix: "", diag }
    }
}
