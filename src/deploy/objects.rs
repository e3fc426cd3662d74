//! The typed Kubernetes objects of a formation: the formation object, Secrets, Services,
//! Deployments and the entry's Job. Each is built field by field from `k8s-openapi` structs;
//! YAML only ever comes from serialising them.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, KeyToPath, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec,
    TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::{
    CARD_PATH, CHANNEL_DIR, CHANNEL_FD, CHANNEL_FILE, DOOR_PORT, DRY_RUN_ANNOTATION, DRY_RUN_RESOURCE_VERSION,
    EndpointMap, Formation, HOME_DIR, MEMBER_CPU_REQUEST, MEMBER_MEMORY_REQUEST_MIB, MUR_PATH, Options, RUN_AS,
    SIDECAR_CPU_REQUEST, SIDECAR_MEMORY_LIMIT_MIB, SIDECAR_MEMORY_MIB, STORE_ROOT, TASK_DIR, TASK_FILE, WORK_DIR,
    authority, labels, map_of, pod_selector, relay_port,
};

/// One object of the output, in the order it is applied.
#[derive(Clone, PartialEq)]
pub enum Object {
    ConfigMap(ConfigMap),
    NetworkPolicy(NetworkPolicy),
    Secret(Secret),
    Service(Service),
    Deployment(Deployment),
    Job(Job),
}

// A Secret's data is a credential: Debug names objects, never shows them.
impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind(), self.name())
    }
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::ConfigMap(_) => "ConfigMap",
            Object::NetworkPolicy(_) => "NetworkPolicy",
            Object::Secret(_) => "Secret",
            Object::Service(_) => "Service",
            Object::Deployment(_) => "Deployment",
            Object::Job(_) => "Job",
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Object::ConfigMap(o) => &mut o.metadata,
            Object::NetworkPolicy(o) => &mut o.metadata,
            Object::Secret(o) => &mut o.metadata,
            Object::Service(o) => &mut o.metadata,
            Object::Deployment(o) => &mut o.metadata,
            Object::Job(o) => &mut o.metadata,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::ConfigMap(o) => &o.metadata,
            Object::NetworkPolicy(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::Deployment(o) => &o.metadata,
            Object::Job(o) => &o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }

    /// One YAML document (no `---` marker), as `kubectl apply` reads it.
    pub fn to_yaml(&self) -> Result<String, String> {
        fn yaml<T: Serialize>(t: &T) -> Result<String, String> {
            serde_yaml_ng::to_string(t).map_err(|e| e.to_string())
        }
        match self {
            Object::ConfigMap(o) => yaml(o),
            Object::NetworkPolicy(o) => yaml(o),
            Object::Secret(o) => yaml(o),
            Object::Service(o) => yaml(o),
            Object::Deployment(o) => yaml(o),
            Object::Job(o) => yaml(o),
        }
    }
}

/// Marks an object of a `--dry-run` render: a `resourceVersion`, which the API server refuses on
/// a create and finds stale on an update, and an annotation saying why.
pub fn mark_dry_run(o: &mut Object) {
    let m = o.metadata_mut();
    m.resource_version = Some(DRY_RUN_RESOURCE_VERSION.into());
    m.annotations.get_or_insert_with(BTreeMap::new).insert(
        DRY_RUN_ANNOTATION.into(),
        "a review copy from mur deploy --dry-run; no API server accepts it (it sets resourceVersion)".into(),
    );
}

/// Every object as one multi-document YAML stream.
pub fn to_yaml_stream(objects: &[Object]) -> Result<String, String> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&o.to_yaml()?);
    }
    Ok(out)
}

