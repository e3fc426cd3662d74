//! Admission through the real binary: manifest-only capsules are built and installed with
//! `mur build` and `mur install -g`, then `mur doctor` reports on rosters that use them
//! (docs/reference/cli.md#mur-doctor layout, byte for byte).

use std::path::{Path, PathBuf};

use crate::support::{Sandbox, stderr, stdout};

const MANIFEST_ONLY_INTRO: &str =
    "checking its roster.yaml. Run mur doctor in a member's source directory to check that member's artifacts.";

/// Writes a manifest-only capsule's sources, builds it and installs it globally; returns the zip.
fn install(sb: &Sandbox, name: &str, version: &str, extra: &str) -> PathBuf {
    let src = format!("src/{name}-{version}");
    sb.write(
        &format!("{src}/murmur.yaml"),
        &format!("name: {name}\nversion: '{version}'\n{extra}"),
    );
    let dir = sb.path(&src);
    let o = sb.run(sb.dir.path(), &["build", dir.to_str().unwrap()]);
    assert!(o.status.success(), "build {name}: {}{}", stdout(&o), stderr(&o));
    let zip = dir.join(format!("{name}-{version}.mur.zip"));
    let o = sb.run(sb.dir.path(), &["install", "-g", zip.to_str().unwrap()]);
    assert!(o.status.success(), "install {name}: {}{}", stdout(&o), stderr(&o));
    zip
}

const SERVES: &str = "exports: {peer_tasks: {accept: true}}\n";
const AUTH: &str = "network: {authentication: {scheme: bearer}}\n";

/// The page's three members, installed: planner (entry, authenticates), coder (serves peers,
/// queue depth 1), reviewer (serves peers).
fn page_members(sb: &Sandbox) {
    install(sb, "planner", "0.3.0", AUTH);
    install(
        sb,
        "coder",
        "1.2.0",
        &format!("{SERVES}{AUTH}lifecycle: {{task_acceptance: queue, queue_depth: 1}}\n"),
    );
    install(sb, "reviewer", "0.9.0", &format!("{SERVES}{AUTH}"));
}

const PAGE_ROSTER: &str = "\
roster_version: 1
members:
  - name: planner
    capsule: local/planner
    version: 0.3.0
    entry: true
  - name: coder
    capsule: local/coder
    version: 1.2.0
  - name: reviewer
    capsule: local/reviewer
    version: 0.9.0
reachability:
  - from: planner
    to: [coder, reviewer]
  - from: reviewer
    to: [coder]
";

/// Writes `formation/roster.yaml` and returns the (canonical) formation directory.
fn formation(sb: &Sandbox, roster: &str) -> PathBuf {
    sb.write("formation/roster.yaml", roster);
    std::fs::canonicalize(sb.path("formation")).unwrap()
}

fn intro(dir: &Path) -> String {
    format!(
        "No murmur.yaml in {}: {MANIFEST_ONLY_INTRO}\n\nRoster\n  file: {}/roster.yaml\n",
        dir.display(),
        dir.display()
    )
}

