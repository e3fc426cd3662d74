//! The one registry of diagnostic codes, and how every command renders them.
//!
//! Every `error[…]`/`warning[…]` line the runtime prints is built from a [`Code`] declared here, so
//! a code's meaning, default hint and severity live in exactly one place. Rendering follows
//! docs/reference/codes.md: `error[CODE]: message`, then `  hint: …` when a hint exists.

use std::fmt;

/// Whether a code refuses (exit 1) or only warns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One registered diagnostic code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    pub id: &'static str,
    pub severity: Severity,
    /// What the code is used for; shown by `docs/` and tests, never printed as the message.
    pub summary: &'static str,
    /// The hint printed when the site raising the code does not supply its own.
    pub default_hint: Option<&'static str>,
}

macro_rules! codes {
    ($( $konst:ident = $id:literal, $sev:ident, $summary:literal, $hint:expr; )*) => {
        $( pub const $konst: Code = Code { id: $id, severity: Severity::$sev, summary: $summary, default_hint: $hint }; )*
        /// Every registered code, in declaration order.
        pub const ALL: &[Code] = &[$($konst),*];
    };
}

/// The hint of an id that names nothing running (`mur stop`, `mur send`).
const PS_HINT: &str = "`mur ps` lists what is running on this machine";

const ROSTER_FIELDS_HINT: &str = "correct the key named above in roster.yaml — docs/reference/roster.md#keys lists every key, its type and whether it is required (`mur explain E-ROS-001`)";

