//! `mur ps`: the live sessions of this machine, grouped by formation (docs/reference/cli.md).
//!
//! Reads `~/.murmur/running/`, prunes records whose process is gone, and prints one row per
//! session. Sessions outside any formation come first; each formation's rows follow its summary
//! line, consecutively.

use super::Outcome;
use crate::paths::MurHome;
use crate::running::{self, RunningRecord};

pub fn run(json: bool) -> Outcome {
    let home = MurHome::from_env();
    let records = match running::live(&home) {
        Ok(r) => r,
        Err(e) => {
            // An unreadable directory is not a refusal: say so and list nothing.
            eprintln!("mur ps: cannot read {}: {e}", home.running().display());
            Vec::new()
        }
    };
    let budgets = budgets(&home, &records);
    if json {
        println!("{}", render_json(&records));
    } else {
        print!("{}", render(&records, &budgets));
    }
    Ok(0)
}

/// A formation's token budget as its launcher last wrote it (`budget.json`,
/// docs/reference/formation.md#budgets): spent and the limit.
pub type Budgets = std::collections::BTreeMap<String, (u64, u64)>;

/// The budgets of the formations these records belong to, where they keep one.
fn budgets(home: &MurHome, records: &[RunningRecord]) -> Budgets {
    let mut out = Budgets::new();
    for frm in records.iter().filter_map(|r| r.formation_id.as_deref()) {
        if out.contains_key(frm) || !crate::ids::is(crate::ids::IdKind::Formation, frm) {
            continue;
        }
        let file = home.formation(frm).join("budget.json");
        let Ok(bytes) = crate::yaml::read_capped(&file, 64 * 1024) else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        if let (Some(spent), Some(limit)) = (v["spent"].as_u64(), v["limit"].as_u64()) {
            out.insert(frm.to_string(), (spent, limit));
        }
    }
    out
}

/// `--json` [ours]: one compact line `{"sessions":[…]}`, keys sorted
/// (docs/reference/cli.md#conventions), sessions in the table's order. Every session carries every
/// key (`null` when absent) so scripts need no existence checks. The door token is never shown.
pub fn render_json(records: &[RunningRecord]) -> String {
    let mut sorted: Vec<&RunningRecord> = records.iter().collect();
    // Standalone sessions first, then formations in id order, as the table lists them.
    sorted.sort_by(|a, b| (&a.formation_id, &a.session_id).cmp(&(&b.formation_id, &b.session_id)));
    let sessions: Vec<serde_json::Value> = sorted
        .iter()
        .map(|r| {
            serde_json::json!({
                "capsule_name": r.capsule_name,
                "capsule_version": r.capsule_version,
                "formation_entry": r.formation_entry,
                "formation_id": r.formation_id,
                "formation_launcher_pid": r.formation_launcher.as_ref().map(|l| l.pid),
                "formation_member": r.formation_member,
                "pid": r.pid,
                "records_dir": r.records_dir,
                "session_id": r.session_id,
                "started_at": r.started_at,
                "url": r.url,
                "workdir": r.workdir,
            })
        })
        .collect();
    serde_json::json!({ "sessions": sessions }).to_string()
}

