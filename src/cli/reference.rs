//! `docs/reference/cli.md`, generated from the clap definitions in `cli/mod.rs` (as `mur man`
//! is), so a flag cannot exist without its entry. What clap does not know — what a command prints
//! on stdout and stderr, its exit statuses, its `--json` fields — is the side table [`NOTES`],
//! one entry per command; `tests/it/reference.rs` fails when a command has no entry, an entry
//! names no command, an argument has no help text, or the checked-in file is stale.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use super::Cli;

/// The command that rewrites the checked-in file after a change to the CLI.
pub const REGENERATE: &str = "MUR_UPDATE_REFERENCE=1 cargo test --workspace --test it reference::cli";

/// What one command prints and how it exits: markdown, written by hand.
pub struct Notes {
    /// Command path below `mur`, e.g. `"trace show"`.
    pub command: &'static str,
    pub stdout: &'static str,
    pub stderr: &'static str,
    pub exit: &'static str,
    /// `--json` output: each field as a path (`artifacts[].name`), then its meaning.
    pub json: &'static [(&'static str, &'static str)],
}

/// The hand-written part of each command's entry, in the order the commands are declared.
pub const NOTES: &[Notes] = &[
    Notes {
        command: "new",
        stdout: "`--roster`: `Scaffolded formation 'NAME' in ./NAME`, the files written (`NAME/roster.yaml`, `NAME/lead/murmur.yaml`, `NAME/worker/murmur.yaml` and the members' sources), a blank line, then `Next:` and the commands that build, install and launch it. `--capsule`: `Scaffolded <lang> capsule 'NAME' in ./NAME`, the files written (`murmur.yaml` with `build.language` and the sources), then `Next:`: the toolchain's install command (once), the build and install, and a `mur run --capsule` line. `--tool`: `Scaffolded <lang> tool 'NAME' in ./tools/NAME and added it to murmur.yaml`, the files written, then `Next:`.",
        stderr: "Diagnostics only.",
        exit: "0 written; 1 with E-NEW-001 (cannot write), E-NEW-002 (bad name), E-NEW-003 (`./NAME` exists in any form, a dangling symlink included) E-NEW-004 (unknown provider) or E-NEW-005 (`--tool`: `./murmur.yaml` is missing, not a model capsule's, or cannot take the entry). Nothing is left behind on a refusal: the scaffold is written into a staging directory and renamed into place last.",
        json: &[],
    },
    Notes {
        command: "build",
        stdout: "`Built <name>@<version>: <path of the .mur.zip>`. The archive is written next to `murmur.yaml` as `<name>-<version>.mur.zip` (an existing one is replaced); it is deterministic, so unchanged sources rebuild to the same sha256.",
        stderr: "W-SEC-019 for each unknown `murmur.yaml` key; for each component built from sources (`build.language`, the capsule's or a tool's), `Building <entry file> with <toolchain>` (with why in parentheses when an earlier build was recorded, e.g. `(app.py changed)`), on a terminal a counter of the seconds the toolchain takes (cleared when it ends), then `Built <component> in <S> s`, or `Unchanged <component> (…)` when its input files, build settings, toolchain and mur are those its stamp under `.murmur/build/` recorded and the component is the one that build wrote: the toolchain does not run and the component keeps its bytes and mtime (`target/`, `node_modules/`, `.venv/` and other tool directories are not inputs; remove `.murmur/build/` to build everything again); diagnostics.",
        exit: "0 built; 1 with E-MAN-001/E-MAN-003 (the manifest), E-BLD-001 (I/O, or the component named by `component:` is missing) or E-BLD-002 (the `build.language` toolchain is missing or failed; its progress line and output tail go to stderr).",
        json: &[],
    },
    Notes {
        command: "install",
        stdout: "`Installed local/<name>@<version> from <FILE>`; ` (the same bytes as before)` after it when that version was installed with these bytes already; `Replaced local/<name>@<version> from <FILE> (sha256 <old> → <new>; sessions already running keep the old bytes)` when other bytes were installed at that version (the first 12 hex digits of each).",
        stderr: "Diagnostics only; on a terminal, while the capsule's component and each WebAssembly tool compile into the compiled cache, a spinner naming it, then `compiled local/<name>@<version> in <S> s` (`compiled local/<name>@<version> tool <tool> in <S> s` for a tool; nothing when stderr is not a terminal).",
        exit: "0 installed; 1 with E-INS-001 (a bad archive, no root `murmur.yaml`, or no project directory above the current one without `-g`). Without `-g` the project's `murmur.lock` gets the entry for `local/<name>` (added or replaced).",
        json: &[],
    },
    Notes {
        command: "list",
        stdout: "One line per artifact, project store first then global, sorted by name and version: `<scope>/<name>  <version>  <project|global>  <first 12 hex of sha256>  <compiled|not-compiled|->`, each column padded to its widest cell (the last column: whether this user's cache holds the native code of the capsule's component and of each of its WebAssembly tools for this mur and engine; `-` for a capsule with neither); `No artifacts installed.` when there are none. With `--json`, one compact JSON line.",
        stderr: "Nothing, except W-CMP-001 when the compiled-component cache cannot be trusted.",
        exit: "0.",
        json: &[
            ("artifacts[]", "one object per artifact, in the table's order"),
            (
                "artifacts[].compiled",
                "`true` when the component and every WebAssembly tool are compiled in this user's cache, `false` when one is not, `null` for a capsule with neither",
            ),
            ("artifacts[].name", "full artifact name, `<scope>/<name>`"),
            ("artifacts[].sha256", "64 lowercase hex, the sidecar's digest"),
            ("artifacts[].store", "`project` or `global`"),
            ("artifacts[].version", "the installed version"),
        ],
    },
    Notes {
        command: "approve",
        stdout: "`Approved <n> MCP tool(s) of <scope>/<name>@<version>: <entry>.<tool>, …` and `  recorded in <path of tool-pins.json>`; `<capsule> has no MCP tools: nothing to approve …` for a capsule without any. The capsule is resolved as `mur run --capsule` resolves it (project store, then global); each MCP server is reached as a session start reaches it, with its `api_key` variable from the environment ([capsules.md#pinned-tools](capsules.md#pinned-tools)).",
        stderr: "Diagnostics only: W-RUN-011 when the definitions cannot be recorded.",
        exit: "0 recorded; 1 with E-RUN-002 (the capsule cannot be resolved, or a server cannot be reached, lacks an allowed tool, or its key variable is unset) or W-RUN-011.",
        json: &[],
    },
    Notes {
        command: "doctor",
        stdout: "In a formation directory (a `roster.yaml`, no `murmur.yaml`): a line saying the roster is checked, then the Roster block — `file:`, one row per member (name, `capsule@version`, `entry`, `serves peers`/`refuses peers`, `authenticated door`/`public door`), `reachability: a → b, …`, one `env:` line per model member, one line per W-ROS-001 and per W-RUN-008 (a member with callees whose network grant reaches no door, as a launch would warn), one W-RUN-010 warning per key variable a member reads (a model's `inference.api_key`, an MCP tool's `api_key`, a remote member's `remote.api_key`) that is unset here (admission needs no key; `mur run` will refuse the member, E-RUN-002 or E-RUN-071), one `✗` line per model member that lacks anything else it needs to run (E-RUN-002, as its session would refuse) — then the tally (`All checks passed.` or `<P> check(s) passed, <F> error(s) found[, <W> warning(s)].` and one `Fix:` line per problem). In a capsule's source directory: one `  ✓  <check>` or `  ✗  <message>` line per check, the Roster block when a `roster.yaml` is beside it, then the tally. `--graph`/`--dot` print the admitted reachability graph instead (Mermaid / Graphviz). With `--json`, one compact JSON line.",
        stderr: "Each refusal in full: `[mur doctor] error[CODE]: …` and its hint.",
        exit: "0 when no check failed (warnings do not fail); 1 when one did, or with E-IO-001 when there is neither a `roster.yaml` nor a `murmur.yaml` here or above.",
        json: &[
            ("errors[]", "each failed check"),
            ("errors[].code", "its diagnostic code"),
            ("errors[].message", "the message, as printed after `error[CODE]: `"),
            ("errors[].fix", "the hint, or null"),
            ("member", "null in a formation directory; else the capsule's checks"),
            ("member.dir", "the source directory checked"),
            ("member.checks[]", "each check, in order"),
            ("member.checks[].ok", "whether it passed"),
            ("member.checks[].text", "what was checked, or why it failed"),
            ("ok", "true when no check failed"),
            ("roster", "null when no roster was checked"),
            ("roster.admitted", "whether admission passed"),
            ("roster.file", "the roster.yaml checked"),
            ("roster.error", "the refusal's code (only when not admitted)"),
            (
                "roster.edges[]",
                "the admitted edges, roster order (only when admitted)",
            ),
            ("roster.edges[].from", "caller's member name"),
            ("roster.edges[].to", "callee's member name"),
            (
                "roster.members[]",
                "one object per member, roster order (only when admitted)",
            ),
            ("roster.members[].authenticated", "its door requires a token"),
            ("roster.members[].capsule", "`<scope>/<name>`"),
            ("roster.members[].entry", "whether it is the entry"),
            ("roster.members[].name", "its roster name"),
            ("roster.members[].serves_peers", "its manifest accepts peer tasks"),
            ("roster.members[].sha256", "the bytes admission bound it to"),
            ("roster.members[].version", "its pinned version"),
            ("roster.reachability", "`all`, `none` or `rules` (only when admitted)"),
            (
                "warnings[]",
                "each warning (W-ROS-001, W-RUN-008, W-RUN-010, W-SEC-019)",
            ),
            ("warnings[].code", "its code"),
            ("warnings[].message", "its text"),
            ("warnings[].fix", "what would silence it"),
        ],
    },
    Notes {
        command: "run",
        stdout: "With `--capsule`: with `--json`, the readiness line first ([formation.md#readiness-line](formation.md#readiness-line)), then, when a `--task` task ends, `{\"answer\":…,\"state\":\"TASK_STATE_…\",\"task_id\":\"tsk_…\"}`; without `--json`, only the answer of a `--task` task. A `--task` run ends when its task ends, whatever the capsule's lifecycle. With `--roster`: the entry member's stdout (it shares the launcher's), so the formation's answer; with `--json` the formation line comes first ([formation.md#formation-line](formation.md#formation-line)).",
        stderr: "With `--capsule`: a one-line door notice (without `--json`: `session <ses_id> of <capsule>@<version> serves its door at http://localhost:PORT`, followed, for a session that serves on, by `until it is stopped:` and the `mur stop <id>` that stops it (or Ctrl-C), otherwise by when it ends), diagnostics behind `[capsule-runtime] `. With `--roster`: the formation line (without `--json`), every peer's stderr and later stdout lines behind `[<member>] `, the launcher's own lines behind `[mur run] `, retention removals. On a terminal, a component compiled because the compiled cache lacks it shows a spinner, then `[capsule-runtime] compiled <capsule>@<version> in <S> s` (`[mur run] ` for a launch, which compiles each component once for its members). When the `--task` task (a formation's: its entry's) asks for input: `[mur run] <member> asks (through <members>) (task <tsk_id>):` and the question on the next line; on a terminal (stdin and stderr) then `[mur run] your answer (one line, Enter sends it): `, and the line typed answers it (an empty line is asked again); without a terminal, once per session, `[capsule-runtime] task <tsk_id> waits for input; answer it with …`, naming the `mur answer <tsk_id> TEXT` that answers it, and the door and running record whose operator token a SendMessage naming the task in `message.taskId` needs (never the token itself). The question never goes to `logs/bootstrap.log`.",
        exit: "`--capsule`: 0 when the task completed, the session was idle, or its formation ended; 1 on a refusal, a task that did not complete (E-RUN-030), a SIGTERM during a task (E-RUN-040) or the deadline (E-RUN-053); 143 when the 20 s teardown bound forced the end ([formation.md#how-a-member-ends](formation.md#how-a-member-ends)). `--roster`: the entry's exit status (128+N if it died of signal N); 1 on an admission refusal (nothing started), a launch failure (E-RUN-045) or a deadline before the entry started (E-RUN-053); 128+N when the launcher itself got SIGINT, SIGTERM or SIGHUP. `mur run` with neither `--capsule` nor `--roster` is a usage error (2).",
        json: &[
            ("auth", "readiness line: `bearer` when the door requires a token"),
            (
                "formation_id",
                "readiness and formation lines: the formation (readiness line: only in one)",
            ),
            ("name", "readiness line: the capsule's full artifact name"),
            ("pid", "readiness line: the session's process"),
            ("records_dir", "readiness line: its records directory"),
            ("session_id", "readiness line: `ses_…`"),
            ("tokens", "readiness line, hidden `--readiness-tokens` only"),
            ("tokens.operator", "the operator door token, `mdt1.…`"),
            ("url", "readiness line: the door, `localhost:PORT` (no scheme)"),
            ("version", "readiness line: the capsule's version"),
            ("workdir", "readiness line: the work folder"),
            ("answer", "task line: the answer of a completed task, else null"),
            ("state", "task line: the task's final A2A state, `TASK_STATE_…`"),
            ("task_id", "task line: `tsk_…`"),
            ("deadline", "formation line: null, or the formation's deadline"),
            ("deadline.at", "RFC 3339 UTC, seconds"),
            ("deadline.secs", "the `--deadline` given"),
            ("entry", "formation line: the entry member's name"),
            ("peers[]", "formation line: one object per peer, roster order"),
            ("peers[].name", "its member name"),
            ("peers[].pid", "its process"),
            ("peers[].session_id", "`ses_…`"),
            ("peers[].url", "its door, `http://localhost:PORT`"),
            ("peers[].workdir", "its work folder"),
        ],
    },
    Notes {
        command: "deploy",
        stdout: "The manifests as a YAML stream (refused on a terminal once they carry credentials, E-DEP-001), unless `-o DIR`. Without `--formation-uid` only the formation object, which carries no credential; with `--dry-run` every object, marked so no API server accepts it. See [kubernetes.md](../kubernetes.md).",
        stderr: "What to run next (the second step's command line), the Secret the members' keys are read from and the key names it must hold (never a value), `[mur deploy] wrote N objects into DIR` with `-o`, diagnostics behind `[mur deploy] `.",
        exit: "0; 1 on an admission refusal (the codes of `mur run --roster`) or E-DEP-001…003.",
        json: &[],
    },
    Notes {
        command: "send",
        stdout: "The answer, as the door streams it: the text of each `artifactUpdate` of the `response` artifact as it arrives (a chunk with `append: true` adds to what was printed; one that replaces a turn's text starts on a new line), then a newline. Nothing else.",
        stderr: "`mur send: task <tsk_id> on <ses_id> (<capsule>@<version>)` once the door took the task; diagnostics. The operator token (read from the session's running record, 0600) is never printed, and never put in an argument or the environment.",
        exit: "0 when the task completed; 3 when it asks for input (the question on stderr, with the `mur answer` that answers it); 1 with E-SND-001 (malformed id, or no such session or formation here), E-SND-002 (it has ended, or ended before its task did), E-SND-003 (the door does not answer on 127.0.0.1, is not this user's, answers with something else than its event stream, or sends more than 8 MiB in one event or 64 MiB in all) or E-SND-004 (the door refused the task, or the task ended failed, canceled or rejected).",
        json: &[],
    },
    Notes {
        command: "answer",
        stdout: "What followed the answer, as `mur send` prints it: the task's answer as the door streams it, then a newline.",
        stderr: "`mur answer: task <tsk_id> on <ses_id> (<capsule>@<version>)` once the door took the answer; when the task asks again, `mur answer: task <tsk_id> waits for input; <member> asks (through <members>):`, the question, and a line naming the `mur answer <tsk_id> TEXT` that answers it; diagnostics. The task is found by asking each of this user's running sessions (newest first, at most 64, GetTask with the running record's operator token) until one knows it; the token is never printed, nor put in an argument or the environment.",
        exit: "0 when the task then completed; 3 when it asks again; 1 with E-ANS-001 (malformed task id, or no running session holds the task), E-ANS-002 (the answer is empty, larger than the door's 8 MiB body bound, or unreadable, or the door refused it: `-32004` when the task waits for no answer, being terminal, answered already or timed out), E-ANS-003 (the task then ended failed, canceled or rejected) or E-SND-003 (the door does not answer, or not as a door).",
        json: &[],
    },
    Notes {
        command: "stop",
        stdout: "`ses_…`: `stopped:  <id>`. `frm_…`: `stopped:  <id>`, `launcher: pid N, SIGTERM` (or `…, SIGTERM, then SIGKILL`, or `none running`), then one `member:   <ses_id>  <capsule>@<version>  <ending>` line per member, the ending being `formation_ended`, `session_end <exit_status>` or `no session_end`.",
        stderr: "Diagnostics only.",
        exit: "0 stopped; 1 with E-RUN-022 (malformed id, or nothing with it running) or E-RUN-024 (the formation's members name different launchers; nothing is signalled).",
        json: &[],
    },
    Notes {
        command: "ps",
        stdout: "With `-a`: what `mur trace list` prints, instead of the live sessions. Otherwise `SESSION  CAPSULE  PID  STARTED (UTC)` columns (the start to the second), plus `MEMBER` when any live session belongs to a formation, within 100 columns; a formation's sessions are grouped under `formation <frm_id>  launcher pid <N|->  <k> member(s)`, followed by a line `  tokens <spent> of <limit>` when the formation keeps a token budget (`--max-tokens`, or the default guard of a formation with a model member); the JSON lists sessions only, with each door's `url`. Records of dead processes are removed as they are found. With `--json`, one compact JSON line.",
        stderr: "`mur ps: cannot read <dir>: …` when the running records cannot be listed.",
        exit: "0.",
        json: &[
            ("sessions[]", "one object per live session, in the table's order"),
            ("sessions[].capsule_name", "`<scope>/<name>`"),
            ("sessions[].capsule_version", "its version"),
            ("sessions[].formation_entry", "true for a formation's entry, else null"),
            ("sessions[].formation_id", "its formation, or null"),
            ("sessions[].formation_launcher_pid", "the launcher's pid, or null"),
            ("sessions[].formation_member", "its roster name, or null"),
            ("sessions[].pid", "the session's process"),
            ("sessions[].records_dir", "its records directory"),
            ("sessions[].session_id", "`ses_…`"),
            ("sessions[].started_at", "RFC 3339, milliseconds, UTC"),
            ("sessions[].url", "its door, `localhost:PORT`"),
            ("sessions[].workdir", "its work folder"),
        ],
    },
    Notes {
        command: "trace",
        stdout: "See `mur trace show`.",
        stderr: "See `mur trace show`.",
        exit: "2 without a subcommand.",
        json: &[],
    },
    Notes {
        command: "trace show",
        stdout: "`ses_…`: one line per trace record, `<RFC 3339 ms>  <event_type>  <its own fields>`. `frm_…`: the formation block ([formation.md#formation-traces](formation.md#formation-traces)): the roots searched, one row per member session, one line per member call, one line per question a member's task asked (`questions:`, sizes and waits only), and the `usage:` table (per member and total: tasks, calls, model turns, model ms, other ms, tokens in and out). With `--json`, one compact JSON line: for `ses_…` the session's usage, for `frm_…` every member's, the calls, the questions and the total. With `--follow`: the records as they are appended (read again every 100 ms), each as a `ses_…` line; for `frm_…`, of every member session, as `<RFC 3339 ms>  <member>  <event_type>  <its own fields>`. It ends once the session wrote `session_end` or its process is gone; for a formation, once its launcher and every member are gone.",
        stderr: "Diagnostics only.",
        exit: "0 (with `--follow`, once what it follows ended); 1 with E-TRC-002 when no session has that id (or belongs to that formation), when a prefix or `last` names no single formation, or, after the block, when the formation's trace is not whole: a member its launcher started has no trace found, or a trace found cannot be read.",
        json: &[
            ("session_id", "`ses_…` only: the session"),
            ("member", "`ses_…` only: its formation member name, or null"),
            ("usage", "`ses_…` only: the session's usage object (fields below)"),
            ("formation_id", "`frm_…` only: the formation"),
            (
                "members[]",
                "`frm_…` only: one object per member session, in the table's order",
            ),
            ("members[].session_id", "the session"),
            ("members[].member", "its member name"),
            ("members[].capsule", "its capsule name"),
            ("members[].exit_status", "its `session_end.exit_status`, or null"),
            ("members[].usage", "its usage object"),
            ("calls[]", "`frm_…` only: one object per member call"),
            ("calls[].call_id", "the `mcl_…` id"),
            ("calls[].from", "the calling member"),
            ("calls[].to", "the called member"),
            ("calls[].status", "the call's status, as `member_call.status`"),
            ("calls[].duration_ms", "how long it took, or null"),
            (
                "questions[]",
                "`frm_…` only: one object per question a member's task asked, in session order",
            ),
            ("questions[].member", "the member whose trace recorded it"),
            ("questions[].task_id", "the task that asked"),
            (
                "questions[].asked_by",
                "who asked, innermost first (the asking member, then each it came up through)",
            ),
            ("questions[].question_bytes", "the question's size in bytes"),
            (
                "questions[].outcome",
                "`answered`, `timed_out` or `abandoned`; null while open",
            ),
            ("questions[].waited_ms", "how long it waited, or null while open"),
            ("questions[].answer_bytes", "the answer's size in bytes, or null"),
            ("total", "`frm_…` only: the members' usage summed"),
            ("usage.tasks", "tasks started (`task_start` records)"),
            ("usage.calls", "member calls made"),
            ("usage.model_turns", "model turns (`inference` records)"),
            ("usage.model_ms", "milliseconds spent in model turns"),
            ("usage.tool_calls", "WebAssembly and MCP tool calls the model made"),
            (
                "usage.tool_ms",
                "milliseconds spent in them (overlapping calls each count)",
            ),
            (
                "usage.other_ms",
                "task time outside model turns and tool calls (never below 0)",
            ),
            (
                "usage.task_ms",
                "task time, the sum of `task_end` and `task_canceled` `duration_ms`",
            ),
            ("usage.input_tokens", "input tokens the providers reported"),
            ("usage.output_tokens", "output tokens the providers reported"),
            (
                "usage.turns_without_usage",
                "model turns whose provider reported no token counts",
            ),
        ],
    },
    Notes {
        command: "trace list",
        stdout: "`FORMATION  STARTED  STATE  ROSTER  TASK` columns, one row per directory under `~/.murmur/formations/`, newest first: the shortest prefix of the id (at least `frm_` and 12 digits) no other formation's starts with, the mint time (local, to the minute), `running` or `ended` (the launcher's pid and start token), the roster's directory (`~` for the home directory) and the first words of `--task` (at most 60 characters, `…` when cut; `(served, no --task)` without one). `no formation was launched under <dir>` when there is none.",
        stderr: "Nothing.",
        exit: "0.",
        json: &[],
    },
    Notes {
        command: "ui",
        stdout: "`mur ui: serving the records of <~/.murmur/records> at`, then the page's address `http://127.0.0.1:<PORT>/?token=<64 hex>` on a line of its own (the only place the page's token is ever shown: it is the UI's own, not a formation's), then a line saying the address is the operator's alone. It serves until stopped (Ctrl-C, SIGTERM). Read-only: it writes, prunes and answers nothing (but `--open`'s launch page).",
        stderr: "With `--open`: a line when no browser is found (`$BROWSER`, else `xdg-open` or `open` on `PATH`) or it cannot be run, or the launch page cannot be written; the browser gets only the `file://` address of a 0600 page in the owner-only `~/.murmur/ui/` carrying a one-time launch code (never the token; removed once used). Diagnostics.",
        exit: "Runs until stopped; 1 with E-UI-001 when 127.0.0.1:PORT cannot be bound.",
        json: &[],
    },
    Notes {
        command: "demo",
        stdout: "The formation's answer, then `Calls in formation frm_…:` and one line per member call.",
        stderr: "`mur demo:` progress lines (what was built and installed), the formation's own stderr.",
        exit: "The formation's exit status; 1 with E-DEMO-001 when it cannot be prepared. Everything lives in a private temporary home, removed at the end.",
        json: &[],
    },
    Notes {
        command: "explain",
        stdout: "The code, its severity and what it is for, its default hint, then its section of [codes.md](codes.md): when it fires, an example, what to do. The text is built into the binary.",
        stderr: "Diagnostics only.",
        exit: "0; 1 (E-EXP-001) for a code that is not registered (any case is read: `mur explain e-ros-007`).",
        json: &[],
    },
    Notes {
        command: "completion",
        stdout: "The completion script.",
        stderr: "Nothing.",
        exit: "0; 2 for an unknown shell.",
        json: &[],
    },
    Notes {
        command: "man",
        stdout: "The mur(1) page in roff; with `--dir`, the path of each page written (`mur.1`, `mur-run.1`, …), one per line. A closed stdout (`mur man | head`) is not an error.",
        stderr: "Diagnostics only.",
        exit: "0; 1 (E-IO-001) when a page cannot be written.",
        json: &[],
    },
];