codes! {
    E_ROS_001 = "E-ROS-001", Error, "roster.yaml does not read or does not have the roster shape", Some(ROSTER_FIELDS_HINT);
    E_ROS_002 = "E-ROS-002", Error, "not exactly one member is marked entry: true", Some("mark exactly one member `entry: true`; every other member leaves `entry` out or writes `entry: false`");
    E_ROS_003 = "E-ROS-003", Error, "a member name is declared more than once", Some("rename one of the members so every name in roster.yaml is unique");
    E_ROS_004 = "E-ROS-004", Error, "a reachability rule names a non-member", Some("add the missing member to `members`, or correct the name in the reachability rule");
    E_ROS_005 = "E-ROS-005", Error, "a called member does not serve peers", None;
    E_ROS_006 = "E-ROS-006", Error, "a roster with edges has a member whose door does not authenticate", None;
    E_ROS_007 = "E-ROS-007", Error, "a member is not installed at its version, or its artifact is damaged", None;
    E_ROS_008 = "E-ROS-008", Error, "a reachability rule lists the entry member in `to`", None;
    E_REG_005 = "E-REG-005", Error, "murmur.lock pins a member's capsule differently", Some("install the version and bytes the lock pins, or drop the stale entry from murmur.lock");
    W_ROS_001 = "W-ROS-001", Warning, "more members may call a member than it holds tasks at once", None;
    E_MAN_001 = "E-MAN-001", Error, "murmur.yaml is missing, unreadable, not YAML, or has a wrong type or missing key", Some("correct murmur.yaml as the message says; docs/reference/manifest.md lists every key");
    E_MAN_003 = "E-MAN-003", Error, "murmur.yaml declares conflicting rules", None;
    E_MAN_004 = "E-MAN-004", Error, "a key field names a variable the runtime itself passes to members", Some("name the variable that holds the provider's key (such as OPENAI_API_KEY), never one of the runtime's own: MURMUR_*, OTEL_*, LC_*, TRACEPARENT or the fixed list of docs/reference/formation.md#member-environment");
    W_SEC_019 = "W-SEC-019", Warning, "murmur.yaml has a key this runtime does not know", None;
    E_RUN_002 = "E-RUN-002", Error, "the capsule named by --capsule cannot be resolved or run", Some("install it with `mur install`, and check `mur list` for the exact name and version");
    E_RUN_003 = "E-RUN-003", Error, "murmur.lock is unreadable or not lock_version 3", Some("fix murmur.lock, or delete it so that nothing is pinned");
    E_RUN_010 = "E-RUN-010", Error, "the door cannot bind its address", Some("choose another --bind address, or free the port");
    E_RUN_012 = "E-RUN-012", Error, "a session cannot be staged: its work folder, records directory, trace or --task file cannot be used", None;
    E_RUN_022 = "E-RUN-022", Error, "mur stop: the id is malformed or nothing with it is running", Some(PS_HINT);
    E_RUN_024 = "E-RUN-024", Error, "mur stop: the formation's members name different launchers", Some("stop its members one by one with `mur stop ses_…`");
    E_RUN_030 = "E-RUN-030", Error, "a --task task ended other than completed", None;
    E_RUN_040 = "E-RUN-040", Error, "a running task was cancelled by SIGTERM", None;
    E_RUN_044 = "E-RUN-044", Error, "MURMUR_FORMATION_ID is malformed", Some("MURMUR_FORMATION_ID is set by `mur run --roster`; unset it to run a capsule on its own");
    E_RUN_045 = "E-RUN-045", Error, "the formation could not be launched", None;
    E_RUN_046 = "E-RUN-046", Error, "a formation channel or formation environment refusal", None;
    E_RUN_047 = "E-RUN-047", Error, "the installed artifact changed since admission", Some("launch the formation again so that admission binds the bytes now installed");
    E_RUN_053 = "E-RUN-053", Error, "the formation deadline fell", None;
    E_RUN_054 = "E-RUN-054", Error, "a callee's agent card does not verify under the key its launcher handed", Some("another process may be answering at that member's address; see the member's own log (`mur ps`, `mur trace show`) and launch the formation again");
    E_RUN_055 = "E-RUN-055", Error, "an MCP tool's definition is not the approved one, so it is not offered to the model", Some("if you trust the server's new definition, approve it with `mur approve <capsule> --capsule-version <version>`");
    // [ours] A remote capsule (docs/reference/capsules.md#remote-capsules) whose agent cannot be
    // used, or whose credential variable is unset: refused at start-up, before the member is ready.
    E_RUN_070 = "E-RUN-070", Error, "a remote capsule's agent is not ready: its card cannot be fetched, is not A2A 1.0 with a JSON-RPC interface, or asks for what the capsule cannot give", Some("check that the remote agent runs and serves its card at remote.url, that it speaks A2A 1.0 over JSON-RPC, and that remote.api_key and capabilities.network.allow give it what its card asks");
    E_RUN_071 = "E-RUN-071", Error, "a remote capsule's credential variable is unset or empty", None;
    W_RUN_007 = "W-RUN-007", Warning, "a formation member was handed no lifeline", None;
    W_RUN_008 = "W-RUN-008", Warning, "a caller's network grant reaches no loopback door", None;
    // [ours] A running session's trace or a task's result file cannot be written (a full disk):
    // the session goes on, and says once what its records will lack.
    W_RUN_009 = "W-RUN-009", Warning, "a running session's records cannot be written", Some("free space on the disk that holds ~/.murmur/records; the session goes on, and records what it can once writes succeed again");
    // [ours] `mur doctor`: a key variable a member reads at start is unset where doctor runs.
    // Admission needs no key, so the roster passes; `mur run` still refuses the member.
    W_RUN_010 = "W-RUN-010", Warning, "a member's key variable is unset where mur doctor runs: admission passes, mur run will refuse the member", None;
    W_RUN_011 = "W-RUN-011", Warning, "the approved definitions of a capsule's MCP tools could not be recorded", Some("make the directory of the installed archive writable by this user; the tools are judged again at the next start");
    // [ours] A test-only switch (MURMUR_TEST_TIMING, MURMUR_MUR_BINARY) is set and takes effect.
    W_ENV_001 = "W-ENV-001", Warning, "a test-only environment switch is in effect", None;
    // [ours] ~/.murmur/compiled (or an entry in it) is not this user's alone: components are
    // compiled in memory on every launch instead of loaded from it.
    W_CMP_001 = "W-CMP-001", Warning, "the compiled-component cache is not trusted", Some("make ~/.murmur/compiled a directory of your own that only you can write (`chmod 700 ~/.murmur/compiled`), or remove it so that mur creates it again");
    E_IO_001 = "E-IO-001", Error, "no project root found", Some("run it inside a project directory or a formation directory holding roster.yaml");
    E_IO_003 = "E-IO-003", Error, "signal handling could not be set up", None;
    E_NEW_001 = "E-NEW-001", Error, "mur new: the scaffold cannot be written", None;
    E_NEW_002 = "E-NEW-002", Error, "mur new: the name is not a valid artifact or member name", Some("use lowercase letters, digits and '-', starting with a letter");
    E_NEW_003 = "E-NEW-003", Error, "mur new: the target directory already exists", Some("choose another name, or move the existing path away");
    E_NEW_004 = "E-NEW-004", Error, "mur new: the inference provider is unknown", Some("use --inference openai or --inference anthropic");
    E_NEW_005 = "E-NEW-005", Error, "mur new --tool: the directory's murmur.yaml cannot take the tool", Some("run mur new --tool inside a model capsule's source directory");
    E_BLD_001 = "E-BLD-001", Error, "mur build: a file cannot be read or written, or the component is missing", None;
    E_BLD_002 = "E-BLD-002", Error, "mur build: the capsule's language toolchain is missing, or failed to build the component", None;
    E_INS_001 = "E-INS-001", Error, "mur install: the archive is bad, has no root murmur.yaml, or there is no project", None;
    E_TRC_002 = "E-TRC-002", Error, "mur trace show: nothing found for the id, or not all of a formation's trace", Some("`mur trace list` lists every formation launched here, `mur ps` the running sessions; a session's id is printed in its readiness line");
    // [ours] `mur send`: a task to a running session's or formation's door.
    E_SND_001 = "E-SND-001", Error, "mur send: the id is malformed or names no session or formation on this machine", Some(PS_HINT);
    E_SND_002 = "E-SND-002", Error, "mur send: the session or formation is not running", Some("start it again (`mur run …` without --task keeps it serving), then send the task");
    E_SND_003 = "E-SND-003", Error, "mur send: the door does not answer, or not as a door", Some("`mur ps` shows whether the session still runs; its logs/bootstrap.log says why it ended");
    E_SND_004 = "E-SND-004", Error, "mur send: the task ended other than completed, or the door refused it", None;
    // [ours] A task that asked for input (docs/reference/door.md#asking).
    E_ASK_001 = "E-ASK-001", Error, "a task's question got no answer within lifecycle.input_timeout_secs", Some("answer sooner (SendMessage naming the task, `mur answer`, or at the terminal), or raise lifecycle.input_timeout_secs in the asking capsule's murmur.yaml");
    // [ours] Token budgets (docs/reference/formation.md#budgets).
    E_BUD_001 = "E-BUD-001", Error, "the formation's token budget (mur run --max-tokens) has no room for the next model turn", Some("raise --max-tokens, or lower inference.max_tokens or the work a task asks for; `mur trace show` lists what each member spent");
    E_BUD_002 = "E-BUD-002", Error, "the session's token budget (inference.max_session_tokens, or a lone session's --max-tokens) has no room for the next model turn", Some("raise inference.max_session_tokens in the capsule's murmur.yaml (or --max-tokens), or lower inference.max_tokens; `mur trace show` lists what the session spent");
    E_BUD_003 = "E-BUD-003", Error, "mur run --max-tokens or --max-turns: the value is not a number from 1 to 10^12 (turns: 2^32-1), nor `unlimited`", Some("give a whole number, e.g. --max-tokens 200000 or --max-turns 100; `unlimited` lifts the default guard");
    E_BUD_004 = "E-BUD-004", Error, "a task's token budget (its grant's, narrowed along the calls above it) has no room for the next model turn", Some("the budget comes from the calling task (call-member's `budget`, what its own grant had left, and --max-tokens); give the call more, or ask the callee for less work");
    E_BUD_005 = "E-BUD-005", Error, "a task reached its limit of model turns (inference.max_turns, --max-turns, or the default guard of 50) and the model still asked for a tool call", Some("raise the limit with `mur run --max-turns N` or inference.max_turns in the capsule's murmur.yaml (`--max-turns unlimited` lifts the default guard), or ask for less work; `mur trace show` lists each turn");
    // [ours] Grants: on whose behalf, until when and with how much a called task runs (docs/reference/formation.md#grants).
    E_GRT_001 = "E-GRT-001", Error, "a door refused a call's grant (x-murmur-grant): forged, altered, another formation's or member's, or not the caller's", Some("a grant is sealed by the formation's launcher for one call to one member; only the runtime writes x-murmur-grant (`mur explain E-GRT-001`)");
    E_GRT_002 = "E-GRT-002", Error, "a task reached the deadline of the grant it runs under and was canceled", Some("the deadline is inherited from the calling task (and the formation's --deadline); give the root task more time, or ask the callee for less work");
    E_GRT_003 = "E-GRT-003", Error, "the launcher refused a call's grant: the calling task's own grant has passed its deadline, has no budget left, or the chain is too long", None;
    // [ours] `mur answer`: a person answers a task's question at its door.
    E_ANS_001 = "E-ANS-001", Error, "mur answer: the task id is malformed, or no running session holds the task", Some("the task id is printed with its question (`… asks …`); `mur ps` lists the running sessions");
    E_ANS_002 = "E-ANS-002", Error, "mur answer: the door refused the answer (the task waits for none, or the answer is empty or too large)", None;
    E_ANS_003 = "E-ANS-003", Error, "mur answer: after the answer, the task ended other than completed", None;
    // [ours] OpenTelemetry export (src/otel): asked for but not set up, or the collector failing.
    W_OTL_001 = "W-OTL-001", Warning, "OpenTelemetry export was asked for but cannot be set up; no span is exported", Some("correct the OTEL_* variable named above, or unset OTEL_EXPORTER_OTLP_ENDPOINT to run without export");
    W_OTL_002 = "W-OTL-002", Warning, "spans cannot be delivered to the OpenTelemetry collector", Some("check that the collector at OTEL_EXPORTER_OTLP_ENDPOINT is running and accepts OTLP/HTTP with protobuf bodies; tasks are not affected");
    E_DEMO_001 = "E-DEMO-001", Error, "mur demo: the demo formation cannot be prepared or launched", None;
    // [ours] `mur ui`: the live view in the browser.
    E_UI_001 = "E-UI-001", Error, "mur ui: the page cannot be served on 127.0.0.1 (the port is taken or cannot be bound)", Some("leave out --port to take a free port, or name another one");
    E_UI_002 = "E-UI-002", Error, "mur ui: an action was refused: it did not come from a page of this server (its page token or origin is missing or wrong)", Some("act from the page `mur ui` serves; reload it if the server was restarted");
    E_UI_003 = "E-UI-003", Error, "mur ui: an action could not be carried out (the formation or task is not running, or its door refused)", None;
    E_EXP_001 = "E-EXP-001", Error, "mur explain: no such diagnostic code", Some("codes look like E-ROS-007 or W-RUN-008; docs/reference/codes.md lists every one");
    // [ours] `mur deploy --kubernetes`.
    E_DEP_001 = "E-DEP-001", Error, "mur deploy: manifests carrying credentials would be written to a terminal", Some("pipe them to the cluster (`mur deploy … | kubectl apply -f -`) or write them to owner-only files with -o DIR");
    E_DEP_002 = "E-DEP-002", Error, "mur deploy: an option or member name cannot be carried into Kubernetes objects", None;
    E_DEP_003 = "E-DEP-003", Error, "mur deploy: the manifests cannot be rendered or written", None;
    E_DEP_004 = "E-DEP-004", Error, "mur deploy: a member dials an endpoint on the loopback, and the cluster's place of it is not given (or an --endpoint is wrong)", Some("give the service's place in the cluster with --endpoint LOOPBACK-HOST:PORT=SERVICE-HOST:PORT");
    E_DEP_005 = "E-DEP-005", Error, "mur deploy: the formation asks for a guarantee the cluster render cannot carry yet", None;
    // [ours] Supervised restarts of a formation's peers (docs/reference/formation.md#restarts).
    E_RST_001 = "E-RST-001", Error, "mur run --restart: the policy is not N/SECS with N from 1 to 1000 and SECS from 1 to 86400", Some("give at most how many restarts within how many seconds, e.g. --restart 3/60, or leave it out so a peer that ends is withdrawn");
    W_RST_001 = "W-RST-001", Warning, "a peer ended more often than the formation's restart policy allows and was withdrawn", Some("its stderr above says why it ended; raise --restart N/SECS if it may end that often");
    E_RST_002 = "E-RST-002", Error, "the member restarted while this task ran, and its capsule does not declare that its tasks may run again, so the task ended failed", Some("send the task again; a capsule whose tasks are safe to repeat says `lifecycle.repeatable_tasks: true` in murmur.yaml, and its running task is then run again after a restart");
    E_RST_003 = "E-RST-003", Error, "the member's task store cannot keep the task (it is full or cannot be written), so the task was not taken", Some("the store keeps at most 1000 ended tasks and 64 MiB; see the member's logs/bootstrap.log for why it could not write, and send the task again");
    // [ours] `mur doctor`: what the launch would refuse, found before it.
    E_DOC_001 = "E-DOC-001", Error, "mur doctor: an endpoint a member will use (its model server, an MCP server, its remote agent) does not answer, or is another user's listener", Some("start the server, or correct the URL on the manifest line named; `mur doctor --offline` skips this check");
    E_DOC_002 = "E-DOC-002", Error, "mur doctor: a key that gives a capsule something to run (inference, component, remote) is misspelt, so the capsule has nothing to run and `mur run` refuses it", Some("correct the key's spelling on the line named in murmur.yaml, then rebuild and reinstall the capsule");
    // [ours] A model capsule's MCP tool server (docs/reference/capsules.md#tools) that does not
    // keep to the protocol revision it speaks: the call (or the session's start) fails with the code.
    E_MCP_001 = "E-MCP-001", Error, "an MCP server speaks no protocol version this client does, or answers otherwise than the revision it said it speaks", Some("run a server of MCP 2025-03-26 to 2026-07-28; a server that lists 2026-07-28 in server/discover must serve requests without a session");
    E_MCP_002 = "E-MCP-002", Error, "an MCP tool call's task did not end within the call's bound, and was cancelled (tasks/cancel)", Some("the bound is the runtime's tool-call timeout; a tool that works longer should report progress and finish sooner, or be split into shorter calls");
    E_MCP_003 = "E-MCP-003", Error, "an MCP server asked more questions in one tool call than it may, or asked what cannot be answered", Some("a call may ask at most 4 questions at once and 8 in all, each an elicitation form; sampling and roots are not offered");
}

