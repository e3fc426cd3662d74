//! `mur ui`: the real binary serving the sandbox's records, read by a real headless Chromium
//! (provisioned under target/, support/chromium.rs) and by plain HTTP requests: the demo
//! formation's graph, a running formation updating without a reload, a model formation's turns
//! and tokens, record text rendered as text, and every request that lacks the token, names
//! another host or comes from another origin refused; a formation started after the list was
//! opened appearing in it, its entry's question and then its streamed answer (held at a gate
//! before its last piece) shown live from the door, with the door's operator token in none of
//! what the browser gets; `--open` running `$BROWSER` with an owner-only launch page that
//! another user replaying the browser's argv cannot use; and the door's connection bounds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use serde_json::json;

use crate::support::chromium::Browser;
use crate::support::provider::{Gate, Piece, Provider, Reply, Step, openai};
use crate::support::{Launcher, Sandbox, stderr, stdout};

pub(crate) use crate::support::ui_server::Ui;

/// One raw HTTP/1.1 GET (or `method`) with exactly these headers; the status and the head.
fn raw(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

/// The header `name` of a raw reply (lowercase match).
fn header_of(reply: &str, name: &str) -> Option<String> {
    reply
        .split("\r\n\r\n")
        .next()?
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)))
        .map(|(_, v)| v.trim().to_string())
}

