//! The event stream of a page: `event: change` whenever the records it shows grew (a formation's
//! traces, or for the list every formation's), so the script fetches the page's fragment again.
//! It sends no record itself: what a page shows is rendered, escaped, in one place (`page.rs`).
//! Like `mur trace show --follow`, it looks at the traces' lengths on a poll; at most
//! [`super::MAX_STREAMS`] streams are open at once, and each looks at the files it watches once
//! per poll, whatever the browser does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

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

/// The stream for one formation (`Some`) or the list (`None`).
pub fn stream(state: Arc<State>, formation: Option<String>) -> HttpResponse {
    if state.streams.fetch_add(1, Ordering::SeqCst) >= super::MAX_STREAMS {
        state.streams.fetch_sub(1, Ordering::SeqCst);
        return text(StatusCode::SERVICE_UNAVAILABLE, "too many open event streams\n".into());
    }
    let slot = Slot(state);
    let first = Some(bytes::Bytes::from_static(b"retry: 1000\n\n"));
    let body = futures_util::stream::unfold(
        (slot, formation, None::<u64>, 0u32, first),
        |(slot, formation, last, polls, first)| async move {
            if let Some(b) = first {
                return Some((Ok::<_, std::io::Error>(b), (slot, formation, last, polls, None)));
            }
            let mut polls = polls;
            loop {
                actix_rt::time::sleep(POLL).await;
                polls = polls.wrapping_add(1);
                let list = formation.is_none();
                if list && polls % 4 != 0 && polls % KEEP_ALIVE_POLLS != 0 {
                    continue;
                }
                let state = slot.0.clone();
                let watched = formation.clone();
                let now = actix_web::web::block(move || fingerprint(&state, watched.as_deref()))
                    .await
                    .ok();
                if let Some(now) = now
                    && last != Some(now)
                {
                    // The first look reports a change too: records may have been appended
                    // between the page's render and the stream's start.
                    let event = format!("event: change\ndata: {now:x}\n\n");
                    return Some((Ok(bytes::Bytes::from(event)), (slot, formation, Some(now), polls, None)));
                }
                if polls % KEEP_ALIVE_POLLS == 0 {
                    return Some((
                        Ok(bytes::Bytes::from_static(b": keep-alive\n\n")),
                        (slot, formation, last, polls, None),
                    ));
                }
            }
        },
    );
    secured(HttpResponse::Ok())
        .content_type("text/event-stream")
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
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
