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
    /// Where its runtime sends requests of its own: the model's provider, each MCP server, the
    /// remote agent. Its egress policy admits exactly these (and its callees).
    pub endpoints: Vec<Endpoint>,
    /// What the capsule's and its WebAssembly tools' `network.allow` rules let them reach
    /// beyond the loopback: admitted by its egress policy too.
    pub allowed: Vec<Destination>,
    /// The variables its keys are read from (`Manifest::key_vars`): each is set in its pod from
    /// the Secret `--keys-secret` names.
    pub keys: Vec<String>,
    /// The memory its pod may use: the runtime's own and the bounds of what the capsule runs.
    pub memory_mib: u64,
    /// `lifecycle.input_timeout_secs` is set: its tasks may ask their sender a question.
    pub asks: bool,
}

/// A URL a member's runtime dials, named by the manifest field it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `inference.endpoint`, `tools[<name>].mcp`, `remote.url`.
    pub field: String,
    pub url: String,
    pub origin: Origin,
}

impl Endpoint {
    /// A loopback endpoint reaches the pod itself in a cluster, not the machine it was written for.
    pub fn is_loopback(&self) -> bool {
        crate::address::allow::is_loopback_host(&self.origin.host)
    }
}

/// A host (a name or an address) and, when the rule names one, a port: one egress destination.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Destination {
    pub host: String,
    pub port: Option<u16>,
}

/// Where a URL's requests go: the host as written (a name or an address) and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub host: String,
    pub port: u16,
}

/// The memory the runtime of one member takes besides what its capsule runs (an idle member is
/// about 21 MiB resident, docs/performance.md), with room for its door's connections, a model's
/// streams and its records.
pub const RUNTIME_MEMORY_MIB: u64 = 128;
/// What a member's pod asks the scheduler for: an idle member's share.
pub const MEMBER_MEMORY_REQUEST_MIB: u64 = 32;
pub const MEMBER_CPU_REQUEST: &str = "50m";
/// A relay or the entry's wait: one socat, and a forked one per connection it carries.
pub const SIDECAR_MEMORY_MIB: u64 = 16;
pub const SIDECAR_MEMORY_LIMIT_MIB: u64 = 64;
pub const SIDECAR_CPU_REQUEST: &str = "10m";

/// A member's memory limit in MiB: the runtime's own, plus the linear memory a component
/// capsule's task may hold, plus one instance per WebAssembly tool (a model turn may call each).
pub fn memory_mib(m: &crate::manifest::Manifest) -> u64 {
    use crate::manifest::{Kind, ToolSource};
    let component = match m.kind {
        Kind::Component { .. } => crate::limits::COMPONENT_MEMORY_BYTES >> 20,
        _ => 0,
    };
    let tools = m
        .tools
        .iter()
        .filter(|t| matches!(t.source, ToolSource::Wasm { .. }))
        .count() as u64;
    RUNTIME_MEMORY_MIB
        .saturating_add(component)
        .saturating_add(tools.saturating_mul(crate::limits::TOOL_MEMORY_BYTES >> 20))
}

/// The URLs `m`'s runtime dials itself, in manifest order: the model's endpoint (or its
/// provider's default), each MCP server, the remote agent.
pub fn endpoints(m: &crate::manifest::Manifest) -> Vec<Endpoint> {
    use crate::manifest::ToolSource;
    let mut out = Vec::new();
    let mut push = |field: String, url: &str| {
        if let Some(origin) = Origin::of(url) {
            out.push(Endpoint {
                field,
                url: url.to_string(),
                origin,
            });
        }
    };
    if let Some(i) = &m.inference {
        let field = if i.endpoint.is_some() {
            "inference.endpoint"
        } else {
            "inference.provider"
        };
        if let Some(url) = i
            .endpoint
            .as_deref()
            .or_else(|| i.provider.map(crate::manifest::Provider::default_endpoint))
        {
            push(field.to_string(), url);
        }
    }
    for t in &m.tools {
        if let ToolSource::Mcp { url, .. } = &t.source {
            push(format!("tools[{}].mcp", t.name), url);
        }
    }
    if let Some(r) = &m.remote {
        push("remote.url".to_string(), &r.url);
    }
    out
}