/// The owner reference every object but the formation object carries. `controller` makes the
/// formation object the one manager of each; `blockOwnerDeletion` keeps a foreground delete of
/// the formation waiting until its members are gone.
pub fn owner(f: &Formation, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: f.object_name(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn meta(f: &Formation, o: &Options, owner: &OwnerReference, name: String, member: Option<usize>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(o.namespace.clone()),
        labels: Some(labels(f, member)),
        owner_references: Some(vec![owner.clone()]),
        ..Default::default()
    }
}

/// The formation object: what admission bound (members, capsules, hashes, edges) and the
/// entry's task. It holds no credential; every other object names it as its owner.
pub fn formation_object(f: &Formation, o: &Options) -> ConfigMap {
    let members: Vec<serde_json::Value> = f
        .members
        .iter()
        .map(|m| {
            serde_json::json!({
                "name": m.name,
                "capsule": m.capsule,
                "version": m.version,
                "sha256": m.sha256,
                "entry": m.entry,
            })
        })
        .collect();
    let edges: Vec<serde_json::Value> = f
        .edges
        .iter()
        .map(|&(a, b)| serde_json::json!({"from": f.members[a].name, "to": f.members[b].name}))
        .collect();
    let facts = serde_json::json!({
        "formation_id": f.id,
        "members": members,
        "edges": edges,
    });
    let mut data = BTreeMap::new();
    // Serialising a json! value cannot fail.
    data.insert(
        "formation.json".to_string(),
        serde_json::to_string_pretty(&facts).unwrap_or_default() + "\n",
    );
    if let Some(t) = &o.task {
        data.insert(TASK_FILE.to_string(), t.clone());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(f.object_name()),
            namespace: Some(o.namespace.clone()),
            labels: Some(labels(f, None)),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Member `i`'s formation channel, readable only by the pods that mount it: its own.
pub fn secret(f: &Formation, o: &Options, owner: &OwnerReference, i: usize, channel: &str) -> Secret {
    let mut data = BTreeMap::new();
    data.insert(CHANNEL_FILE.to_string(), ByteString(channel.as_bytes().to_vec()));
    Secret {
        metadata: meta(f, o, owner, f.secret_name(i), Some(i)),
        type_: Some("Opaque".into()),
        // A formation's credentials never change: a new key means a new formation.
        immutable: Some(true),
        data: Some(data),
        ..Default::default()
    }
}

/// Members that get a Service: every callee (its callers' relays dial it), and the entry when
/// it serves tasks rather than running one (an operator's pod reaches it).
pub fn has_service(f: &Formation, o: &Options, i: usize) -> bool {
    !f.callers(i).is_empty() || (f.members[i].entry && o.task.is_none())
}

pub fn service(f: &Formation, o: &Options, owner: &OwnerReference, i: usize) -> Service {
    Service {
        metadata: meta(f, o, owner, f.member_object(i), Some(i)),
        spec: Some(ServiceSpec {
            selector: Some(pod_selector(f, i)),
            ports: Some(vec![ServicePort {
                name: Some("door".into()),
                port: i32::from(DOOR_PORT),
                target_port: Some(IntOrString::String("door".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn deployment(f: &Formation, o: &Options, owner: &OwnerReference, i: usize) -> Deployment {
    Deployment {
        metadata: meta(f, o, owner, f.member_object(i), Some(i)),
        spec: Some(DeploymentSpec {
            // One session per member, as locally; Recreate never runs two at once.
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(pod_selector(f, i)),
                ..Default::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                ..Default::default()
            }),
            template: pod_template(f, o, i, "Always"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The entry with `--task`: one run, no retry (a retry would run the task twice), ended by the
/// deadline when one is given.
pub fn job(f: &Formation, o: &Options, owner: &OwnerReference, i: usize) -> Job {
    Job {
        metadata: meta(f, o, owner, f.member_object(i), Some(i)),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: o.deadline.map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
            template: pod_template(f, o, i, "Never"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `mur run --capsule` as the launcher starts a member
/// (docs/reference/formation.md#member-command-lines), less what a pod replaces: the door binds a
/// fixed port on the pod's network, the store is the image's, and no operator token is printed
/// (`--readiness-tokens` feeds the launcher's probe; the kubelet probes the public card instead,
/// and a token must never reach a log).
pub fn member_args(f: &Formation, o: &Options, i: usize) -> Vec<String> {
    let m = &f.members[i];
    let mut args: Vec<String> = [
        "run",
        "--capsule",
        &m.capsule,
        "--capsule-version",
        &m.version,
        "--capsule-sha256",
        &m.sha256,
        "--store-root",
        STORE_ROOT,
        "--workdir",
        WORK_DIR,
        "--json",
        "--bind",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("0.0.0.0:{DOOR_PORT}"));
    if m.entry {
        let lifecycle: &[&str] = match o.task {
            Some(_) => &[
                "--lifecycle-task-acceptance",
                "single",
                "--lifecycle-after-task",
                "exit",
            ],
            None => &[
                "--lifecycle-task-acceptance",
                "queue",
                "--lifecycle-after-task",
                "sleep",
            ],
        };
        args.extend(lifecycle.iter().map(|s| s.to_string()));
        if o.task.is_some() {
            args.push("--task".into());
            args.push(format!("{TASK_DIR}/{TASK_FILE}"));
        }
    }
    args
}

/// `MURMUR_FORMATION_CHANNEL` names a descriptor, so a shell opens the Secret's file on it and
/// execs `mur` (which then is the pod's first process). The script is fixed text: every value
/// travels as an argument, so no name is ever parsed by the shell.
pub fn member_command() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("exec {MUR_PATH} \"$@\" {CHANNEL_FD}<{CHANNEL_DIR}/{CHANNEL_FILE}"),
        "mur".into(),
    ]
}

/// A key's variable, read from the Secret `--keys-secret` names under the variable's own name.
/// Not optional: a pod whose Secret lacks it does not start (CreateContainerConfigError), as a
/// local member without its key would fail its first model turn.
fn key_env(o: &Options, var: &str) -> EnvVar {
    EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: o.keys_secret.clone(),
                key: var.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mib(n: u64) -> Quantity {
    Quantity(format!("{n}Mi"))
}

/// Requests what an idle process holds; limits memory to what it may hold at most. No CPU
/// limit: locally nothing throttles a member, and its task bounds are wall-clock ones.
fn resources(request_cpu: &str, request_mib: u64, limit_mib: u64) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(request_cpu.into())),
            ("memory".to_string(), mib(request_mib.min(limit_mib))),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), mib(limit_mib))])),
        ..Default::default()
    }
}

fn sidecar_resources() -> ResourceRequirements {
    resources(SIDECAR_CPU_REQUEST, SIDECAR_MEMORY_MIB, SIDECAR_MEMORY_LIMIT_MIB)
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// Every container: unprivileged, no new privileges, no capabilities, a read-only root.
fn locked_down() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A caller's relay to one callee: a native sidecar (an init container that keeps running) so it
/// is up before the member starts and never holds a finished Job open. Door URLs stay on
/// `localhost` (docs/reference/capsules.md#what-the-host-grants), so a capsule's `network.allow`
/// means what it means locally.
fn relay(f: &Formation, o: &Options, callee: usize) -> Container {
    let port = relay_port(callee);
    Container {
        name: format!("to-{}-door", f.members[callee].name),
        image: Some(o.image.clone()),
        restart_policy: Some("Always".into()),
        command: Some(vec![
            "socat".into(),
            format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"),
            format!("TCP:{}:{DOOR_PORT}", f.service_host(callee, &o.namespace)),
        ]),
        startup_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(port)),
                host: Some("127.0.0.1".into()),
            }),
            period_seconds: Some(1),
            ..Default::default()
        }),
        resources: Some(sidecar_resources()),
        security_context: Some(locked_down()),
        ..Default::default()
    }
}

/// A relay for a loopback endpoint the capsule's manifest names (`--endpoint`): it listens where
/// the manifest points, on the pod's own loopback, and forwards to the service's place in the
/// cluster. The bytes pass as they are: TLS, if the endpoint speaks it, stays end to end.
fn endpoint_relay(o: &Options, n: usize, map: &EndpointMap) -> Container {
    let (listen, bind, host) = if map.from.host.contains(':') {
        ("TCP6-LISTEN", "[::1]".to_string(), "::1".to_string())
    } else if map
        .from
        .host
        .parse::<std::net::Ipv4Addr>()
        .is_ok_and(|a| a.is_loopback())
    {
        ("TCP-LISTEN", map.from.host.clone(), map.from.host.clone())
    } else {
        // `localhost` is dialled at 127.0.0.1, never looked up (manifest::endpoint::localhost_socket).
        ("TCP-LISTEN", "127.0.0.1".to_string(), "127.0.0.1".to_string())
    };
    let port = map.from.port;
    Container {
        name: format!("to-endpoint-{n}"),
        image: Some(o.image.clone()),
        restart_policy: Some("Always".into()),
        command: Some(vec![
            "socat".into(),
            format!("{listen}:{port},bind={bind},fork,reuseaddr"),
            format!("TCP:{}", authority(&map.to)),
        ]),
        startup_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(port)),
                host: Some(host),
            }),
            period_seconds: Some(1),
            ..Default::default()
        }),
        resources: Some(sidecar_resources()),
        security_context: Some(locked_down()),
        ..Default::default()
    }
}