/// Every command below `mur`, depth first, with its path (`"trace show"`); hidden ones and
/// clap's `help` left out.
pub fn commands() -> Vec<(String, Command)> {
    let mut root = Cli::command();
    root.build();
    let mut out = Vec::new();
    walk(&root, "", &mut out);
    out
}

fn walk(cmd: &Command, prefix: &str, out: &mut Vec<(String, Command)>) {
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let path = if prefix.is_empty() {
            sub.get_name().to_string()
        } else {
            format!("{prefix} {}", sub.get_name())
        };
        out.push((path.clone(), sub.clone()));
        walk(sub, &path, out);
    }
}

/// The arguments of `cmd` that a reference lists: every one but clap's `--help`/`--version`.
pub fn arguments(cmd: &Command) -> Vec<&Arg> {
    cmd.get_arguments()
        .filter(|a| {
            !matches!(
                a.get_action(),
                ArgAction::Help | ArgAction::HelpLong | ArgAction::Version
            )
        })
        .collect()
}

fn spelling(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| v.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    let takes_value = a.get_action().takes_values();
    let mut s = match (a.get_short(), a.get_long()) {
        (Some(c), Some(l)) => format!("-{c}, --{l}"),
        (None, Some(l)) => format!("--{l}"),
        (Some(c), None) => format!("-{c}"),
        (None, None) => return value,
    };
    if takes_value {
        let optional = a.get_num_args().is_some_and(|n| n.min_values() == 0);
        if optional {
            let _ = write!(s, " [{value}]");
        } else {
            let _ = write!(s, " {value}");
        }
    }
    s
}