#[test]
fn requests_without_the_token_from_another_host_or_origin_are_refused() {
    let sb = Sandbox::new();
    let ui = Ui::start(&sb);
    let host = format!("127.0.0.1:{}", ui.port);
    let own_origin = format!("http://{host}");
    let with_token = format!("/?token={}", ui.token());
    let wrong_token = format!("/?token={}", "0".repeat(64));

    // The token trades for an HttpOnly, SameSite=Strict cookie and a redirect without it.
    let (status, reply) = raw(ui.port, "GET", &with_token, &[("Host", &host)]);
    assert_eq!(status, 303, "{reply}");
    assert_eq!(header_of(&reply, "location").as_deref(), Some("/"));
    let cookie = header_of(&reply, "set-cookie").expect("a cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().expect("name=value").to_string();
    assert!(pair.ends_with(ui.token()), "{pair}");

    let (status, reply) = raw(ui.port, "GET", "/", &[("Host", &host), ("Cookie", &pair)]);
    assert_eq!(status, 200, "{reply}");
    let csp = header_of(&reply, "content-security-policy").expect("a CSP");
    assert!(csp.starts_with("default-src 'none'; script-src 'self'"), "{csp}");
    assert!(
        !reply.to_ascii_lowercase().contains("access-control-"),
        "no CORS: {reply}"
    );
    assert_eq!(header_of(&reply, "x-frame-options").as_deref(), Some("DENY"));

    // (method, path, headers, status)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16);
    let refused: Vec<Case> = vec![
        ("GET", "/", vec![("Host", &host)], 401),
        ("GET", "/assets/app.js", vec![("Host", &host)], 401),
        ("GET", "/events", vec![("Host", &host)], 401),
        ("GET", &wrong_token, vec![("Host", &host)], 403),
        // HTTP/1.1 without a Host: actix-http refuses it before any handler.
        ("GET", "/", vec![("Cookie", &pair)], 400),
        ("GET", "/", vec![("Host", "evil.example"), ("Cookie", &pair)], 421),
        ("GET", &with_token, vec![("Host", "localhost:1")], 421),
        (
            "GET",
            "/",
            vec![("Host", &host), ("Cookie", &pair), ("Origin", "http://evil.example")],
            403,
        ),
        (
            "GET",
            "/",
            vec![("Host", &host), ("Cookie", &pair), ("Sec-Fetch-Site", "cross-site")],
            403,
        ),
        (
            "POST",
            "/",
            vec![("Host", &host), ("Cookie", &pair), ("Origin", &own_origin)],
            405,
        ),
        (
            "GET",
            "/formation/frm_nope",
            vec![("Host", &host), ("Cookie", &pair)],
            404,
        ),
    ];
    for (method, path, headers, want) in &refused {
        let (status, reply) = raw(ui.port, method, path, headers);
        assert_eq!(status, *want, "{method} {path} {headers:?}:\n{reply}");
        assert!(!reply.contains(ui.token()), "a refusal echoes no token");
    }

    // A page of another origin in a real browser cannot read the UI either: its fetch is
    // refused and no CORS header lets the reply through.
    let mut b = Browser::start();
    b.goto(&ui.with_token("/"));
    assert_eq!(b.eval("document.querySelector('h1').textContent"), json!("Formations"));
    assert_eq!(b.eval("document.cookie"), json!(""), "the script never sees the token");
    b.goto("data:text/html,<p>elsewhere</p>");
    let fetched = b.eval(&format!(
        "fetch('http://127.0.0.1:{}/fragment/list', {{credentials: 'include'}}).then(r => 'read ' + r.status, e => 'refused')",
        ui.port
    ));
    assert_eq!(fetched, json!("refused"));
}

/// Writes the demo formation into `dir` and builds and installs its members into the sandbox's
/// global store.
fn demo_formation(sb: &Sandbox, dir: &Path) {
    for (rel, bytes) in mur::scaffold::demo::FILES {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, bytes).expect("write");
    }
    for member in mur::scaffold::demo::MEMBERS {
        let out = sb.run(dir, &["build", member]);
        assert!(out.status.success(), "{}", stderr(&out));
        let built = stdout(&out);
        let zip = built.trim().rsplit_once(": ").expect("Built …: path").1.to_string();
        let out = sb.run(dir, &["install", "-g", &zip]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

#[test]
fn the_demo_formation_shows_its_three_members_and_three_call_edges() {
    let sb = Sandbox::new();
    let dir = sb.path("demo");
    demo_formation(&sb, &dir);
    let out = sb.run(&dir, &["run", "--roster", "--task", mur::scaffold::demo::DEFAULT_TASK]);
    assert!(out.status.success(), "{}", stderr(&out));
    let frm = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .expect("formation line")
        .trim()
        .to_string();

    let ui = Ui::start(&sb);
    let mut b = Browser::start();
    b.goto(&ui.with_token("/"));
    let listed = b.eval(&format!(
        "!!document.querySelector('tr.formation[data-formation=\"{frm}\"]')"
    ));
    assert_eq!(listed, json!(true), "{}", b.eval("document.body.innerText"));
    let row = b.eval("document.querySelector('tr.formation').innerText");
    assert!(
        row.as_str().unwrap_or("").contains("3: planner, analyst, writer"),
        "{row}"
    );

    b.goto(&format!("http://127.0.0.1:{}/formation/{frm}", ui.port));
    let nodes = b.eval("[...document.querySelectorAll('svg.graph g.node')].map(n => n.dataset.member + (n.classList.contains('entry') ? '*' : ''))");
    assert_eq!(nodes, json!(["planner*", "analyst", "writer"]));
    let edges = b.eval("[...document.querySelectorAll('svg.graph g.edge.called')].map(e => `${e.dataset.from}>${e.dataset.to}:${e.dataset.calls}`).sort()");
    assert_eq!(
        edges,
        json!(["planner>analyst:1", "planner>writer:1", "writer>analyst:1"])
    );
    let tree = b.eval("[...document.querySelectorAll('li.call')].map(c => c.dataset.depth)");
    assert_eq!(
        tree,
        json!(["0", "0", "1"]),
        "writer's call to analyst nests under planner's call"
    );
    assert_eq!(b.eval("document.querySelectorAll('section.member').length"), json!(3));

    if std::env::var_os("MUR_UPDATE_REFERENCE").is_some() {
        let png = b.screenshot(1100, 1000);
        let path = crate::support::repo_root().join("docs/images/ui-formation.png");
        std::fs::create_dir_all(path.parent().expect("docs/images")).expect("mkdir");
        std::fs::write(&path, png).expect("write the screenshot");
    }
}

pub(crate) const KEY_VAR: &str = "MUR_IT_UI_KEY";
pub(crate) const KEY: &str = "sk-it-ui-0123456789";
/// A model name the provider reports: record text that must stay text.
const EVIL: &str = "<script>document.title='pwned'</script>";

/// The task the lead gives the echo peer, which answers with it: an answer that must stay text.
const CALLED: &str = "<img src=x onerror=\"document.title='pwned'\"><b>bold?</b>";

const ROSTER: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/planner
    version: 0.1.0
    entry: true
  - name: coder
    capsule: local/echo
    version: 0.1.0
reachability:
  - from: lead
    to: [coder]
";

#[test]
fn a_running_model_formation_updates_live_and_shows_its_turns_and_tokens() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    // The first turn waits until the test lets it go, so the page is open before the call.
    let (go, wait) = mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let mut first = openai::tool_calls(&[("c1", "call-member", json!({"member": "coder", "task": CALLED}))]);
    first["model"] = json!(EVIL);
    let script = vec![
        Step::func(move |_| {
            let _ = wait
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .recv_timeout(Duration::from_secs(60));
            Reply::json(first.clone())
        }),
        Reply::json(openai::text("Waiting for coder.")).into(),
        Reply::json(openai::text("Done.")).into(),
    ];
    let provider = Provider::start(script);
    let manifest = format!(
        "name: planner\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You plan.\n  max_turns: 5\n\
         capabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n",
        provider.url()
    );
    sb.install_manifest("planner", &manifest);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    let launcher = Launcher::start(&sb, &dir, &["--task", "Ship it"], &[(KEY_VAR, KEY)]);
    let frm = launcher.formation_id();

    let ui = Ui::start(&sb);
    let mut b = Browser::start();
    b.goto(&ui.with_token(&format!("/formation/{frm}")));
    assert_eq!(
        b.eval("document.querySelector('.summary').dataset.status"),
        json!("running")
    );
    // The entry starts last: its trace (which names its callees) may come just after the page.
    let both = b.wait_for(
        "document.querySelectorAll('svg.graph g.node').length === 2 && document.querySelectorAll('svg.graph g.edge').length === 1",
        Duration::from_secs(20),
    );
    assert!(
        both.is_some(),
        "the members and the roster's edge, before any call: {}",
        b.eval("document.body.innerText")
    );
    assert_eq!(
        b.eval("document.querySelectorAll('svg.graph g.edge.called').length"),
        json!(0)
    );
    b.eval("window.notReloaded = true");
    let _ = go.send(());

    // The call appears, the turns and tokens follow, and the formation ends, all without a reload.
    let called = b.wait_for(
        "document.querySelector('svg.graph g.edge.called[data-to=\"coder\"]')",
        Duration::from_secs(30),
    );
    assert!(
        called.is_some(),
        "no call appeared: {}",
        b.eval("document.body.innerText")
    );
    let ended = b.wait_for(
        "document.querySelector('.summary').dataset.status === 'ok'",
        Duration::from_secs(30),
    );
    assert!(ended.is_some(), "{}", b.eval("document.body.innerText"));
    assert_eq!(b.eval("window.notReloaded"), json!(true), "updated in place");
    assert!(
        b.eval("Number(document.getElementById('live').dataset.updates)")
            .as_u64()
            >= Some(1)
    );
    let (code, _, err) = launcher.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");

    let turns = b.eval(
        "[...document.querySelectorAll('section[data-member=\"lead\"] tr.turn')].map(r => [r.querySelector('.model').textContent, r.querySelector('.tin').textContent, r.querySelector('.tout').textContent])",
    );
    assert_eq!(
        turns,
        json!([[EVIL, "20", "7"], ["scripted", "10", "5"], ["scripted", "10", "5"]]),
        "each turn with its model and the provider's tokens"
    );
    let summary = b.eval("document.querySelector('.summary').textContent");
    assert!(
        summary.as_str().unwrap_or("").contains("40 tokens in · 17 tokens out"),
        "{summary}"
    );
    // The answers as the sessions filed them; the echo peer's is markup, shown as text.
    let answers = b.eval(
        "[...document.querySelectorAll('details.answer pre')].map(p => p.closest('section').dataset.member + ': ' + p.textContent)",
    );
    assert!(
        answers.as_array().is_some_and(|a| a.contains(&json!("lead: Done."))),
        "{answers}"
    );
    assert!(
        answers.as_array().is_some_and(|a| a.iter().any(|x| x
            .as_str()
            .is_some_and(|x| x.starts_with("coder: ") && x.contains(CALLED)))),
        "{answers}"
    );
    assert_eq!(b.eval("document.querySelectorAll('main img, main b').length"), json!(0));
    // The model's name is text: no script of it ran, no element of it exists.
    assert_eq!(b.eval("document.scripts.length"), json!(1));
    assert_ne!(b.eval("document.title"), json!("pwned"));
    let html = b.eval("document.documentElement.outerHTML");
    assert!(!html.as_str().unwrap_or("").contains(KEY), "no key reaches the page");
    assert!(
        !html.as_str().unwrap_or("").contains("mdt1"),
        "no door token reaches the page"
    );
    // The lead's timeline shows its call with what the callee's whole subtree spent (the echo
    // peer: no model, no tool).
    b.goto(&ui.with_token(&format!("/formation/{frm}")));
    let calls = b.eval(
        "[...document.querySelectorAll('section[data-member=\"lead\"] li.step[data-kind=\"call\"]')].map(li => li.textContent)",
    );
    let shown = calls.as_array().cloned().unwrap_or_default();
    assert_eq!(shown.len(), 1, "{calls}");
    assert!(
        shown[0].as_str().is_some_and(|t| t.contains("call coder")
            && t.contains("completed · subtree: 0 tokens in, 0 out, 0 model turns, 0 tool calls, ")),
        "{calls}"
    );
    // Its first turn's words: the task it was given and the call it asked for.
    let first_turn = b.eval(
        "[...document.querySelector('section[data-member=\"lead\"] li.step[data-kind=\"turn\"]').querySelectorAll('.part')].map(p => [p.dataset.part, p.querySelector('pre').textContent])",
    );
    let parts = first_turn.as_array().cloned().unwrap_or_default();
    assert_eq!(parts.first(), Some(&json!(["input", "Ship it"])), "{first_turn}");
    assert!(
        parts
            .get(1)
            .and_then(|p| p[1].as_str())
            .and_then(|o| o.strip_prefix("call-member "))
            .and_then(|args| serde_json::from_str::<serde_json::Value>(args).ok())
            .is_some_and(|args| args == json!({"member": "coder", "task": CALLED})),
        "{first_turn}"
    );
}

/// A formation of 64 members and 1 000 calls renders whole in a real browser (its first paint
/// is timed by `benches/ui_paint.rs`, not here).
#[test]
fn a_large_formation_renders_whole_in_the_browser() {
    let sb = Sandbox::new();
    let home = mur::paths::MurHome::at_home(&sb.home());
    let frm = crate::support::ui_records::write_formation(&home, 64, 1000, 1_700_000_000_000);
    let ui = Ui::start(&sb);
    let mut b = Browser::start();
    b.goto(&ui.with_token("/"));
    b.goto(&format!("http://127.0.0.1:{}/formation/{frm}", ui.port));
    assert_eq!(
        b.eval("document.querySelectorAll('svg.graph g.node').length"),
        json!(64)
    );
    assert_eq!(b.eval("document.querySelectorAll('li.call').length"), json!(1000));
    // No process runs and no answer was filed: each task says its text is gone.
    assert_eq!(
        b.eval("[...new Set([...document.querySelectorAll('tr.task .note.gone')].map(n => n.textContent))]"),
        json!([mur::ui::page::GONE])
    );
}

/// The question the writer asks, and the answer it then streams: markup that must stay text.
const QUESTION: &str = "Which <b>colour</b> & why?";
const PIECES: [&str; 3] = ["Alpha <i>one</i>, ", "beta, ", "gamma."];
const STREAMED: &str = "Alpha <i>one</i>, beta, gamma.";

/// The OpenAI events streaming [`PIECES`], held before the last piece until `gate` opens.
fn held_before_last(gate: &Gate) -> Reply {
    let events = openai::stream_text(&PIECES);
    let last = json!(PIECES[2]).to_string();
    let mut pieces = Vec::new();
    for e in events {
        if e.contains(&last) {
            pieces.push(Piece::Wait(gate.clone()));
        }
        pieces.push(Piece::Bytes(e));
    }
    Reply::pieces(pieces)
}

#[test]
fn a_new_formation_its_question_and_its_streamed_answer_show_live_and_the_door_token_never() {
    let sb = Sandbox::new();
    let gate = Gate::new();
    let script = vec![
        Reply::json(openai::tool_calls(&[(
            "q1",
            "request-input",
            json!({"question": QUESTION}),
        )]))
        .into(),
        held_before_last(&gate).into(),
    ];
    let provider = Provider::start(script);
    let manifest = format!(
        "name: writer\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You write.\n  max_turns: 4\n\
         lifecycle:\n  input_timeout_secs: 60\ncapabilities:\n  network:\n    allow: [localhost]\n\
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

    // (c) The list is open before the formation starts; its row comes without a reload.
    let ui = Ui::start(&sb);
    let mut b = Browser::start();
    b.goto(&ui.with_token("/"));
    assert_eq!(b.eval("document.querySelectorAll('tr.formation').length"), json!(0));
    b.eval("window.notReloaded = true");
    let launcher = Launcher::start(&sb, &dir, &["--task", "Write it"], &[(KEY_VAR, KEY)]);
    let frm = launcher.formation_id();
    let row = b.wait_for(
        &format!("document.querySelector('tr.formation[data-formation=\"{frm}\"] .s-running')"),
        Duration::from_secs(20),
    );
    assert!(row.is_some(), "{}", b.eval("document.body.innerText"));
    assert_eq!(b.eval("window.notReloaded"), json!(true), "the list updated in place");
    let door_token = crate::support::running_record(&sb, "writer")["door_token"]
        .as_str()
        .expect("the entry's operator token")
        .to_string();

    // (b) The entry asks: the question's text is on the page, as text.
    b.goto(&format!("http://127.0.0.1:{}/formation/{frm}", ui.port));
    // Every event of the page's own stream, to look into afterwards.
    b.eval(&format!(
        "window.seen = []; const es = new EventSource('/events/{frm}'); \
         for (const k of ['text', 'change']) es.addEventListener(k, e => window.seen.push(k + ' ' + e.data)); 1"
    ));
    let asked = b.wait_for(
        "document.querySelector('.live[data-task] .question')?.textContent",
        Duration::from_secs(30),
    );
    assert!(
        asked.is_some(),
        "no question shown: {}",
        b.eval("document.body.innerText")
    );
    assert_eq!(
        b.eval("document.querySelector('.live[data-task] .question').textContent"),
        json!(QUESTION)
    );
    assert_eq!(
        b.eval("document.querySelector('tr.task').dataset.state"),
        json!("input-required")
    );
    assert_eq!(b.eval("document.querySelectorAll('main b, main i').length"), json!(0));
    let task_id = b.eval("document.querySelector('.live[data-task]').dataset.task");
    let task_id = task_id.as_str().expect("the task's id").to_string();

    // (a) Answered, the task streams its answer: the first pieces show before the last is sent,
    // in place, then the whole text.
    b.eval("window.notReloaded = true");
    let answer = Launcher::spawn({
        let mut c = sb.mur(&dir);
        c.args(["answer", &task_id, "blue"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    });
    let first = format!("{}{}", PIECES[0], PIECES[1]);
    let early = b.wait_for(
        &format!(
            "document.querySelector('.live[data-task] pre.stream')?.textContent === {}",
            json!(first)
        ),
        Duration::from_secs(8),
    );
    assert!(
        early.is_some(),
        "the first pieces did not show while the last was held: {} / {:?}",
        b.eval("document.body.innerText"),
        b.eval("window.seen")
    );
    assert_eq!(
        b.eval("document.querySelector('.live[data-task] .question').hidden"),
        json!(true),
        "the answered question is gone"
    );
    gate.open();
    let whole = b.wait_for(
        &format!(
            "[...document.querySelectorAll('.live pre.stream, details.answer pre')].some(p => p.textContent === {})",
            json!(STREAMED)
        ),
        Duration::from_secs(20),
    );
    assert!(whole.is_some(), "{}", b.eval("document.body.innerText"));
    assert_eq!(b.eval("window.notReloaded"), json!(true), "updated in place");
    assert!(b.eval("Number(document.getElementById('live').dataset.texts)").as_u64() >= Some(2));
    let (code, out, err) = answer.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(STREAMED), "{out}");
    let (code, out, err) = launcher.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(STREAMED), "{out}");
    let ended = b.wait_for(
        "document.querySelector('.summary').dataset.status === 'ok'",
        Duration::from_secs(20),
    );
    assert!(ended.is_some(), "{}", b.eval("document.body.innerText"));
    assert_eq!(b.eval("document.querySelectorAll('main b, main i').length"), json!(0));
    assert_ne!(b.eval("document.title"), json!("pwned"));

    // The door's operator token reached neither the page, nor its stream, nor an address.
    let seen = b
        .eval("window.seen.join('\\n')")
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(seen.contains("text ") && seen.contains("\\u003ci\\u003eone"), "{seen}");
    let html = b
        .eval("document.documentElement.outerHTML")
        .as_str()
        .unwrap_or_default()
        .to_string();
    let urls = b.eval("location.href + ' ' + performance.getEntries().map(e => e.name).join(' ')");
    for (what, text) in [
        ("page", html.as_str()),
        ("stream", seen.as_str()),
        ("addresses", urls.as_str().unwrap_or_default()),
    ] {
        assert!(!text.contains(&door_token), "the operator token is in the {what}");
        assert!(!text.contains("mdt1"), "a door token is in the {what}");
    }
    let (_, reply) = raw(
        ui.port,
        "GET",
        &format!("/fragment/{frm}?token={}", ui.token()),
        &[("Host", &format!("127.0.0.1:{}", ui.port))],
    );
    assert!(!reply.contains(&door_token) && !reply.contains("mdt1"));
    assert!(!ui.stderr().contains(&door_token), "nor mur ui's own output");
}

/// What the launch page at `url` (a `file://` address) sends the browser to: its path.
fn launch_path(url: &str, port: u16) -> (std::path::PathBuf, String) {
    let page = std::path::PathBuf::from(url.strip_prefix("file://").expect("a file:// address"));
    let text = std::fs::read_to_string(&page).expect("the launch page");
    let prefix = format!("url=http://127.0.0.1:{port}");
    let at = text.find(&prefix).expect("the page moves on to mur ui") + prefix.len();
    let path = text[at..].split('"').next().expect("the address").to_string();
    (page, path)
}

#[test]
fn open_hands_browser_an_owner_only_launch_page_and_without_one_prints_a_note() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let bin = sb.path("bin");
    let got = sb.path("open").join("opened.txt");
    let browser = bin.join("browser");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", got.display()),
    )
    .expect("script");
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ui = Ui::start_with(&sb, |c| {
        c.arg("--open").env("BROWSER", &browser);
    });
    let opened = crate::support::wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&got).is_ok_and(|t| !t.is_empty())
    });
    assert!(opened.is_some(), "$BROWSER was not run: {}", ui.stderr());
    let url = std::fs::read_to_string(&got).expect("the opened address");
    // argv is every user's to read: it names a file, and carries neither the token nor the code.
    assert!(url.starts_with("file://"), "{url}");
    assert!(!url.contains(ui.token()) && !url.contains("launch="), "{url}");
    let (page, path) = launch_path(&url, ui.port);
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&page), 0o600, "{}", page.display());
    assert_eq!(mode(page.parent().expect("its directory")), 0o700);
    assert!(path.starts_with("/?launch="), "{path}");
    assert!(
        !path.contains(ui.token()),
        "the page carries the one-time code, not the token"
    );
    // The page lets the browser in once, although to the browser it is another site (a file):
    // the cookie and a page of the server's own origin that moves on to `/`.
    let host = format!("127.0.0.1:{}", ui.port);
    let (status, reply) = raw(
        ui.port,
        "GET",
        &path,
        &[("Host", &host), ("Sec-Fetch-Site", "cross-site")],
    );
    assert_eq!(status, 200, "{reply}");
    assert!(header_of(&reply, "set-cookie").is_some_and(|c| c.contains(ui.token())));
    assert!(
        reply.contains("<meta http-equiv=\"refresh\" content=\"0;url=/\">"),
        "{reply}"
    );
    assert!(!page.exists(), "the launch page stays once its code is used");
    assert_eq!(raw(ui.port, "GET", &path, &[("Host", &host)]).0, 403, "it works once");
    drop(ui);

    // No $BROWSER and no xdg-open on PATH: the URL and a note, and it serves on.
    let empty = sb.path("empty-bin");
    let mut ui = Ui::start_with(&sb, |c| {
        c.arg("--open").env("PATH", &empty).env_remove("BROWSER");
    });
    let noted = crate::support::wait_until(Duration::from_secs(10), || ui.stderr().contains("no browser found"));
    assert!(noted.is_some(), "{}", ui.stderr());
    assert!(!ui.stderr().contains("error"), "{}", ui.stderr());
    assert!(ui.child.try_wait().expect("try_wait").is_none(), "it still serves");
    let (status, _) = raw(
        ui.port,
        "GET",
        &format!("/?token={}", ui.token()),
        &[("Host", &host_of(&ui))],
    );
    assert_eq!(status, 303);
}

