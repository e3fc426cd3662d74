//! Finding runs again (docs/guide.md#reading-traces): every formation is listed with its roster's
//! directory and the task's first words, ids resolve by unique prefix or `last`, and a formation's
//! trace shown from any directory is whole or says what it lacks.

use std::path::PathBuf;

use crate::support::{Sandbox, stderr, stdout};

/// The README's formation: `mur new --roster crew`, both members built and installed.
fn crew(sb: &Sandbox) -> PathBuf {
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["new", "--roster", "crew"]);
    assert!(out.status.success(), "mur new: {}", stderr(&out));
    let dir = cwd.join("crew");
    for member in ["lead", "worker"] {
        let src = dir.join(member);
        let out = sb.run(&dir, &["build", src.to_str().expect("utf-8")]);
        assert!(out.status.success(), "build {member}: {}", stderr(&out));
        let zip = stdout(&out).trim().rsplit(": ").next().expect("zip").to_string();
        let out = sb.run(&dir, &["install", "-g", &zip]);
        assert!(out.status.success(), "install {member}: {}", stderr(&out));
    }
    dir
}

fn launch(sb: &Sandbox, dir: &std::path::Path, task: &str) -> String {
    let out = sb.run(dir, &["run", "--roster", "--task", task]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .expect("formation line")
        .trim()
        .to_string()
}

#[test]
fn past_formations_are_listed_and_found_by_prefix_or_last_from_anywhere() {
    let sb = Sandbox::new();
    let dir = crew(&sb);
    let first = launch(&sb, &dir, "count the crew");
    let second = launch(
        &sb,
        &dir,
        "say hi to the whole crew, every one of them, by name and with a wave",
    );
    let elsewhere = sb.path("elsewhere");

    for args in [&["trace", "list"][..], &["ps", "-a"][..]] {
        let out = sb.run(&elsewhere, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{args:?}: a header and both formations:\n{text}");
        assert!(lines[0].starts_with("FORMATION  "), "{text}");
        // Newest first, each with its roster's directory and its task's first words.
        let crew_dir = std::fs::canonicalize(&dir).expect("canonical").display().to_string();
        assert!(
            lines[1].starts_with(&second[..16]) && lines[1].contains("  ended  "),
            "{text}"
        );
        assert!(
            lines[1].contains(&crew_dir) && lines[1].contains("say hi to the whole crew"),
            "{text}"
        );
        assert!(lines[1].ends_with('…') && lines[1].chars().count() < 160, "{text}");
        assert!(
            lines[2].starts_with(&first[..16]) && lines[2].ends_with("count the crew"),
            "{text}"
        );
    }

    let out = sb.run(&elsewhere, &["trace", "show", "last"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(shown.contains(&format!("formation:  {second}")), "{shown}");
    assert!(
        shown.contains("  lead  ") && shown.contains("  worker  "),
        "both members: {shown}"
    );

    let out = sb.run(&elsewhere, &["trace", "show", &first[..16]]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("formation:  {first}")));

    // Both ids start with `frm_` and the same mint time's first digits.
    let out = sb.run(&elsewhere, &["trace", "show", "frm_"]);
    assert_eq!(out.status.code(), Some(1));
    let out = sb.run(&elsewhere, &["trace", "show", &first[..6]]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("is the start of 2 formations' ids"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_formation_trace_that_lacks_its_entry_says_so() {
    let sb = Sandbox::new();
    let dir = crew(&sb);
    let frm = launch(&sb, &dir, "say hi");
    // The entry's records live under its work folder's group: move them away.
    let project = std::fs::canonicalize(&dir).expect("canonical");
    let group = sb
        .home()
        .join(".murmur/records")
        .join(project.strip_prefix("/").expect("absolute"));
    std::fs::rename(&group, sb.path("moved")).expect("move the entry's records");
    let out = sb.run(&sb.path("elsewhere"), &["trace", "show", &frm]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{}\n{err}", stdout(&out));
    assert!(
        stdout(&out).contains("  worker  "),
        "what it has is shown: {}",
        stdout(&out)
    );
    assert!(
        err.contains(&format!(
            "error[E-TRC-002]: the trace of formation {frm} is not whole: no trace of member 'lead' (the entry) was found"
        )),
        "{err}"
    );
}
