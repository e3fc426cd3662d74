//! Formations as a person finds them again: every one launched on this machine, newest first,
//! from the markers under `~/.murmur/formations/` (`mur trace list`, `mur ps -a`), and ids as a
//! person types them: the whole id, a unique prefix of it (as git takes a commit's), or `last`.

use crate::ids::{self, IdKind};
use crate::marker::{self, Marker};
use crate::paths::MurHome;

/// One formation's directory and what its marker says.
pub struct Known {
    pub id: String,
    /// `None` when the marker is missing or does not parse.
    pub marker: Option<Marker>,
}

/// Every formation with a directory, newest first (ids sort in mint order).
pub fn known(home: &MurHome) -> Vec<Known> {
    let mut ids: Vec<String> = std::fs::read_dir(home.formations())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| ids::is(IdKind::Formation, n))
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids.into_iter()
        .map(|id| Known {
            marker: marker::read(&home.formation_marker(&id)),
            id,
        })
        .collect()
}

/// `text` as the formation id it names: `last` is the newest formation, `frm_…` a whole id or a
/// prefix that only one formation's id starts with. Anything else comes back as given, for the
/// command to judge. `Err` says why a `last` or a prefix names no single formation.
pub fn resolve(home: &MurHome, text: &str) -> Result<String, String> {
    if text == "last" {
        return known(home).into_iter().next().map(|k| k.id).ok_or_else(|| {
            format!(
                "'last' names no formation: none was launched under {}",
                home.formations().display()
            )
        });
    }
    let prefix = IdKind::Formation.prefix();
    if !text.starts_with(prefix) || ids::is(IdKind::Formation, text) || text.len() <= prefix.len() {
        return Ok(text.to_string());
    }
    let matching: Vec<String> = known(home)
        .into_iter()
        .map(|k| k.id)
        .filter(|id| id.starts_with(text))
        .collect();
    match matching.as_slice() {
        [] => Ok(text.to_string()),
        [one] => Ok(one.clone()),
        many => Err(format!(
            "'{}' is the start of {} formations' ids ({}); give more of it",
            crate::diag::shown(text),
            many.len(),
            many.iter()
                .map(|id| crate::ids::shortest_prefix(id, many))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// `mur trace list` / `mur ps -a`: one line per formation, newest first: its short id, when it
/// started, whether it still runs, the roster's directory and the task's first words.
pub fn list(home: &MurHome) -> String {
    let all = known(home);
    if all.is_empty() {
        return format!("no formation was launched under {}\n", home.formations().display());
    }
    let ids: Vec<String> = all.iter().map(|k| k.id.clone()).collect();
    let rows: Vec<[String; 5]> = all
        .iter()
        .map(|k| {
            let started = ids::mint_time_ms(IdKind::Formation, &k.id)
                .and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64))
                .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_else(|| "-".into());
            let (state, roster, task) = match &k.marker {
                Some(m) => (
                    if crate::procinfo::is_alive(m.launcher_pid, Some(&m.launcher_start)) {
                        "running"
                    } else {
                        "ended"
                    },
                    crate::paths::tilde(&m.project_dir),
                    m.task.clone().unwrap_or_else(|| "(served, no --task)".into()),
                ),
                None => ("?", "-".into(), "-".into()),
            };
            [
                crate::ids::shortest_prefix(&k.id, &ids),
                started,
                state.into(),
                roster,
                task,
            ]
        })
        .collect();
    let header = ["FORMATION", "STARTED", "STATE", "ROSTER", "TASK"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..4).map(width).collect();
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate().take(4) {
            s.push_str(&format!("{c:<w$}  ", w = widths[i]));
        }
        s.push_str(cells[4]);
        format!("{}\n", s.trim_end())
    };
    let mut out = line(header);
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frm(ms: u64, tail: u64) -> String {
        format!("frm_{ms:012x}{tail:020x}")
    }

    #[test]
    fn prefixes_and_last_resolve_to_one_formation() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        let (a, b, c) = (frm(1000, 1), frm(2000, 2), frm(2000, 3));
        for id in [&a, &b, &c] {
            std::fs::create_dir_all(home.formation(id)).unwrap();
        }
        assert_eq!(resolve(&home, "last").as_deref(), Ok(c.as_str()));
        assert_eq!(resolve(&home, &a[..16]).as_deref(), Ok(a.as_str()));
        assert_eq!(resolve(&home, &c).as_deref(), Ok(c.as_str()));
        let both = resolve(&home, &b[..20]).unwrap_err();
        assert!(both.contains("is the start of 2 formations' ids"), "{both}");
        assert!(
            both.contains(&c[..35]) && both.contains(&b[..35]),
            "each named so it can be told apart: {both}"
        );
        assert_eq!(
            resolve(&home, "ses_1").as_deref(),
            Ok("ses_1"),
            "not a formation's: the command judges"
        );
        assert_eq!(
            resolve(&home, "frm_ff").as_deref(),
            Ok("frm_ff"),
            "no match: the command says so"
        );
        let ids = vec![a.clone(), b.clone(), c.clone()];
        assert_eq!(crate::ids::shortest_prefix(&a, &ids), &a[..16]);
        assert!(
            c.starts_with(&crate::ids::shortest_prefix(&c, &ids))
                && !b.starts_with(&crate::ids::shortest_prefix(&c, &ids))
        );
    }

    #[test]
    fn last_with_no_formation_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        assert!(resolve(&home, "last").unwrap_err().contains("none was launched"));
        assert!(list(&home).starts_with("no formation was launched"));
    }
}