/// Runs `mur doctor` in `dir`; returns (exit code, stdout, stderr).
fn doctor(sb: &Sandbox, dir: &Path) -> (i32, String, String) {
    let o = sb.run(dir, &["doctor"]);
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

/// The stdout of a refused roster: the block with one ✗ line, the tally and the fix.
fn refused(dir: &Path, message: &str, hint: &str) -> String {
    format!(
        "{}  \u{2717}  {message}\n\n0 check(s) passed, 1 error(s) found.\n\nFix: {hint}\n",
        intro(dir)
    )
}

#[test]
fn doctor_admits_the_page_roster() {
    let sb = Sandbox::new();
    page_members(&sb);
    let dir = formation(&sb, PAGE_ROSTER);
    let (code, out, err) = doctor(&sb, &dir);
    assert_eq!(err, "");
    assert_eq!(
        out,
        format!(
            "{}  planner    local/planner@0.3.0    entry   refuses peers   authenticated door
  coder      local/coder@1.2.0              serves peers    authenticated door
  reviewer   local/reviewer@0.9.0           serves peers    authenticated door
  reachability: planner \u{2192} coder, planner \u{2192} reviewer, reviewer \u{2192} coder

All checks passed.
",
            intro(&dir)
        )
    );
    assert_eq!(code, 0);
}

#[test]
fn doctor_warns_when_callers_outnumber_what_a_member_holds() {
    let sb = Sandbox::new();
    install(&sb, "lead", "1.0.0", &format!("{SERVES}{AUTH}"));
    install(&sb, "helper", "1.0.0", &format!("{SERVES}{AUTH}"));
    install(
        &sb,
        "worker",
        "1.0.0",
        &format!("{SERVES}{AUTH}lifecycle: {{task_acceptance: single}}\n"),
    );
    let dir = formation(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/lead, version: 1.0.0, entry: true}\n  - {name: helper, capsule: local/helper, version: 1.0.0}\n  - {name: worker, capsule: local/worker, version: 1.0.0}\nreachability: all\n",
    );
    let (code, out, err) = doctor(&sb, &dir);
    assert_eq!(err, "");
    assert_eq!(
        out,
        format!(
            "{}  lead     local/lead@1.0.0     entry   serves peers    authenticated door
  helper   local/helper@1.0.0           serves peers    authenticated door
  worker   local/worker@1.0.0           serves peers    authenticated door
  reachability (all): lead \u{2192} helper, lead \u{2192} worker, helper \u{2192} worker, worker \u{2192} helper
  warning[W-ROS-001]: roster.yaml lets 2 member(s) call 'helper' (lead, worker), but it holds 1 task at once \u{2014} lifecycle.task_acceptance: single \u{2014} so a call that finds it full is offered again until its deadline; lifecycle.task_acceptance: queue with lifecycle.queue_depth: 1 would hold them all (`mur explain W-ROS-001`)
  warning[W-ROS-001]: roster.yaml lets 2 member(s) call 'worker' (lead, helper), but it holds 1 task at once \u{2014} lifecycle.task_acceptance: single \u{2014} so a call that finds it full is offered again until its deadline; lifecycle.task_acceptance: queue with lifecycle.queue_depth: 1 would hold them all (`mur explain W-ROS-001`)

0 check(s) passed, 0 error(s) found, 2 warning(s).

Fix: helper (local/helper@1.0.0): set lifecycle.task_acceptance: queue and lifecycle.queue_depth: 1 in its murmur.yaml so all 2 members that may call it are held at once, or narrow its callers in roster.yaml (warning[W-ROS-001])
Fix: worker (local/worker@1.0.0): set lifecycle.task_acceptance: queue and lifecycle.queue_depth: 1 in its murmur.yaml so all 2 members that may call it are held at once, or narrow its callers in roster.yaml (warning[W-ROS-001])
",
            intro(&dir)
        )
    );
    assert_eq!(code, 0, "warnings never fail");
}

#[test]
fn doctor_with_no_edges_needs_no_consent_or_authentication() {
    let sb = Sandbox::new();
    install(&sb, "solo", "1.10", "");
    let dir = formation(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: solo, capsule: local/solo, version: 1.10, entry: true}\n",
    );
    let (code, out, err) = doctor(&sb, &dir);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        format!(
            "{}  solo   local/solo@1.10   entry   refuses peers   public door\n  reachability: none\n\nAll checks passed.\n",
            intro(&dir)
        )
    );
}

