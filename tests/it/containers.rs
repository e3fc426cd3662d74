//! The formation image, built and run with a real container engine: the image docs/kubernetes.md
//! tells users to build (`deploy/formation-image.sh`, the registry-free build of the Dockerfile's
//! image) is built here with Debian's Docker Engine, and the demo formation rendered by
//! `mur deploy --kubernetes` runs from it. Every container is started from its rendered Pod spec
//! (read from the manifests, never restated here): its command and args, its environment (values
//! and `secretKeyRef`s), its volume mounts (Secret and ConfigMap items written as files with their
//! modes, emptyDirs), its user, group and security context; sidecars (init containers with
//! `restartPolicy: Always`) before the init containers that run to completion, then the member.
//!
//! What stands in for what a cluster would give (no API server can run on these machines):
//! - **A pod's network**: a pause container per pod (the image's busybox `sleep`) owning a network
//!   namespace on a private bridge, which every container of the pod joins, as a pod sandbox.
//! - **Service DNS**: `<service>.<namespace>.svc` (and its longer and shorter forms) resolves,
//!   through the pod's `/etc/hosts`, to the pod the Service selects; the test checks that each
//!   Service's port is its target's container port, so the address is the one kube-proxy would
//!   forward to.
//! - **NetworkPolicy** is not enforced: the bridge lets any pod reach any other. The policies are
//!   checked against the admitted edges in `deploy::network_policies_carry_exactly_the_admitted_edges`,
//!   and the doors still check each call's edge token here.
//! - **Probes**: the readiness probe's HTTP GET is sent from this host to the pod's address, as a
//!   kubelet does from the node; a sidecar's TCP startup probe is read from the pod's own socket
//!   table.
//! - **Resources** (requests, memory limits) are not applied.
//!
//! Nothing is left running: the engine (its own `dockerd` under `target/test-docker`) removes
//! every container and its network and ends, and the test checks that no process of it, no
//! container's process and no bridge remains.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Container, PodSpec, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::deploy::{FRM, IMAGE, Obj, demo_formation, full};
use crate::support::engine::{self, DOCKER, Engine};
use crate::support::{self, Sandbox, needs, stderr, stdout, toolchains::target_dir, wait_until};

/// One workload's pod: its name, labels and spec as rendered.
struct Workload {
    name: String,
    labels: BTreeMap<String, String>,
    spec: PodSpec,
    job: bool,
}

fn workloads(objs: &[(String, Obj)]) -> Vec<Workload> {
    objs.iter()
        .filter_map(|(_, o)| {
            let (name, template, job) = match o {
                Obj::Deployment(d) => (d.metadata.name.clone()?, d.spec.as_ref()?.template.clone(), false),
                Obj::Job(j) => (j.metadata.name.clone()?, j.spec.as_ref()?.template.clone(), true),
                _ => return None,
            };
            let labels = template.metadata.as_ref()?.labels.clone().unwrap_or_default();
            Some(Workload {
                name,
                labels,
                spec: template.spec?,
                job,
            })
        })
        .collect()
}

/// The formation's pods on one engine, on one bridge.
struct Cluster<'e> {
    engine: &'e Engine,
    network: String,
    /// The /24's first three octets.
    prefix: String,
    root: PathBuf,
    secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// Each workload's pod address.
    ips: BTreeMap<String, String>,
    /// `/etc/hosts` lines every pod gets: what a Service's DNS name resolves to.
    hosts: Vec<(String, String)>,
    /// The processes the pods' containers ran as (each pause and each long-running container).
    pids: Vec<u32>,
}

