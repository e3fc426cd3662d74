//! `mur doctor`: admits a roster and reports the result (docs/reference/cli.md#mur-doctor), or
//! checks a member's sources.
//!
//! Formation mode (the current directory holds `roster.yaml` and no `murmur.yaml`) prints the
//! [compatible] layout of docs/reference/cli.md#mur-doctor. Member mode (a `murmur.yaml` at or
//! above the current directory) prints one `  ✓  <check>` / `  ✗  <message>` line per check [ours],
//! then the Roster block when the project also holds `roster.yaml`. The exit code is 1 iff a check
//! failed; warnings alone never fail.
//!
//! `--json` [ours] prints the same findings as one JSON object; `--graph` / `--dot` [ours] print
//! only the admitted reachability graph, as Mermaid or Graphviz DOT.

use std::path::Path;

use serde_json::{Value, json};

use super::{DoctorArgs, Failure, Outcome};
use crate::diag::{self, Diagnostic};
use crate::manifest::{self, Kind};
use crate::paths::{self, MurHome, Project};
use crate::roster::{self, Admitted, Reachability};

const PREFIX: &str = "[mur doctor] ";

pub fn run(args: &DoctorArgs) -> Outcome {
    let cwd = std::env::current_dir().map_err(|e| {
        fail(Diagnostic::new(
            diag::E_IO_001,
            format!("no project root found (cannot read the current directory: {e})"),
        ))
    })?;
    let here = Project::at(&cwd);
    if args.graph || args.dot {
        return graph(&cwd, &here, args.dot);
    }
    let mut report = Report::default();
    if exists(&here.roster()) && !exists(&here.manifest()) {
        report.line(&format!(
            "No murmur.yaml in {}: checking its roster.yaml. Run mur doctor in a member's source directory to check that member's artifacts.",
            cwd.display()
        ));
        report.line("");
        roster_block(&mut report, &here, &MurHome::from_env(), !args.offline);
    } else {
        let project = paths::find_project_root(&cwd, &["murmur.yaml"]).ok_or_else(|| {
            fail(Diagnostic::new(
                diag::E_IO_001,
                "no project root found (no murmur.yaml in current or parent directories)",
            ))
        })?;
        member_checks(&mut report, &project, !args.offline);
        if exists(&project.roster()) {
            roster_block(&mut report, &project, &MurHome::from_env(), !args.offline);
        }
    }
    report.tally();
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.out);
    }
    Ok(u8::from(!report.errors.is_empty()))
}

/// `--graph` / `--dot`: the roster doctor would check (the formation directory's, else the
/// project's), admitted, drawn. A refused roster is the refusal, exit 1.
fn graph(cwd: &Path, here: &Project, dot: bool) -> Outcome {
    let project = if exists(&here.roster()) {
        here.clone()
    } else {
        paths::find_project_root(cwd, &["roster.yaml"]).ok_or_else(|| {
            fail(
                Diagnostic::new(
                    diag::E_IO_001,
                    "no roster.yaml in current or parent directories: there is no graph to draw",
                )
                .with_hint("run mur doctor --graph inside a formation directory holding roster.yaml"),
            )
        })?
    };
    let a = roster::front::admit_project(project.root(), &MurHome::from_env()).map_err(fail)?;
    print!("{}", if dot { dot_graph(&a) } else { mermaid(&a) });
    Ok(0)
}

/// A node's label lines: name, capsule@version, and `entry` for the entry member.
fn label_lines(m: &roster::AdmittedMember) -> Vec<String> {
    let mut l = vec![m.name.clone(), format!("{}@{}", m.capsule, m.version)];
    if m.entry {
        l.push("entry".into());
    }
    l
}

/// A Mermaid flowchart [ours]. Nodes are `m<index>` because a member may be named after a
/// Mermaid keyword (`end`); names and capsule names hold no quote, so labels need no escaping.
pub fn mermaid(a: &Admitted) -> String {
    let mut out = String::from("flowchart LR\n");
    for (i, m) in a.members.iter().enumerate() {
        out.push_str(&format!("    m{i}[\"{}\"]\n", label_lines(m).join("<br/>")));
    }
    for &(f, t) in &a.edges {
        out.push_str(&format!("    m{f} --> m{t}\n"));
    }
    out
}

