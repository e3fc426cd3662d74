//! Checks 2–8 of admission (docs/reference/roster.md#refusals). Pure: reads the stores it is handed
//! and writes nothing. Checks 2–5 read no store, so a structural fault is refused with nothing
//! installed.

use std::collections::HashSet;
use std::path::PathBuf;

use super::{Admitted, AdmittedMember, MemberDecl, Reachability, Roster, edges, warn};
use crate::diag::shown;
use crate::diag::{Diagnostic, E_ROS_002, E_ROS_003, E_ROS_004, E_ROS_005, E_ROS_006, E_ROS_007, E_ROS_008};
use crate::names::ArtifactName;

/// Checks 2–5: unique names, exactly one entry, rules name members, no rule calls the entry.
pub fn check_structure(r: &Roster) -> Result<(), Diagnostic> {
    structure(r).map(|_| ())
}

/// Checks 2–5; returns the entry member's index.
fn structure(r: &Roster) -> Result<usize, Diagnostic> {
    let mut seen = HashSet::new();
    if let Some(m) = r.members.iter().find(|m| !seen.insert(m.name.as_str())) {
        return Err(Diagnostic::new(
            E_ROS_003,
            format!("roster.yaml: member name '{}' is declared more than once", m.name),
        ));
    }

    let entries: Vec<usize> = (0..r.members.len()).filter(|&i| r.members[i].entry).collect();
    let entry = match entries.as_slice() {
        [one] => *one,
        [] => {
            return Err(Diagnostic::new(
                E_ROS_002,
                "roster.yaml: no member is marked `entry: true`; a roster designates exactly one entry member",
            ));
        }
        many => {
            let names: Vec<String> = many.iter().map(|&i| format!("'{}'", r.members[i].name)).collect();
            return Err(Diagnostic::new(
                E_ROS_002,
                format!(
                    "roster.yaml: members {} are each marked `entry: true`; a roster designates exactly one entry member",
                    names.join(", ")
                ),
            ));
        }
    };

    let Reachability::Rules(rules) = &r.reachability else {
        return Ok(entry);
    };
    for rule in rules {
        for name in std::iter::once(&rule.from).chain(&rule.to) {
            if !seen.contains(name.as_str()) {
                return Err(Diagnostic::new(
                    E_ROS_004,
                    format!(
                        "roster.yaml: the reachability rule from '{}' names '{}', which is not a member of this roster",
                        shown(&rule.from),
                        shown(name)
                    ),
                ));
            }
        }
    }
    let entry_name = &r.members[entry].name;
    if let Some(rule) = rules.iter().find(|rule| rule.to.contains(entry_name)) {
        return Err(Diagnostic::new(
            E_ROS_008,
            format!(
                "roster.yaml: the reachability rule from '{}' lists the entry member '{entry_name}' in `to`, but the entry \
                 member is never called by a peer: it takes the formation's tasks from the launch or from a client at its door",
                rule.from
            ),
        )
        .with_hint(format!(
            "to have '{entry_name}' hand work to '{from}', write `- from: {entry_name}` with `to: [{from}]` instead",
            from = rule.from
        )));
    }
    Ok(entry)
}

/// What the stores hold for one member.
#[derive(Clone)]
pub(crate) struct Bound {
    pub zip_path: PathBuf,
    pub sha256: String,
    /// The packed `murmur.yaml` bytes.
    pub manifest: Vec<u8>,
}

/// A `murmur.lock` pin, as check 6 compares it.
pub(crate) type PinView = crate::store::lock::Pin;

/// Admits the roster against the stores and the lock (checks 2–8), or refuses it with one code.
pub fn admit(
    r: &Roster,
    stores: &crate::store::Stores,
    lock: Option<&crate::store::lock::Lock>,
) -> Result<Admitted, Diagnostic> {
    admit_with(
        r,
        &mut |name, version| {
            stores
                .resolve(name, version)
                .map_err(|e| e.to_string())
                .map(|res| Bound {
                    zip_path: res.zip_path,
                    sha256: res.sha256,
                    manifest: res.archive.manifest,
                })
        },
        &|full| lock.and_then(|l| l.pin(full)).cloned(),
        &|m| installed_like(stores, m),
    )
}

