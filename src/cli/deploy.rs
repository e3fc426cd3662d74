//! `mur deploy --roster DIR --kubernetes` [ours]: admits the roster exactly as `mur run --roster`
//! does, then writes the formation as Kubernetes manifests (docs/kubernetes.md).
//!
//! Two steps, because an owner reference needs the owner's uid and only the API server assigns
//! one. Without `--formation-uid` the command mints a formation id and writes only the formation
//! object, which carries no credential; once it is applied, the same command with
//! `--formation-id` and `--formation-uid` writes every object, each owned by it. So no member
//! object can exist that deleting the formation object would not remove.
//!
//! The full manifests carry every member's credentials: they go to a pipe or to owner-only files
//! under `-o DIR`, never to a terminal (E-DEP-001).

use std::io::{IsTerminal, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use clap::Args;

use super::{Failure, Outcome};
use crate::deploy::{self, Formation, Object, Options};
use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::paths::MurHome;
use crate::roster;
use crate::token::SigningKey;

const PREFIX: &str = "[mur deploy] ";

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The formation to deploy (a roster.yaml, or its directory)
    #[arg(long, value_name = "PATH", default_value = "roster.yaml")]
    pub roster: PathBuf,
    /// Write Kubernetes manifests (the one target there is)
    #[arg(long, required = true)]
    pub kubernetes: bool,
    /// The namespace every object goes into
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// The container image built from mur's Dockerfile, holding the formation's capsules
    #[arg(long, value_name = "IMAGE", default_value = concat!("mur:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// Run the entry as a Job that ends after this task: its text, or a file (relative to the
    /// current directory) holding it
    #[arg(long)]
    pub task: Option<String>,
    /// With --task: the entry Job's activeDeadlineSeconds
    #[arg(long, value_name = "SECS", requires = "task", value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: Option<u64>,
    /// Write one file per object into DIR (created owner-only; must be empty) instead of stdout
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// The formation id the first step printed (instead of minting one)
    #[arg(long, value_name = "ID")]
    pub formation_id: Option<String>,
    /// The applied formation object's uid: write every object, owned by it
    #[arg(long, value_name = "UID", requires = "formation_id")]
    pub formation_uid: Option<String>,
    /// Write every object for review, under no real owner and marked so no API server accepts it
    #[arg(long, conflicts_with = "formation_uid")]
    pub dry_run: bool,
    /// The Secret (you create it) holding the members' API keys, one key per variable name
    #[arg(long, value_name = "NAME", default_value = deploy::DEFAULT_KEYS_SECRET)]
    pub keys_secret: String,
    /// Where in the cluster a loopback endpoint of a manifest is: the pod relays LOOPBACK to
    /// TARGET (repeatable)
    #[arg(long = "endpoint", value_name = "LOOPBACK-HOST:PORT=HOST:PORT")]
    pub endpoints: Vec<String>,
    /// The formation's token budget of `mur run --roster`: not carried into a cluster yet, so
    /// refused (E-DEP-005)
    #[arg(long, value_name = "TOKENS", allow_hyphen_values = true)]
    pub max_tokens: Option<String>,
}

fn fail(diag: Diagnostic) -> Failure {
    Failure { prefix: PREFIX, diag }
}

fn io_refusal(msg: String) -> Failure {
    fail(Diagnostic::new(diag::E_DEP_003, msg).without_hint())
}

