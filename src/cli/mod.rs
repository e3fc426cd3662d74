//! The `mur` command line: one file per command, each a thin shell over the library.
//!
//! Every command returns an exit code or a [`crate::diag::Diagnostic`]; this module renders diagnostics
//! (docs/reference/codes.md) and leaves usage errors (exit 2) to clap.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub mod answer;
pub mod approve;
pub mod build;
pub mod completion;
pub mod demo;
pub mod deploy;
pub mod doctor;
pub mod doctor_env;
pub mod explain;
pub mod formations;
pub mod install;
pub mod list;
pub mod new;
pub mod ps;
pub mod reference;
pub mod run;
pub mod send;
pub mod stop;
pub mod trace;
pub mod ui;

pub use crate::outcome::{Failure, Outcome};

#[derive(Debug, Parser)]
#[command(
    name = "mur",
    version,
    about = "Launch formations of agent capsules, with least privilege between them"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scaffold a new formation
    New(NewArgs),
    /// Pack a capsule's source directory into <name>-<version>.mur.zip
    Build(BuildArgs),
    /// Install a .mur.zip into the project store (or the global one with -g)
    Install(InstallArgs),
    /// List installed capsules
    List(JsonArgs),
    /// Approve a capsule's MCP tools as their servers define them now; a session offers a model
    /// only tools whose definitions are the approved ones
    Approve(ApproveArgs),
    /// Check a roster (in a formation directory) or a capsule's sources
    Doctor(DoctorArgs),
    /// Run one capsule, or launch a formation with --roster
    Run(Box<RunArgs>),
    /// Write a formation as Kubernetes manifests (admitted as `mur run --roster` admits it)
    Deploy(deploy::DeployArgs),
    /// Send a task to a running session or formation and print its answer as it arrives
    Send(SendArgs),
    /// Answer the question a running task asked, and print what follows as `mur send` does
    Answer(AnswerArgs),
    /// Stop a running session or formation
    Stop(StopArgs),
    /// List running sessions, grouped by formation (-a: every formation launched, newest first)
    Ps(PsArgs),
    /// Show traces
    Trace(TraceArgs),
    /// Serve a live view of this user's formations in the browser, on 127.0.0.1
    Ui(UiArgs),
    /// Build, install and launch the offline demo formation in a private home
    Demo(DemoArgs),
    /// Explain a diagnostic code (e.g. `mur explain E-ROS-007`): what it means and what to do
    Explain {
        /// The code, as printed in `error[…]` or `warning[…]`
        code: String,
    },
    /// Print a shell completion script (e.g. `mur completion bash > ~/.local/share/bash-completion/completions/mur`)
    Completion {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the mur(1) man page (roff), or write every page into --dir
    Man {
        /// Write mur.1 and one page per subcommand (mur-run.1, …) into DIR
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Scaffold a formation (roster.yaml and two members) named NAME
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present_any = ["capsule", "tool"],
        conflicts_with_all = ["capsule", "tool"]
    )]
    pub roster: Option<String>,
    /// Scaffold one component capsule named NAME, written in --lang (default rust)
    #[arg(long, value_name = "NAME", conflicts_with = "tool")]
    pub capsule: Option<String>,
    /// In a model capsule's directory: scaffold a WebAssembly tool named NAME under tools/NAME,
    /// written in --lang (default python), and add it to murmur.yaml
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// Make both members model capsules of this provider (openai or anthropic)
    #[arg(long, value_name = "PROVIDER", conflicts_with_all = ["capsule", "tool", "lang"])]
    pub inference: Option<String>,
    /// Write the members' sources in this language; mur build makes their components
    #[arg(long, value_name = "LANG", value_parser = ["python", "javascript", "rust"])]
    pub lang: Option<String>,
    /// With --capsule: a remote capsule whose door forwards each task to the A2A agent at URL
    /// (its card or JSON-RPC endpoint; https://, or http:// to loopback)
    #[arg(long, value_name = "URL", requires = "capsule", conflicts_with_all = ["lang", "tool", "inference"])]
    pub remote: Option<String>,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The capsule's source directory (holding murmur.yaml)
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Install into the global store (~/.murmur/artifacts)
    #[arg(short = 'g', long)]
    pub global: bool,
    /// The .mur.zip to install
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Launch the formation of this roster (a roster.yaml, or its directory; ./roster.yaml when PATH is left out)
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "roster.yaml",
          conflicts_with_all = ["capsule", "capsule_version", "workdir", "bind", "resume",
                                "lifecycle_task_acceptance", "lifecycle_after_task"])]
    pub roster: Option<PathBuf>,
    /// The installed capsule to run, as <scope>/<name>
    #[arg(long, requires = "capsule_version")]
    pub capsule: Option<String>,
    /// The exact version of --capsule
    #[arg(long, requires = "capsule")]
    pub capsule_version: Option<String>,
    /// A task: its text, or a file (relative to the current directory) holding it
    #[arg(long)]
    pub task: Option<String>,
    /// Machine-readable output on stdout
    #[arg(long)]
    pub json: bool,
    /// Address the door binds, on a port the OS chooses; ADDR:PORT binds that port
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// Work folder (default: the current directory)
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// End every member (with --capsule: the session) at this many seconds after launch
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: Option<u64>,
    /// The token budget, input plus output over every model turn: with --roster the formation's,
    /// over every member; with --capsule the session's. Default 1000000 for a model formation or
    /// session; `unlimited` lifts the default
    #[arg(long, value_name = "TOKENS", allow_hyphen_values = true)]
    pub max_tokens: Option<String>,
    /// With --roster: restart a peer whose process ends while the formation runs, at most N times
    /// within SECS seconds (then it is withdrawn); the entry member is never restarted
    #[arg(long, value_name = "N/SECS", requires = "roster")]
    pub restart: Option<String>,
    /// Model turns per task, for every model member (with --capsule: the session's); a capsule's
    /// inference.max_turns still holds. Default 50; `unlimited` lifts the default
    #[arg(long, value_name = "TURNS", allow_hyphen_values = true)]
    pub max_turns: Option<String>,
    /// Resume a session (not supported together with --roster)
    #[arg(long, value_name = "SESSION")]
    pub resume: Option<String>,
    #[command(flatten)]
    pub hidden: HiddenRunArgs,
}