/// Looks a code up by its printed id, e.g. `"E-ROS-001"`.
pub fn lookup(id: &str) -> Option<Code> {
    ALL.iter().copied().find(|c| c.id == id)
}

/// A diagnostic ready to print: a code, its message, and an optional hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    /// `None` falls back to the code's default hint; `Some("")` suppresses any hint.
    hint: Option<String>,
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            hint: None,
        }
    }

    /// Replaces the code's default hint for this occurrence.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Prints no hint at all, even when the code has a default one.
    pub fn without_hint(mut self) -> Self {
        self.hint = Some(String::new());
        self
    }

    /// The hint that will be printed, if any.
    pub fn hint(&self) -> Option<&str> {
        match &self.hint {
            Some(h) if h.is_empty() => None,
            Some(h) => Some(h),
            None => self.code.default_hint,
        }
    }

    /// The first line's head: `error[CODE]` or `warning[CODE]`.
    pub fn head(&self) -> String {
        let word = match self.code.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        format!("{word}[{}]", self.code.id)
    }

    /// The full rendering, behind an optional prefix such as `[mur run] `.
    pub fn render(&self, prefix: &str) -> String {
        let mut out = format!("{prefix}{}: {}", self.head(), self.message);
        if let Some(h) = self.hint() {
            out.push_str("\n  hint: ");
            out.push_str(h);
        }
        out
    }

    /// Prints the rendering on stderr. A message may quote what a member, a model or a remote
    /// agent said: on a terminal its control characters are made visible
    /// ([`crate::question::for_stream`]); piped, its bytes are unchanged.
    pub fn eprint(&self, prefix: &str) {
        use std::io::{IsTerminal, Write};
        let mut stderr = std::io::stderr().lock();
        let terminal = stderr.is_terminal();
        let _ = writeln!(
            stderr,
            "{}",
            crate::question::for_stream(&self.render(prefix), terminal)
        );
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(""))
    }
}