/// The entry starts once each of its callees' Services answers, as the launcher starts the
/// entry last. It dials the Services directly: its relays would accept before a callee is up.
fn wait_for_callees(f: &Formation, o: &Options, i: usize) -> Container {
    let mut command: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        "for door; do until socat -u OPEN:/dev/null \"TCP:$door,connect-timeout=2\"; do sleep 1; done; done".into(),
        "wait".into(),
    ];
    command.extend(
        f.callees(i)
            .into_iter()
            .map(|c| format!("{}:{DOOR_PORT}", f.service_host(c, &o.namespace))),
    );
    Container {
        name: "wait-for-callees".into(),
        image: Some(o.image.clone()),
        command: Some(command),
        resources: Some(sidecar_resources()),
        security_context: Some(locked_down()),
        ..Default::default()
    }
}

fn pod_template(f: &Formation, o: &Options, i: usize, restart: &str) -> PodTemplateSpec {
    let m = &f.members[i];
    let callees = f.callees(i);
    let with_task = m.entry && o.task.is_some();

    let mut mounts = vec![
        mount("channel", CHANNEL_DIR, true),
        mount("home", HOME_DIR, false),
        mount("work", WORK_DIR, false),
        mount("tmp", "/tmp", false),
    ];
    let mut volumes = vec![
        Volume {
            name: "channel".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(f.secret_name(i)),
                items: Some(vec![KeyToPath {
                    key: CHANNEL_FILE.into(),
                    path: CHANNEL_FILE.into(),
                    ..Default::default()
                }]),
                // Owner and group read only; the group is the pod's fsGroup.
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        },
        empty_dir("home"),
        empty_dir("work"),
        empty_dir("tmp"),
    ];
    if with_task {
        mounts.push(mount("task", TASK_DIR, true));
        volumes.push(Volume {
            name: "task".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: f.object_name(),
                items: Some(vec![KeyToPath {
                    key: TASK_FILE.into(),
                    path: TASK_FILE.into(),
                    ..Default::default()
                }]),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    let member = Container {
        name: "member".into(),
        image: Some(o.image.clone()),
        command: Some(member_command()),
        args: Some(member_args(f, o, i)),
        env: Some(
            [
                env("MURMUR_FORMATION_ID", &f.id),
                env("MURMUR_FORMATION_CHANNEL", CHANNEL_FD),
                env("HOME", HOME_DIR),
            ]
            .into_iter()
            .chain(m.keys.iter().map(|k| key_env(o, k)))
            .collect(),
        ),
        resources: Some(resources(MEMBER_CPU_REQUEST, MEMBER_MEMORY_REQUEST_MIB, m.memory_mib)),
        ports: Some(vec![ContainerPort {
            name: Some("door".into()),
            container_port: i32::from(DOOR_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(CARD_PATH.into()),
                port: IntOrString::String("door".into()),
                ..Default::default()
            }),
            period_seconds: Some(2),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        working_dir: Some(WORK_DIR.into()),
        security_context: Some(locked_down()),
        ..Default::default()
    };

    let mut init: Vec<Container> = callees.iter().map(|&c| relay(f, o, c)).collect();
    // One relay per loopback endpoint, each once (two fields may name the same one).
    let mut maps: Vec<&EndpointMap> = Vec::new();
    for e in m.endpoints.iter().filter(|e| e.is_loopback()) {
        if let Some(map) = map_of(o, e)
            && !maps.contains(&map)
        {
            maps.push(map);
        }
    }
    init.extend(maps.iter().enumerate().map(|(n, map)| endpoint_relay(o, n, map)));
    if m.entry && !callees.is_empty() {
        init.push(wait_for_callees(f, o, i));
    }

    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            // A superset of `pod_selector`: the formation and the member.
            labels: Some(labels(f, Some(i))),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            // No API credentials in any member pod: nothing in it may read another's Secret.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            restart_policy: Some(restart.into()),
            // The member's own teardown backstop is 20 s; the launcher waits 25 s.
            termination_grace_period_seconds: Some(25),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(RUN_AS),
                run_as_group: Some(RUN_AS),
                fs_group: Some(RUN_AS),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            init_containers: (!init.is_empty()).then_some(init),
            containers: vec![member],
            volumes: Some(volumes),
            ..Default::default()
        }),
    }
}