/// Flags the launcher passes to its members; not for operators.
#[derive(Debug, Args, Default)]
pub struct HiddenRunArgs {
    /// The sha256 admission bound the capsule to; other bytes are refused (E-RUN-047)
    #[arg(long, hide = true, value_name = "HEX")]
    pub capsule_sha256: Option<String>,
    /// Resolve from DIR/.murmur/artifacts, then the global store, pinned by DIR/murmur.lock
    #[arg(long, hide = true, value_name = "DIR")]
    pub store_root: Option<PathBuf>,
    /// Add the operator door token to the readiness line (it goes to the launcher's private pipe)
    #[arg(long, hide = true)]
    pub readiness_tokens: bool,
    /// End the session at this instant (Unix ms), the formation's --deadline
    #[arg(long, hide = true, value_name = "UNIX_MS")]
    pub inherited_deadline: Option<u64>,
    /// Replaces the manifest's lifecycle.task_acceptance
    #[arg(long, hide = true, value_name = "none|single|queue")]
    pub lifecycle_task_acceptance: Option<String>,
    /// Replaces the manifest's lifecycle.after_task
    #[arg(long, hide = true, value_name = "exit|sleep")]
    pub lifecycle_after_task: Option<String>,
}

#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Machine-readable output on stdout: one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PsArgs {
    /// Machine-readable output on stdout: one JSON object
    #[arg(long, conflicts_with = "all")]
    pub json: bool,
    /// Every formation launched on this machine, running or ended, newest first (as `mur trace list`)
    #[arg(short = 'a', long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Machine-readable output on stdout: one JSON object
    #[arg(long, conflicts_with_all = ["graph", "dot"])]
    pub json: bool,
    /// Print the admitted reachability graph as a Mermaid flowchart
    #[arg(long)]
    pub graph: bool,
    /// Print the admitted reachability graph in Graphviz DOT
    #[arg(long)]
    pub dot: bool,
    /// Do not dial the endpoints members will use (model servers, MCP servers, remote agents)
    #[arg(long)]
    pub offline: bool,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// A running session (ses_…), or a formation (frm_…) whose entry member takes the task
    pub id: String,
    /// The task's text
    pub text: String,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The task that asks (tsk_…), as its question names it
    pub task_id: String,
    /// The answer's text
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub text: Option<String>,
    /// Read the answer from FILE (`-` reads stdin) instead of TEXT
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The installed capsule (<scope>/<name>)
    pub capsule: String,
    /// Its version
    #[arg(long)]
    pub capsule_version: String,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// A session id (ses_…) or formation id (frm_…)
    pub id: String,
    /// Seconds to wait for the process before SIGKILL
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Show a session's trace, or every session of a formation with where its time and tokens went
    Show {
        /// A session id (ses_…), or a formation's: its id (frm_…), a prefix only it starts with, or `last`
        id: String,
        /// Print the usage summary (per member and for the formation) as one JSON object
        #[arg(long, conflicts_with = "follow")]
        json: bool,
        /// Keep printing records as they are appended, until the session or formation ends
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Every formation launched on this machine, newest first: its short id, start, state, roster
    /// directory and the task's first words
    List,
}