/// Every refusal, as stdout, stderr and exit code.
#[test]
fn doctor_refusals() {
    let sb = Sandbox::new();
    page_members(&sb);
    install(&sb, "loner", "1.0.0", AUTH); // serves no peers
    install(&sb, "open", "1.0.0", SERVES); // public door
    // The hint names the archive `mur build` makes: `mur install` takes a file, not a name.
    let e007_hint = |cv: &str| {
        let (full, version) = cv.split_once('@').expect("capsule@version");
        let name = full.rsplit('/').next().expect("name");
        format!(
            "build the capsule's sources and install the archive \u{2014} `mur build DIR && mur install -g DIR/{name}-{version}.mur.zip` (or `mur install` inside the project) \u{2014} or change the member's version in roster.yaml to one `mur list` shows"
        )
    };
    let roster = |extra_members: &str, reach: &str| {
        format!(
            "roster_version: 1\nmembers:\n  - {{name: planner, capsule: local/planner, version: 0.3.0, entry: true}}\n  - {{name: coder, capsule: local/coder, version: 1.2.0}}\n{extra_members}{reach}"
        )
    };
    struct Case {
        roster: String,
        code: &'static str,
        message: String,
        hint: String,
    }
    let cases = vec![
        Case {
            roster: roster("  - {name: ghost, capsule: local/ghost, version: 1.0.0}\n", ""),
            code: "E-ROS-007",
            message: "roster.yaml: member 'ghost' (local/ghost@1.0.0) cannot be admitted: not installed in the project or global store".into(),
            hint: e007_hint("local/ghost@1.0.0"),
        },
        Case {
            // Installed, but not at the version the roster names.
            roster: roster("", "").replace("version: 1.2.0", "version: 1.2.1"),
            code: "E-ROS-007",
            message: "roster.yaml: member 'coder' (local/coder@1.2.1) cannot be admitted: not installed in the project or global store".into(),
            // What is installed under that name is named, not only how to build the one asked for.
            hint: "installed under a similar name or version: local/coder@1.2.0 \u{2014} correct the member's capsule and version in roster.yaml, or build and install this one: `mur build DIR && mur install -g DIR/coder-1.2.1.mur.zip`".into(),
        },
        Case {
            roster: roster("  - {name: loner, capsule: local/loner, version: 1.0.0}\n", "reachability: [{from: planner, to: [coder, loner]}]\n"),
            code: "E-ROS-005",
            message: "roster.yaml: member 'loner' is listed in a reachability rule's `to`, but its manifest does not declare `exports.peer_tasks.accept: true`".into(),
            hint: "declare `exports.peer_tasks.accept: true` in the murmur.yaml of local/loner, then rebuild and reinstall it; or remove 'loner' from every rule's `to`".into(),
        },
        Case {
            roster: roster("  - {name: open, capsule: local/open, version: 1.0.0}\n", "reachability: [{from: planner, to: [coder]}]\n"),
            code: "E-ROS-006",
            message: "roster.yaml: member 'open' declares no `network.authentication`, and this roster declares peer traffic, so every member's door must require authentication".into(),
            hint: "declare `network.authentication: {scheme: bearer}` in the murmur.yaml of local/open, then rebuild and reinstall it; a capsule that authenticates cannot also declare capabilities.spawn.allow (E-MAN-003)".into(),
        },
        Case {
            // Structural faults are refused before any store is read: nothing named is installed.
            roster: "roster_version: 1\nmembers:\n  - {name: x, capsule: local/nope, version: '1', entry: true}\n  - {name: x, capsule: local/nope, version: '1'}\n".into(),
            code: "E-ROS-003",
            message: "roster.yaml: member name 'x' is declared more than once".into(),
            hint: "rename one of the members so every name in roster.yaml is unique".into(),
        },
        Case {
            roster: roster("", "reachability: [{from: coder, to: [planner]}]\n"),
            code: "E-ROS-008",
            message: "roster.yaml: the reachability rule from 'coder' lists the entry member 'planner' in `to`, but the entry member is never called by a peer: it takes the formation's tasks from the launch or from a client at its door".into(),
            hint: "to have 'planner' hand work to 'coder', write `- from: planner` with `to: [coder]` instead".into(),
        },
        Case {
            roster: roster("", "").replace("local/coder", "crew-coder"),
            code: "E-ROS-001",
            message: "roster.yaml: members[1].capsule (member 'coder'): 'crew-coder' is not a full artifact name: an artifact is named <scope>/<name>".into(),
            hint: "name it with its scope: 'murmur/crew-coder' for a Murmur default artifact, '<owner>/crew-coder' for one published from github.com/<owner>, or 'local/crew-coder' for one installed from a .mur.zip file".into(),
        },
    ];
    for c in cases {
        let dir = formation(&sb, &c.roster);
        let (code, out, err) = doctor(&sb, &dir);
        assert_eq!(out, refused(&dir, &c.message, &c.hint), "{}", c.roster);
        assert_eq!(
            err,
            format!("[mur doctor] error[{}]: {}\n  hint: {}\n", c.code, c.message, c.hint),
            "{}",
            c.roster
        );
        assert_eq!(code, 1, "{}", c.roster);
    }
}