/// A Graphviz digraph [ours]; the entry member is drawn bold.
pub fn dot_graph(a: &Admitted) -> String {
    let mut out = String::from("digraph formation {\n    rankdir=LR;\n    node [shape=box];\n");
    for m in &a.members {
        let style = if m.entry { ", style=bold" } else { "" };
        out.push_str(&format!(
            "    \"{}\" [label=\"{}\"{style}];\n",
            m.name,
            label_lines(m).join("\\n")
        ));
    }
    for &(f, t) in &a.edges {
        out.push_str(&format!(
            "    \"{}\" -> \"{}\";\n",
            a.members[f].name, a.members[t].name
        ));
    }
    out.push_str("}\n");
    out
}

fn fail(diag: Diagnostic) -> Failure {
    Failure { prefix: PREFIX, diag }
}

/// Present in any form, a dangling symlink included, so that it is reported rather than skipped.
fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// What doctor has found so far: the stdout text, the failures and the warnings' fix texts.
#[derive(Default)]
struct Report {
    out: String,
    passed: usize,
    errors: Vec<Diagnostic>,
    warning_fixes: Vec<String>,
    /// The same findings for `--json`: each check, warnings, and the Roster block.
    checks: Vec<Value>,
    warnings: Vec<Value>,
    member_dir: Option<String>,
    roster: Option<Value>,
}

impl Report {
    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn pass(&mut self, check: &str) {
        self.passed += 1;
        self.checks.push(json!({"ok": true, "text": check}));
        self.line(&format!("  \u{2713}  {check}"));
    }

    /// A warning: its line now, its `fix` in the tally and in `--json`'s `warnings`.
    fn warn(&mut self, w: &Diagnostic, fix: String) {
        self.line(&format!("  {}", w.render("")));
        self.warnings
            .push(json!({"code": w.code.id, "message": w.message, "fix": fix}));
        self.warning_fixes.push(fix);
    }

    /// A refusal: `  ✗  <message>` on stdout, the full diagnostic on stderr.
    fn refuse(&mut self, d: Diagnostic) {
        self.line(&format!("  \u{2717}  {}", d.message));
        self.checks.push(json!({"ok": false, "text": d.message}));
        d.eprint(PREFIX);
        self.errors.push(d);
    }

    /// `--json` [ours]: `ok` (no check failed), `errors` and `warnings` (`code`, `message`, `fix`),
    /// `member` (`dir`, `checks`: `ok`, `text`; `null` in formation mode) and `roster` (`null` when
    /// no roster was checked). Keys sorted (docs/reference/cli.md#conventions).
    fn to_json(&self) -> String {
        let errors: Vec<Value> = self
            .errors
            .iter()
            .map(|d| json!({"code": d.code.id, "message": d.message, "fix": d.hint()}))
            .collect();
        let member = self
            .member_dir
            .as_ref()
            .map(|dir| json!({"dir": dir, "checks": self.checks}));
        json!({
            "errors": errors,
            "member": member,
            "ok": self.errors.is_empty(),
            "roster": self.roster,
            "warnings": self.warnings,
        })
        .to_string()
    }

    fn tally(&mut self) {
        if self.errors.is_empty() && self.warning_fixes.is_empty() {
            self.line("All checks passed.");
            return;
        }
        let mut t = format!("{} check(s) passed, {} error(s) found", self.passed, self.errors.len());
        if !self.warning_fixes.is_empty() {
            t.push_str(&format!(", {} warning(s)", self.warning_fixes.len()));
        }
        t.push('.');
        self.line(&t);
        self.line("");
        let fixes: Vec<String> = self
            .errors
            .iter()
            .map(|d| d.hint().unwrap_or(&d.message).to_string())
            .chain(self.warning_fixes.iter().cloned())
            .collect();
        // Two members reading one unset variable share one fix: it is said once.
        let mut said = std::collections::HashSet::new();
        for f in fixes.into_iter().filter(|f| said.insert(f.clone())) {
            self.line(&format!("Fix: {f}"));
        }
    }
}

