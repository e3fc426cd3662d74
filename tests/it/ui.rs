//! `mur ui`: the real binary serving the sandbox's records, read by a real headless Chromium
//! (provisioned under target/, support/chromium.rs) and by plain HTTP requests: the demo
//! formation's graph, a running formation updating without a reload, a model formation's turns
//! and tokens, record text rendered as text, and every request that lacks the token, names
//! another host or comes from another origin refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use serde_json::json;

use crate::support::chromium::Browser;
use crate::support::provider::{Provider, Reply, Step, openai};
use crate::support::{Launcher, Sandbox, stderr, stdout};

/// A `mur ui` serving a sandbox's home; killed when dropped.
struct Ui {
    child: Child,
    port: u16,
    /// The URL it printed, token included.
    url: String,
}

impl Ui {
    fn start(sb: &Sandbox) -> Ui {
        let mut child = sb
            .mur(&sb.path("ui"))
            .arg("ui")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mur ui");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let url = loop {
            let line = rx.recv_timeout(Duration::from_secs(20)).expect("mur ui prints its URL");
            if line.starts_with("http://") {
                break line;
            }
        };
        let port = url
            .trim_start_matches("http://127.0.0.1:")
            .split('/')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a loopback URL with a port");
        Ui { child, port, url }
    }

    fn token(&self) -> &str {
        self.url.rsplit_once("token=").map(|(_, t)| t).unwrap_or_default()
    }

    /// The address of `path` carrying the token (the browser trades it for the cookie).
    fn with_token(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}?token={}", self.port, self.token())
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

const KEY_VAR: &str = "MUR_IT_UI_KEY";
const KEY: &str = "sk-it-ui-0123456789";
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
}

#[test]
fn a_large_formation_renders_in_the_browser_quickly() {
    let sb = Sandbox::new();
    let home = mur::paths::MurHome::at_home(&sb.home());
    let frm = crate::support::ui_records::write_formation(&home, 64, 1000, 1_700_000_000_000);
    let ui = Ui::start(&sb);
    let mut b = Browser::start();
    // The cookie first, so the page's own load is timed without the token's redirect.
    b.goto(&ui.with_token("/"));
    let mut best = f64::MAX;
    for _ in 0..3 {
        b.goto(&format!("http://127.0.0.1:{}/formation/{frm}", ui.port));
        assert_eq!(
            b.eval("document.querySelectorAll('svg.graph g.node').length"),
            json!(64)
        );
        assert_eq!(b.eval("document.querySelectorAll('li.call').length"), json!(1000));
        let t = b.eval(
            "(() => { const n = performance.getEntriesByType('navigation')[0]; \
              const p = performance.getEntriesByName('first-contentful-paint')[0]; \
              return {ttfb: n.responseStart, dom: n.domContentLoadedEventEnd, load: n.loadEventEnd, \
                      fcp: p ? p.startTime : null, bytes: n.transferSize}; })()",
        );
        eprintln!("ui: 64 members, 1000 calls in the browser (ms): {t}");
        let first = t["fcp"].as_f64().or(t["load"].as_f64()).expect("a render time");
        best = best.min(first);
    }
    // The target is 500 ms (docs/performance.md §8); the bound here leaves room for a loaded
    // machine while still catching a page that grew by an order of magnitude.
    assert!(best < 2000.0, "first render took {best} ms");
}
