//! What a person following the docs is told when a step goes wrong: hints that name a command
//! that works, and that point at our own reference (`mur explain CODE`) rather than at a site.

use std::path::Path;

use crate::support::{Sandbox, repo_root, stderr, stdout};

/// The scaffolded formation `crew`, nothing installed.
fn crew(sb: &Sandbox) -> std::path::PathBuf {
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["new", "--roster", "crew"]);
    assert!(out.status.success(), "mur new: {}", stderr(&out));
    cwd.join("crew")
}

/// The first backquoted command in `hint`.
fn quoted_command(hint: &str) -> String {
    let start = hint.find('`').expect("a quoted command") + 1;
    let len = hint[start..].find('`').expect("its end");
    hint[start..start + len].to_string()
}

#[test]
fn the_hint_of_an_uninstalled_member_is_a_command_that_installs_it() {
    let sb = Sandbox::new();
    let dir = crew(&sb);
    for _ in ["lead", "worker"] {
        let out = sb.run(&dir, &["doctor"]);
        let err = stderr(&out);
        let refusal = err
            .lines()
            .find(|l| l.contains("error[E-ROS-007]"))
            .unwrap_or_else(|| panic!("{err}"));
        let member = refusal.split('\'').nth(1).expect("the member's name");
        let hint = err
            .lines()
            .skip_while(|l| !l.contains("error[E-ROS-007]"))
            .find_map(|l| l.trim().strip_prefix("hint: "))
            .unwrap_or_else(|| panic!("no E-ROS-007 hint: {err}"));
        // Follow it as written, with the member's source directory for DIR.
        let command = quoted_command(hint).replace("DIR", &dir.join(member).display().to_string());
        for step in command.split(" && ") {
            let args: Vec<&str> = step.split_whitespace().collect();
            assert_eq!(args[0], "mur", "{hint}");
            let out = sb.run(&dir, &args[1..]);
            assert!(out.status.success(), "`{step}` from the hint failed: {}", stderr(&out));
        }
    }
    let out = sb.run(&dir, &["doctor"]);
    assert!(
        out.status.success(),
        "after following the hints: {}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_missing_roster_and_an_install_in_a_formation_directory_say_what_to_do() {
    let sb = Sandbox::new();
    let empty = sb.path("empty");
    let out = sb.run(&empty, &["run", "--roster"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error[E-ROS-001]: roster.yaml not found at "), "{err}");
    assert!(
        err.contains("  hint: run the command in the directory that holds roster.yaml, give its path (`--roster PATH`), or scaffold a formation with `mur new --roster NAME`"),
        "{err}"
    );
    assert!(!err.contains("correct the key"), "{err}");

    let dir = crew(&sb);
    let built = sb.run(&dir, &["build", "worker"]);
    assert!(built.status.success(), "{}", stderr(&built));
    let zip = "worker/crew-worker-0.1.0.mur.zip";
    let out = sb.run(&dir, &["install", zip]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let want = format!(
        "  hint: {} is a formation directory (roster.yaml, no murmur.yaml): install its members into the global store with `mur install -g {zip}`, where every formation finds them",
        std::fs::canonicalize(&dir).unwrap_or(dir.clone()).display()
    );
    assert!(err.lines().any(|l| l == want) || err.contains(&want[8..]), "{err}");
    let out = sb.run(&dir, &["install", "-g", zip]);
    assert!(out.status.success(), "the hinted command: {}", stderr(&out));
}

#[test]
fn explain_prints_a_codes_reference_and_refuses_an_unknown_one() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["explain", "w-run-008"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("W-RUN-008 (warning): a caller's network grant reaches no loopback door\n"),
        "{text}"
    );
    assert!(text.contains("**When it fires:**"), "{text}");
    let out = sb.run(&cwd, &["explain", "E-NOPE-1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error[E-EXP-001]: no diagnostic code E-NOPE-1\n"),
        "{}",
        stderr(&out)
    );
}

/// Nothing the runtime prints links to another project's site: hints name our own reference
/// (`mur explain`, docs/reference). The agent-card extension URIs are identifiers on the wire,
/// not links, and stay as the reference runtime spells them.
#[test]
fn no_message_or_hint_links_to_another_projects_documentation() {
    let mut offenders = Vec::new();
    for root in ["src", "crates/mur-core/src"] {
        walk(&repo_root().join(root), &mut |file, text| {
            for (n, line) in text.lines().enumerate() {
                if line.contains("docs.murmur.nexus") && !line.contains("/reference/agent-card/#murmur-") {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        });
    }
    assert!(
        offenders.is_empty(),
        "links to another project's site:\n{}",
        offenders.join("\n")
    );
}

/// The source cites the reference manual users have (docs/reference), never the companion
/// specification's section numbers, which no user can look up.
#[test]
fn no_source_comment_cites_the_companion_specifications_sections() {
    let mut offenders = Vec::new();
    for root in ["src", "crates/mur-core/src"] {
        walk(&repo_root().join(root), &mut |file, text| {
            for (n, line) in text.lines().enumerate() {
                if line.contains("runtime.md") {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        });
    }
    assert!(
        offenders.is_empty(),
        "the companion specification cited instead of docs/reference:\n{}",
        offenders.join("\n")
    );
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &str)) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, f);
        } else if p.extension().is_some_and(|x| x == "rs") {
            f(&p, &std::fs::read_to_string(&p).expect("read"));
        }
    }
}

/// `mur doctor` reports what `mur run --roster` would refuse or warn about once members start:
/// a model member's unset key variable is a warning naming the variable and the command that will
/// fail (W-RUN-010: admission needs no key, and a pipeline that checks rosters has no secrets),
/// and `mur run` still refuses it (E-RUN-002); a caller whose network grant reaches no door is
/// W-RUN-008. Before, an unset key made doctor exit 1.
#[test]
fn doctor_warns_of_an_unset_key_that_mur_run_refuses_and_of_a_grant_that_reaches_no_door() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["new", "--roster", "team", "--inference", "openai"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = cwd.join("team");
    for m in ["lead", "worker"] {
        let b = sb.run(&dir, &["build", m]);
        assert!(b.status.success(), "{}", stderr(&b));
        let zip = format!("{m}/team-{m}-0.1.0.mur.zip");
        let i = sb.run(&dir, &["install", "-g", &zip]);
        assert!(i.status.success(), "{}", stderr(&i));
    }
    let doctor = |key: Option<&str>| {
        let mut cmd = sb.mur(&dir);
        // The suite has no network, so the guide's offline form: api.openai.com cannot be dialled.
        cmd.args(["doctor", "--offline"]);
        match key {
            Some(k) => cmd.env("OPENAI_API_KEY", k),
            None => cmd.env_remove("OPENAI_API_KEY"),
        };
        cmd.output().expect("mur doctor")
    };
    let out = doctor(None);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert!(!err.contains("error["), "{err}");
    for m in ["lead", "worker"] {
        let want = format!(
            "  warning[W-RUN-010]: roster.yaml: member '{m}': its inference.api_key is ${{OPENAI_API_KEY}}, and OPENAI_API_KEY is not set in this environment: admission needs no key, but `mur run` will refuse the member (E-RUN-002)"
        );
        assert!(text.lines().any(|l| l == want), "{text}");
    }
    assert!(
        text.contains("0 error(s) found, 2 warning(s).")
            && text.contains("Fix: export OPENAI_API_KEY=<the key> before `mur run`"),
        "{text}"
    );
    let json = sb
        .mur(&dir)
        .args(["doctor", "--json", "--offline"])
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("mur doctor --json");
    assert_eq!(json.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(stdout(&json).trim()).expect("json");
    assert_eq!(
        (&v["ok"], &v["warnings"][0]["code"]),
        (&serde_json::json!(true), &serde_json::json!("W-RUN-010")),
        "{v}"
    );
    // The launch the warning names still refuses, with the code the warning gave.
    let run = sb
        .mur(&dir)
        .args(["run", "--roster", "--task", "hello"])
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("mur run");
    let err = stderr(&run);
    assert_ne!(run.status.code(), Some(0), "{err}");
    assert!(
        err.contains("error[E-RUN-002]") && err.contains("OPENAI_API_KEY is not set in this environment"),
        "{err}"
    );
    let out = doctor(Some("sk-doctor-0123456789"));
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("All checks passed."), "{}", stdout(&out));

    // The lead may call the worker, but its grant no longer reaches a door.
    let manifest = dir.join("lead/murmur.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    let cut = text.find("capabilities:").expect("a capabilities block");
    std::fs::write(&manifest, &text[..cut]).expect("write");
    let b = sb.run(&dir, &["build", "lead"]);
    assert!(b.status.success(), "{}", stderr(&b));
    let i = sb.run(&dir, &["install", "-g", "lead/team-lead-0.1.0.mur.zip"]);
    assert!(i.status.success(), "{}", stderr(&i));
    let out = doctor(Some("sk-doctor-0123456789"));
    let text = stdout(&out);
    assert!(out.status.success(), "a warning does not fail doctor: {text}");
    assert!(
        text.contains("  warning[W-RUN-008]: roster.yaml lets 'lead' call 'worker', but its capabilities.network.allow reaches no loopback http door"),
        "{text}"
    );
    assert!(
        text.contains("Fix: declare \"localhost\" in capabilities.network.allow of local/team-lead's murmur.yaml"),
        "{text}"
    );
}

/// The scaffolded formation `crew`, built and installed as the README says.
fn crew_installed(sb: &Sandbox) -> std::path::PathBuf {
    let dir = crew(sb);
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

#[test]
fn a_run_that_succeeds_ends_without_lines_that_read_like_failures() {
    let sb = Sandbox::new();
    let dir = crew_installed(&sb);
    let out = sb.run(&dir, &["run", "--roster", "--task", "hello"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(stdout(&out).contains("hello"), "{}", stdout(&out));
    for alarming in ["cancelling", "lifeline closed", "error", "warning"] {
        assert!(
            !err.contains(alarming),
            "{alarming:?} after a run that succeeded:\n{err}"
        );
    }
}

#[test]
fn a_pasted_diagnostic_head_is_explained() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["explain", "error[E-ROS-001]:"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("E-ROS-001 (error): "), "{}", stdout(&out));
}

#[test]
fn misspelt_manifest_keys_are_warned_with_the_key_meant() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["new", "--capsule", "scout", "--lang", "python"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let manifest = cwd.join("scout/murmur.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    let typos = text
        .replace("lifecycle:\n", "lifecycle:\n  input_timeout: 30\n")
        .replace("build:\n", "inferance:\n  provider: openai\nbuild:\n");
    std::fs::write(&manifest, typos).expect("write");
    let out = sb.run(&cwd.join("scout"), &["doctor"]);
    let err = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        err.contains("murmur.yaml: inferance: unknown key; it is ignored (did you mean `inference`?)"),
        "{err}"
    );
    assert!(
        err.contains(
            "lifecycle.input_timeout: unknown key; it is ignored (did you mean `lifecycle.input_timeout_secs`?)"
        ),
        "{err}"
    );
}

#[test]
fn a_misspelt_capsule_in_the_roster_is_answered_with_what_is_installed() {
    let sb = Sandbox::new();
    let dir = crew_installed(&sb);
    let roster = dir.join("roster.yaml");
    let text = std::fs::read_to_string(&roster).expect("roster");
    std::fs::write(&roster, text.replace("local/crew-worker", "local/crew-wokrer")).expect("write");
    let out = sb.run(&dir, &["doctor"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let hint = err
        .lines()
        .skip_while(|l| !l.contains("error[E-ROS-007]"))
        .find_map(|l| l.trim().strip_prefix("hint: "))
        .unwrap_or_else(|| panic!("no E-ROS-007 hint: {err}"));
    assert!(
        hint.starts_with("installed under a similar name or version: local/crew-worker@0.1.0 "),
        "{hint}"
    );
    assert!(!hint.contains("crew-lead"), "only what is close: {hint}");
}

#[test]
fn doctor_says_each_fix_once_when_members_share_it() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["new", "--roster", "chat", "--inference", "openai"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = cwd.join("chat");
    for member in ["lead", "worker"] {
        let src = dir.join(member);
        let out = sb.run(&dir, &["build", src.to_str().expect("utf-8")]);
        assert!(out.status.success(), "build {member}: {}", stderr(&out));
        let zip = stdout(&out).trim().rsplit(": ").next().expect("zip").to_string();
        let out = sb.run(&dir, &["install", "-g", &zip]);
        assert!(out.status.success(), "install {member}: {}", stderr(&out));
    }
    let out = sb
        .mur(&dir)
        .arg("doctor")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("doctor");
    let text = stdout(&out);
    let fixes: Vec<&str> = text.lines().filter(|l| l.starts_with("Fix: ")).collect();
    assert!(!fixes.is_empty(), "both members read the unset OPENAI_API_KEY:\n{text}");
    let mut unique = fixes.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(fixes.len(), unique.len(), "a fix said twice:\n{text}");
}