/// What is installed under a name like the member's (`scope/name@version`), or under its name at
/// another version: a misspelt capsule or version is far likelier than one never built. Names
/// are compared without their scope, so a slip in a short name does not match another name.
fn installed_like(stores: &crate::store::Stores, m: &MemberDecl) -> Vec<String> {
    let listed = stores.list();
    let names: Vec<&str> = listed.iter().map(|l| l.name.name.as_str()).collect();
    let close = crate::suggest::similar(&m.capsule.name, names.iter().copied());
    let mut out: Vec<String> = Vec::new();
    for l in &listed {
        if l.name == m.capsule || close.contains(&l.name.name.as_str()) {
            let shown = format!("{}@{}", l.name, l.version);
            if !out.contains(&shown) {
                out.push(shown);
            }
        }
    }
    out
}

/// [`admit`] over any store and lock, so checks 6–8 are testable without files.
pub(crate) fn admit_with(
    r: &Roster,
    resolve: &mut dyn FnMut(&ArtifactName, &str) -> Result<Bound, String>,
    pin: &dyn Fn(&str) -> Option<PinView>,
    installed_like: &dyn Fn(&MemberDecl) -> Vec<String>,
) -> Result<Admitted, Diagnostic> {
    let entry = structure(r)?;

    // Members running the same capsule share one lookup: each lookup hashes the whole archive,
    // tens of MB for a language runtime's component.
    let mut seen: std::collections::HashMap<(String, String), Result<Bound, String>> = Default::default();
    let mut resolve = |name: &ArtifactName, version: &str| {
        seen.entry((name.to_string(), version.to_string()))
            .or_insert_with(|| resolve(name, version))
            .clone()
    };

    // Check 6: each member through E-ROS-007, then E-REG-005, before the next member.
    let mut members = Vec::with_capacity(r.members.len());
    for (i, m) in r.members.iter().enumerate() {
        // A version that cannot name a store directory ('../x', 'a/b') is never looked up, so a
        // roster cannot steer the lookup outside the stores.
        if crate::manifest::check_version(&m.version).is_err() {
            return Err(not_admitted(m, &crate::store::ResolveError::NotInstalled.to_string()));
        }
        let bound = resolve(&m.capsule, &m.version).map_err(|why| {
            let d = not_admitted(m, &why);
            let missing = why == crate::store::ResolveError::NotInstalled.to_string();
            match if missing { installed_like(m) } else { Vec::new() } {
                like if like.is_empty() => d,
                like => d.with_hint(format!(
                    "installed under a similar name or version: {} \u{2014} correct the member's capsule and version in \
                     roster.yaml, or build and install this one: `mur build DIR && mur install -g DIR/{}-{}.mur.zip`",
                    like.join(", "),
                    m.capsule.name,
                    shown(&m.version)
                )),
            }
        })?;
        let manifest = crate::manifest::parse_packed(&bound.manifest)
            .map_err(|why| not_admitted(m, &why))?
            .manifest;
        let full = m.capsule.to_string();
        if let Some(p) = pin(&full) {
            lock_agrees(m, &full, &p, &bound.sha256)?;
        }
        members.push(AdmittedMember {
            name: m.name.clone(),
            capsule: m.capsule.clone(),
            version: m.version.clone(),
            entry: i == entry,
            sha256: bound.sha256,
            zip_path: bound.zip_path,
            manifest,
        });
    }

    let accepts: Vec<bool> = members.iter().map(|m| m.manifest.peer_tasks_accept).collect();
    let edges = edges::build(&r.reachability, &r.members, &accepts, entry);

    // Check 7: explicit rules only (`all` pairs only consenting members), callees in roster order.
    if let Reachability::Rules(rules) = &r.reachability {
        let called: HashSet<&str> = rules
            .iter()
            .flat_map(|rule| rule.to.iter().map(String::as_str))
            .collect();
        if let Some(m) = members
            .iter()
            .find(|m| called.contains(m.name.as_str()) && !m.manifest.peer_tasks_accept)
        {
            return Err(Diagnostic::new(
                E_ROS_005,
                format!(
                    "roster.yaml: member '{}' is listed in a reachability rule's `to`, but its manifest does not declare \
                     `exports.peer_tasks.accept: true`",
                    m.name
                ),
            )
            .with_hint(format!(
                "declare `exports.peer_tasks.accept: true` in the murmur.yaml of {}, then rebuild and reinstall it; or \
                 remove '{}' from every rule's `to`",
                m.capsule, m.name
            )));
        }
    }

    // Check 8: with any edge, every member's door authenticates, members on no edge included.
    if !edges.is_empty()
        && let Some(m) = members.iter().find(|m| !m.manifest.authentication)
    {
        return Err(Diagnostic::new(
            E_ROS_006,
            format!(
                "roster.yaml: member '{}' declares no `network.authentication`, and this roster declares peer traffic, \
                     so every member's door must require authentication",
                m.name
            ),
        )
        .with_hint(format!(
            "declare `network.authentication: {{scheme: bearer}}` in the murmur.yaml of {}, then rebuild and \
                 reinstall it; a capsule that authenticates cannot also declare capabilities.spawn.allow (E-MAN-003)",
            m.capsule
        )));
    }

    let admitted = Admitted {
        members,
        edges,
        warnings: Vec::new(),
        reachability: r.reachability.clone(),
    };
    let warnings = overflows(&admitted).iter().map(warn::Overflow::diagnostic).collect();
    Ok(Admitted { warnings, ..admitted })
}

