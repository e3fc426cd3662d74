//! One MCP session per server on the thread that runs the tasks. An awc client is bound to its
//! thread, so sessions live in a thread-local map: the executor's arbiter opens each server's
//! session at its first call and shares it with every later task; a session that failed is
//! forgotten, and the next call begins a new one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::mcp::{McpEndpoint, McpLimits, McpServer};

thread_local! {
    static SESSIONS: RefCell<HashMap<String, Rc<McpServer>>> = RefCell::new(HashMap::new());
}

/// This thread's session with `endpoint`'s server, opened now if there is none.
pub(super) async fn session(endpoint: &McpEndpoint) -> Result<Rc<McpServer>, String> {
    if let Some(s) = SESSIONS.with(|m| m.borrow().get(&endpoint.name).cloned()) {
        return Ok(s);
    }
    let server = Rc::new(McpServer::connect(endpoint.clone(), McpLimits::default()).await?);
    // Two first calls may both have connected; the one that files first is kept.
    Ok(SESSIONS.with(|m| Rc::clone(m.borrow_mut().entry(endpoint.name.clone()).or_insert(server))))
}

/// Drops this thread's session with the server of entry `name` (it ends with a `DELETE`).
pub(super) fn forget(name: &str) {
    let gone = SESSIONS.with(|m| m.borrow_mut().remove(name));
    drop(gone);
}