#[test]
fn doctor_reports_a_hash_mismatch_and_never_falls_through_to_the_global_store() {
    let sb = Sandbox::new();
    let zip = install(&sb, "coder", "1.2.0", "");
    let dir = formation(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: coder, capsule: local/coder, version: 1.2.0, entry: true}\n",
    );
    // A project-store copy whose sidecar does not match its bytes; the global copy is good.
    let store = dir.join(".murmur/artifacts/local/coder/1.2.0");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::copy(&zip, store.join("coder-1.2.0.mur.zip")).unwrap();
    let global_sidecar = sb.home().join(".murmur/artifacts/local/coder/1.2.0/coder-1.2.0.sha256");
    let actual = std::fs::read_to_string(&global_sidecar).unwrap().trim().to_string();
    let recorded = "0".repeat(64);
    std::fs::write(store.join("coder-1.2.0.sha256"), format!("{recorded}\n")).unwrap();

    let (code, out, err) = doctor(&sb, &dir);
    let message = format!(
        "roster.yaml: member 'coder' (local/coder@1.2.0) cannot be admitted: the stored bytes hash to {actual}, but the store records {recorded}"
    );
    let hint = "build the capsule's sources and install the archive \u{2014} `mur build DIR && mur install -g DIR/coder-1.2.0.mur.zip` (or `mur install` inside the project) \u{2014} or change the member's version in roster.yaml to one `mur list` shows";
    assert_eq!(out, refused(&dir, &message, hint));
    assert_eq!(
        err,
        format!("[mur doctor] error[E-ROS-007]: {message}\n  hint: {hint}\n")
    );
    assert_eq!(code, 1);

    // With the damaged copy gone, the global one is admitted.
    std::fs::remove_dir_all(dir.join(".murmur")).unwrap();
    assert_eq!(doctor(&sb, &dir).0, 0);
}

#[test]
fn doctor_checks_the_lock_beside_the_roster() {
    let sb = Sandbox::new();
    install(&sb, "coder", "1.2.0", "");
    let dir = formation(
        &sb,
        "roster_version: 1\nmembers:\n  - {name: coder, capsule: local/coder, version: 1.2.0, entry: true}\n",
    );
    let sha =
        std::fs::read_to_string(sb.home().join(".murmur/artifacts/local/coder/1.2.0/coder-1.2.0.sha256")).unwrap();
    let sha = sha.trim();
    let lock = |version: &str, sha: &str| {
        std::fs::write(
            dir.join("murmur.lock"),
            format!("lock_version: 3\nartifacts:\n  - name: local/coder\n    resolved_version: {version}\n    sha256: {{any: {sha}}}\n    origin: operator\n"),
        )
        .unwrap();
    };

    lock("1.2.0", sha);
    assert_eq!(doctor(&sb, &dir).0, 0, "a lock that agrees admits");

    lock("1.1.0", sha);
    let (code, out, err) = doctor(&sb, &dir);
    let message = "roster.yaml: member 'coder': murmur.lock conflict for 'local/coder': pinned local/coder@1.1.0, but local/coder@1.2.0 was resolved";
    let hint =
        "pin the locked version (1.1.0) in roster.yaml, or drop the stale entry for 'local/coder' from murmur.lock";
    assert_eq!(out, refused(&dir, message, hint));
    assert_eq!(
        err,
        format!("[mur doctor] error[E-REG-005]: {message}\n  hint: {hint}\n")
    );
    assert_eq!(code, 1);

    let other = "f".repeat(64);
    lock("1.2.0", &other);
    let (code, out, _) = doctor(&sb, &dir);
    assert!(
        out.contains(&format!("  \u{2717}  roster.yaml: member 'coder': murmur.lock conflict for 'local/coder': 'local/coder' is pinned at sha256 {other}, but {sha} was resolved\n")),
        "{out}"
    );
    assert_eq!(code, 1);

    std::fs::write(dir.join("murmur.lock"), "lock_version: 2\n").unwrap();
    let (code, out, err) = doctor(&sb, &dir);
    assert!(out.contains("  \u{2717}  invalid murmur.lock: "), "{out}");
    assert!(
        err.starts_with("[mur doctor] error[E-RUN-003]: invalid murmur.lock: "),
        "{err}"
    );
    assert_eq!(code, 1);
    // Admission never writes the lock.
    assert_eq!(
        std::fs::read_to_string(dir.join("murmur.lock")).unwrap(),
        "lock_version: 2\n"
    );
}

