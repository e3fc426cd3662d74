//! `mur deploy --kubernetes`: an admitted formation as Kubernetes objects (docs/kubernetes.md).
//!
//! Pure: an admitted roster, a few options and a freshly drawn signing key in, typed
//! `k8s-openapi` objects out. Nothing here starts a process, opens a socket or writes a file; the
//! command (`cli/deploy.rs`) admits, draws the key, and writes what this returns.
//!
//! The mapping, in short: every member is a pod running `mur run --capsule` on the admitted bytes;
//! its formation channel is a Secret file holding its own first line and its callees' address
//! line; reachability is enforced twice, by the tokens at every door and by NetworkPolicies
//! naming exactly each callee's callers; and one formation object (a ConfigMap) owns everything,
//! so deleting it removes the formation, as closing the lifelines ends it locally.

pub mod objects;
pub mod policy;

#[cfg(test)]
mod tests;

use crate::channel::line::{Address, Call, FirstLine, address_line};
use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::roster::Admitted;
use crate::token::SigningKey;

pub use objects::Object;

/// The port every member's door binds inside its pod (each pod has a network of its own).
pub const DOOR_PORT: u16 = 8080;
/// A caller's relay to callee `i` listens on `127.0.0.1:RELAY_PORT_BASE + i`.
pub const RELAY_PORT_BASE: u16 = 10000;
/// The door's public card: the readiness probe's path (the door serves it without a token).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// Label naming the formation on every object and pod.
pub const LABEL_FORMATION: &str = "murmur.nexus/formation";
/// Label naming the member on its objects and pods.
pub const LABEL_MEMBER: &str = "murmur.nexus/member";
/// Label a pod carries to reach the entry member's door (`murmur.nexus/role: operator`).
pub const LABEL_ROLE: &str = "murmur.nexus/role";
pub const ROLE_OPERATOR: &str = "operator";
const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Where the image keeps `mur`, its capsule store and the member's writable directories
/// (see the Dockerfile).
pub const MUR_PATH: &str = "/usr/local/bin/mur";
pub const STORE_ROOT: &str = "/opt/murmur";
pub const HOME_DIR: &str = "/home/mur";
pub const WORK_DIR: &str = "/work";
/// The Secret's mount and file: what `MURMUR_FORMATION_CHANNEL` reads, on descriptor 3.
pub const CHANNEL_DIR: &str = "/var/run/murmur";
pub const CHANNEL_FILE: &str = "channel";
pub const CHANNEL_FD: &str = "3";
/// The formation object's `task` key, mounted into the entry's pod.
pub const TASK_DIR: &str = "/etc/murmur";
pub const TASK_FILE: &str = "task";
/// The unprivileged user the image creates.
pub const RUN_AS: i64 = 10001;

/// One member as admission bound it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `<scope>/<name>`.
    pub capsule: String,
    pub version: String,
    pub sha256: String,
    pub entry: bool,
    /// A remote capsule's agent (`remote.url`): the one origin its egress policy admits.
    pub remote: Option<RemoteOrigin>,
}

/// Where a remote member's tasks go: the host as written (a name or an address) and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOrigin {
    pub host: String,
    pub port: u16,
}