/// What the capsule's and its WebAssembly tools' `network.allow` rules reach off the loopback
/// (the loopback in a pod is the pod: relays to callees and mapped endpoints live there).
pub fn allowed(m: &crate::manifest::Manifest) -> Vec<Destination> {
    use crate::manifest::ToolSource;
    let mut rules: Vec<&String> = m.network_allow.iter().collect();
    for t in &m.tools {
        if let ToolSource::Wasm { network_allow, .. } = &t.source {
            rules.extend(network_allow);
        }
    }
    let mut out: Vec<Destination> = rules
        .into_iter()
        .filter_map(|r| crate::address::allow::AllowRule::parse(r).ok())
        .filter(|r| !crate::address::allow::is_loopback_host(r.host()))
        .map(|r| Destination {
            host: r.host().to_string(),
            port: r.port(),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Origin {
    /// The origin of `url` (`https://host[:port]/…`, or `http://` to loopback); `None` for a URL
    /// that names no host and port.
    pub fn of(url: &str) -> Option<Origin> {
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
        (!host.is_empty()).then(|| Origin {
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
                    endpoints: endpoints(&m.manifest),
                    allowed: allowed(&m.manifest),
                    keys: m.manifest.key_vars(),
                    memory_mib: memory_mib(&m.manifest),
                    asks: m.manifest.lifecycle.input_timeout_secs.is_some(),
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
    /// The Secret (not written by `mur deploy`) whose keys the members' API keys are read from.
    pub keys_secret: String,
    /// `--endpoint LOOPBACK=TARGET`: where, in the cluster, what a manifest names on the loopback is.
    pub endpoint_maps: Vec<EndpointMap>,
    /// `--dry-run`: every object, under a placeholder owner and marked so that no API server
    /// creates or updates it.
    pub dry_run: bool,
}

/// The default `--keys-secret`.
pub const DEFAULT_KEYS_SECRET: &str = "mur-keys";

/// The owner uid of a `--dry-run` render: no object has it (the nil UUID).
pub const DRY_RUN_UID: &str = "00000000-0000-0000-0000-000000000000";
/// The `resourceVersion` every `--dry-run` object carries: the API server refuses to create an
/// object that sets one, and refuses an update from a stale one, so the render cannot be applied.
pub const DRY_RUN_RESOURCE_VERSION: &str = "1";
/// The annotation that marks a `--dry-run` object for a reader.
pub const DRY_RUN_ANNOTATION: &str = "murmur.nexus/dry-run";

/// One `--endpoint HOST:PORT=HOST:PORT`: a member's pod relays its own loopback `from` (where
/// the capsule's manifest points) to `to` (where that service is in the cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointMap {
    pub from: Origin,
    pub to: Origin,
}

impl EndpointMap {
    /// Reads `HOST:PORT=HOST:PORT`; IPv6 hosts in brackets. The error says what is wrong.
    pub fn parse(arg: &str) -> Result<EndpointMap, String> {
        let (from, to) = arg
            .split_once('=')
            .ok_or_else(|| "it needs the form LOOPBACK-HOST:PORT=CLUSTER-HOST:PORT".to_string())?;
        let origin = |side: &str, what: &str| {
            Origin::of(&format!("http://{side}"))
                .filter(|o| side.contains(':') && !side.contains(['/', '?', '#', '@']) && !o.host.is_empty())
                .ok_or_else(|| format!("{what} '{}' is not HOST:PORT", diag::shown(side)))
        };
        let from = origin(from, "the loopback side")?;
        let to = origin(to, "the cluster side")?;
        if !crate::address::allow::is_loopback_host(&from.host) {
            return Err(format!(
                "the loopback side '{}' is not on the loopback",
                diag::shown(&from.host)
            ));
        }
        if crate::address::allow::is_loopback_host(&to.host) {
            return Err(format!(
                "the cluster side '{}' is on the loopback, which in a pod is the pod itself",
                diag::shown(&to.host)
            ));
        }
        Ok(EndpointMap { from, to })
    }
}

/// The `--endpoint` that maps `e`, when one does: same host as written (any case) and port.
pub fn map_of<'a>(o: &'a Options, e: &Endpoint) -> Option<&'a EndpointMap> {
    o.endpoint_maps
        .iter()
        .find(|m| m.from.host.eq_ignore_ascii_case(&e.origin.host) && m.from.port == e.origin.port)
}

/// `host:port` as a URL writes it (IPv6 in brackets).
pub fn authority(o: &Origin) -> String {
    if o.host.contains(':') {
        format!("[{}]:{}", o.host, o.port)
    } else {
        format!("{}:{}", o.host, o.port)
    }
}

/// Where member `i`'s egress goes beyond its callees' doors: each endpoint (a mapped loopback
/// one at its cluster side) and each `network.allow` destination, each once.
pub fn destinations(f: &Formation, o: &Options, i: usize) -> Vec<Destination> {
    let m = &f.members[i];
    let mut out: Vec<Destination> = m
        .endpoints
        .iter()
        .filter_map(|e| {
            let origin = if e.is_loopback() { &map_of(o, e)?.to } else { &e.origin };
            Some(Destination {
                host: origin.host.clone(),
                port: Some(origin.port),
            })
        })
        .chain(m.allowed.iter().cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Each key variable the formation's members read, with the members reading it, in roster
/// order: what the Secret `--keys-secret` names must hold.
pub fn keys_needed(f: &Formation) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for m in &f.members {
        for k in &m.keys {
            match out.iter_mut().find(|(v, _)| v == k) {
                Some((_, ms)) => ms.push(m.name.clone()),
                None => out.push((k.clone(), vec![m.name.clone()])),
            }
        }
    }
    out
}

/// The refusal of a guarantee a render cannot carry yet (docs/kubernetes.md, "Each guarantee on
/// the cluster"), naming it: `--max-tokens` today.
pub fn refuse_uncarried(what: &str, why: &str, hint: &str) -> Diagnostic {
    Diagnostic::new(
        diag::E_DEP_005,
        format!("{what} cannot be carried into the cluster yet: {why}"),
    )
    .with_hint(hint)
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

/// A DNS-1123 subdomain: what most object names must be.
fn is_dns_subdomain(s: &str) -> bool {
    (1..=253).contains(&s.len()) && s.split('.').all(is_dns_label)
}

/// Every loopback endpoint a member dials has its cluster side (`--endpoint`), no relay of it
/// takes a port the pod already uses, and every `--endpoint` maps something.
fn check_endpoints(f: &Formation, o: &Options) -> Result<(), Diagnostic> {
    for (i, m) in f.members.iter().enumerate() {
        for e in m.endpoints.iter().filter(|e| e.is_loopback()) {
            if map_of(o, e).is_none() {
                return Err(Diagnostic::new(
                    diag::E_DEP_004,
                    format!(
                        "member '{}': {} '{}' is on the loopback, which in a pod is the pod itself, not this machine",
                        m.name,
                        e.field,
                        diag::shown(&e.url)
                    ),
                )
                .with_hint(format!(
                    "say where that service is in the cluster: --endpoint {}=SERVICE-HOST:PORT (the pod then relays its own {} to it)",
                    authority(&e.origin),
                    authority(&e.origin)
                )));
            }
            let taken = e.origin.port == DOOR_PORT || f.callees(i).iter().any(|&c| relay_port(c) == e.origin.port);
            if taken {
                return Err(Diagnostic::new(
                    diag::E_DEP_004,
                    format!(
                        "member '{}': {} '{}' uses port {} of the loopback, which its pod keeps for its door or a relay to a callee",
                        m.name,
                        e.field,
                        diag::shown(&e.url),
                        e.origin.port
                    ),
                )
                .with_hint(format!(
                    "serve that endpoint on another port in the capsule's manifest (not {DOOR_PORT} nor {RELAY_PORT_BASE} to {RELAY_PORT_BASE}+members)"
                )));
            }
        }
    }
    for map in &o.endpoint_maps {
        let used = f.members.iter().any(|m| {
            m.endpoints
                .iter()
                .any(|e| e.is_loopback() && map_of(o, e).is_some_and(|x| x == map))
        });
        if !used {
            return Err(Diagnostic::new(
                diag::E_DEP_004,
                format!(
                    "--endpoint {}={}: no member dials {}",
                    authority(&map.from),
                    authority(&map.to),
                    authority(&map.from)
                ),
            )
            .with_hint("name a loopback endpoint a member's manifest names (inference.endpoint, tools[].mcp, remote.url), as written there"));
        }
    }
    Ok(())
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
    if !is_dns_subdomain(&o.keys_secret) {
        return Err(refuse(format!(
            "--keys-secret '{}' is not a Kubernetes object name",
            diag::shown(&o.keys_secret)
        ))
        .with_hint(
            "use at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
        ));
    }
    check_endpoints(f, o)?;
    if o.task.is_some() && f.members.get(f.entry()).is_some_and(|m| m.asks) {
        return Err(refuse_uncarried(
            "--task with an entry that asks its sender questions (lifecycle.input_timeout_secs)",
            "the entry's Job has no Service, so no operator could answer a question its task asks, and the task would wait out its input timeout",
            "leave out --task: the entry then serves tasks behind its Service, and an operator's pod that sent a task answers its questions",
        ));
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
    let uid = if o.dry_run {
        Some(DRY_RUN_UID.to_string())
    } else {
        o.owner_uid.clone()
    };
    let Some(uid) = &uid else {
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
    if o.dry_run {
        out.iter_mut().for_each(objects::mark_dry_run);
    }
    Ok(Manifests {
        objects: out,
        // A dry run's Secrets hold tokens of a key dropped unused: no door accepts them.
        carries_credentials: !o.dry_run,
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
