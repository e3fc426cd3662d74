//! `mur explain CODE`: what a diagnostic code means and what to do about it, in the spirit of
//! `rustc --explain`. The text is the code's own section of docs/reference/codes.md, built into
//! the binary, so a hint can point here instead of at a page the machine may not reach, and the
//! reference and this command never disagree (`tests/it/reference.rs` keeps every code's section).

use crate::diag::{self, Diagnostic, Severity};
use crate::outcome::{Failure, Outcome};

/// The manual's page of codes, as this binary was built with it.
const CODES: &str = include_str!("../../docs/reference/codes.md");

pub fn run(code: &str) -> Outcome {
    let id = bare_code(code).to_ascii_uppercase();
    let Some(known) = diag::lookup(&id) else {
        return Err(Failure::from(Diagnostic::new(
            diag::E_EXP_001,
            format!("no diagnostic code {}", diag::shown(code)),
        )));
    };
    let severity = match known.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let mut out = format!("{} ({severity}): {}\n", known.id, known.summary);
    if let Some(hint) = known.default_hint {
        out.push_str(&format!("hint: {hint}\n"));
    }
    if let Some(text) = section(CODES, known.id) {
        out.push('\n');
        out.push_str(text.trim());
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}

/// The code in `text` as a diagnostic prints it (`error[E-ROS-001]:`, `warning[W-SEC-019]`) or
/// bare (`E-ROS-001`), so a pasted line's head works as well as the code alone.
fn bare_code(text: &str) -> &str {
    let t = text.trim().trim_end_matches(':');
    match (t.find('['), t.strip_suffix(']')) {
        (Some(open), Some(inner)) => &inner[open + 1..],
        _ => t,
    }
}

/// The body of `### <id>` in `doc`: up to the next heading of that level or above.
fn section<'d>(doc: &'d str, id: &str) -> Option<&'d str> {
    let head = format!("\n### {id}\n");
    let start = doc.find(&head)? + head.len();
    let rest = &doc[start..];
    let end = ["\n### ", "\n## "]
        .iter()
        .filter_map(|h| rest.find(h))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_section_in_the_built_in_page() {
        for code in diag::ALL {
            let text = section(CODES, code.id).unwrap_or_else(|| panic!("{} has no section", code.id));
            assert!(!text.trim().is_empty(), "{}", code.id);
            assert!(!text.contains("\n### "), "{}: the section runs into the next", code.id);
        }
        assert_eq!(section("x\n### A-1\nbody\n## Next\n", "A-1"), Some("body"));
        assert_eq!(section("x\n### A-1\nbody", "A-1"), Some("body"));
        assert_eq!(section("x\n### A-10\nbody", "A-1"), None);
    }

    #[test]
    fn a_code_is_taken_as_printed_or_bare() {
        for pasted in [
            "E-ROS-001",
            " error[E-ROS-001]: ",
            "error[E-ROS-001]",
            "warning[E-ROS-001]:",
            "e-ros-001",
        ] {
            assert_eq!(bare_code(pasted).to_ascii_uppercase(), "E-ROS-001", "{pasted:?}");
        }
    }
}