impl<'e> Cluster<'e> {
    fn new(
        engine: &'e Engine,
        objs: &[(String, Obj)],
        pods: &[Workload],
        root: PathBuf,
        prefix: &str,
        network: &str,
    ) -> Self {
        let mut secrets = BTreeMap::new();
        let mut config_maps = BTreeMap::new();
        let mut services: Vec<Service> = Vec::new();
        for (_, o) in objs {
            match o {
                Obj::Secret(s) => {
                    let mut data: BTreeMap<String, Vec<u8>> = s
                        .data
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, ByteString(v))| (k, v))
                        .collect();
                    for (k, v) in s.string_data.clone().unwrap_or_default() {
                        data.insert(k, v.into_bytes());
                    }
                    secrets.insert(s.metadata.name.clone().expect("secret name"), data);
                }
                Obj::ConfigMap(c) => {
                    config_maps.insert(
                        c.metadata.name.clone().expect("name"),
                        c.data.clone().unwrap_or_default(),
                    );
                }
                Obj::Service(s) => services.push(s.clone()),
                _ => {}
            }
        }
        let ips: BTreeMap<String, String> = pods
            .iter()
            .enumerate()
            .map(|(i, w)| (w.name.clone(), format!("{prefix}.{}", 10 + i)))
            .collect();
        let mut hosts = Vec::new();
        for s in &services {
            let name = s.metadata.name.clone().expect("service name");
            let ns = s.metadata.namespace.clone().expect("service namespace");
            let spec = s.spec.as_ref().expect("service spec");
            let selector = spec.selector.clone().unwrap_or_default();
            let selected: Vec<&Workload> = pods
                .iter()
                .filter(|w| selector.iter().all(|(k, v)| w.labels.get(k) == Some(v)))
                .collect();
            assert_eq!(selected.len(), 1, "Service {name} selects exactly one workload's pods");
            let pod = selected[0];
            // The address stands in for the Service's only if its port is the pod's.
            for p in spec.ports.iter().flatten() {
                let target = p.target_port.as_ref().expect("targetPort");
                assert_eq!(
                    container_port(&pod.spec.containers[0], target),
                    p.port,
                    "Service {name}: port {} is not its target's",
                    p.port
                );
            }
            for host in [
                format!("{name}.{ns}.svc.cluster.local"),
                format!("{name}.{ns}.svc"),
                format!("{name}.{ns}"),
                name.clone(),
            ] {
                hosts.push((host, ips[&pod.name].clone()));
            }
        }
        Cluster {
            engine,
            network: network.to_string(),
            prefix: prefix.to_string(),
            root,
            secrets,
            config_maps,
            ips,
            hosts,
            pids: Vec::new(),
        }
    }

    /// Starts workload `w`'s pod: its sandbox, its volumes, its sidecars and init containers in
    /// order, then its member container: detached for a Deployment (returned once its readiness
    /// probe answers), to completion for a Job (its output returned).
    fn start(&mut self, w: &Workload) -> Option<Output> {
        let pod = &w.name;
        let ip = self.ips[pod].clone();
        assert!(ip.starts_with(&self.prefix));
        let sc = w.spec.security_context.clone().unwrap_or_default();
        let user = match (sc.run_as_user, sc.run_as_group) {
            (Some(u), Some(g)) => format!("{u}:{g}"),
            (Some(u), None) => u.to_string(),
            _ => panic!("pod {pod} names no user (runAsNonRoot needs one the image does not give)"),
        };
        let fs_group = sc.fs_group;
        let volumes = self.volumes(w, fs_group);
        let mut pause = vec![
            "run".to_string(),
            "-d".into(),
            "--name".into(),
            format!("{pod}-pause"),
            "--hostname".into(),
            pod.clone(),
            "--network".into(),
            self.network.clone(),
            "--ip".into(),
            ip.clone(),
            "--user".into(),
            user.clone(),
            "--read-only".into(),
            "--cap-drop".into(),
            "ALL".into(),
            "--security-opt".into(),
            "no-new-privileges".into(),
        ];
        for (host, addr) in &self.hosts {
            pause.push("--add-host".into());
            pause.push(format!("{host}:{addr}"));
        }
        pause.extend([
            "--entrypoint".into(),
            "/bin/sleep".into(),
            IMAGE.into(),
            "2147483647".into(),
        ]);
        let id = self.docker_ok(&pause, &[]);
        let sandbox_pid = self.pid_of(&id);
        for c in w.spec.init_containers.iter().flatten() {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let out = self.container(w, c, &user, fs_group, &volumes, sidecar);
            if sidecar {
                let port = c
                    .startup_probe
                    .as_ref()
                    .and_then(|p| p.tcp_socket.as_ref())
                    .map(|t| match &t.port {
                        IntOrString::Int(n) => *n as u16,
                        IntOrString::String(s) => panic!("sidecar {} probes a named port {s}", c.name),
                    })
                    .unwrap_or_else(|| panic!("sidecar {} has no TCP startup probe", c.name));
                assert!(
                    wait_until(Duration::from_secs(30), || listens(sandbox_pid, port)).is_some(),
                    "sidecar {} of {pod} does not listen on 127.0.0.1:{port}",
                    c.name
                );
            } else {
                let out = out.expect("init container output");
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "init container {} of {pod}: {}",
                    c.name,
                    stderr(&out)
                );
            }
        }
        let member = &w.spec.containers[0];
        assert_eq!(w.spec.containers.len(), 1, "one container per member pod");
        if w.job {
            return self.container(w, member, &user, fs_group, &volumes, false);
        }
        self.container(w, member, &user, fs_group, &volumes, true);
        let probe = member
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("readiness probe");
        let port = container_port(member, &probe.port);
        let url = format!("http://{ip}:{port}{}", probe.path.as_deref().unwrap_or("/"));
        let ready = wait_until(Duration::from_secs(60), || {
            ureq::get(&url).timeout(Duration::from_secs(2)).call().is_ok()
        });
        if ready.is_none() {
            let logs = self
                .engine
                .docker()
                .args(["logs", &format!("{pod}-{}", member.name)])
                .output()
                .expect("docker logs");
            panic!(
                "{pod}'s readiness probe {url} never answered:\n{}{}",
                stdout(&logs),
                stderr(&logs)
            );
        }
        None
    }

    /// Runs container `c` of `w`'s pod in the pod's network namespace: detached (`None`), or to
    /// its end (its output).
    fn container(
        &mut self,
        w: &Workload,
        c: &Container,
        user: &str,
        fs_group: Option<i64>,
        volumes: &BTreeMap<String, PathBuf>,
        detach: bool,
    ) -> Option<Output> {
        let name = format!("{}-{}", w.name, c.name);
        let mut args: Vec<String> = vec!["run".into()];
        if detach {
            args.push("-d".into());
        }
        args.extend([
            "--name".into(),
            name.clone(),
            "--network".into(),
            format!("container:{}-pause", w.name),
        ]);
        for (k, v) in &w.labels {
            args.extend(["--label".into(), format!("{k}={v}")]);
        }
        args.extend(["--user".into(), user.to_string()]);
        if let Some(g) = fs_group {
            args.extend(["--group-add".into(), g.to_string()]);
        }
        let csc = c.security_context.clone().unwrap_or_default();
        if csc.read_only_root_filesystem == Some(true) {
            args.push("--read-only".into());
        }
        if csc.allow_privilege_escalation == Some(false) {
            args.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        for cap in csc
            .capabilities
            .as_ref()
            .and_then(|c| c.drop.clone())
            .unwrap_or_default()
        {
            args.extend(["--cap-drop".into(), cap]);
        }
        if csc.privileged == Some(true) || csc.capabilities.as_ref().is_some_and(|c| c.add.is_some()) {
            panic!("{name} asks for privileges this stand-in does not grant");
        }
        if let Some(wd) = &c.working_dir {
            args.extend(["--workdir".into(), wd.clone()]);
        }
        // Values reach docker through its environment (`-e NAME`), never its argv.
        let mut env: Vec<(String, String)> = Vec::new();
        for e in c.env.iter().flatten() {
            let value = match (&e.value, &e.value_from) {
                (Some(v), None) => v.clone(),
                (None, Some(from)) => {
                    let r = from
                        .secret_key_ref
                        .as_ref()
                        .unwrap_or_else(|| panic!("{name}: {} is set from something other than a Secret", e.name));
                    let bytes = self
                        .secrets
                        .get(&r.name)
                        .and_then(|s| s.get(&r.key))
                        .unwrap_or_else(|| {
                            panic!(
                                "{name}: Secret {} has no key {}: the pod would not start",
                                r.name, r.key
                            )
                        });
                    String::from_utf8(bytes.clone()).expect("a key variable's value is text")
                }
                (None, None) => String::new(),
                (Some(_), Some(_)) => panic!("{name}: {} has a value and a source", e.name),
            };
            args.extend(["--env".into(), e.name.clone()]);
            env.push((e.name.clone(), value));
        }
        for m in c.volume_mounts.iter().flatten() {
            let src = volumes
                .get(&m.name)
                .unwrap_or_else(|| panic!("{name} mounts {}, which its pod does not have", m.name));
            let mut spec = format!("type=bind,src={},dst={}", src.display(), m.mount_path);
            if m.read_only == Some(true) {
                spec.push_str(",readonly");
            }
            assert!(m.sub_path.is_none(), "{name}: subPath mounts are not carried here");
            args.extend(["--mount".into(), spec]);
        }
        let command = c.command.clone().unwrap_or_default();
        if let Some(first) = command.first() {
            args.extend(["--entrypoint".into(), first.clone()]);
        }
        args.push(c.image.clone().expect("image"));
        args.extend(command.iter().skip(1).cloned());
        args.extend(c.args.clone().unwrap_or_default());
        if detach {
            let id = self.docker_ok(&args, &env);
            self.pid_of(&id);
            None
        } else {
            Some(self.docker(&args, &env).output().expect("docker run"))
        }
    }

    /// Writes `w`'s Secret and ConfigMap volumes as files (items, modes, the pod's fsGroup) and
    /// makes its emptyDirs; returns each volume's host directory by name.
    fn volumes(&self, w: &Workload, fs_group: Option<i64>) -> BTreeMap<String, PathBuf> {
        let gid = fs_group.map(|g| nix::unistd::Gid::from_raw(g as u32));
        let mut dirs = BTreeMap::new();
        for v in w.spec.volumes.iter().flatten() {
            let dir = self.root.join(&w.name).join(&v.name);
            std::fs::create_dir_all(&dir).expect("volume dir");
            let files: Option<(BTreeMap<String, Vec<u8>>, _, _)> = if let Some(s) = &v.secret {
                let name = s.secret_name.clone().expect("secretName");
                let data = self
                    .secrets
                    .get(&name)
                    .unwrap_or_else(|| panic!("no Secret {name}"))
                    .clone();
                Some((data, s.items.clone(), s.default_mode))
            } else if let Some(c) = &v.config_map {
                let data = self
                    .config_maps
                    .get(&c.name)
                    .unwrap_or_else(|| panic!("no ConfigMap {}", c.name));
                let data = data.iter().map(|(k, v)| (k.clone(), v.clone().into_bytes())).collect();
                Some((data, c.items.clone(), c.default_mode))
            } else if v.empty_dir.is_some() {
                None
            } else {
                panic!(
                    "{}: volume {} is of a kind this stand-in does not carry",
                    w.name, v.name
                );
            };
            match files {
                Some((data, items, default_mode)) => {
                    let items: Vec<(String, String, Option<i32>)> = match items {
                        Some(items) => items.into_iter().map(|i| (i.key, i.path, i.mode)).collect(),
                        None => data.keys().map(|k| (k.clone(), k.clone(), None)).collect(),
                    };
                    for (key, path, mode) in items {
                        let bytes = data
                            .get(&key)
                            .unwrap_or_else(|| panic!("{}: volume {} has no key {key}", w.name, v.name));
                        let file = dir.join(&path);
                        std::fs::write(&file, bytes).expect("write a volume item");
                        let mode = mode.or(default_mode).unwrap_or(0o644) as u32;
                        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
                        nix::unistd::chown(&file, None, gid).expect("chown");
                    }
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
                }
                None => {
                    // An emptyDir: owned by the pod's fsGroup, setgid, as the kubelet makes it.
                    nix::unistd::chown(&dir, None, gid).expect("chown");
                    let mode = if gid.is_some() { 0o2770 } else { 0o777 };
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
                }
            }
            dirs.insert(v.name.clone(), dir);
        }
        dirs
    }

    fn docker(&self, args: &[String], env: &[(String, String)]) -> Command {
        let mut c = self.engine.docker();
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("DOCKER_HOST", self.engine.host())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn docker_ok(&self, args: &[String], env: &[(String, String)]) -> String {
        let o = self.docker(args, env).output().expect("docker");
        assert!(o.status.success(), "docker {}: {}", args.join(" "), stderr(&o));
        stdout(&o).trim().to_string()
    }

    fn pid_of(&mut self, id: &str) -> u32 {
        let pid: u32 = self
            .engine
            .ok(&["inspect", "--format", "{{.State.Pid}}", id])
            .parse()
            .expect("pid");
        assert!(pid > 0, "container {id} is not running");
        self.pids.push(pid);
        pid
    }
}

/// The number a container port (a number or a `ports[].name`) stands for.
fn container_port(c: &Container, port: &IntOrString) -> i32 {
    match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{} has no port named {name}", c.name))
                .container_port
        }
    }
}