pub fn run(a: &DeployArgs) -> Outcome {
    // Admission through the one front end `mur run --roster` uses: same steps, same refusals,
    // rendered the same way.
    let admitted = roster::front::admit_arg(&a.roster, &MurHome::from_env())
        .map_err(|diag| Failure { prefix: "", diag })?
        .admitted;
    for w in &admitted.warnings {
        w.eprint(PREFIX);
    }
    if a.max_tokens.is_some() {
        return Err(fail(deploy::refuse_uncarried(
            "--max-tokens",
            "the formation's token budget is kept by the launcher, which counts every member's model turns, and a formation in a cluster has no launcher",
            "leave out --max-tokens; a model capsule's own inference.max_session_tokens still bounds each member's session in its pod",
        )));
    }
    let mut endpoint_maps = Vec::new();
    for e in &a.endpoints {
        let map = deploy::EndpointMap::parse(e).map_err(|why| {
            fail(Diagnostic::new(
                diag::E_DEP_004,
                format!("--endpoint '{}': {why}", diag::shown(e)),
            ))
        })?;
        endpoint_maps.push(map);
    }
    let id = a.formation_id.clone().unwrap_or_else(|| ids::mint(IdKind::Formation));
    let formation = Formation::from_admitted(&admitted, id);
    let task = match &a.task {
        Some(t) => Some(task_text(t)?),
        None => None,
    };
    let options = Options {
        namespace: a.namespace.clone(),
        image: a.image.clone(),
        task,
        deadline: a.deadline,
        owner_uid: a.formation_uid.clone(),
        keys_secret: a.keys_secret.clone(),
        endpoint_maps,
        dry_run: a.dry_run,
    };
    // Checked before the key is drawn: a refusal mints nothing.
    deploy::check(&formation, &options).map_err(fail)?;
    let key = SigningKey::generate().map_err(|e| {
        io_refusal(format!(
            "the formation's signing key could not be drawn from the OS: {e}"
        ))
    })?;
    let manifests = deploy::manifests(&formation, &options, &key).map_err(fail)?;
    // The key signed every edge token; nothing may mint another.
    drop(key);

    match &a.output {
        Some(dir) => write_dir(dir, &manifests.objects)?,
        None => {
            if manifests.carries_credentials && std::io::stdout().is_terminal() {
                return Err(fail(Diagnostic::new(
                    diag::E_DEP_001,
                    "the manifests hold every member's formation credentials, and stdout is a terminal, so they are not printed",
                )));
            }
            let text = deploy::objects::to_yaml_stream(&manifests.objects)
                .map_err(|e| io_refusal(format!("the manifests cannot be rendered as YAML: {e}")))?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| io_refusal(format!("the manifests cannot be written to stdout: {e}")))?;
        }
    }
    keys_note(&formation, &options);
    if options.dry_run {
        eprintln!(
            "{PREFIX}formation {}: {} objects for review (--dry-run): owned by no real object, their tokens signed by a key already dropped, and each sets resourceVersion, so no API server creates or updates them",
            formation.id,
            manifests.objects.len()
        );
    } else if options.owner_uid.is_none() {
        next_step(&formation, &options, a.output.is_some());
    } else {
        eprintln!(
            "{PREFIX}formation {}: {} objects, each owned by configmap/{}; delete that object to remove the formation",
            formation.id,
            manifests.objects.len(),
            formation.object_name()
        );
    }
    Ok(0)
}

/// The Secret the members' keys are read from, which `mur deploy` never writes (it never sees a
/// key): its name and the variable names it must hold, never a value.
fn keys_note(f: &Formation, o: &Options) {
    let needed = deploy::keys_needed(f);
    if needed.is_empty() {
        return;
    }
    let list: Vec<String> = needed
        .iter()
        .map(|(var, members)| format!("{var} ({})", members.join(", ")))
        .collect();
    // From a file, so no key passes through a command line or a shell's history.
    eprintln!(
        "{PREFIX}members read their keys from secret/{secret}, which mur deploy does not write, under these names: {list}. \
         Create it before the members start, from an owner-only file of NAME=value lines:\n  kubectl create secret generic {secret} --namespace {ns} --from-env-file=FILE",
        secret = o.keys_secret,
        ns = o.namespace,
        list = list.join(", "),
    );
}

/// `--task T`: the contents of `T` when it names a file relative to the current directory, else
/// `T` itself, as the entry member reads it locally; the pod gets the text, not the path.
fn task_text(arg: &str) -> Result<String, Failure> {
    crate::session::startup::read_task(arg, Path::new("")).map_err(io_refusal)
}

/// The first step's closing note: what to apply, and the command that writes the rest.
fn next_step(f: &Formation, o: &Options, to_dir: bool) {
    let applied = if to_dir { "Apply the file written" } else { "Apply it" };
    eprintln!(
        "{PREFIX}formation {id}: this is its formation object, configmap/{obj}, which will own every other object. \
         {applied}, then run this command again with\n  --formation-id {id} --formation-uid \"$(kubectl get configmap {obj} --namespace {ns} -o jsonpath='{{.metadata.uid}}')\"\n\
         to write the members, piped to `kubectl apply -f -` or into -o DIR.",
        id = f.id,
        obj = f.object_name(),
        ns = o.namespace,
    );
}

/// One file per object, `NNN-<kind>-<name>.yaml` in apply order, each owner-only: the Secrets
/// hold credentials, and a directory `kubectl apply -f` reads must hold nothing stale.
fn write_dir(dir: &Path, objects: &[Object]) -> Result<(), Failure> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(fail(
                    Diagnostic::new(
                        diag::E_DEP_003,
                        format!("the output directory {} is not empty", dir.display()),
                    )
                    .with_hint(
                        "name a new or empty directory: `kubectl apply -f DIR` would apply whatever else it holds",
                    ),
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| io_refusal(format!("the output directory {} cannot be made: {e}", dir.display())))?;
        }
        Err(e) => {
            return Err(io_refusal(format!(
                "the output directory {} cannot be read: {e}",
                dir.display()
            )));
        }
    }
    for (n, o) in objects.iter().enumerate() {
        let path = dir.join(format!("{n:03}-{}-{}.yaml", o.kind().to_ascii_lowercase(), o.name()));
        let text = o
            .to_yaml()
            .map_err(|e| io_refusal(format!("{} {} cannot be rendered as YAML: {e}", o.kind(), o.name())))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| io_refusal(format!("{} cannot be written: {e}", path.display())))?;
    }
    eprintln!("{PREFIX}wrote {} objects into {}", objects.len(), dir.display());
    Ok(())
}
