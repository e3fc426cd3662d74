//! `mur ui`: this user's formations in the browser. It serves, on 127.0.0.1 only, the formation
//! list and each formation (graph, calls, members' tasks, turns and tool calls), rendered on the
//! server from the trace records (`records.rs` finds and reads them, `page.rs` renders them),
//! and an event stream per page (`sse.rs`) that says when records were appended, so the page's
//! small script reloads what it shows. What the records cannot hold (a running task's answer
//! text as it streams, an open question) `live.rs` reads from the member's door with the running
//! record's operator token, which stays on this side: the page gets the text, never the token.
//! Every request passes `auth.rs` first. The operator acts from the page through `act.rs`
//! (`POST /act/…`: start a task, answer a question, cancel a task, stop a formation), each
//! action also carrying the page token; no record is written or pruned from here.

pub mod act;
pub mod auth;
pub mod live;
pub mod page;
pub mod records;
pub mod sse;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, web};

use crate::door::{conn, serve};
use crate::paths::MurHome;

/// The page's script and style, built into the binary: the page loads nothing else.
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// `default-src 'none'` and only this server's own script, style and event stream: no inline
/// script or style, no other host, no frames, no forms.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                       img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Event streams open at once, at most; more are refused (503) rather than polled for.
pub const MAX_STREAMS: usize = 32;

pub struct UiOptions {
    pub home: MurHome,
    /// 0: a free port.
    pub port: u16,
}

/// What every handler shares.
pub struct State {
    pub home: MurHome,
    pub port: u16,
    pub token: auth::Token,
    /// The page token (`act.rs`): written into every page, carried by every action.
    pub page_token: auth::Token,
    pub index: records::Index,
    pub streams: AtomicUsize,
    /// What the doors of running formations say of their open tasks (`live.rs`).
    pub live: Arc<live::Live>,
    /// `--open`'s one-time launch code, until the browser uses it.
    pub launch: std::sync::Mutex<Option<auth::Token>>,
    /// The owner-only page that hands the browser the launch code, while it is of use.
    pub launch_page: std::sync::Mutex<Option<PathBuf>>,
}

impl State {
    /// Removes the launch page, once its code is used or the server stops.
    fn forget_launch_page(&self) {
        if let Some(page) = crate::sync::lock(&self.launch_page).take() {
            let _ = std::fs::remove_file(page);
        }
    }
}

/// A bound server, before it serves: its URL (with the token) is known.
pub struct Bound {
    listener: TcpListener,
    state: Arc<State>,
}

impl Bound {
    /// The address the operator opens, token included.
    pub fn url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/?token={}",
            self.state.port,
            self.state.token.as_str()
        )
    }

    /// Writes the page `--open` hands the browser and returns its `file://` address. The page
    /// carries the one-time launch code; the address, which is all a browser's argv shows to
    /// every user of the machine, carries nothing: the page is 0600 in the owner-only
    /// `~/.murmur/ui/`, and it is removed once the code is used.
    pub fn write_launch_page(&self) -> std::io::Result<String> {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
        let code = crate::sync::lock(&self.state.launch)
            .as_ref()
            .map(|t| t.as_str().to_owned())
            .ok_or_else(|| std::io::Error::other("the launch code was used already"))?;
        let dir = self.state.home.ui();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        // A directory already there keeps its mode: made owner-only, and refused when it is
        // not this user's (or not a directory).
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        if !crate::peer_door::usable_dir(&dir) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} is not a directory of this user's alone", dir.display()),
            ));
        }
        let path = self.state.home.ui_launch_page(self.state.port);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let target = format!("http://127.0.0.1:{}/?launch={code}", self.state.port);
        file.write_all(page::forward(&target).as_bytes())?;
        *crate::sync::lock(&self.state.launch_page) = Some(path.clone());
        Ok(file_url(&path))
    }

    /// Serves until the process gets SIGINT or SIGTERM. The server is the door's (`door::serve`,
    /// `door::conn`): every request head, not only a connection's first, must arrive within
    /// `door_head`, a reply that makes no write progress is dropped after `door_write_stall`,
    /// and connections and requests in flight are bounded, so another user holding
    /// connections open cannot keep the operator's browser from an answer.
    pub fn serve(self) -> std::io::Result<()> {
        let state = Arc::clone(&self.state);
        let data = web::Data::from(self.state);
        let limits = serve::Limits {
            max_connections: crate::limits::door_connections(serve::soft_nofile(), serve::MAX_CONNECTIONS),
            grace: std::time::Duration::from_secs(1),
        };
        let serving = serve::Serving::start(self.listener, None, limits, move || {
            App::new()
                .app_data(data)
                .app_data(web::PayloadConfig::new(act::BODY_BYTES))
                .wrap(conn::InFlight::default())
                .default_service(web::to(handle))
        })?;
        let stopped = actix_rt::System::new().block_on(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let mut int = signal(SignalKind::interrupt())?;
            let mut term = signal(SignalKind::terminate())?;
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            serving.stop().await;
            Ok(())
        });
        state.forget_launch_page();
        stopped
    }
}