/// The table for these (live) records; `No sessions are running.` when there are none.
pub fn render(records: &[RunningRecord], budgets: &Budgets) -> String {
    if records.is_empty() {
        return "No sessions are running.\n".to_string();
    }
    let with_formation = records.iter().any(|r| r.formation_id.is_some());

    // Standalone sessions first, then each formation's members in id order.
    let mut standalone: Vec<&RunningRecord> = records.iter().filter(|r| r.formation_id.is_none()).collect();
    standalone.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    let mut formations: Vec<&str> = records.iter().filter_map(|r| r.formation_id.as_deref()).collect();
    formations.sort_unstable();
    formations.dedup();

    // Within 100 columns: a formation's rows follow its summary line, which names it, and the
    // door's URL is in `--json`.
    let mut header = vec!["SESSION", "CAPSULE", "PID", "STARTED (UTC)"];
    if with_formation {
        header.push("MEMBER");
    }
    let row = |r: &RunningRecord| -> Vec<String> {
        let mut cells = vec![
            r.session_id.clone(),
            format!("{}@{}", r.capsule_name, r.capsule_version),
            r.pid.to_string(),
            started(&r.started_at),
        ];
        if with_formation {
            cells.push(r.formation_member.clone().unwrap_or_else(|| "-".into()));
        }
        cells
    };

    // Lines are either a table row or a formation's summary line (printed unpadded).
    enum Line {
        Row(Vec<String>),
        Summary(String),
    }
    let mut lines = vec![Line::Row(header.iter().map(|s| s.to_string()).collect())];
    for r in &standalone {
        lines.push(Line::Row(row(r)));
    }
    for frm in formations {
        let mut members: Vec<&RunningRecord> = records
            .iter()
            .filter(|r| r.formation_id.as_deref() == Some(frm))
            .collect();
        members.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        let launcher = members
            .iter()
            .find_map(|r| r.formation_launcher.as_ref())
            .map(|l| l.pid.to_string())
            .unwrap_or_else(|| "-".into());
        lines.push(Line::Summary(format!(
            "formation {frm}  launcher pid {launcher}  {} member(s)",
            members.len()
        )));
        // Its own line, so the summary stays within 100 columns.
        if let Some((spent, limit)) = budgets.get(frm) {
            lines.push(Line::Summary(format!("  tokens {spent} of {limit}")));
        }
        for r in members {
            lines.push(Line::Row(row(r)));
        }
    }

    let mut widths = vec![0usize; header.len()];
    for line in &lines {
        if let Line::Row(cells) = line {
            for (w, c) in widths.iter_mut().zip(cells) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    for line in lines {
        match line {
            Line::Summary(s) => out.push_str(&s),
            Line::Row(cells) => {
                let last = cells.len() - 1;
                for (i, c) in cells.iter().enumerate() {
                    if i == last {
                        out.push_str(c);
                    } else {
                        out.push_str(&format!("{c:<w$}  ", w = widths[i]));
                    }
                }
            }
        }
        out.push('\n');
    }
    out
}

/// A record's `started_at` to the second: `2026-01-01 00:00:00` for `2026-01-01T00:00:00.000Z`;
/// anything else as written.
fn started(at: &str) -> String {
    match at.split_once('.') {
        Some((secs, _)) if secs.len() == 19 && secs.as_bytes().get(10) == Some(&b'T') => secs.replacen('T', " ", 1),
        _ => at.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::running::LauncherRef;

    fn rec(ses: &str, frm: Option<&str>, member: Option<&str>) -> RunningRecord {
        RunningRecord {
            capsule_name: "local/echo".into(),
            capsule_version: "0.1.0".into(),
            formation_id: frm.map(str::to_string),
            formation_member: member.map(str::to_string),
            formation_launcher: frm.map(|_| LauncherRef {
                pid: 4242,
                process_start: "1".into(),
            }),
            pid: 77,
            process_start: "1".into(),
            records_dir: "/r".into(),
            session_id: ses.into(),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            url: "localhost:4000".into(),
            workdir: "/w".into(),
            ..Default::default()
        }
    }

    #[test]
    fn json_lists_sessions_in_table_order_without_tokens() {
        assert_eq!(render_json(&[]), r#"{"sessions":[]}"#);
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let mut b = rec("ses_b", Some(frm), Some("planner"));
        b.door_token = Some(crate::secret::Secret::new("mdt1.secret".into()));
        b.formation_entry = true;
        let out = render_json(&[b, rec("ses_a", None, None)]);
        assert!(!out.contains("mdt1"), "{out}");
        assert_eq!(
            out,
            format!(
                "{{\"sessions\":[\
                 {{\"capsule_name\":\"local/echo\",\"capsule_version\":\"0.1.0\",\"formation_entry\":false,\"formation_id\":null,\"formation_launcher_pid\":null,\"formation_member\":null,\"pid\":77,\"records_dir\":\"/r\",\"session_id\":\"ses_a\",\"started_at\":\"2026-01-01T00:00:00.000Z\",\"url\":\"localhost:4000\",\"workdir\":\"/w\"}},\
                 {{\"capsule_name\":\"local/echo\",\"capsule_version\":\"0.1.0\",\"formation_entry\":true,\"formation_id\":\"{frm}\",\"formation_launcher_pid\":4242,\"formation_member\":\"planner\",\"pid\":77,\"records_dir\":\"/r\",\"session_id\":\"ses_b\",\"started_at\":\"2026-01-01T00:00:00.000Z\",\"url\":\"localhost:4000\",\"workdir\":\"/w\"}}]}}"
            )
        );
    }

    #[test]
    fn nothing_running() {
        assert_eq!(render(&[], &Budgets::new()), "No sessions are running.\n");
    }

    #[test]
    fn standalone_sessions_have_four_columns() {
        let out = render(&[rec("ses_b", None, None), rec("ses_a", None, None)], &Budgets::new());
        assert_eq!(
            out,
            "SESSION  CAPSULE           PID  STARTED (UTC)\n\
             ses_a    local/echo@0.1.0  77   2026-01-01 00:00:00\n\
             ses_b    local/echo@0.1.0  77   2026-01-01 00:00:00\n"
        );
    }

    #[test]
    fn a_formation_of_real_ids_fits_100_columns() {
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let mut r = rec("ses_0199c4e2f1b7712a9d3e4f5061728395", Some(frm), Some("reviewer-2"));
        r.capsule_name = "local/reviewer".into();
        r.pid = 4_194_304;
        let budgets = Budgets::from([(frm.to_string(), (999_999_999, 1_000_000_000))]);
        let out = render(&[r, rec("ses_0199c4e2f1b7712a9d3e4f5061728396", None, None)], &budgets);
        for line in out.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
    }

    #[test]
    fn started_is_shown_to_the_second() {
        let cases = [
            ("2026-01-01T00:00:00.000Z", "2026-01-01 00:00:00"),
            ("2026-12-05T17:05:09.123456Z", "2026-12-05 17:05:09"),
            ("yesterday", "yesterday"),
            ("2026-01-01 00:00:00.000Z", "2026-01-01 00:00:00.000Z"),
        ];
        for (at, want) in cases {
            assert_eq!(started(at), want, "{at}");
        }
    }

    #[test]
    fn formation_rows_are_grouped_under_a_summary_line() {
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let out = render(
            &[
                rec("ses_c", Some(frm), Some("coder")),
                rec("ses_a", None, None),
                rec("ses_b", Some(frm), Some("planner")),
            ],
            &Budgets::new(),
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert!(lines[0].starts_with("SESSION  CAPSULE"), "{out}");
        assert!(lines[0].ends_with("STARTED (UTC)        MEMBER"), "{out}");
        assert!(
            lines[1].starts_with("ses_a ") && lines[1].ends_with("00:00:00  -"),
            "{out}"
        );
        assert_eq!(lines[2], format!("formation {frm}  launcher pid 4242  2 member(s)"));
        assert!(
            lines[3].starts_with("ses_b ") && lines[3].ends_with("00:00:00  planner"),
            "{out}"
        );
        assert!(lines[4].starts_with("ses_c ") && lines[4].ends_with("coder"), "{out}");
        // A formation that keeps a budget shows its running total on that line.
        let budgets = Budgets::from([(frm.to_string(), (1200, 5000))]);
        let recs = [rec("ses_b", Some(frm), Some("planner"))];
        let out = render(&recs, &budgets);
        assert_eq!(
            out.lines().skip(1).take(2).collect::<Vec<_>>(),
            [
                format!("formation {frm}  launcher pid 4242  1 member(s)").as_str(),
                "  tokens 1200 of 5000"
            ]
        );
    }

    #[test]
    fn formation_without_launcher_shows_a_dash() {
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let mut r = rec("ses_a", Some(frm), None);
        r.formation_launcher = None;
        let out = render(&[r], &Budgets::new());
        assert!(
            out.contains(&format!("formation {frm}  launcher pid -  1 member(s)\n")),
            "{out}"
        );
    }
}