/// Member mode [ours]: the manifest parses (with its W-SEC-019 warnings), its kind is sound and
/// written as meant (E-DOC-002), and, when `dial`, each endpoint it names answers (E-DOC-001).
fn member_checks(report: &mut Report, project: &Project, dial: bool) {
    report.line(&format!("Member sources in {}", project.root().display()));
    report.member_dir = Some(project.root().display().to_string());
    match manifest::load_file(&project.manifest()) {
        Err(d) => report.refuse(d),
        Ok(parsed) => {
            let m = &parsed.manifest;
            let text = std::fs::read_to_string(project.manifest()).ok();
            report.pass(&format!("murmur.yaml parses: {}@{}", m.name, m.version));
            for w in &parsed.warnings {
                let fix = format!(
                    "{} — remove the key or correct its spelling in murmur.yaml ({})",
                    w.message,
                    w.head()
                );
                report.warn(w, fix);
            }
            match &m.kind {
                Kind::Model => {
                    report.pass("kind: model capsule (inference)");
                    // What the session checks at its start (E-RUN-002), the key read as set: an
                    // unset key is the launch's to refuse, and doctor sends no request.
                    if let Some(inference) = &m.inference {
                        let key = inference.api_key_var.clone();
                        let env = |v: &str| match &key {
                            Some(k) if k == v => Some("set".to_string()),
                            _ => std::env::var(v).ok(),
                        };
                        if let Err(mut d) =
                            crate::model::ModelConfig::resolve(&m.name.to_string(), &m.version, inference, env)
                        {
                            d.message = format!("murmur.yaml: {}", d.message);
                            report.refuse(d);
                        }
                    }
                }
                Kind::Remote => report.pass(&remote_kind(m)),
                Kind::ManifestOnly => report
                    .pass("kind: manifest-only capsule (it builds, installs and is admitted; there is nothing to run)"),
                Kind::Component { path } => {
                    let file = project.root().join(path);
                    let sources = m.build.map(crate::scaffold::toolchain::entry);
                    if file.is_file() {
                        report.pass(&format!("kind: component capsule ({path})"));
                    } else if let Some(entry) = sources.filter(|e| project.root().join(e).is_file()) {
                        // `mur build` makes the component from these sources.
                        report.pass(&format!(
                            "kind: component capsule ({path}, built from {entry} by mur build)"
                        ));
                    } else {
                        report.refuse(
                            Diagnostic::new(
                                diag::E_BLD_001,
                                format!("component '{path}' not found at {}", file.display()),
                            )
                            .with_hint(super::build::COMPONENT_MISSING_HINT),
                        );
                    }
                }
            }
            if let Some(d) = misspelt_kind(m, &parsed.warnings, text.as_deref(), "") {
                report.refuse(d);
            }
            for d in crate::checkup::dials(m, text.as_deref()).into_iter().filter(|_| dial) {
                match crate::outbound::reach::reach(&d.url, DIAL_WITHIN) {
                    Ok(()) => report.pass(&format!(
                        "{} answers: {}{}",
                        d.key,
                        d.url,
                        crate::checkup::at_line(d.line)
                    )),
                    Err(why) => report.refuse(unreachable(&d, &why, "")),
                }
            }
        }
    }
    report.line("");
}

/// How long doctor waits for each endpoint's connection.
const DIAL_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// E-DOC-001: `d` did not answer (`why`); `whose` prefixes the message (`roster.yaml: member …: `).
fn unreachable(d: &crate::checkup::Dial, why: &str, whose: &str) -> Diagnostic {
    let then = match d.key.as_str() {
        "inference.endpoint" => "its model turns would fail",
        "remote.url" => "`mur run` would refuse it (its agent's card cannot be read)",
        _ => "`mur run` would refuse it (its MCP server cannot be reached)",
    };
    Diagnostic::new(
        diag::E_DOC_001,
        format!(
            "{whose}{} {}{} does not answer: {why}, so {then}",
            d.key,
            d.url,
            crate::checkup::at_line(d.line)
        ),
    )
}

/// E-DOC-002 for a kind key written wrong (crate::checkup::misspelt_kind).
fn misspelt_kind(
    m: &manifest::Manifest,
    warnings: &[Diagnostic],
    text: Option<&str>,
    whose: &str,
) -> Option<Diagnostic> {
    let (written, meant, line) = crate::checkup::misspelt_kind(m, warnings, text)?;
    Some(Diagnostic::new(
        diag::E_DOC_002,
        format!(
            "{whose}murmur.yaml{}: `{written}:` is not a key; `{meant}:` was meant, so the capsule has nothing to run and `mur run` refuses it",
            line.map(|n| format!(" line {n}")).unwrap_or_default()
        ),
    ))
}

/// A remote capsule's kind line: the host that receives its tasks and the variable its
/// credential is read from (never the credential).
fn remote_kind(m: &manifest::Manifest) -> String {
    let Some(r) = &m.remote else {
        return "kind: remote capsule".to_string();
    };
    let host = manifest::endpoint::split(&r.url).map_or("?", |e| e.authority);
    match &r.api_key_var {
        Some(var) => format!("kind: remote capsule (forwards its tasks to {host}, with the credential in ${var})"),
        None => format!("kind: remote capsule (forwards its tasks to {host}, without a credential)"),
    }
}

