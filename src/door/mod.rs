//! The door: a member's A2A JSON-RPC service over HTTP/1.1 (docs/reference/door.md#authentication).
//!
//! Only the door knows JSON-RPC and A2A's spellings; it renders the task model (`crate::tasks`)
//! as A2A. The session runtime starts it with [`Door::start_with_board`] on a board of its own,
//! feeds the `--task` task into that [`Board`], drains work with [`Board::next_work`], reports
//! outcomes with [`Board::finish`], and stops it with [`Door::stop`]. Layout:
//! - `pipeline` — the docs/reference/door.md#request-pipeline steps in order, one handler behind
//!   the `auth` middleware;
//! - `auth` — FormationAuth (`mft1`/`mdt1` verification) and the
//!   docs/reference/door.md#authentication refusal bodies;
//! - `jsonrpc` — request decoding, the `A2A-Version` rule, method table, reply/error bodies;
//! - `methods` — SendMessage, GetTask, CancelTask, ListTasks, SubscribeToTask, the extended card;
//! - `params` — those methods' params validated, SendMessage's parts framed as the task text;
//! - `view` — a task as A2A shows it: the Task object, its status and artifact;
//! - `sse` — streams for SendStreamingMessage and SubscribeToTask; `replay` — one rendering of
//!   each stream event and the per-task log streams resume from; `card` — the agent card;
//! - `push` — the push-notification config methods and each config's webhook delivery;
//! - `serve` — the HTTP/1.1 server: one thread that accepts and serves every connection;
//! - `conn` — one connection's transport, with the head and write-stall bounds, and the
//!   in-flight bound. A peer's door also serves a Unix socket (`crate::peer_door`).

pub mod auth;
pub mod call;
pub mod card;
pub mod conn;
pub use mur_core::wire::jsonrpc;
pub mod methods;
pub mod params;
pub mod pipeline;
pub mod push;
pub mod replay;
pub mod serve;
pub mod sse;
pub mod view;

#[cfg(test)]
mod tests;

use std::net::TcpListener;
use std::sync::Arc;

use crate::secret::Secret;
use actix_web::{App, web};

pub use auth::{CARD_PATH, Caller, FormationAuth, FormationTrust};
pub use card::CardFacts;

use crate::diag::{self, Diagnostic};
use crate::manifest::Acceptance;
use crate::tasks::Board;
use crate::token::DoorKey;
use jsonrpc::Method;

/// Request bodies over this are answered 413 [ours]. Here, not in `pipeline`, because `params`
/// bounds a task's text by it too, and `pipeline` imports the methods that import `params`.
pub const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Seconds a stopping door waits for open requests (blocked SendMessage, SSE) [ours]. Closing
/// the board first ends them, so a stop normally takes far less.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Everything the door needs to know about its session.
#[derive(Debug, Clone)]
pub struct DoorConfig {
    /// Full artifact name, `<scope>/<name>`; also the `www-authenticate` realm.
    pub capsule_name: String,
    pub capsule_version: String,
    pub description: String,
    pub session_id: String,
    /// `network.authentication`: require a token (mint an operator token).
    pub authenticate: bool,
    /// `exports.peer_tasks.accept`.
    pub peer_tasks_accept: bool,
    pub acceptance: Acceptance,
    pub queue_depth: u32,
    /// The formation this member belongs to, when its channel said so.
    pub formation: Option<FormationTrust>,
    /// `capabilities.network.allow` rules, for the capsule extension of the card.
    pub network_allow: Vec<String>,
    /// Tool names, for the capsule extension of the card.
    pub tools: Vec<String>,
    /// `exports.skills`, for the card.
    pub skills: Vec<crate::manifest::Skill>,
    /// `exports.input_modes`: file media types SendMessage accepts besides text and data.
    pub input_modes: Vec<String>,
    /// A peer's Unix socket, served beside the TCP port (see `socket`); `None` elsewhere.
    pub socket: Option<std::path::PathBuf>,
}

/// A running door. Dropping it stops the server without waiting for open requests; call
/// [`Door::stop`] to give them the grace.
pub struct Door {
    url: String,
    port: u16,
    operator_token: Option<Secret>,
    board: Arc<Board>,
    serving: serve::Serving,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never show the operator token.
        f.debug_struct("Door")
            .field("url", &self.url)
            .field("board", &self.board)
            .finish_non_exhaustive()
    }
}

/// The methods the door extension of the card lists: those answered other than with an error.
fn served_methods(acceptance: Acceptance, authenticate: bool) -> Vec<&'static str> {
    let takes_tasks = acceptance != Acceptance::None;
    let mut m = Vec::new();
    if takes_tasks {
        m.extend([Method::SendMessage, Method::SendStreamingMessage]);
    }
    m.extend([Method::GetTask, Method::ListTasks, Method::CancelTask]);
    if takes_tasks {
        m.push(Method::SubscribeToTask);
    }
    if authenticate {
        m.push(Method::GetExtendedAgentCard);
    }
    m.extend([
        Method::CreatePushConfig,
        Method::GetPushConfig,
        Method::ListPushConfigs,
        Method::DeletePushConfig,
    ]);
    m.into_iter().map(Method::name).collect()
}