fn help(a: &Arg) -> String {
    a.get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string().replace('\n', " "))
        .unwrap_or_default()
}

fn details(a: &Arg) -> String {
    let mut d = Vec::new();
    if a.is_required_set() {
        d.push("required".to_string());
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && !matches!(a.get_action(), ArgAction::SetTrue) {
        d.push(format!("default `{}`", defaults.join(" ")));
    }
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| format!("`{}`", p.get_name()))
        .collect();
    if !possible.is_empty() && a.get_action().takes_values() {
        d.push(format!("one of {}", possible.join(", ")));
    }
    d.join("; ")
}

/// Markdown table cells must not break the table.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The text of `docs/reference/cli.md`.
pub fn markdown() -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# `mur` command line");
    let _ = writeln!(m);
    let _ = writeln!(
        m,
        "<!-- Generated from the clap definitions (src/cli/) and the side table in src/cli/reference.rs. Do not edit: change those, then run `{REGENERATE}`. -->"
    );
    m.push_str(PREAMBLE);
    for (path, cmd) in commands() {
        let _ = writeln!(m);
        let _ = writeln!(m, "## mur {path}");
        let _ = writeln!(m);
        if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
            let _ = writeln!(m, "{about}");
            let _ = writeln!(m);
        }
        let mut c = cmd.clone().bin_name(format!("mur {path}"));
        let usage = c.render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
        let _ = writeln!(m, "```text\n{usage}\n```");
        let args = arguments(&cmd);
        let visible: Vec<&&Arg> = args.iter().filter(|a| !a.is_hide_set()).collect();
        if !visible.is_empty() {
            let _ = writeln!(m);
            let _ = writeln!(m, "| Argument | Meaning | Details |");
            let _ = writeln!(m, "|---|---|---|");
            for a in visible {
                let _ = writeln!(
                    m,
                    "| `{}` | {} | {} |",
                    cell(&spelling(a)),
                    cell(&help(a)),
                    cell(&details(a))
                );
            }
        }
        let hidden: Vec<&&Arg> = args.iter().filter(|a| a.is_hide_set()).collect();
        if !hidden.is_empty() {
            let _ = writeln!(m);
            let _ = writeln!(
                m,
                "Hidden arguments, which the launcher passes to its members ([formation.md#member-command-lines](formation.md#member-command-lines)); not for operators:"
            );
            let _ = writeln!(m);
            let _ = writeln!(m, "| Argument | Meaning |");
            let _ = writeln!(m, "|---|---|");
            for a in hidden {
                let _ = writeln!(m, "| `{}` | {} |", cell(&spelling(a)), cell(&help(a)));
            }
        }
        if let Some(n) = NOTES.iter().find(|n| n.command == path) {
            let _ = writeln!(m);
            let _ = writeln!(m, "- **stdout:** {}", n.stdout);
            let _ = writeln!(m, "- **stderr:** {}", n.stderr);
            let _ = writeln!(m, "- **exit status:** {}", n.exit);
            if !n.json.is_empty() {
                let _ = writeln!(m);
                let _ = writeln!(m, "`--json` fields (keys sorted, compact, one line):");
                let _ = writeln!(m);
                let _ = writeln!(m, "| Field | Meaning |");
                let _ = writeln!(m, "|---|---|");
                for (f, meaning) in n.json {
                    let _ = writeln!(m, "| `{f}` | {} |", cell(meaning));
                }
            }
        }
    }
    m
}

