//! `mur ui`'s actions, in a real headless Chromium against a running formation of the real
//! binary: a task typed into the entry's box, the question it asks answered where it is shown
//! (by the keyboard), a second task canceled, the formation stopped; and before any of it,
//! requests that cannot act: without the page token, with a wrong one, without this origin, and
//! from a page of another origin in the same browser (whose requests carry the cookie: the
//! cookie does not tell ports apart). What they tried never became a task, and the formation
//! kept running until the page stopped it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use serde_json::json;

use crate::support::chromium::Browser;
use crate::support::provider::{Gate, Piece, Provider, Reply, openai};
use crate::support::{Launcher, Sandbox};
use crate::ui::{KEY, KEY_VAR, Ui};

const QUESTION: &str = "Which <b>colour</b>?";
const ANSWERED: &str = "Painted blue.";
/// What the other origin's page tries to send.
const FORGED: &str = "pwned by another site";

/// One POST of `body` to `path` with exactly these headers: the status and the whole reply.
fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("write");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

/// A server of another origin (another port of 127.0.0.1) whose one page, once loaded, sends
/// `mur ui` the requests a hostile page can: simple POSTs with the browser's cookie, and a POST
/// with a guessed page token (which needs the server's consent first). `window.done` lists how
/// each went: `sent` (an opaque reply), `read` (a reply the page could read), `blocked`.
fn other_origin(ui_port: u16, frm: &str) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let page = format!(
        "<!doctype html><html><body><script>\n\
         (async () => {{ const r = [];\n\
           for (const p of ['/act/send/{frm}', '/act/stop/{frm}']) {{\n\
             const url = 'http://127.0.0.1:{ui_port}' + p;\n\
             const body = JSON.stringify({{text: {forged}}});\n\
             try {{ await fetch(url, {{method: 'POST', mode: 'no-cors', credentials: 'include', \
                    headers: {{'Content-Type': 'text/plain'}}, body}}); r.push('read'); }} catch (e) {{ r.push('error'); }}\n\
             try {{ const x = await fetch(url, {{method: 'POST', credentials: 'include', \
                    headers: {{'Content-Type': 'application/json', 'X-Mur-Page-Token': 'ab'.repeat(32)}}, body}});\n\
                    r.push('read ' + x.status); }} catch (e) {{ r.push('blocked'); }}\n\
           }}\n\
           window.done = r; }})();\n\
         </script></body></html>",
        forged = json!(FORGED),
    );
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = BufReader::new(conn);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let mut conn = reader.into_inner();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

/// The task records of the entry's trace.
fn task_starts(sb: &Sandbox) -> Vec<serde_json::Value> {
    let rec = crate::support::running_record(sb, "writer");
    let dir = std::path::PathBuf::from(rec["records_dir"].as_str().expect("records_dir"));
    std::fs::read_to_string(dir.join("trace.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event_type"] == "task_start")
        .collect()
}