/// The Roster block of docs/reference/cli.md#mur-doctor, for the roster of `project`, against its
/// stores and lock.
fn roster_block(report: &mut Report, project: &Project, home: &MurHome, dial: bool) {
    report.line("Roster");
    report.line(&format!("  file: {}", project.roster().display()));
    let file = project.roster().display().to_string();
    match roster::front::admit_project(project.root(), home) {
        Err(d) => {
            report.roster = Some(json!({"admitted": false, "file": file, "error": d.code.id}));
            report.refuse(d);
        }
        Ok(a) => {
            report.roster = Some(roster_json(&a, file));
            // Each W-ROS-001 warning is one overflow, both in roster order.
            let fixes: Vec<String> = roster::overflows(&a).iter().map(|o| o.fix()).collect();
            for (i, w) in a.warnings.iter().enumerate() {
                let fix = fixes.get(i).map(String::as_str).or(w.hint());
                report
                    .warnings
                    .push(json!({"code": w.code.id, "message": w.message, "fix": fix}));
            }
            for row in rows(&a) {
                report.line(&row);
            }
            report.line(&format!("  {}", reachability_line(&a)));
            for l in super::doctor_env::roster_lines(&a) {
                report.line(&l);
            }
            for w in &a.warnings {
                report.line(&format!("  {}", w.render("")));
            }
            report
                .warning_fixes
                .extend(roster::overflows(&a).iter().map(|o| o.fix()));
            launch_checks(report, &a);
            if dial {
                dial_checks(report, &a);
            }
        }
    }
    report.line("");
}

/// What `mur run --roster` would refuse or warn about only once members start, checked here:
/// a model member that lacks what it needs to run (E-RUN-002, as its session refuses it), a key
/// variable a member reads that is unset here (W-RUN-010: admission needs no key, and a pipeline
/// that checks rosters holds no secrets; `mur run` still refuses the member) and a member with
/// callees whose network grant reaches no door (W-RUN-008).
fn launch_checks(report: &mut Report, a: &Admitted) {
    let unset = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty()).is_none();
    for (i, m) in a.members.iter().enumerate() {
        if let Some(inference) = &m.manifest.inference {
            let key_var = inference.api_key_var.as_deref().filter(|v| unset(v));
            if let Some(var) = key_var {
                unset_key(
                    report,
                    &m.name,
                    &format!("its inference.api_key is ${{{var}}}"),
                    var,
                    diag::E_RUN_002,
                );
            }
            // Every other refusal of a session's start: the unset key, already a warning, reads
            // as set here (a stand-in that goes nowhere: doctor sends no request).
            let env = |v: &str| match key_var {
                Some(var) if v == var => Some("set".to_string()),
                _ => std::env::var(v).ok(),
            };
            if let Err(mut d) = crate::model::ModelConfig::resolve(&m.capsule.to_string(), &m.version, inference, env) {
                d.message = format!("roster.yaml: member '{}': {}", m.name, d.message);
                report.refuse(d);
            }
        }
        // An MCP tool's key is read at session start as the model's is.
        for t in &m.manifest.tools {
            // Written out for every kind, so a new kind is a decision here too.
            let key_var = match &t.source {
                crate::manifest::ToolSource::Mcp { api_key_var, .. } => api_key_var.as_deref(),
                crate::manifest::ToolSource::Wasm { .. } => None,
            };
            if let Some(var) = key_var
                && unset(var)
            {
                let what = format!("its tool '{}' names ${{{var}}} as the MCP server's key", t.name);
                unset_key(report, &m.name, &what, var, diag::E_RUN_002);
            }
        }
        // A remote member's credential is read at session start, as its agent's card is.
        if let Some(var) = m.manifest.remote.as_ref().and_then(|r| r.api_key_var.as_deref())
            && unset(var)
        {
            let what = format!("its remote.api_key is ${{{var}}}");
            unset_key(report, &m.name, &what, var, diag::E_RUN_071);
        }
        // A manifest-only capsule runs nothing, and a remote one only forwards: they call nobody.
        if matches!(m.manifest.kind, Kind::ManifestOnly | Kind::Remote) {
            continue;
        }
        let callees: Vec<String> = a.callees(i).iter().map(|&c| a.members[c].name.clone()).collect();
        if let Some(w) =
            crate::session::startup::unreachable_callees_warning(&m.name, &callees, &m.manifest.network_allow)
        {
            let fix = format!(
                "declare \"localhost\" in capabilities.network.allow of {}'s murmur.yaml, then rebuild and reinstall it ({})",
                m.capsule,
                w.head()
            );
            report.warn(&w, fix);
        }
    }
}