#[test]
fn doctor_on_an_unreadable_roster_path() {
    let sb = Sandbox::new();
    let dir = std::fs::canonicalize(sb.path("formation")).unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere.yaml"), dir.join("roster.yaml")).unwrap();
    let (code, out, err) = doctor(&sb, &dir);
    let message = format!(
        "failed to read roster.yaml at {}/roster.yaml: it is a symbolic link to {}/elsewhere.yaml, which does not exist",
        dir.display(),
        dir.display()
    );
    let hint = "correct the key named above in roster.yaml \u{2014} docs/reference/roster.md#keys lists every key, its type and whether it is required (`mur explain E-ROS-001`)";
    assert_eq!(out, refused(&dir, &message, hint));
    assert_eq!(
        err,
        format!("[mur doctor] error[E-ROS-001]: {message}\n  hint: {hint}\n")
    );
    assert_eq!(code, 1);
}

#[test]
fn doctor_outside_any_project_is_e_io_001() {
    let sb = Sandbox::new();
    let dir = sb.path("nowhere");
    let (code, out, err) = doctor(&sb, &dir);
    assert_eq!(out, "");
    assert_eq!(
        err,
        "[mur doctor] error[E-IO-001]: no project root found (no murmur.yaml in current or parent directories)\n  hint: run it inside a project directory or a formation directory holding roster.yaml\n"
    );
    assert_eq!(code, 1);
}

#[test]
fn doctor_in_a_member_source_directory() {
    let sb = Sandbox::new();
    sb.write("member/murmur.yaml", "name: coder\nversion: 1.10\nflavour: spicy\n");
    let dir = std::fs::canonicalize(sb.path("member")).unwrap();
    let (code, out, err) = doctor(&sb, &dir);
    assert_eq!(err, "");
    assert_eq!(
        out,
        format!(
            "Member sources in {}\n  \u{2713}  murmur.yaml parses: coder@1.10\n  warning[W-SEC-019]: murmur.yaml: flavour: unknown key; it is ignored\n  \u{2713}  kind: manifest-only capsule (it builds, installs and is admitted; there is nothing to run)\n\n2 check(s) passed, 0 error(s) found, 1 warning(s).\n\nFix: murmur.yaml: flavour: unknown key; it is ignored \u{2014} remove the key or correct its spelling in murmur.yaml (warning[W-SEC-019])\n",
            dir.display()
        )
    );
    assert_eq!(code, 0);

    // A subdirectory finds the member above it; a roster beside the manifest adds its block.
    sb.write(
        "member/roster.yaml",
        "roster_version: 1\nmembers:\n  - {name: coder, capsule: local/coder, version: 1.10, entry: true}\n",
    );
    let sub = sb.path("member/sub");
    let (code, out, err) = doctor(&sb, &sub);
    assert!(out.contains(&format!("Roster\n  file: {}/roster.yaml\n  \u{2717}  roster.yaml: member 'coder' (local/coder@1.10) cannot be admitted: not installed in the project or global store\n\n", dir.display())), "{out}");
    assert!(out.ends_with("2 check(s) passed, 1 error(s) found, 1 warning(s).\n\nFix: build the capsule's sources and install the archive \u{2014} `mur build DIR && mur install -g DIR/coder-1.10.mur.zip` (or `mur install` inside the project) \u{2014} or change the member's version in roster.yaml to one `mur list` shows\nFix: murmur.yaml: flavour: unknown key; it is ignored \u{2014} remove the key or correct its spelling in murmur.yaml (warning[W-SEC-019])\n"), "{out}");
    assert!(err.starts_with("[mur doctor] error[E-ROS-007]: "), "{err}");
    assert_eq!(code, 1);

    // A manifest that does not parse is a failed check.
    sb.write("member/murmur.yaml", "name: coder\n");
    let (code, out, err) = doctor(&sb, &dir);
    assert!(out.contains("  \u{2717}  murmur.yaml: version: is required\n"), "{out}");
    assert!(
        err.starts_with("[mur doctor] error[E-MAN-001]: murmur.yaml: version: is required"),
        "{err}"
    );
    assert_eq!(code, 1);
}
