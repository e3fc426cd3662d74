//! Fuzzes how a calling member reads its callee's door
//! (docs/reference/capsules.md#calls-between-members):
//! the SendMessage reply, the GetTask reply, and SubscribeToTask events folded into the callee's
//! task. A callee's door, or whatever answers at its URL, controls every byte.
//!
//! Input: the first byte picks the HTTP status (one of those a door answers with); the rest is the
//! body, also read as a stream of `data:` events split on newlines. Properties: no panic; reading
//! is deterministic; a `no_answer` outcome names at most `MAX_NO_ANSWER_BELOW` calls.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::wire::calls::{MAX_NO_ANSWER_BELOW, Poll, StreamedTask, read_get_task, read_send_reply, stream_news};

const STATUSES: [u16; 8] = [200, 400, 401, 403, 404, 413, 500, 503];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let status = STATUSES[usize::from(pick) % STATUSES.len()];

    let sent = read_send_reply("worker", status, body);
    assert_eq!(read_send_reply("worker", status, body), sent);

    let polled = read_get_task("worker", status, body);
    assert_eq!(read_get_task("worker", status, body), polled);
    if let Poll::Ended(ended) = &polled {
        assert!(ended.no_answer_below.len() <= MAX_NO_ANSWER_BELOW);
    }

    // The same bytes as a stream of events, one JSON value per line.
    let mut task = StreamedTask::default();
    for line in body.split(|&b| b == b'\n') {
        if let Ok(event) = serde_json::from_slice::<serde_json::Value>(line) {
            let news = stream_news(&event);
            assert_eq!(stream_news(&event), news);
            task.apply(&event);
            if let Some(ended) = task.ended("worker") {
                assert!(ended.no_answer_below.len() <= MAX_NO_ANSWER_BELOW);
            }
        }
    }
});