/// Another user replays what `mur ui --open` leaves it: reads the browser's argv and
/// environment from `/proc`, every file they name it can open, and requests every `mur ui`
/// address found in them (and `/`), printing `STATUS`, and `COOKIE` for a reply that sets one.
const REPLAY: &str = r#"
import http.client, os, re, stat, sys, urllib.parse
pid, port = sys.argv[1], sys.argv[2]
seen = []
def read(path):
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
        data = open(path, "rb").read(1 << 16)
    except OSError as e:
        print("UNREADABLE", path, e.strerror, flush=True)
        return
    text = data.replace(b"\0", b" ").decode("utf-8", "replace")
    print("READ", path, "".join(c if c.isprintable() else " " for c in text[:300]), flush=True)
    seen.append(text)
read("/proc/%s/cmdline" % pid)
read("/proc/%s/environ" % pid)
for text in list(seen):
    for word in text.split():
        path = word[len("file://"):] if word.startswith("file://") else word
        if path.startswith("/"):
            read(urllib.parse.unquote(path))
paths = {"/"}
for text in seen:
    paths.update(re.findall(r"http://127\.0\.0\.1:%s(/[^\s\"'<>]*)" % port, text))
for path in sorted(paths):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    c.request("GET", path, headers={"Host": "127.0.0.1:%s" % port})
    r = c.getresponse()
    print("STATUS", r.status, path, flush=True)
    if r.getheader("set-cookie"):
        print("COOKIE", path, flush=True)