impl std::error::Error for Diagnostic {}

/// A user-written value inside a message: control characters escaped so a file or a peer cannot
/// write to the terminal through a diagnostic, and cut after 80 characters so it cannot flood it.
pub fn shown(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == 80 {
            out.push('\u{2026}');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for c in ALL {
            assert!(seen.insert(c.id), "{} registered twice", c.id);
            let (kind, rest) = c.id.split_once('-').expect("code has a kind");
            assert!(kind == "E" || kind == "W", "{}", c.id);
            assert_eq!(kind == "E", c.severity == Severity::Error, "{}", c.id);
            assert!(rest.len() >= 5, "{}", c.id);
        }
    }

    #[test]
    fn renders_error_with_default_and_own_hint() {
        let d = Diagnostic::new(E_ROS_003, "roster.yaml: member name 'a' is declared more than once");
        assert_eq!(
            d.render(""),
            "error[E-ROS-003]: roster.yaml: member name 'a' is declared more than once\n  hint: rename one of the members so every name in roster.yaml is unique"
        );
        let d = Diagnostic::new(E_ROS_005, "m").with_hint("h");
        assert_eq!(d.render("[mur doctor] "), "[mur doctor] error[E-ROS-005]: m\n  hint: h");
        let d = Diagnostic::new(E_ROS_003, "m").without_hint();
        assert_eq!(d.render(""), "error[E-ROS-003]: m");
        assert_eq!(Diagnostic::new(W_ROS_001, "w").render(""), "warning[W-ROS-001]: w");
        assert_eq!(lookup("E-RUN-045"), Some(E_RUN_045));
    }

    #[test]
    fn user_values_are_escaped_and_cut() {
        assert_eq!(shown("a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
        let long = "x".repeat(100);
        assert_eq!(shown(&long), format!("{}\u{2026}", "x".repeat(80)));
        assert_eq!(shown("plain"), "plain");
    }
}