const PREAMBLE: &str = "
`mur` is one binary. This page lists every command, argument, output and exit status; it is
generated from the definitions `mur --help` and `mur man` print, so it cannot list a flag the
binary lacks or miss one it has.

## Conventions

- **Diagnostics** go to stderr as `error[CODE]: message`, followed by `  hint: …` (two spaces)
  when there is a hint, or `warning[CODE]: text`. A line may carry a prefix naming who speaks:
  `[mur run] ` (the launcher), `[capsule-runtime] ` (a member runtime), `[mur doctor] `,
  `[mur deploy] `, or `[<member>] ` for a peer's relayed output. Every code is in
  [codes.md](codes.md).
- **stdout** carries only what a command produces (an answer, a table, one JSON object), so it
  can be piped; progress and status go to stderr.
- **Text from members, models and remote agents** (an answer, a failure, a question, a record's
  fields in `mur trace show`) is printed to a terminal with its control characters made visible
  (`\\u{1b}`), so it cannot retitle the window, clear the screen or write the clipboard; piped or
  written to a file, its bytes are unchanged. `--json` output is JSON.
- **JSON** that `mur` writes is compact UTF-8 with keys in ascending byte order at every depth,
  one object per line. Readers should not depend on key order.
- **Exit status:** 0 success (a member wound down by its formation included); 1 a refusal or
  failure with an `error[…]` line; 2 a usage error (unknown or conflicting flags, a missing
  argument: clap's own message); 128+N the process ended because of signal N (143 for SIGTERM,
  also a member's forced teardown).
- **Environment:** `HOME` locates `~/.murmur`; `RUST_LOG` turns on developer logs on stderr
  (silent by default); `MURMUR_FORMATION_ID`, `MURMUR_FORMATION_CHANNEL` and
  `MURMUR_FORMATION_LIFELINE` are set by the launcher for its members (formation.md).
";