"#;

/// `mur ui --open`'s browser is watched by another user: it reads the browser's argv (any
/// user may) and its environment, opens every file they name, and replays every address it
/// finds; it gets no cookie and no page, and the operator's browser (a real Chromium opening
/// what `$BROWSER` was given) still gets in. Before, the launch address sat in argv: its replay
/// took the cookie, and the operator's browser got 403.
#[test]
fn another_user_replaying_what_open_shows_gets_no_cookie_and_the_operators_browser_gets_in() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // The replay runs as another user (nobody).
    if crate::support::needs::skip_for_want_of("root", crate::support::needs::not_root()) {
        return;
    }
    let sb = Sandbox::new();
    let out = sb.path("open");
    let go = out.join("go");
    nix::unistd::mkfifo(&go, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    // A browser that stays, as a browser does, until the test lets it go.
    let browser = sb.path("bin").join("browser");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\necho $$ > '{o}/pid.tmp' && mv '{o}/pid.tmp' '{o}/pid'\nread line < '{o}/go'\n",
            o = out.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ui = Ui::start_with(&sb, |c| {
        c.arg("--open").env("BROWSER", &browser);
    });
    let pid_file = out.join("pid");
    let started = crate::support::wait_until(Duration::from_secs(10), || pid_file.is_file());
    assert!(started.is_some(), "$BROWSER was not run: {}", ui.stderr());
    let pid = std::fs::read_to_string(&pid_file).expect("pid").trim().to_string();
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the browser's argv");
    // The address the browser was given: its last argument.
    let url = String::from_utf8_lossy(&argv)
        .trim_end_matches('\0')
        .rsplit('\0')
        .next()
        .expect("the browser's argument")
        .to_string();

    // The other user gets as far as mur's own modes let it: the sandbox's directories (private
    // to the test) are opened up to the home's `.murmur`; the test's own notes stay private.
    for dir in [sb.dir.path().to_path_buf(), sb.home(), sb.home().join(".murmur")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let replay = std::process::Command::new("python3")
        .args(["-c", REPLAY, &pid, &ui.port.to_string()])
        .uid(65534)
        .gid(65534)
        .current_dir("/")
        .output()
        .expect("python3 as nobody");
    let report = String::from_utf8_lossy(&replay.stdout).into_owned();
    eprintln!("what another user got:\n{report}");
    assert!(
        replay.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let cmdline = format!("READ /proc/{pid}/cmdline ");
    assert!(
        report.lines().any(|l| l.starts_with(&cmdline) && l.contains(&url)),
        "the replay did not read the browser's argv:\n{report}"
    );
    assert!(!report.contains("COOKIE"), "another user got the cookie:\n{report}");
    assert!(
        report
            .lines()
            .filter(|l| l.starts_with("STATUS "))
            .all(|l| l.starts_with("STATUS 401 ") || l.starts_with("STATUS 403 ")),
        "another user got a page:\n{report}"
    );
    let page = std::path::PathBuf::from(url.strip_prefix("file://").expect("argv names a file"));
    assert!(
        report
            .lines()
            .any(|l| l.starts_with(&format!("UNREADABLE {} ", page.display()))),
        "the replay did not try the launch page:\n{report}"
    );
    std::fs::write(&go, "go\n").expect("let the browser stub go");

    // The operator's browser opens the same address and is in.
    let mut b = Browser::start();
    b.goto(&url);
    let home = format!("http://127.0.0.1:{}/", ui.port);
    let inside = b.wait_for(
        &format!("location.href === '{home}' && document.title === 'mur ui: formations'"),
        Duration::from_secs(20),
    );
    assert!(
        inside.is_some(),
        "the operator's browser did not get in: {} {}",
        b.eval("location.href"),
        b.eval("document.body ? document.body.innerText : ''")
    );
    assert!(!page.exists(), "the launch page stays once its code is used");
}

/// `mur ui` keeps the door's connection bounds: every request head of a connection, not only
/// its first, must arrive within `door_head` (here 2 s) of the accept or the previous reply's
/// end, so another user holding connections open with half-sent heads holds nothing for long
/// and the operator is answered meanwhile. Before, a second head was never timed.
#[test]
fn a_slow_and_a_stalled_second_request_head_to_mur_ui_are_closed_in_bounded_time() {
    use crate::wear::{closed_within, first_request_of, serve_until_closed};
    use std::time::Instant;
    let sb = Sandbox::new();
    let ui = Ui::start_with(&sb, |c| {
        c.env("MURMUR_TEST_TIMING", "door_head=2s");
    });
    let host = host_of(&ui);
    let cookie = format!("mur_ui_{}={}", ui.port, ui.token());
    let first = format!("GET /assets/app.css HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n");

    // A second head that stops half-way.
    let mut stalled = first_request_of(&host, first.as_bytes());
    stalled
        .write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
        .expect("half a head");
    // A second head sent a byte at a time, never finished.
    let slow = {
        let (host, first) = (host.clone(), first.clone());
        std::thread::spawn(move || {
            let mut s = first_request_of(&host, first.as_bytes());
            let start = Instant::now();
            let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\nx-slow: ");
            for b in head.as_bytes().iter().cycle() {
                if start.elapsed() > Duration::from_secs(20) || s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
                let mut probe = [0u8; 1];
                s.set_nonblocking(true).expect("nonblocking");
                let eof = matches!(s.read(&mut probe), Ok(0));
                s.set_nonblocking(false).expect("blocking");
                if eof {
                    break;
                }
            }
            start.elapsed()
        })
    };
    // An idle keep-alive connection that sends nothing more.
    let mut idle = first_request_of(&host, first.as_bytes());

    // The operator is served meanwhile, until the stalled head is cut off.
    let stalled_after = serve_until_closed(&mut stalled, Duration::from_secs(10), |i| {
        let (status, reply) = raw(ui.port, "GET", "/", &[("Host", &host), ("Cookie", &cookie)]);
        assert_eq!(status, 200, "operator request {i}: {reply}");
    })
    .expect("the stalled head is cut off");
    let idle_after = closed_within(&mut idle, Duration::from_secs(10)).expect("the idle connection is closed");
    let slow_after = slow.join().expect("slow writer");
    eprintln!("closed after: stalled {stalled_after:?}, idle {idle_after:?}, slow {slow_after:?}");
    assert!(
        slow_after < Duration::from_secs(6),
        "a head sent a byte at a time lasted {slow_after:?}"
    );
    let (status, reply) = raw(ui.port, "GET", "/", &[("Host", &host), ("Cookie", &cookie)]);
    assert_eq!(status, 200, "after the slow heads: {reply}");
}

fn host_of(ui: &Ui) -> String {
    format!("127.0.0.1:{}", ui.port)
}
