//! Fuzzes a remote capsule's reading of its remote agent (`wire::remote`;
//! docs/reference/capsules.md#remote-capsules): the agent card's check, a JSON-RPC reply, the
//! stream of events folded into the remote task, an HTTP refusal and its `retry-after`; and the
//! bodies it sends, built from what a caller wrote. The remote agent controls every byte read.
//!
//! Input: the first byte says whether the capsule has a key (bit 0), the attempt a refusal is
//! (bits 1-2) and its HTTP status (bits 3-7); the rest is the card, the reply, the events (one
//! JSON reply per line) and the `retry-after` value at once. Properties:
//! - no panic;
//! - a card accepted has a JSON-RPC endpoint of the card's own origin, over https or to loopback,
//!   a name within 200 bytes, and sends a credential exactly when the capsule has a key; allowing
//!   every origin accepts it too, as the same card; a refusal quotes at most 1 KiB;
//! - a reply's result is its `result` object, as the parsed reply reads; an error quotes at most
//!   2 KiB of what the agent said;
//! - folding events: streamed text grows the answer by exactly itself, an ended task's answer is
//!   the task's, a question is within `MAX_QUESTION`, the answer within `MAX_ANSWER_BYTES`, the
//!   task and context ids are the first ones seen and within 256 bytes;
//! - a refusal waits only for 429 and 5xx, before `MAX_RETRIES`, at most `RETRY_MAX`, and exactly
//!   the seconds a `retry-after` of digits asks within that bound;
//! - a request body built from any text reads back to that text, its ids and its method.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use mur_core::manifest::endpoint;
use mur_core::wire::remote::{self, Credential, Ended, News, Refusal, RemoteTask};
use serde_json::Value;

const CARD_URL: &str = "https://a.example/.well-known/agent-card.json";
const STATUSES: [u16; 16] = [
    200, 301, 307, 400, 401, 403, 404, 408, 429, 500, 501, 502, 503, 504, 505, 599,
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let has_key = mode & 1 == 1;
    let attempt = u32::from((mode >> 1) & 0x03) * 2;
    let status = STATUSES[usize::from(mode >> 3) % STATUSES.len()];

    card(body, has_key);
    reply(body);
    events(body);
    refused(status, std::str::from_utf8(body).ok(), attempt);
    sent(&String::from_utf8_lossy(body), mode & 1 == 1);
});

fn card(body: &[u8], has_key: bool) {
    let checked = remote::check_card(body, CARD_URL, has_key, |_| false);
    let anywhere = remote::check_card(body, CARD_URL, has_key, |_| true);
    match &checked {
        Ok(card) => {
            assert_eq!(remote::origin(&card.endpoint), remote::origin(CARD_URL));
            assert!(card.endpoint.starts_with("https://") || endpoint::plain_http_allowed(&card.endpoint));
            assert!(card.name.len() <= 200);
            assert_eq!(card.credential == Credential::None, !has_key, "{card:?}");
            assert_eq!(anywhere.as_ref(), Ok(card), "allowing more refused a card");
        }
        Err(e) => assert!(e.len() <= 1024, "{} bytes: {e}", e.len()),
    }
    if let Err(e) = &anywhere {
        assert!(e.len() <= 1024, "{} bytes: {e}", e.len());
    }
}

fn reply(body: &[u8]) {
    let read = remote::rpc_result(body);
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => {
            assert_eq!(read, remote::rpc_value(&v));
            if let Ok(result) = &read {
                assert!(result.is_object());
                assert_eq!(Some(result), v.get("result"));
            }
        }
        Err(_) => assert!(read.is_err()),
    }
    if let Err(e) = read {
        assert!(e.len() <= 2048 + 100, "{} bytes", e.len());
    }
}

fn events(body: &[u8]) {
    let mut task = RemoteTask::default();
    let mut again = RemoteTask::default();
    let mut ids: (Option<String>, Option<String>) = (None, None);
    for line in body.split(|&b| b == b'\n') {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let Ok(result) = remote::rpc_value(&event) else {
            continue;
        };
        let before = task.answer();
        let news = task.apply(&result);
        assert_eq!(again.apply(&result), news, "folding is deterministic");
        let after = task.answer();
        assert!(after.len() <= remote::MAX_ANSWER_BYTES);
        match &news {
            Ok(News::Chunk(text)) => assert_eq!(after.len(), before.len() + text.len()),
            Ok(News::Ended(Ended::Completed(answer))) => assert_eq!(answer, &after),
            Ok(News::Asked(q)) => assert!(!q.is_empty() && q.len() <= remote::MAX_QUESTION),
            Ok(News::Working(Some(t))) => assert!(!t.is_empty() && t.len() <= remote::MAX_QUESTION),
            Ok(News::Ended(Ended::Failed(t) | Ended::Rejected(t))) => {
                assert!(t.len() <= 100 + remote::MAX_QUESTION)
            }
            Ok(_) => {}
            Err(e) => assert!(e.len() <= 200, "{e}"),
        }
        for (kept, now) in [(&mut ids.0, &task.task_id), (&mut ids.1, &task.context_id)] {
            if kept.is_some() {
                assert_eq!(kept, now, "an id seen first stays");
            }
            if let Some(id) = now {
                assert!(!id.is_empty() && id.len() <= 256);
            }
            kept.clone_from(now);
        }
    }
}

fn refused(status: u16, retry_after: Option<&str>, attempt: u32) {
    // The runtime reads `Retry-After` (outbound's reader); here, whole seconds stand for it.
    let asked = retry_after
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    match remote::refusal(status, asked, attempt) {
        Refusal::Retry(wait) => {
            assert!(matches!(status, 429 | 500 | 502 | 503 | 504), "{status}");
            assert!(attempt < remote::MAX_RETRIES);
            assert!(wait <= remote::RETRY_MAX);
            if let Some(asked) = asked {
                assert_eq!(wait, asked, "the agent's own wait is kept when it is within the bound");
            }
        }
        Refusal::Reject(why) => {
            assert!(matches!(status, 401 | 403 | 429), "{status}: {why}");
        }
        Refusal::Fail(why) => assert!(status != 401 && status != 403, "{status}: {why}"),
    }
}

fn sent(text: &str, streaming: bool) {
    let continued = (!text.is_empty()).then_some(text);
    let body = remote::message_body(streaming, text, "m-1", text, continued, continued);
    let v: Value = serde_json::from_str(&body).expect("a request body is JSON");
    let method = if streaming {
        "SendStreamingMessage"
    } else {
        "SendMessage"
    };
    assert_eq!(v["method"], method);
    assert_eq!(v["id"], text);
    let message = &v["params"]["message"];
    assert_eq!(message["parts"][0]["text"], text);
    assert_eq!(message["taskId"].as_str(), continued);
    assert_eq!(message["contextId"].as_str(), continued);
}