/// `--bind ADDR` binds a port the OS chooses (docs/reference/door.md#transport). `ADDR:PORT` [ours]
/// binds that port, which a cluster Service needs to name the door (`mur deploy --kubernetes`);
/// only a full socket address is read that way, so every plain address keeps its meaning.
fn bind_listener(bind: &str) -> std::io::Result<TcpListener> {
    match bind.parse::<std::net::SocketAddr>() {
        Ok(addr) => TcpListener::bind(addr),
        Err(_) => TcpListener::bind((bind, 0)),
    }
}

impl Door {
    /// Binds `bind` on a port the OS chooses and serves the door from a thread of its own
    /// (`serve`), which accepts and serves every connection. The board is made from
    /// `config.acceptance` / `config.queue_depth`.
    pub fn start(config: DoorConfig, bind: &str) -> Result<Door, Diagnostic> {
        let board = Board::new(config.acceptance, config.queue_depth);
        Door::start_with_board(config, bind, board)
    }

    /// As [`Door::start`] with a board made by the caller (e.g. with an injected clock); the
    /// board's acceptance governs admission.
    pub fn start_with_board(config: DoorConfig, bind: &str, board: Arc<Board>) -> Result<Door, Diagnostic> {
        let cannot = |why: String| Diagnostic::new(diag::E_RUN_010, format!("the door cannot bind {bind}: {why}"));
        let listener = bind_listener(bind).map_err(|e| cannot(e.to_string()))?;
        let unix = match &config.socket {
            Some(path) => Some(crate::peer_door::bind(path).map_err(|e| {
                Diagnostic::new(
                    diag::E_RUN_010,
                    format!("the door cannot bind its socket {}: {e}", path.display()),
                )
            })?),
            None => None,
        };
        let port = listener.local_addr().map_err(|e| cannot(e.to_string()))?.port();
        let url = format!("localhost:{port}");

        let (auth, operator_token) = if config.authenticate {
            let key = DoorKey::generate().map_err(|e| cannot(format!("no random door key: {e}")))?;
            let token = Secret::new(key.mint_operator());
            let authority = auth::DoorAuthenticator::new(&config.capsule_name, key, config.formation.clone());
            (FormationAuth::authenticating(Arc::new(authority)), Some(token))
        } else {
            (FormationAuth::public(), None)
        };
        let facts = CardFacts {
            name: config.capsule_name.clone(),
            version: config.capsule_version.clone(),
            description: config.description.clone(),
            session_id: config.session_id.clone(),
            url: url.clone(),
            authenticating: config.authenticate,
            peer_tasks: config.peer_tasks_accept,
            methods: served_methods(board.acceptance(), config.authenticate),
            tools: config.tools.clone(),
            network: config.network_allow.clone(),
            skills: config.skills.clone(),
            input_modes: config.input_modes.clone(),
            signer: card::Signer(Arc::new(
                crate::card_sig::CardKey::generate().map_err(|e| cannot(format!("no random card key: {e}")))?,
            )),
        };
        let shared = web::Data::new(pipeline::Shared {
            board: Arc::clone(&board),
            card: card::Card::sign(facts),
            realm: config.capsule_name.clone(),
            peer_tasks_accept: config.peer_tasks_accept,
            push: push::Configs::default(),
        });
        let limits = serve::Limits {
            max_connections: crate::limits::door_connections(serve::soft_nofile(), serve::MAX_CONNECTIONS),
            grace: SHUTDOWN_GRACE,
        };
        let serving = serve::Serving::start(listener, unix, limits, move || {
            App::new()
                .app_data(shared)
                // Inside FormationAuth: a credential's share is counted once it is known.
                .wrap(conn::Shares::default())
                .wrap(auth)
                // Outermost: a request past the in-flight bound costs no token check.
                .wrap(conn::InFlight::default())
                .default_service(web::to(pipeline::handle))
        })
        .map_err(|e| cannot(e.to_string()))?;
        Ok(Door {
            url,
            port,
            operator_token,
            board,
            serving,
        })
    }

    /// `localhost:<port>` (no scheme), as the readiness line and running record carry it.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The operator `mdt1` of an authenticating door. Hand it only to the readiness line (with
    /// `--readiness-tokens`) and the 0600 running record.
    pub fn operator_token(&self) -> Option<&Secret> {
        self.operator_token.as_ref()
    }

    pub fn board(&self) -> &Arc<Board> {
        &self.board
    }

    /// Stops accepting connections and ends the server, waiting up to a short grace for open
    /// requests. Close the board first so blocked SendMessage calls and SSE streams finish.
    pub async fn stop(&self) {
        self.serving.stop().await;
    }
}