/// `file://` and `path`, every byte but unreserved ones and `/` percent-encoded.
fn file_url(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// Binds 127.0.0.1 (never another address) and mints the token.
pub fn bind(opts: UiOptions) -> std::io::Result<Bound> {
    let listener = TcpListener::bind(("127.0.0.1", opts.port))?;
    let port = listener.local_addr()?.port();
    let state = Arc::new(State {
        home: opts.home,
        port,
        token: auth::Token::random()?,
        page_token: auth::Token::random()?,
        index: records::Index::default(),
        streams: AtomicUsize::new(0),
        live: Arc::default(),
        launch: std::sync::Mutex::new(Some(auth::Token::random()?)),
        launch_page: std::sync::Mutex::new(None),
    });
    Ok(Bound { listener, state })
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Every response's headers: the policy, no sniffing, no referrer, no caching, no framing. No
/// `Access-Control-*` header is ever sent, so no other origin may read a response.
fn secured(mut b: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    b.insert_header(("Content-Security-Policy", CSP))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Referrer-Policy", "no-referrer"))
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Frame-Options", "DENY"))
        .insert_header(("Cross-Origin-Resource-Policy", "same-origin"));
    b
}

fn text(status: StatusCode, body: String) -> HttpResponse {
    secured(HttpResponse::build(status))
        .content_type("text/plain; charset=utf-8")
        .body(body)
}

fn json_reply(status: StatusCode, body: &serde_json::Value) -> HttpResponse {
    secured(HttpResponse::build(status))
        .content_type("application/json")
        .body(body.to_string())
}

/// An action's refusal as the page shows it: its code, message and hint.
fn refusal(status: StatusCode, d: &crate::diag::Diagnostic) -> HttpResponse {
    json_reply(
        status,
        &serde_json::json!({"ok": false, "code": d.code.id, "message": d.message, "hint": d.hint()}),
    )
}

fn html(body: String) -> HttpResponse {
    secured(HttpResponse::Ok())
        .content_type("text/html; charset=utf-8")
        .body(body)
}

/// The one handler: the checks of `auth.rs`, then the route. GET and HEAD are served, and POST
/// for the actions of `act.rs`.
async fn handle(req: HttpRequest, body: web::Bytes, state: web::Data<State>) -> HttpResponse {
    let posting = req.method() == actix_web::http::Method::POST;
    let launch = crate::sync::lock(&state.launch).clone();
    let verdict = auth::decide(
        &auth::Request {
            host: header(&req, "host"),
            origin: header(&req, "origin"),
            sec_fetch_site: header(&req, "sec-fetch-site"),
            cookie: header(&req, "cookie"),
            path: req.path(),
            query: req.query_string(),
        },
        state.port,
        &state.token,
        launch.as_ref(),
    );
    let refused = matches!(verdict, auth::Verdict::Refuse(..));
    match verdict {
        auth::Verdict::Allow => {}
        // An action never trades a token or a launch code: only the cookie admits it.
        _ if posting && !refused => {
            return text(
                StatusCode::FORBIDDEN,
                "an action is admitted by the cookie alone\n".into(),
            );
        }
        auth::Verdict::Launch { location } => {
            // Taken under the lock: of two requests with the code, one gets in.
            let used = crate::sync::lock(&state.launch).take();
            if used.is_none() {
                return text(StatusCode::FORBIDDEN, "the launch address works once\n".into());
            }
            state.forget_launch_page();
            // The launch page is a file, so this request comes from another site (and a
            // redirect would keep it so, cookie left out): a page of ours moves on instead.
            return secured(HttpResponse::Ok())
                .insert_header(("Set-Cookie", auth::set_cookie(state.port, &state.token)))
                .content_type("text/html; charset=utf-8")
                .body(page::forward(&location));
        }
        auth::Verdict::Adopt { location } => {
            return secured(HttpResponse::SeeOther())
                .insert_header(("Set-Cookie", auth::set_cookie(state.port, &state.token)))
                .insert_header(("Location", location))
                .finish();
        }
        auth::Verdict::Refuse(code, why) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::FORBIDDEN);
            return text(status, format!("{why}\n"));
        }
    }
    if posting && req.path().starts_with("/act/") {
        return action(&req, state.into_inner(), body).await;
    }
    if req.method() != actix_web::http::Method::GET && req.method() != actix_web::http::Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "mur ui serves GET, HEAD and its actions' POST\n".into(),
        );
    }
    let path = req.path().to_owned();
    let state = state.into_inner();
    match path.as_str() {
        "/assets/app.js" => secured(HttpResponse::Ok())
            .content_type("text/javascript; charset=utf-8")
            .body(APP_JS),
        "/assets/app.css" => secured(HttpResponse::Ok())
            .content_type("text/css; charset=utf-8")
            .body(APP_CSS),
        "/" => {
            let rows = match blocking(state.clone(), |s| s.index.formations(&s.home)).await {
                Ok(rows) => rows,
                Err(r) => return r,
            };
            html(page::shell(
                "mur ui: formations",
                &page::list(&rows, crate::timing::unix_ms()),
                Some(("/events", "/fragment/list")),
                state.page_token.as_str(),
            ))
        }
        "/fragment/list" => {
            let rows = match blocking(state.clone(), |s| s.index.formations(&s.home)).await {
                Ok(rows) => rows,
                Err(r) => return r,
            };
            html(page::list(&rows, crate::timing::unix_ms()))
        }
        "/events" => sse::stream(state, None),
        p => route_formation(state, p).await,
    }
}

