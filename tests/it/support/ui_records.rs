//! Synthetic formation records for `mur ui`'s large-formation test and its bench
//! (benches/ui.rs): traces as the runtime lays them out, written straight into a home.

use std::path::Path;

use mur::paths::MurHome;
use serde_json::{Value, json};

/// Writes one member's trace, as the runtime lays it out, with `calls` calls to `callees`.
pub fn write_member(
    home: &MurHome,
    frm: &str,
    name: &str,
    entry: bool,
    callees: &[String],
    calls: &[(String, String)],
    t0: u64,
) {
    let ses = mur::ids::mint(mur::ids::IdKind::Session);
    let dir = if entry {
        home.records_group(Path::new("/bench/project")).join(&ses)
    } else {
        home.records_group(&home.member_dir(frm, name)).join(&ses)
    };
    std::fs::create_dir_all(dir.join("logs")).expect("records dir");
    let mut lines = Vec::new();
    let rec = |kind: &str, ts: u64, fields: Value| {
        let mut v = json!({"event_type": kind, "event_id": mur::ids::mint(mur::ids::IdKind::Event),
                           "parent_id": null, "session_id": ses, "timestamp": ts});
        for (k, x) in fields.as_object().expect("fields") {
            v[k] = x.clone();
        }
        v.to_string()
    };
    lines.push(rec(
        "session_start",
        t0,
        json!({"capsule_name": format!("local/{name}"), "capsule_version": "0.1.0", "model": "m",
               "max_turns": 10, "tools_declared": 0, "formation_id": frm, "formation_member": name,
               "formation_callees": callees}),
    ));
    let task = mur::ids::mint(mur::ids::IdKind::Task);
    lines.push(rec("task_start", t0 + 1, json!({"task_id": task})));
    for (i, (call, to)) in calls.iter().enumerate() {
        let ts = t0 + 2 + i as u64;
        lines.push(rec(
            "inference",
            ts,
            json!({"task_id": task, "turn": i + 1, "provider": "openai", "model": "m", "duration_ms": 40,
                   "input_tokens": 100, "output_tokens": 20, "retries": 0, "streamed": true, "status": "ok"}),
        ));
        lines.push(rec(
            "member_call",
            ts,
            json!({"task_id": task, "call_id": call, "member": to, "member_task_id": format!("tsk_{call}"),
                   "status": "completed", "duration_ms": 12, "output": "done", "truncated": false,
                   "delivered": true, "no_answer_below": null}),
        ));
    }
    lines.push(rec(
        "task_end",
        t0 + 5000,
        json!({"task_id": task, "exit_status": "ok", "duration_ms": 4999}),
    ));
    lines.push(rec(
        "session_end",
        t0 + 5001,
        json!({"exit_status": "ok", "duration_ms": 5001}),
    ));
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(dir.join("trace.jsonl"), text).expect("trace");
}

/// A formation of `members` members, each calling the next three, and `calls` calls over them.
pub fn write_formation(home: &MurHome, members: usize, calls: usize, t0: u64) -> String {
    let frm = mur::ids::mint(mur::ids::IdKind::Formation);
    let names: Vec<String> = (0..members).map(|i| format!("m{i:03}")).collect();
    let mut made: Vec<Vec<(String, String)>> = vec![Vec::new(); members];
    for c in 0..calls {
        let from = c % members;
        let to = (from + 1 + c / members % 3) % members;
        made[from].push((mur::ids::mint(mur::ids::IdKind::Call), names[to].clone()));
    }
    for (i, name) in names.iter().enumerate() {
        let callees: Vec<String> = (1..=3.min(members - 1))
            .map(|d| names[(i + d) % members].clone())
            .collect();
        write_member(home, &frm, name, i == 0, &callees, &made[i], t0);
    }
    frm
}
