//! `mur completion <shell>` and `mur man`: shell completions and the mur(1) man page, generated
//! from the clap definitions in `cli/mod.rs` so they never drift from the real flags.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, Outcome};
use crate::diag::{self, Diagnostic};

/// Writes the completion script for `shell` on stdout.
pub fn completion(shell: Shell) -> Outcome {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "mur", &mut buf);
    emit(&buf)
}

/// Writes the mur(1) man page (roff) on stdout, or with `dir` every page (mur.1, mur-run.1, …,
/// one per visible subcommand, as the top page's SEE ALSO-style list names them) into `dir`.
pub fn man(dir: Option<&Path>) -> Outcome {
    match dir {
        None => emit(&man_page()?),
        Some(d) => {
            let pages = write_pages(d)?;
            for p in pages {
                println!("{}", p.display());
            }
            Ok(0)
        }
    }
}

/// The roff text of mur(1).
pub fn man_page() -> Result<Vec<u8>, Diagnostic> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .map_err(|e| io_fail("stdout", &e))?;
    Ok(buf)
}

/// Writes every page into `dir` (created) and returns their paths, sorted.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    std::fs::create_dir_all(dir).map_err(|e| io_fail(&dir.display().to_string(), &e))?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(|e| io_fail(&dir.display().to_string(), &e))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io_fail(&dir.display().to_string(), &e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .collect();
    pages.sort();
    Ok(pages)
}

fn io_fail(target: &str, e: &std::io::Error) -> Diagnostic {
    Diagnostic::new(diag::E_IO_001, format!("cannot write to {target}: {e}"))
        .with_hint("check that the directory exists and is writable")
}

/// Writes `bytes` on stdout; a closed pipe (e.g. `mur man | head`) is not an error.
fn emit(bytes: &[u8]) -> Outcome {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(io_fail("stdout", &e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_names_every_visible_subcommand() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish, Shell::Elvish, Shell::PowerShell] {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mur", &mut buf);
            let text = String::from_utf8(buf).unwrap();
            for sub in [
                "new",
                "build",
                "install",
                "list",
                "doctor",
                "run",
                "stop",
                "ps",
                "trace",
                "completion",
                "man",
            ] {
                assert!(text.contains(sub), "{shell}: no {sub}");
            }
            // The scripts use the clap definitions themselves: a flag added there is completed.
            assert!(text.contains("deadline"), "{shell}: no --deadline");
        }
    }

    #[test]
    fn man_page_lists_subcommands() {
        let text = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(text.contains(".TH mur 1"), "no title header");
        for sub in ["new", "run", "doctor", "trace", "completion", "man"] {
            assert!(text.contains(&format!("mur\\-{sub}(1)")), "no {sub}");
        }
    }

    #[test]
    fn one_page_per_visible_subcommand_with_its_flags() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_pages(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "mur.1",
            "mur-run.1",
            "mur-doctor.1",
            "mur-trace-show.1",
            "mur-completion.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        let run = std::fs::read_to_string(dir.path().join("mur-run.1")).unwrap();
        assert!(run.contains("\\-\\-deadline"), "mur-run.1 has no --deadline");
        assert!(!run.contains("capsule\\-sha256"), "hidden flag in mur-run.1");
    }
}