#[derive(Debug, Args)]
pub struct UiArgs {
    /// Listen on this port of 127.0.0.1 (default: a free one)
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Open the page in the browser, where one is available ($BROWSER, else xdg-open)
    #[arg(long)]
    pub open: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The task for the demo formation (a default one when omitted)
    pub task: Option<String>,
}

/// An id as typed (`last`, a unique `frm_` prefix) as the formation id it names; `code` is the
/// command's own refusal of an id that names none.
fn formation_id(text: &str, code: crate::diag::Code) -> Result<String, Failure> {
    formations::resolve(&crate::paths::MurHome::from_env(), text)
        .map_err(|why| Failure::from(crate::diag::Diagnostic::new(code, why)))
}

/// Installs the `RUST_LOG`-driven tracing subscriber on stderr (silent by default).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Rust ignores SIGPIPE, so a print to a closed stdout (`mur ps | head -1`) would panic. Commands
/// that only report take the default back and end quietly, as other Unix tools do. `run` and
/// `demo` keep ignoring it: they own processes, and must wind them down rather than vanish.
fn end_quietly_when_stdout_closes(command: &Command) {
    if matches!(command, Command::Run(_) | Command::Demo(_)) {
        return;
    }
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: restores one signal's default disposition; no handler of ours is replaced.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

pub fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    end_quietly_when_stdout_closes(&cli.command);
    let outcome = match &cli.command {
        Command::New(a) => new::run(a),
        Command::Build(a) => build::run(a),
        Command::Install(a) => install::run(a),
        Command::List(a) => list::run(a.json),
        Command::Approve(a) => approve::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Run(a) => run::run(a),
        Command::Deploy(a) => deploy::run(a),
        Command::Send(a) => formation_id(&a.id, crate::diag::E_SND_001).and_then(|id| {
            send::run(&SendArgs {
                id,
                text: a.text.clone(),
            })
        }),
        Command::Answer(a) => answer::run(a),
        Command::Stop(a) => {
            formation_id(&a.id, crate::diag::E_RUN_022).and_then(|id| stop::run(&StopArgs { id, timeout: a.timeout }))
        }
        Command::Ps(a) if a.all => trace::list(),
        Command::Ps(a) => ps::run(a.json),
        Command::Trace(a) => match &a.command {
            TraceCommand::Show {
                id,
                json: _,
                follow: true,
            } => formation_id(id, crate::diag::E_TRC_002).and_then(|id| trace::follow(&id)),
            TraceCommand::Show {
                id,
                json,
                follow: false,
            } => formation_id(id, crate::diag::E_TRC_002).and_then(|id| trace::show(&id, *json)),
            TraceCommand::List => trace::list(),
        },
        Command::Ui(a) => ui::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Explain { code } => explain::run(code),
        Command::Completion { shell } => completion::completion(*shell),
        Command::Man { dir } => completion::man(dir.as_deref()),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            f.diag.eprint(f.prefix);
            ExitCode::from(1)
        }
    }
}