impl RemoteOrigin {
    /// The origin of `url` (`https://host[:port]/…`, or `http://` to loopback); `None` for a URL
    /// that names no host and port.
    pub fn of(url: &str) -> Option<RemoteOrigin> {
        let e = crate::manifest::endpoint::split(url)?;
        let default = if e.tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = e.authority.strip_prefix('[') {
            let (h, rest) = v6.split_once(']')?;
            (h, rest.strip_prefix(':'))
        } else {
            match e.authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (e.authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0)?,
            None => default,
        };
        (!host.is_empty()).then(|| RemoteOrigin {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// The admitted formation under its id: members in roster order and the admitted edges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Formation {
    pub id: String,
    pub members: Vec<Member>,
    /// `(from, to)` member indices, as admission ordered them.
    pub edges: Vec<(usize, usize)>,
}

impl Formation {
    pub fn from_admitted(a: &Admitted, id: String) -> Formation {
        Formation {
            id,
            members: a
                .members
                .iter()
                .map(|m| Member {
                    name: m.name.clone(),
                    capsule: m.capsule.to_string(),
                    version: m.version.clone(),
                    sha256: m.sha256.clone(),
                    entry: m.entry,
                    remote: m.manifest.remote.as_ref().and_then(|r| RemoteOrigin::of(&r.url)),
                })
                .collect(),
            edges: a.edges.clone(),
        }
    }

    pub fn entry(&self) -> usize {
        self.members.iter().position(|m| m.entry).unwrap_or(0)
    }

    /// The members `i` may call, in roster order.
    pub fn callees(&self, i: usize) -> Vec<usize> {
        crate::roster::edges::callees(&self.edges, i)
    }

    /// The members that may call `i`, in roster order.
    pub fn callers(&self, i: usize) -> Vec<usize> {
        crate::roster::edges::callers(&self.edges, i)
    }

    /// `frm-<32 hex>`: the formation object's name (object names allow no `_`).
    pub fn object_name(&self) -> String {
        self.id.replace('_', "-")
    }

    /// The id's last 12 hex digits (random bits of the UUIDv7), which keep the names of two
    /// formations in one namespace apart.
    fn suffix(&self) -> &str {
        &self.id[self.id.len().saturating_sub(12)..]
    }

    /// `<member>-<suffix>`: the member's Deployment or Job, and its Service.
    pub fn member_object(&self, i: usize) -> String {
        format!("{}-{}", self.members[i].name, self.suffix())
    }

    /// The member's Secret: its formation channel.
    pub fn secret_name(&self, i: usize) -> String {
        format!("{}-channel", self.member_object(i))
    }

    /// The callee's door as its callers' relays dial it: the Service's in-cluster name.
    pub fn service_host(&self, i: usize, namespace: &str) -> String {
        format!("{}.{namespace}.svc", self.member_object(i))
    }
}

/// What `mur deploy` was asked for, checked by [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub namespace: String,
    pub image: String,
    /// The entry's task text: the entry runs as a Job that ends with it.
    pub task: Option<String>,
    /// With a task: the Job's `activeDeadlineSeconds`.
    pub deadline: Option<u64>,
    /// The formation object's uid as the API server assigned it. Without it only the formation
    /// object is written, since an owner reference needs the owner's real uid.
    pub owner_uid: Option<String>,
}

/// What one run writes.
pub struct Manifests {
    pub objects: Vec<Object>,
    /// Whether any object carries credentials (a Secret): such output never goes to a terminal.
    pub carries_credentials: bool,
}

fn refuse(msg: String) -> Diagnostic {
    Diagnostic::new(diag::E_DEP_002, msg)
}

/// A DNS-1123 label: what a namespace name must be.
fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Refuses options and member names the cluster would refuse, before anything is minted.
pub fn check(f: &Formation, o: &Options) -> Result<(), Diagnostic> {
    ids::check(IdKind::Formation, &f.id).map_err(|e| {
        refuse(format!(
            "--formation-id '{}' is not a formation id: {e}",
            diag::shown(&f.id)
        ))
        .with_hint("pass the id the first `mur deploy` printed, e.g. frm_0199c4e2f1b7712a9d3e4f5061728394")
    })?;
    if !is_dns_label(&o.namespace) {
        return Err(refuse(format!(
            "--namespace '{}' is not a Kubernetes namespace name",
            diag::shown(&o.namespace)
        ))
        .with_hint("use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"));
    }
    if o.image.is_empty() || o.image.len() > 1024 || o.image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse(format!(
            "--image '{}' is not a container image reference",
            diag::shown(&o.image)
        ))
        .with_hint("name the image built from mur's Dockerfile, e.g. registry.example/mur-formation:1"));
    }
    if let Some(uid) = &o.owner_uid {
        let canonical = uuid::Uuid::parse_str(uid).is_ok_and(|u| u.hyphenated().to_string() == *uid);
        if !canonical {
            return Err(refuse(format!(
                "--formation-uid '{}' is not an object uid (a lowercase UUID such as 2f0c6c4e-3d1a-4b7e-9d52-6a1f0e8b7c39)",
                diag::shown(uid)
            ))
            .with_hint("read it from the cluster: kubectl get configmap <formation object> -o jsonpath='{.metadata.uid}'"));
        }
    }
    // Label values must end in a letter or digit; member names may end in '-'.
    if let Some(m) = f.members.iter().find(|m| m.name.ends_with('-')) {
        return Err(refuse(format!(
            "member '{}' ends in '-', which a Kubernetes label value cannot, so its pods could not be selected",
            m.name
        ))
        .with_hint("rename the member in roster.yaml so it ends in a letter or digit"));
    }
    if o.deadline.is_some() && o.task.is_none() {
        return Err(refuse("--deadline needs --task: only the entry's Job can carry a deadline".into()).without_hint());
    }
    Ok(())
}