/// Every W-ROS-001 overflow of an admitted roster, in roster order.
pub fn overflows(a: &Admitted) -> Vec<warn::Overflow> {
    let callers_of_each = super::edges::callers_of_each(&a.edges, a.members.len());
    (0..a.members.len())
        .filter_map(|i| {
            let m = &a.members[i];
            let callers = callers_of_each[i].iter().map(|&c| a.members[c].name.clone()).collect();
            let lc = &m.manifest.lifecycle;
            warn::check(
                &m.name,
                &format!("{}@{}", m.capsule, m.version),
                lc.task_acceptance,
                lc.queue_depth,
                callers,
            )
        })
        .collect()
}

/// What installs a member's capsule: `mur install` takes the archive `mur build` makes from the
/// capsule's sources (`<name>-<version>.mur.zip`), never a `<capsule>@<version>` to fetch.
fn install_hint(m: &MemberDecl) -> String {
    let zip = format!("{}-{}.mur.zip", m.capsule.name, shown(&m.version));
    format!(
        "build the capsule's sources and install the archive \u{2014} `mur build DIR && mur install -g DIR/{zip}` \
         (or `mur install` inside the project) \u{2014} or change the member's version in roster.yaml to one `mur list` shows"
    )
}

fn not_admitted(m: &MemberDecl, why: &str) -> Diagnostic {
    let cv = format!("{}@{}", m.capsule, shown(&m.version));
    Diagnostic::new(
        E_ROS_007,
        format!("roster.yaml: member '{}' ({cv}) cannot be admitted: {why}", m.name),
    )
    .with_hint(install_hint(m))
}

/// E-REG-005 when the lock pins this member's capsule differently from what was resolved: the
/// rule `mur run --capsule` applies too.
fn lock_agrees(m: &MemberDecl, full: &str, p: &PinView, sha256: &str) -> Result<(), Diagnostic> {
    p.check(
        &format!("roster.yaml: member '{}': ", m.name),
        full,
        &m.version,
        sha256,
        "in roster.yaml",
    )
}