/// `/formation/frm_…`, `/fragment/frm_…` and `/events/frm_…`.
async fn route_formation(state: Arc<State>, path: &str) -> HttpResponse {
    let (kind, id) = match path.rsplit_once('/') {
        Some((kind @ ("/formation" | "/fragment" | "/events"), id)) => (kind, id.to_owned()),
        _ => return text(StatusCode::NOT_FOUND, "no such page\n".into()),
    };
    if crate::ids::check(crate::ids::IdKind::Formation, &id).is_err() {
        return text(StatusCode::NOT_FOUND, "not a formation id\n".into());
    }
    if kind == "/events" {
        return sse::stream(state, Some(id));
    }
    let wanted = id.clone();
    let page_token = state.page_token.clone();
    let found = blocking(state, move |s| {
        let files = s.index.formation_traces(&s.home, &wanted);
        if files.is_empty() {
            return None;
        }
        let running = records::alive_formations(&s.home).contains(&wanted);
        let view = records::view_with_timelines(&wanted, &files);
        if running {
            // The page is being looked at: its open tasks' texts are followed at their doors.
            s.live.watch(&s.home, &view);
        }
        let live = s.live.of(&wanted);
        Some((view, running, live))
    })
    .await;
    let found = match found {
        Ok(f) => f,
        Err(r) => return r,
    };
    let Some((view, running, live)) = found else {
        return text(StatusCode::NOT_FOUND, format!("no records of formation {id}\n"));
    };
    let body = page::formation_live(&view, running, crate::timing::unix_ms(), &live);
    if kind == "/fragment" {
        return html(body);
    }
    let events = format!("/events/{id}");
    let fragment = format!("/fragment/{id}");
    html(page::shell(
        &format!("mur ui: {id}"),
        &body,
        Some((&events, &fragment)),
        page_token.as_str(),
    ))
}

/// `POST /act/…` (`act.rs`): the page token and this origin, then the action, off the event loop.
async fn action(req: &HttpRequest, state: Arc<State>, body: web::Bytes) -> HttpResponse {
    use crate::diag::{Diagnostic, E_UI_002};
    let Some(action) = act::Action::parse(req.path()) else {
        return text(StatusCode::NOT_FOUND, "no such action\n".into());
    };
    let own = format!("http://127.0.0.1:{}", state.port);
    if header(req, "origin") != Some(own.as_str()) {
        let d = Diagnostic::new(E_UI_002, "the action does not name this server's origin");
        return refusal(StatusCode::FORBIDDEN, &d);
    }
    let given = header(req, act::PAGE_TOKEN_HEADER);
    if !given.is_some_and(|g| state.page_token.matches(g)) {
        let d = Diagnostic::new(
            E_UI_002,
            match given {
                None => "the action carries no page token of this server",
                Some(_) => "the action's page token is not this server's",
            },
        );
        return refusal(StatusCode::FORBIDDEN, &d);
    }
    let words = if action.takes_text() {
        match act::text_of(&body) {
            Ok(t) => Some(t),
            Err(f) => return refusal(StatusCode::BAD_REQUEST, &f.diag),
        }
    } else {
        None
    };
    let home = state.home.clone();
    match web::block(move || act::run(&home, &action, words.as_deref())).await {
        Ok(Ok(done)) => json_reply(StatusCode::OK, &done),
        Ok(Err(f)) => refusal(StatusCode::CONFLICT, &f.diag),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the action could not finish: {e}\n"),
        ),
    }
}

/// Runs file reads off the server's event loop; `Err` is the 500 to answer when the read could
/// not finish (a bug, not a peer's doing: the server goes on).
async fn blocking<T: Send + 'static>(
    state: Arc<State>,
    f: impl FnOnce(&State) -> T + Send + 'static,
) -> Result<T, HttpResponse> {
    web::block(move || f(&state)).await.map_err(|e| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the records could not be read: {e}\n"),
        )
    })
}