/// Member `i`'s formation channel as its Secret holds it: its first line (its own edge tokens
/// and the verify key), then, when it has callees, one address line naming each callee's relay
/// on the pod's loopback. End of file closes the address book, as on a local channel.
pub fn channel_file(f: &Formation, i: usize, key: &SigningKey) -> String {
    let m = &f.members[i];
    let callees = f.callees(i);
    let first = FirstLine {
        formation_id: f.id.clone(),
        member: m.name.clone(),
        launcher: None,
        entry: m.entry,
        verify_key: key.verify_key().to_b64(),
        calls: callees
            .iter()
            .map(|&c| Call {
                name: f.members[c].name.clone(),
                token: crate::secret::Secret::passed_on(key.mint(&f.id, &m.name, &f.members[c].name)),
            })
            .collect(),
    };
    let mut out = first.to_line();
    if !callees.is_empty() {
        let addrs: Vec<Address> = callees
            .iter()
            .map(|&c| Address {
                name: f.members[c].name.clone(),
                url: format!("http://localhost:{}", relay_port(c)),
                door: None,
                card_key: None,
            })
            .collect();
        out.push_str(&address_line(&addrs));
    }
    out
}

/// The loopback port of a caller's relay to callee `i`.
pub fn relay_port(i: usize) -> u16 {
    // Admission bounds a roster far below 55 535 members (roster.yaml is at most 1 MiB).
    RELAY_PORT_BASE.saturating_add(u16::try_from(i).unwrap_or(u16::MAX - RELAY_PORT_BASE))
}

/// The manifests of one run: the formation object alone without an owner uid; with it, every
/// object, each owned by the formation object. `key` signs the edge tokens and is dropped by the
/// caller once this returns.
pub fn manifests(f: &Formation, o: &Options, key: &SigningKey) -> Result<Manifests, Diagnostic> {
    check(f, o)?;
    let formation_object = Object::ConfigMap(objects::formation_object(f, o));
    let Some(uid) = &o.owner_uid else {
        return Ok(Manifests {
            objects: vec![formation_object],
            carries_credentials: false,
        });
    };
    let owner = objects::owner(f, uid);
    let mut out = vec![formation_object];
    // Policies first: a pod never runs before the rules that fence it are in place.
    out.extend(
        policy::network_policies(f, o, &owner)
            .into_iter()
            .map(Object::NetworkPolicy),
    );
    for i in 0..f.members.len() {
        out.push(Object::Secret(objects::secret(
            f,
            o,
            &owner,
            i,
            &channel_file(f, i, key),
        )));
    }
    for i in 0..f.members.len() {
        if objects::has_service(f, o, i) {
            out.push(Object::Service(objects::service(f, o, &owner, i)));
        }
    }
    // Peers before the entry, as the launcher starts them.
    let entry = f.entry();
    for i in (0..f.members.len()).filter(|&i| i != entry) {
        out.push(Object::Deployment(objects::deployment(f, o, &owner, i)));
    }
    out.push(match o.task {
        Some(_) => Object::Job(objects::job(f, o, &owner, entry)),
        None => Object::Deployment(objects::deployment(f, o, &owner, entry)),
    });
    Ok(Manifests {
        objects: out,
        carries_credentials: true,
    })
}

/// Labels every object of the formation carries; `member` adds the member's.
pub fn labels(f: &Formation, member: Option<usize>) -> std::collections::BTreeMap<String, String> {
    let mut l = std::collections::BTreeMap::new();
    l.insert(LABEL_MANAGED_BY.to_string(), "mur".to_string());
    l.insert(LABEL_FORMATION.to_string(), f.id.clone());
    if let Some(i) = member {
        l.insert(LABEL_MEMBER.to_string(), f.members[i].name.clone());
    }
    l
}

/// The labels that select member `i`'s pods (and nothing else).
pub fn pod_selector(f: &Formation, i: usize) -> std::collections::BTreeMap<String, String> {
    let mut l = std::collections::BTreeMap::new();
    l.insert(LABEL_FORMATION.to_string(), f.id.clone());
    l.insert(LABEL_MEMBER.to_string(), f.members[i].name.clone());
    l
}
