//! The pages of `mur ui`, rendered on the server: the formation list and one formation (its graph
//! as inline SVG, its calls, and each member's tasks, turns, tool calls and diagnostics). Every
//! text that comes from a record goes through [`e`] (`text::html_escape`), the one escaping; the
//! page carries no inline script or style, so the Content-Security-Policy can forbid both.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use crate::task::TaskState;
use crate::trace::view::{Edge, FormationView, MemberNode, TaskRow};
use crate::ui::live::Shown;
use crate::ui::records::FormationRow;

/// What a task whose text the door no longer holds says instead.
pub const GONE: &str = "the answer text is no longer available: the formation has ended";
/// What a task whose text was longer than the page keeps says under it.
pub const CUT: &str = "the text shown stops at 64 KiB";

fn e(s: &str) -> String {
    crate::text::html_escape(s)
}

/// The whole page around `body`; `live` names the event stream and the fragment the script
/// reloads when it reports a change; `page_token` is what the script sends with an action
/// (`act.rs`). The status line outside `main` says how the last action went.
pub fn shell(title: &str, body: &str, live: Option<(&str, &str)>, page_token: &str) -> String {
    let live_attrs = match live {
        Some((events, fragment)) => format!(" data-events=\"{}\" data-fragment=\"{}\"", e(events), e(fragment)),
        None => String::new(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"mur-page-token\" content=\"{}\">\
         <title>{}</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <script src=\"/assets/app.js\" defer></script></head>\
         <body><header><a href=\"/\">mur ui</a> <output id=\"act-status\" role=\"status\" aria-live=\"polite\"></output>\
         </header><main id=\"live\"{live_attrs}>{body}</main></body></html>\n",
        e(page_token),
        e(title)
    )
}

/// A page that sends the browser on to `to` at once. A refresh rather than a redirect: the
/// request it makes comes from the page's own origin, so a page of `mur ui` sends it with the
/// cookie just set (which a redirect in a navigation begun elsewhere would not carry).
pub fn forward(to: &str) -> String {
    let to = e(to);
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={to}\"><title>mur ui</title></head>\
         <body><a href=\"{to}\">mur ui</a></body></html>\n"
    )
}

/// `1234` → `1.2 s`, `56` → `56 ms`, `125000` → `2 min 5 s`.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

fn time(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "-".into())
}