/// What a member's session dials, dialled (E-DOC-001), and a kind key written wrong in a member's
/// manifest (E-DOC-002), each naming the member and the line of its murmur.yaml. Only failures
/// are shown: the Roster block keeps its layout.
fn dial_checks(report: &mut Report, a: &Admitted) {
    for m in &a.members {
        let text = std::fs::read(&m.zip_path)
            .ok()
            .and_then(|zip| crate::store::archive::read_named(&zip, "murmur.yaml").ok())
            .and_then(|b| String::from_utf8(b).ok());
        let whose = format!("roster.yaml: member '{}' ({}@{}): ", m.name, m.capsule, m.version);
        if let Some(text) = &text
            && let Ok(parsed) = manifest::parse(text.as_bytes())
            && let Some(d) = misspelt_kind(&parsed.manifest, &parsed.warnings, Some(text), &whose)
        {
            report.refuse(d);
        }
        for d in crate::checkup::dials(&m.manifest, text.as_deref()) {
            if let Err(why) = crate::outbound::reach::reach(&d.url, DIAL_WITHIN) {
                report.refuse(unreachable(&d, &why, &whose));
            }
        }
    }
}

/// W-RUN-010: member `member` reads `var` (`what` says where), which is unset here, so `mur run`
/// would refuse the member with `refused_with`.
fn unset_key(report: &mut Report, member: &str, what: &str, var: &str, refused_with: diag::Code) {
    let w = Diagnostic::new(
        diag::W_RUN_010,
        format!(
            "roster.yaml: member '{member}': {what}, and {var} is not set in this environment: admission needs no key, but `mur run` will refuse the member ({})",
            refused_with.id
        ),
    );
    report.warn(&w, format!("export {var}=<the key> before `mur run`"));
}

/// The Roster block for `--json`: members in roster order and the admitted edges by name.
fn roster_json(a: &Admitted, file: String) -> Value {
    let members: Vec<Value> = a
        .members
        .iter()
        .map(|m| {
            json!({
                "authenticated": m.manifest.authentication,
                "capsule": m.capsule.to_string(),
                "entry": m.entry,
                "name": m.name,
                "serves_peers": m.manifest.peer_tasks_accept,
                "sha256": m.sha256,
                "version": m.version,
            })
        })
        .collect();
    let edges: Vec<Value> = a
        .edges
        .iter()
        .map(|&(f, t)| json!({"from": a.members[f].name, "to": a.members[t].name}))
        .collect();
    let mode = match a.reachability {
        Reachability::All => "all",
        Reachability::None => "none",
        Reachability::Rules(_) => "rules",
    };
    json!({"admitted": true, "edges": edges, "file": file, "members": members, "reachability": mode})
}

/// One row per member: columns padded to their widest cell, three spaces between them.
fn rows(a: &Admitted) -> Vec<String> {
    let cvs: Vec<String> = a
        .members
        .iter()
        .map(|m| format!("{}@{}", m.capsule, m.version))
        .collect();
    let name_w = a.members.iter().map(|m| m.name.chars().count()).max().unwrap_or(0);
    let cv_w = cvs.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    a.members
        .iter()
        .zip(&cvs)
        .map(|(m, cv)| {
            format!(
                "  {:<name_w$}   {:<cv_w$}   {:<5}   {:<13}   {}",
                m.name,
                cv,
                if m.entry { "entry" } else { "" },
                if m.manifest.peer_tasks_accept {
                    "serves peers"
                } else {
                    "refuses peers"
                },
                if m.manifest.authentication {
                    "authenticated door"
                } else {
                    "public door"
                },
            )
        })
        .collect()
}

fn reachability_line(a: &Admitted) -> String {
    let head = match a.reachability {
        Reachability::All => "reachability (all)",
        Reachability::None | Reachability::Rules(_) => "reachability",
    };
    if a.edges.is_empty() {
        return format!("{head}: none");
    }
    let edges: Vec<String> = a
        .edges
        .iter()
        .map(|&(f, t)| format!("{} \u{2192} {}", a.members[f].name, a.members[t].name))
        .collect();
    format!("{head}: {}", edges.join(", "))
}