/// Whether the network namespace of process `pid` has a TCP socket listening on 127.0.0.1:`port`.
fn listens(pid: u32, port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .map(|t| {
            t.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1] == want && f[3] == "0A"
            })
        })
        .unwrap_or(false)
}

/// A /24 of 10.213.0.0/16 and a bridge name of this checkout's own, so two checkouts' engines on
/// one machine do not claim the same addresses.
fn subnet() -> (String, String) {
    let n = target_dir()
        .to_string_lossy()
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    let octet = 16 + n % 224;
    (format!("10.213.{octet}"), format!("murit{octet}"))
}

#[test]
fn the_formation_image_runs_the_rendered_demo_formation_to_its_answer() {
    if needs::skip_for_want_of("root", needs::not_root()) {
        return;
    }
    engine::provision();
    let sb = Sandbox::new();
    let dir = demo_formation(&sb);
    let objs = full(&sb, &dir, &["--task", mur::scaffold::demo::DEFAULT_TASK]);
    let capsules = sb.path("capsules");
    for m in ["planner", "analyst", "writer"] {
        let zip = format!("demo-{m}-0.1.0.mur.zip");
        std::fs::copy(sb.dir.path().join(format!("src/demo/{m}/{zip}")), capsules.join(&zip)).expect("copy an archive");
    }
    let mut engine = Engine::start();
    let (prefix, bridge) = subnet();
    let network = "mur-formation";
    engine.network(network, &format!("{prefix}.0/24"), &bridge);
    // The image, as docs/kubernetes.md tells users to build it without a registry.
    let built = Command::new("sh")
        .arg(support::repo_root().join("deploy/formation-image.sh"))
        .arg("--mur")
        .arg(support::mur_bin())
        .arg(IMAGE)
        .arg(&capsules)
        .env("DOCKER", DOCKER)
        .env("DOCKER_HOST", engine.host())
        .output()
        .expect("run deploy/formation-image.sh");
    assert!(built.status.success(), "{}{}", stdout(&built), stderr(&built));
    assert_eq!(stdout(&built).trim(), IMAGE);

    let pods = workloads(&objs);
    assert_eq!(pods.len(), 3, "a pod per member");
    let mut cluster = Cluster::new(&engine, &objs, &pods, sb.path("pods"), &prefix, network);
    // The peers (Deployments), then the entry (the Job), which waits for its callees itself.
    for w in pods.iter().filter(|w| !w.job) {
        assert!(cluster.start(w).is_none());
    }
    let job = pods.iter().find(|w| w.job).expect("the entry's Job");
    let out = cluster.start(job).expect("the entry's output");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    let (readiness, answer) = text.split_once('\n').expect("readiness line");
    let r: serde_json::Value = serde_json::from_str(readiness).expect("readiness json");
    assert_eq!(r["formation_id"], FRM);
    let end: serde_json::Value = serde_json::from_str(answer.trim_end()).expect("task end json");
    assert_eq!(end["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(end["answer"].as_str(), Some(crate::demo::DEFAULT_ANSWER.trim_end()));

    // Nothing left running: every container, the network, the daemon and its containerd.
    let pids = std::mem::take(&mut cluster.pids);
    assert!(
        pids.len() >= 3 + 3,
        "a pause and a member per peer pod, the entry's pause and sidecars"
    );
    drop(cluster);
    let root = engine.dir().to_path_buf();
    engine.shut_down();
    let left = engine::processes_under(&root);
    assert!(left.is_empty(), "the engine left processes running: {left:?}");
    let running: Vec<u32> = pids.into_iter().filter(|p| engine::alive(*p)).collect();
    assert!(running.is_empty(), "containers' processes still run: {running:?}");
    assert!(
        !Path::new("/sys/class/net").join(&bridge).exists(),
        "the bridge {bridge} is left"
    );
}