/// The formation list: running first, then newest first. Each row: the short id (the whole one
/// in its link), the roster's directory, the task's first words, status, when, how long, members
/// and tokens. The filter above it (the script's) hides rows whose text lacks a word typed.
pub fn list(rows: &[FormationRow], now_ms: u64) -> String {
    let mut out = String::from("<h1>Formations</h1>");
    if rows.is_empty() {
        out.push_str("<p class=\"empty\">No formation has run under this home yet.</p>");
        return out;
    }
    out.push_str(
        "<p class=\"filter\"><label for=\"filter\">Filter</label> <input type=\"search\" id=\"filter\" \
         placeholder=\"id, roster, task, status…\" autocomplete=\"off\"> <span id=\"filter-count\"></span></p>\
         <table class=\"formations\"><thead><tr><th>formation</th><th>roster</th><th>task</th><th>status</th>\
         <th>started</th><th>duration</th><th>members</th><th>tokens</th></tr></thead><tbody>",
    );
    for r in rows {
        let end = r.ended_ms.unwrap_or(now_ms);
        let short = if r.short_id.is_empty() {
            &r.formation_id
        } else {
            &r.short_id
        };
        let _ = write!(
            out,
            "<tr class=\"formation\" data-formation=\"{id}\"><td><a href=\"/formation/{id}\" title=\"{id}\"><code>{short}</code></a></td>\
             <td class=\"roster\">{roster}</td><td class=\"task-words\">{words}</td>\
             <td><span class=\"status s-{st}\">{st}</span></td><td>{started}</td><td>{dur}</td>\
             <td class=\"members\">{n}: {names}</td><td class=\"num\">{tokens}</td></tr>",
            id = e(&r.formation_id),
            short = e(short),
            roster = e(r.roster_dir.as_deref().unwrap_or("-")),
            words = e(r.task_words.as_deref().unwrap_or("-")),
            st = e(&r.status),
            started = e(&time(r.started_ms)),
            dur = e(&duration(end.saturating_sub(r.started_ms))),
            n = r.members.len(),
            names = e(&r.members.join(", ")),
            tokens = r.tokens,
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// A state as the records' view spells it: `TASK_STATE_INPUT_REQUIRED` → `input-required`.
pub fn state_word(s: TaskState) -> String {
    s.wire()
        .trim_start_matches("TASK_STATE_")
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// One formation: its summary, graph, calls and members.
pub fn formation(v: &FormationView, running: bool, now_ms: u64) -> String {
    formation_live(v, running, now_ms, &BTreeMap::new())
}

/// One formation with what its doors said of its tasks (`live.rs`): answers as they stream,
/// questions.
pub fn formation_live(v: &FormationView, running: bool, now_ms: u64, live: &BTreeMap<String, Shown>) -> String {
    let mut out = String::new();
    let status = v.status(running);
    let end = v.ended_ms.filter(|_| !running).unwrap_or(now_ms);
    let _ = write!(
        out,
        "<h1>Formation <code>{id}</code></h1><p class=\"summary\" data-status=\"{st}\">\
         <span class=\"status s-{st}\">{st}</span> started {started} · {dur} · {n} members · \
         {calls} calls · {tin} tokens in · {tout} tokens out</p>",
        id = e(&v.formation_id),
        st = e(&status),
        started = e(&time(v.started_ms)),
        dur = e(&duration(end.saturating_sub(v.started_ms))),
        n = v.members.len(),
        calls = v.calls.len(),
        tin = v.usage.input_tokens,
        tout = v.usage.output_tokens,
    );
    if running {
        out.push_str(&controls(v));
    }
    out.push_str(&graph(v));
    out.push_str(&calls(v));
    for m in &v.members {
        out.push_str(&member(&v.formation_id, m, running, live));
    }
    out
}

/// What the operator does to a running formation (`act.rs`): a task for its entry, and stop.
/// The script sends each; stop asks for a second press first.
fn controls(v: &FormationView) -> String {
    let frm = e(&v.formation_id);
    let entry = v.members.iter().find(|m| m.entry).map(|m| m.name.as_str());
    let send = match entry {
        Some(name) => format!(
            "<form class=\"act-send\" data-act=\"/act/send/{frm}\"><label for=\"send-text\">A task for {name}</label>\
             <textarea id=\"send-text\" name=\"text\" rows=\"2\" required \
             aria-describedby=\"send-keys\"></textarea><button type=\"submit\">Send</button>\
             <small id=\"send-keys\">Ctrl+Enter sends</small></form>",
            name = e(name)
        ),
        None => String::new(),
    };
    format!(
        "<section class=\"controls\" aria-label=\"act on the formation\">{send}\
         <button type=\"button\" class=\"act-stop danger\" data-act=\"/act/stop/{frm}\" data-confirm=\"Press again to stop\">\
         Stop formation</button></section>"
    )
}

/// A task's steps in order (`trace::timeline`), folded: a row under the task's. Its `id` lets
/// the script keep it open across the fragment's reloads.
fn timeline(t: &TaskRow) -> String {
    if t.timeline.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<tr class=\"timeline-row\"><td colspan=\"5\"><details class=\"timeline\" id=\"tl-{id}\" data-task=\"{id}\">\
         <summary>timeline: {n} steps</summary><ol class=\"steps\">",
        id = e(&t.task_id),
        n = t.timeline.len() + t.timeline_more,
    );
    for s in &t.timeline {
        let _ = write!(
            out,
            "<li class=\"step k-{kind}{failed}\" data-kind=\"{kind}\"><span class=\"at\">+{at}</span> \
             <strong>{title}</strong> <span class=\"detail\">{detail}</span>{dur}",
            kind = e(s.kind),
            failed = if s.failed { " failed" } else { "" },
            at = e(&duration(s.at_ms)),
            title = e(&s.title),
            detail = e(&s.detail),
            dur = s
                .duration_ms
                .map(|d| format!(" <span class=\"took\">{}</span>", e(&duration(d))))
                .unwrap_or_default(),
        );
        if let Some(text) = &s.text {
            let _ = write!(out, "<pre class=\"text\">{}</pre>", e(text));
        }
        for p in &s.parts {
            let _ = write!(
                out,
                "<div class=\"part\" data-part=\"{label}\"><span class=\"label\">{label}</span>",
                label = e(&p.label)
            );
            if p.note != Some(crate::trace::timeline::TEXT_WITHHELD) {
                let _ = write!(out, "<pre class=\"text\">{}</pre>", e(&p.text));
            }
            if let Some(note) = p.note {
                let _ = write!(out, "<p class=\"note\">{}</p>", e(note));
            }
            out.push_str("</div>");
        }
        if let Some(note) = s.note {
            let _ = write!(out, "<p class=\"note\">{}</p>", e(note));
        }
        out.push_str("</li>");
    }
    if t.timeline_more > 0 {
        let _ = write!(
            out,
            "<li class=\"step more\">{} more steps are not shown</li>",
            t.timeline_more
        );
    }
    out.push_str("</ol></details></td></tr>");
    out
}

/// An open task's actions: the answer to its question, where the question is shown, and cancel.
fn task_actions(frm: &str, t: &TaskRow, running: bool) -> String {
    if !running || t.exit_status.is_some() {
        return String::new();
    }
    let id = e(&t.task_id);
    let frm = e(frm);
    let mut out = String::new();
    if t.state == "input-required" || t.asking.is_some() {
        let _ = write!(
            out,
            "<form class=\"act-answer\" data-act=\"/act/answer/{frm}/{id}\"><label for=\"answer-{id}\">Answer</label>\
             <textarea id=\"answer-{id}\" name=\"text\" rows=\"2\" required></textarea>\
             <button type=\"submit\">Answer</button></form>"
        );
    }
    let _ = write!(
        out,
        "<button type=\"button\" class=\"act-cancel\" data-act=\"/act/cancel/{frm}/{id}\">Cancel task</button>"
    );
    out
}

/// Node positions on a circle, the entry at the top.
fn layout(n: usize) -> (f64, Vec<(f64, f64)>) {
    let radius = (60.0 * n as f64 / std::f64::consts::TAU).max(110.0);
    let size = 2.0 * radius + 200.0;
    let c = size / 2.0;
    let points = (0..n)
        .map(|i| {
            let a = -std::f64::consts::FRAC_PI_2 + std::f64::consts::TAU * i as f64 / n.max(1) as f64;
            (c + radius * a.cos(), c + radius * a.sin())
        })
        .collect();
    (size, points)
}

/// The members as nodes, the roster's edges as lines; an edge calls went along is drawn
/// `called` with its count and the status that matters most.
fn graph(v: &FormationView) -> String {
    let (size, points) = layout(v.members.len());
    let at = |name: &str| v.members.iter().position(|m| m.name == name).map(|i| points[i]);
    let mut out = format!(
        "<svg class=\"graph\" viewBox=\"0 0 {size:.0} {size:.0}\" width=\"{size:.0}\" height=\"{size:.0}\" \
         role=\"img\" aria-label=\"members and their edges\"><defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" \
         refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\
         <path d=\"M 0 0 L 10 5 L 0 10 z\"/></marker></defs>"
    );
    for edge in &v.edges {
        let (Some(a), Some(b)) = (at(&edge.from), at(&edge.to)) else {
            continue;
        };
        out.push_str(&edge_svg(edge, a, b));
    }
    for (m, (x, y)) in v.members.iter().zip(&points) {
        let state = m.exit_status.as_deref().unwrap_or("running");
        let _ = write!(
            out,
            "<g class=\"node{entry}\" data-member=\"{name}\"><circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"26\"/>\
             <text x=\"{x:.1}\" y=\"{ty:.1}\" class=\"name\">{name}</text>\
             <text x=\"{x:.1}\" y=\"{sy:.1}\" class=\"state\">{mark}{state}</text></g>",
            entry = if m.entry { " entry" } else { "" },
            name = e(&m.name),
            ty = y + 4.0,
            sy = y + 42.0,
            mark = if m.entry { "entry · " } else { "" },
            state = e(state),
        );
    }
    out.push_str("</svg>");
    out
}

fn edge_svg(edge: &Edge, a: (f64, f64), b: (f64, f64)) -> String {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len = (dx * dx + dy * dy).sqrt().max(1.0);
    // Stop at the circles' rims; a slight sideways offset keeps a→b and b→a apart.
    let (ux, uy) = (dx / len, dy / len);
    let (ox, oy) = (-uy * 4.0, ux * 4.0);
    let (x1, y1) = (a.0 + ux * 28.0 + ox, a.1 + uy * 28.0 + oy);
    let (x2, y2) = (b.0 - ux * 30.0 + ox, b.1 - uy * 30.0 + oy);
    let status = edge.worst_status().unwrap_or("none");
    let mut class = String::from("edge");
    if edge.calls > 0 {
        class.push_str(" called");
    }
    if !edge.declared {
        class.push_str(" undeclared");
    }
    let mut out = format!(
        "<g class=\"{class} st-{st}\" data-from=\"{from}\" data-to=\"{to}\" data-calls=\"{calls}\">\
         <line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" marker-end=\"url(#arrow)\"/>",
        st = e(status),
        from = e(&edge.from),
        to = e(&edge.to),
        calls = edge.calls,
    );
    if edge.calls > 0 {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\">{}× {}</text>",
            (x1 + x2) / 2.0 + ox * 2.0,
            (y1 + y2) / 2.0 + oy * 2.0,
            edge.calls,
            e(status)
        );
    }
    out.push_str("</g>");
    out
}

fn calls(v: &FormationView) -> String {
    if v.calls.is_empty() {
        return "<section class=\"calls\"><h2>Calls</h2><p class=\"empty\">No call yet.</p></section>".into();
    }
    let mut out = String::from("<section class=\"calls\"><h2>Calls</h2><ol class=\"tree\">");
    for c in &v.calls {
        let _ = write!(
            out,
            "<li class=\"call st-{st}\" data-depth=\"{d}\" data-call=\"{id}\"><span class=\"indent d{dc}\"></span>\
             {from} → {to} <span class=\"status s-{st}\">{st}</span> {dur} <code>{id}</code></li>",
            st = e(&c.status),
            d = c.depth,
            dc = c.depth.min(8),
            id = e(&c.call_id),
            from = e(&c.caller),
            to = e(&c.member),
            dur = c.duration_ms.map(duration).unwrap_or_default(),
        );
    }
    out.push_str("</ol></section>");
    out
}

/// A task's live part: the question it asks and its answer so far, as its door said them, or,
/// once the formation ended, that the text is gone. The script (`assets/app.js`) updates the
/// same elements from the stream, as text.
fn live_part(t: &TaskRow, running: bool, live: &BTreeMap<String, Shown>) -> String {
    if t.answer.is_some() {
        return String::new();
    }
    let shown = live.get(&t.task_id);
    if !running && shown.is_none() {
        return format!("<p class=\"note gone\">{}</p>", e(GONE));
    }
    let task = shown.map(|s| &s.task);
    let question = task.and_then(|t| t.question.as_deref());
    let gone = !running && task.is_none_or(|t| !t.settled()) || shown.is_some_and(|s| s.gone);
    let cut = task.is_some_and(|t| t.cut);
    let note = match (gone, cut) {
        (true, _) => GONE,
        (false, true) => CUT,
        (false, false) => "",
    };
    format!(
        "<div class=\"live\" data-task=\"{id}\"><p class=\"question\"{qh}>{q}</p><pre class=\"stream\">{text}</pre>\
         <p class=\"note\"{nh}>{note}</p></div>",
        id = e(&t.task_id),
        qh = if question.is_some() { "" } else { " hidden" },
        q = e(question.unwrap_or_default()),
        text = e(task.map(|t| t.text.as_str()).unwrap_or_default()),
        nh = if note.is_empty() { " hidden" } else { "" },
        note = e(note),
    )
}

fn member(frm: &str, m: &MemberNode, running: bool, live: &BTreeMap<String, Shown>) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<section class=\"member\" id=\"m-{name}\" data-member=\"{name}\"><h2>{name}{entry}</h2>\
         <p class=\"meta\"><code>{ses}</code> · {capsule}{model} · <span class=\"status s-{st}\">{st}</span>{cut}</p>",
        name = e(&m.name),
        entry = if m.entry {
            " <span class=\"badge\">entry</span>"
        } else {
            ""
        },
        ses = e(&m.session_id),
        capsule = e(&m.capsule),
        model = m
            .model
            .as_deref()
            .map(|x| format!(" · model {}", e(x)))
            .unwrap_or_default(),
        st = e(m.exit_status.as_deref().unwrap_or("running")),
        cut = if m.truncated {
            " · <span class=\"warn\">trace truncated</span>"
        } else {
            ""
        },
    );
    if !m.tasks.is_empty() {
        out.push_str(
            "<table class=\"tasks\"><thead><tr><th>task</th><th>state</th><th>from</th><th>duration</th>\
             <th>question or answer</th></tr></thead><tbody>",
        );
        for t in &m.tasks {
            let asking = t
                .asking
                .as_ref()
                .map(|(by, bytes)| {
                    let who = if by.is_empty() {
                        m.name.clone()
                    } else {
                        by.join(" ← ")
                    };
                    format!(
                        "{} asks ({bytes} B): answer with <code>mur answer {}</code>",
                        e(&who),
                        e(&t.task_id)
                    )
                })
                .unwrap_or_default();
            // The answer as filed, escaped, folded away: a page of many tasks stays short.
            let answer = t
                .answer
                .as_deref()
                .map(|a| {
                    format!(
                        "<details class=\"answer\"><summary>answer</summary><pre>{}</pre></details>",
                        e(a)
                    )
                })
                .unwrap_or_default();
            let asking = asking + &answer + &live_part(t, running, live) + &task_actions(frm, t, running);
            let _ = write!(
                out,
                "<tr class=\"task\" data-state=\"{st}\"><td><code>{id}</code></td><td><span class=\"status s-{st}\">{st}</span></td>\
                 <td>{from}</td><td>{dur}</td><td>{asking}</td></tr>",
                st = e(&t.state),
                id = e(&t.task_id),
                from = e(t.caller.as_deref().unwrap_or("operator")),
                dur = t.duration_ms.map(duration).unwrap_or_default(),
            );
            out.push_str(&timeline(t));
        }
        out.push_str("</tbody></table>");
    }
    if !m.turns.is_empty() {
        out.push_str(
            "<table class=\"turns\"><thead><tr><th>task</th><th>turn</th><th>model</th><th>tokens in</th>\
             <th>tokens out</th><th>duration</th><th>status</th></tr></thead><tbody>",
        );
        for t in &m.turns {
            let n = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
            let _ = write!(
                out,
                "<tr class=\"turn\"><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"model\">{}</td>\
                 <td class=\"num tin\">{}</td><td class=\"num tout\">{}</td><td>{}</td><td>{}</td></tr>",
                e(&t.task_id),
                t.turn,
                e(&t.model),
                n(t.input_tokens),
                n(t.output_tokens),
                duration(t.duration_ms),
                e(&t.status)
            );
        }
        out.push_str("</tbody></table>");
    }
    if !m.tools.is_empty() {
        out.push_str(
            "<table class=\"tools\"><thead><tr><th>task</th><th>tool</th><th>kind</th><th>duration</th>\
             <th>status</th></tr></thead><tbody>",
        );
        for t in &m.tools {
            let _ = write!(
                out,
                "<tr class=\"tool\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                e(&t.task_id),
                e(&t.tool),
                e(&t.kind),
                duration(t.duration_ms),
                e(&t.status)
            );
        }
        out.push_str("</tbody></table>");
    }
    if !m.diagnostics.is_empty() {
        out.push_str("<ul class=\"diagnostics\">");
        for d in &m.diagnostics {
            let _ = write!(out, "<li><code>{}</code></li>", e(d));
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::view::{SessionRecords, build};
    use serde_json::json;

    #[test]
    fn record_text_is_escaped_everywhere() {
        let evil = "<script>alert(1)</script>";
        let records = vec![
            json!({"event_type":"session_start","session_id":"ses_1","timestamp":1,"capsule_name":evil,
                   "formation_id":"frm_x","formation_member":"lead","formation_callees":[],"model":evil}),
            json!({"event_type":"inference","task_id":"tsk_1","turn":1,"model":"m","response_model":evil,
                   "duration_ms":5,"status":"ok"}),
            json!({"event_type":"tool_call","task_id":"tsk_1","tool":evil,"kind":"mcp","duration_ms":1,"status":evil}),
        ];
        let v = build(
            "frm_x",
            &[SessionRecords {
                records,
                entry: true,
                diagnostics: vec![format!("error[E-X-001]: {evil}")],
            }],
        );
        let page = shell(evil, &formation(&v, false, 10), None, "ab");
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        // The page's one script is the served file.
        assert_eq!(page.matches("<script").count(), 1);
    }

    #[test]
    fn a_tasks_live_text_is_escaped_and_says_when_it_is_gone() {
        let task = TaskRow {
            task_id: "tsk_1".into(),
            state: "working".into(),
            ..TaskRow::default()
        };
        let shown = |text: &str, question: Option<&str>, state: TaskState, cut: bool, gone: bool| Shown {
            task: crate::wire::live_task::LiveTask {
                state: Some(state),
                text: text.into(),
                cut,
                question: question.map(str::to_owned),
            },
            gone,
            version: 1,
        };
        let one = |s: Shown| BTreeMap::from([("tsk_1".to_string(), s)]);
        // (running, live, what the part holds, what it must not)
        type Case<'a> = (bool, BTreeMap<String, Shown>, Vec<&'a str>, Vec<&'a str>);
        let table: Vec<Case> = vec![
            (
                true,
                BTreeMap::new(),
                vec!["data-task=\"tsk_1\"", "class=\"note\" hidden"],
                vec![GONE],
            ),
            (
                true,
                one(shown("<i>Hi</i>", None, TaskState::Working, false, false)),
                vec!["&lt;i&gt;Hi&lt;/i&gt;", "class=\"question\" hidden"],
                vec!["<i>", GONE],
            ),
            (
                true,
                one(shown("", Some("Which <b>?"), TaskState::InputRequired, false, false)),
                vec!["<p class=\"question\">Which &lt;b&gt;?</p>"],
                vec!["<b>"],
            ),
            (
                true,
                one(shown("x", None, TaskState::Working, true, false)),
                vec![CUT],
                vec![GONE],
            ),
            (false, BTreeMap::new(), vec![GONE], vec!["data-task"]),
            (
                false,
                one(shown("Hal", None, TaskState::Working, false, true)),
                vec!["Hal", GONE],
                vec![],
            ),
            (
                false,
                one(shown("Done", None, TaskState::Completed, false, false)),
                vec!["Done"],
                vec![GONE],
            ),
        ];
        for (running, live, has, lacks) in table {
            let part = live_part(&task, running, &live);
            for h in has {
                assert!(part.contains(h), "{running} {live:?}: {h} not in {part}");
            }
            for l in lacks {
                assert!(!part.contains(l), "{running} {live:?}: {l} in {part}");
            }
        }
        // A task whose answer was filed shows that, not a live part.
        let filed = TaskRow {
            answer: Some("A".into()),
            ..task.clone()
        };
        assert_eq!(live_part(&filed, false, &BTreeMap::new()), "");
        assert_eq!(state_word(TaskState::InputRequired), "input-required");
    }

    #[test]
    fn actions_show_only_where_they_can_act_and_timelines_are_escaped() {
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let records = vec![
            json!({"event_type":"session_start","session_id":"ses_1","timestamp":1,"capsule_name":"c",
                   "formation_id":frm,"formation_member":"lead","formation_callees":[]}),
            json!({"event_type":"task_start","task_id":"tsk_ask","timestamp":2}),
            json!({"event_type":"input_requested","task_id":"tsk_ask","timestamp":3,"asked_by":[],"question_bytes":4}),
            json!({"event_type":"task_start","task_id":"tsk_work","timestamp":4}),
            json!({"event_type":"task_start","task_id":"tsk_done","timestamp":5}),
            json!({"event_type":"task_end","task_id":"tsk_done","timestamp":6,"exit_status":"ok","duration_ms":1}),
        ];
        let mut v = build(
            frm,
            &[SessionRecords {
                records,
                entry: true,
                diagnostics: vec![],
            }],
        );
        for t in &mut v.members[0].tasks {
            t.timeline = vec![crate::trace::timeline::Step {
                kind: "task",
                title: "task".into(),
                text: Some("<img src=x onerror=alert(1)>".into()),
                ..Default::default()
            }];
        }
        let running = formation(&v, true, 10);
        // (what the running page holds, and how many times)
        let table: Vec<(String, usize)> = vec![
            (format!("data-act=\"/act/send/{frm}\""), 1),
            (format!("data-act=\"/act/stop/{frm}\""), 1),
            (format!("data-act=\"/act/answer/{frm}/tsk_ask\""), 1),
            (format!("data-act=\"/act/cancel/{frm}/tsk_ask\""), 1),
            (format!("data-act=\"/act/cancel/{frm}/tsk_work\""), 1),
            (format!("data-act=\"/act/answer/{frm}/tsk_work\""), 0),
            (format!("/act/cancel/{frm}/tsk_done"), 0),
            ("&lt;img src=x onerror=alert(1)&gt;".into(), 3),
            ("<img".into(), 0),
        ];
        for (has, n) in table {
            assert_eq!(running.matches(has.as_str()).count(), n, "{has} in {running}");
        }
        let ended = formation(&v, false, 10);
        assert!(!ended.contains("data-act"), "an ended formation offers no action");
        let page = shell("t", &running, None, "00ff");
        assert!(page.contains("<meta name=\"mur-page-token\" content=\"00ff\">"));
        assert!(!page.contains("<form action"), "no form submits itself");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        let table: &[(u64, &str)] = &[(0, "0 ms"), (999, "999 ms"), (1234, "1.2 s"), (125_000, "2 min 5 s")];
        for (ms, want) in table {
            assert_eq!(duration(*ms), *want);
        }
    }
}