#[test]
fn the_operator_sends_answers_cancels_and_stops_from_the_page_and_no_other_origin_can() {
    let sb = Sandbox::new();
    let gate = Gate::new();
    // The second task's turn is held until the test ends: it is canceled while it waits.
    let mut held = vec![Piece::Wait(gate.clone())];
    held.extend(openai::stream_text(&["Never sent."]).into_iter().map(Piece::Bytes));
    let script = vec![
        Reply::json(openai::tool_calls(&[(
            "q1",
            "request-input",
            json!({"question": QUESTION}),
        )]))
        .into(),
        Reply::json(openai::text(ANSWERED)).into(),
        Reply::pieces(held).into(),
    ];
    let provider = Provider::start(script);
    let manifest = format!(
        "name: writer\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You write.\n  max_turns: 4\n\
         lifecycle:\n  input_timeout_secs: 120\ncapabilities:\n  network:\n    allow: [localhost]\n\
         network:\n  authentication:\n    scheme: bearer\n",
        provider.url()
    );
    sb.install_manifest("writer", &manifest);
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - name: writer\n    capsule: local/writer\n    version: 0.1.0\n    entry: true\n",
    )
    .expect("roster");
    // No --task: the formation serves until it is stopped.
    let launcher = Launcher::start(&sb, &dir, &[], &[(KEY_VAR, KEY)]);
    let frm = launcher.formation_id();
    let ui = Ui::start(&sb);
    let host = format!("127.0.0.1:{}", ui.port);
    let origin = format!("http://{host}");
    let cookie = format!("mur_ui_{}={}", ui.port, ui.token());
    let send_path = format!("/act/send/{frm}");
    let body = json!({ "text": FORGED }).to_string();

    // The page token, from a page of the server, as the script reads it.
    let mut b = Browser::start();
    b.goto(&ui.with_token(&format!("/formation/{frm}")));
    let token = b.eval("document.querySelector('meta[name=\"mur-page-token\"]').content");
    let token = token.as_str().expect("the page token").to_string();
    assert_eq!(token.len(), 64);
    assert_ne!(token, ui.token(), "the page token is not the cookie's");

    // Requests with the cookie but without what only a page of the server has are refused.
    let wrong = "cd".repeat(32);
    /// (headers besides Host and the cookie, status, what the reply says)
    type Case<'a> = (Vec<(&'a str, &'a str)>, u16, &'a str);
    let table: Vec<Case> = vec![
        (vec![("Origin", origin.as_str())], 403, "E-UI-002"),
        (
            vec![("Origin", origin.as_str()), ("X-Mur-Page-Token", wrong.as_str())],
            403,
            "E-UI-002",
        ),
        (vec![("X-Mur-Page-Token", token.as_str())], 403, "E-UI-002"),
        (
            vec![("Origin", "http://evil.example"), ("X-Mur-Page-Token", token.as_str())],
            403,
            "another origin",
        ),
        (
            vec![
                ("Origin", origin.as_str()),
                ("Sec-Fetch-Site", "same-site"),
                ("X-Mur-Page-Token", token.as_str()),
            ],
            403,
            "another site",
        ),
    ];
    for (i, (extra, status, says)) in table.into_iter().enumerate() {
        let mut headers = vec![("Host", host.as_str()), ("Cookie", cookie.as_str())];
        headers.extend(extra);
        let (got, reply) = post(ui.port, &send_path, &headers, &body);
        assert_eq!(got, status, "case {i}: {reply}");
        assert!(reply.contains(says), "case {i}: {reply}");
    }
    // The page token without the cookie is no better.
    let (got, reply) = post(
        ui.port,
        &send_path,
        &[("Host", &host), ("Origin", &origin), ("X-Mur-Page-Token", &token)],
        &body,
    );
    assert_eq!(got, 401, "{reply}");

    // A page of another origin in the same browser: its simple POSTs go out (with the cookie)
    // and are refused; the one with a custom header is not even sent.
    let evil = other_origin(ui.port, &frm);
    b.goto(&format!("http://127.0.0.1:{evil}/"));
    let tried = b.wait_for("window.done", Duration::from_secs(20));
    assert!(tried.is_some(), "the other origin's page did not finish");
    // The simple POST goes out with the cookie and is refused (the table above is the server's
    // side of it); its reply is withheld from the other origin by Cross-Origin-Resource-Policy,
    // so even its status is unknown there. The one with the page-token header needs a preflight,
    // which is refused, so it never goes out. What follows shows nothing was done.
    assert_eq!(b.eval("window.done"), json!(["error", "blocked", "error", "blocked"]));

    // (a) A task from the entry's box: it asks, and the question shows with its answer form.
    b.goto(&format!("http://127.0.0.1:{}/formation/{frm}", ui.port));
    b.eval("window.notReloaded = true");
    b.eval(
        "(() => { const a = document.querySelector('form.act-send textarea'); a.focus(); a.value = 'Paint the fence'; \
         a.dispatchEvent(new Event('input', {bubbles: true})); \
         document.querySelector('form.act-send button[type=submit]').click(); return 1; })()",
    );
    let asked = b.wait_for(
        &format!(
            "document.querySelector('.live[data-task] .question')?.textContent === {} \
             && document.querySelector('form.act-answer textarea')",
            json!(QUESTION)
        ),
        Duration::from_secs(30),
    );
    assert!(
        asked.is_some(),
        "no question with an answer form: {} / {}",
        b.eval("document.body.innerText"),
        b.eval("document.getElementById('act-status').textContent")
    );
    assert_eq!(
        b.eval("document.getElementById('act-status').dataset.outcome"),
        json!("ok"),
        "{}",
        b.eval("document.getElementById('act-status').textContent")
    );
    assert_eq!(b.eval("document.querySelectorAll('main b').length"), json!(0));

    // (b) Answered where the question is shown, by the keyboard (Ctrl+Enter): the task ends.
    b.eval(
        "(() => { const t = document.querySelector('form.act-answer textarea'); t.focus(); t.value = 'blue'; \
         t.dispatchEvent(new Event('input', {bubbles: true})); \
         t.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', ctrlKey: true, bubbles: true})); return 1; })()",
    );
    let done = b.wait_for(
        &format!(
            "[...document.querySelectorAll('.live pre.stream, details.answer pre')].some(p => p.textContent === {}) \
             && document.querySelector('tr.task').dataset.state === 'completed'",
            json!(ANSWERED)
        ),
        Duration::from_secs(30),
    );
    assert!(
        done.is_some(),
        "{} / {}",
        b.eval("document.body.innerText"),
        b.eval("document.getElementById('act-status').textContent")
    );
    let asked_with = provider.requests()[1].text();
    assert!(
        asked_with.contains("blue"),
        "the answer reached the model: {asked_with}"
    );
    assert_eq!(b.eval("document.querySelectorAll('form.act-answer').length"), json!(0));

    // The task's timeline: its text first (kept beside the trace), the turns with their words,
    // the question and its answer with theirs, the end last.
    b.eval("document.querySelector('details.timeline').open = true; 1");
    let kinds = b.eval("[...document.querySelectorAll('details.timeline li.step')].map(l => l.dataset.kind)");
    let kinds: Vec<&str> = kinds
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|k| k.as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"end"), "{kinds:?}");
    let count = |k: &str| kinds.iter().filter(|x| **x == k).count();
    assert_eq!(
        (count("turn"), count("question"), count("answer")),
        (2, 1, 1),
        "{kinds:?}"
    );
    assert_eq!(
        b.eval("document.querySelector('details.timeline li.step[data-kind=\"task\"] pre.text').textContent"),
        json!("Paint the fence")
    );
    let mut part = |kind: &str, part: &str| {
        b.eval(&format!(
            "(() => {{ const p = document.querySelector('details.timeline li.step[data-kind=\"{kind}\"] .part[data-part=\"{part}\"] pre'); return p ? p.textContent : null; }})()"
        ))
    };
    assert_eq!(part("turn", "input"), json!("Paint the fence"));
    assert_eq!(part("answer", "answer"), json!("blue"));
    let question = part("question", "question");
    assert_eq!(question, json!(QUESTION), "shown as text");

    // (c) A second task, canceled while its turn waits.
    b.eval(
        "(() => { const a = document.querySelector('form.act-send textarea'); a.value = 'Paint the house'; \
         document.querySelector('form.act-send button[type=submit]').click(); return 1; })()",
    );
    assert!(
        provider.wait_requests(3, Duration::from_secs(30)),
        "the second task's turn"
    );
    let cancel = b.wait_for("document.querySelector('button.act-cancel')", Duration::from_secs(20));
    assert!(cancel.is_some(), "{}", b.eval("document.body.innerText"));
    b.eval("document.querySelector('button.act-cancel').click(); 1");
    let canceled = b.wait_for(
        "document.querySelectorAll('tr.task[data-state=\"canceled\"]').length === 1",
        Duration::from_secs(30),
    );
    assert!(
        canceled.is_some(),
        "{} / {}",
        b.eval("document.body.innerText"),
        b.eval("document.getElementById('act-status').textContent")
    );
    assert_eq!(b.eval("window.notReloaded"), json!(true), "all of it in place");

    // Of everything sent, only the page's own tasks became tasks.
    assert_eq!(task_starts(&sb).len(), 2);
    for r in provider.requests() {
        assert!(!r.text().contains(FORGED), "a forged task reached the model");
    }

    // (d) Stop asks for a second press, then stops the formation.
    b.eval("document.querySelector('button.act-stop').click(); 1");
    assert_eq!(
        b.eval("document.querySelector('button.act-stop').textContent"),
        json!("Press again to stop")
    );
    assert!(
        crate::support::running_records(&sb)
            .iter()
            .any(|r| r["formation_id"] == frm.as_str())
    );
    b.eval("document.querySelector('button.act-stop').click(); 1");
    let stopped = b.wait_for(
        &format!("document.getElementById('act-status').textContent.includes('stopped:  {frm}')"),
        Duration::from_secs(40),
    );
    assert!(
        stopped.is_some(),
        "{}",
        b.eval("document.getElementById('act-status').textContent")
    );
    let _ = launcher.wait(Duration::from_secs(30));
    let ended = b.wait_for(
        "document.querySelector('.summary').dataset.status !== 'running' && !document.querySelector('.controls')",
        Duration::from_secs(20),
    );
    assert!(ended.is_some(), "{}", b.eval("document.body.innerText"));
    gate.open();

    // (e) The list finds the run again: its roster's directory, its first task's words, a
    // short id; the filter keeps the rows holding every word typed.
    b.goto(&format!("http://127.0.0.1:{}/", ui.port));
    let row = format!("tr.formation[data-formation=\"{frm}\"]");
    let cells = b.eval(&format!(
        "(() => {{ const r = document.querySelector('{row}'); \
           return [r.querySelector('a code').textContent, r.querySelector('.roster').textContent, \
                   r.querySelector('.task-words').textContent]; }})()"
    ));
    let short = cells[0].as_str().expect("the short id");
    assert!(frm.starts_with(short) && short.len() < frm.len(), "{cells}");
    assert!(cells[1].as_str().is_some_and(|d| d.ends_with("/formation")), "{cells}");
    assert_eq!(cells[2], json!("Paint the fence"));
    let typed = |b: &mut Browser, words: &str| {
        b.eval(&format!(
            "(() => {{ const f = document.getElementById('filter'); f.value = {}; \
               f.dispatchEvent(new Event('input', {{bubbles: true}})); \
               return document.querySelector('{row}').hidden; }})()",
            json!(words)
        ))
    };
    assert_eq!(typed(&mut b, "FENCE paint"), json!(false));
    assert_eq!(typed(&mut b, "fence nothing-like-it"), json!(true));
    assert_eq!(typed(&mut b, ""), json!(false));
}
