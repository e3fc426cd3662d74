//! The event stream of a page: `event: change` whenever the records it shows grew (a formation's
//! traces, or for the list every formation's), so the script fetches the page's fragment again,
//! and on a formation's page `event: text` whenever a task's live text (`live.rs`: its answer as
//! it streams, its question) changed, which the script puts in place as text. It sends no record
//! itself: what a page shows of the records is rendered, escaped, in one place (`page.rs`).
//! Like `mur trace show --follow`, it looks at the traces' lengths on a poll; at most
//! [`super::MAX_STREAMS`] streams are open at once, and each looks at the files it watches once
//! per poll, whatever the browser does.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use serde_json::json;

use super::{State, records, secured, text};

/// How often a formation's traces are looked at (the list's walk: every fourth time).
const POLL: Duration = Duration::from_millis(250);
/// A comment this often keeps idle proxies and the browser from giving up on the stream.
const KEEP_ALIVE_POLLS: u32 = 60;

/// Releases the stream's slot when the browser goes away and actix drops the stream.
struct Slot(Arc<State>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a stream remembers between polls.
struct Polling {
    slot: Slot,
    formation: Option<String>,
    last: Option<u64>,
    polls: u32,
    first: bool,
    /// The version of each task's live text last sent.
    sent: HashMap<String, u64>,
}

/// The stream for one formation (`Some`) or the list (`None`).
pub fn stream(state: Arc<State>, formation: Option<String>) -> HttpResponse {
    if state.streams.fetch_add(1, Ordering::SeqCst) >= super::MAX_STREAMS {
        state.streams.fetch_sub(1, Ordering::SeqCst);
        return text(StatusCode::SERVICE_UNAVAILABLE, "too many open event streams\n".into());
    }
    let start = Polling {
        slot: Slot(state),
        formation,
        last: None,
        polls: 0,
        first: true,
        sent: HashMap::new(),
    };
    let body = futures_util::stream::unfold(start, |mut p| async move {
        if p.first {
            p.first = false;
            return Some((
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"retry: 1000\n\n")),
                p,
            ));
        }
        loop {
            actix_rt::time::sleep(POLL).await;
            p.polls = p.polls.wrapping_add(1);
            let mut out = match &p.formation {
                Some(id) => live_events(&p.slot.0, id, &mut p.sent),
                None => String::new(),
            };
            let list = p.formation.is_none();
            if !(list && p.polls % 4 != 0 && p.polls % KEEP_ALIVE_POLLS != 0) {
                let state = p.slot.0.clone();
                let watched = p.formation.clone();
                let now = actix_web::web::block(move || fingerprint(&state, watched.as_deref()))
                    .await
                    .ok();
                if let Some(now) = now
                    && p.last != Some(now)
                {
                    // The first look reports a change too: records may have been appended
                    // between the page's render and the stream's start.
                    out.push_str(&format!("event: change\ndata: {now:x}\n\n"));
                    p.last = Some(now);
                }
            }
            if out.is_empty() && p.polls % KEEP_ALIVE_POLLS == 0 {
                out.push_str(": keep-alive\n\n");
            }
            if !out.is_empty() {
                return Some((Ok(bytes::Bytes::from(out)), p));
            }
        }
    });
    secured(HttpResponse::Ok())
        .content_type("text/event-stream")
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// An `event: text` for each of the formation's tasks whose live text changed since it was last
/// sent: `{"task", "state", "text", "cut", "question", "gone"}`, JSON with `<`, `>` and `&`
/// escaped besides, on one line. The page puts it in place as text, never as markup.
fn live_events(state: &State, formation: &str, sent: &mut HashMap<String, u64>) -> String {
    let mut out = String::new();
    // Ids of tasks the server forgot stay behind: cleared past a bound, which resends the rest.
    if sent.len() > 2 * super::live::MAX_TASKS {
        sent.clear();
    }
    for (task_id, shown) in state.live.changed(formation, sent) {
        sent.insert(task_id.clone(), shown.version);
        let data = json!({
            "task": task_id,
            "state": shown.task.state.map(super::page::state_word),
            "text": shown.task.text,
            "cut": shown.task.cut,
            "question": shown.task.question,
            "gone": shown.gone,
        });
        out.push_str("event: text\ndata: ");
        out.push_str(&script_safe(&data.to_string()));
        out.push_str("\n\n");
    }
    out
}

/// JSON that stays inert wherever it lands: no `<`, `>` or `&` as such.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// What changes when the watched records do.
fn fingerprint(state: &State, formation: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let files = match formation {
        Some(id) => state.index.formation_traces(&state.home, id),
        None => state.index.traces(&state.home),
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    records::fingerprint(&files).hash(&mut h);
    // A formation that ends changes its status even when no record follows.
    let mut alive: Vec<String> = records::alive_formations(&state.home)
        .into_iter()
        .filter(|id| formation.is_none_or(|f| f == id))
        .collect();
    alive.sort();
    alive.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::script_safe;

    #[test]
    fn relayed_json_carries_no_markup_characters() {
        let data = serde_json::json!({"text": "</script><b>&amp;\n"}).to_string();
        let safe = script_safe(&data);
        assert!(!safe.contains(['<', '>', '&', '\n']), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back["text"], "</script><b>&amp;\n");
    }
}
