//! Reachability as NetworkPolicies: the cluster refuses what the tokens would refuse.
//!
//! One policy selects every pod of the formation and admits no ingress (default deny). Each
//! callee then gets one policy admitting, on its door's port, exactly the pods of its admitted
//! callers. Policies are additive, so a pod's allowed ingress is the union of those selecting
//! it: for a callee, its callers; for anything else, nobody. The entry, which no member may
//! call, is reachable only from pods labelled as the formation's operator, and only when it
//! serves tasks (without `--task`). Egress follows what each member actually dials
//! ([`member_egress`]): its callees' doors, DNS, and each endpoint its manifest names (a model's
//! provider, an MCP server, a remote agent; a loopback one at its `--endpoint` place) and each
//! `network.allow` destination, nothing else. A policy cannot name a host, so a destination
//! named by a host name is admitted at its port on any address; the member's runtime holds it to
//! the one origin.
//!
//! [`edges_of`] reads the member edges back out of policies, so tests can hold the output
//! against the admitted edge set.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    DOOR_PORT, Destination, Formation, LABEL_FORMATION, LABEL_MEMBER, LABEL_ROLE, Options, ROLE_OPERATOR, destinations,
    labels, pod_selector,
};

fn selector(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    }
}

fn policy(
    f: &Formation,
    o: &Options,
    owner: &OwnerReference,
    name: String,
    member: Option<usize>,
    spec: NetworkPolicySpec,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(o.namespace.clone()),
            labels: Some(labels(f, member)),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        spec: Some(spec),
    }
}

fn door_rule(from: Vec<NetworkPolicyPeer>) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from: Some(from),
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(i32::from(DOOR_PORT))),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}

fn pods(labels: BTreeMap<String, String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(selector(labels)),
        ..Default::default()
    }
}

/// The labels of the pods that may reach the entry's door when it serves tasks.
pub fn operator_labels(f: &Formation) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(LABEL_FORMATION.to_string(), f.id.clone());
    l.insert(LABEL_ROLE.to_string(), ROLE_OPERATOR.to_string());
    l
}

/// The formation's NetworkPolicies: default deny, then one per callee in roster order, then the
/// operator's way to the entry.
pub fn network_policies(f: &Formation, o: &Options, owner: &OwnerReference) -> Vec<NetworkPolicy> {
    let mut all_pods = BTreeMap::new();
    all_pods.insert(LABEL_FORMATION.to_string(), f.id.clone());
    let mut out = vec![policy(
        f,
        o,
        owner,
        format!("{}-deny", f.object_name()),
        None,
        NetworkPolicySpec {
            pod_selector: Some(selector(all_pods)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(Vec::new()),
            ..Default::default()
        },
    )];
    for callee in 0..f.members.len() {
        let callers = f.callers(callee);
        if callers.is_empty() {
            continue;
        }
        out.push(policy(
            f,
            o,
            owner,
            format!("{}-callers", f.member_object(callee)),
            Some(callee),
            NetworkPolicySpec {
                pod_selector: Some(selector(pod_selector(f, callee))),
                policy_types: Some(vec!["Ingress".into()]),
                ingress: Some(vec![door_rule(
                    callers.iter().map(|&c| pods(pod_selector(f, c))).collect(),
                )]),
                ..Default::default()
            },
        ));
    }
    for i in 0..f.members.len() {
        out.push(member_egress(f, o, owner, i));
    }
    let entry = f.entry();
    if o.task.is_none() {
        out.push(policy(
            f,
            o,
            owner,
            format!("{}-operator", f.member_object(entry)),
            Some(entry),
            NetworkPolicySpec {
                pod_selector: Some(selector(pod_selector(f, entry))),
                policy_types: Some(vec!["Ingress".into()]),
                ingress: Some(vec![door_rule(vec![pods(operator_labels(f))])]),
                ..Default::default()
            },
        ));
    }
    out
}

fn port(protocol: &str, port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(i32::from(port))),
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

/// Member `i`'s egress: DNS (UDP and TCP 53, anywhere: where the cluster's resolver runs differs
/// by cluster) when it dials anything; each callee's pods on the door's port (its relays dial the
/// callee's Service); and each destination, at its address when it is one and at any address
/// when it is a name (a NetworkPolicy matches addresses, never names), on its port (every TCP
/// port when a `network.allow` rule names none). A member that dials nothing gets no egress.
pub fn member_egress(f: &Formation, o: &Options, owner: &OwnerReference, member: usize) -> NetworkPolicy {
    let callees = f.callees(member);
    let dests = destinations(f, o, member);
    let mut rules = Vec::new();
    if !callees.is_empty() || !dests.is_empty() {
        rules.push(NetworkPolicyEgressRule {
            to: None,
            ports: Some(vec![port("UDP", 53), port("TCP", 53)]),
        });
    }
    if !callees.is_empty() {
        rules.push(NetworkPolicyEgressRule {
            to: Some(callees.iter().map(|&c| pods(pod_selector(f, c))).collect()),
            ports: Some(vec![port("TCP", DOOR_PORT)]),
        });
    }
    rules.extend(dests.iter().map(destination_rule));
    policy(
        f,
        o,
        owner,
        format!("{}-egress", f.member_object(member)),
        Some(member),
        NetworkPolicySpec {
            pod_selector: Some(selector(pod_selector(f, member))),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(rules),
            ..Default::default()
        },
    )
}

fn destination_rule(d: &Destination) -> NetworkPolicyEgressRule {
    let cidrs: Vec<String> = match d.host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => vec![format!("{a}/32")],
        Ok(std::net::IpAddr::V6(a)) => vec![format!("{a}/128")],
        Err(_) => vec!["0.0.0.0/0".into(), "::/0".into()],
    };
    NetworkPolicyEgressRule {
        to: Some(
            cidrs
                .into_iter()
                .map(|cidr| NetworkPolicyPeer {
                    ip_block: Some(IPBlock { cidr, except: None }),
                    ..Default::default()
                })
                .collect(),
        ),
        ports: Some(vec![match d.port {
            Some(p) => port("TCP", p),
            None => NetworkPolicyPort {
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        }]),
    }
}

/// `(caller, callee)` member names that the policies of `formation` let through to a door:
/// every `from` pod selector naming a member, against the member the policy selects. Selectors
/// of other shapes (the operator's, the default deny) add no member edge.
pub fn edges_of(policies: &[NetworkPolicy], formation: &str) -> BTreeSet<(String, String)> {
    let member_of = |sel: &LabelSelector| -> Option<String> {
        let l = sel.match_labels.as_ref()?;
        if l.get(LABEL_FORMATION).map(String::as_str) != Some(formation) || l.len() != 2 {
            return None;
        }
        l.get(LABEL_MEMBER).cloned()
    };
    let mut out = BTreeSet::new();
    for p in policies {
        let Some(spec) = &p.spec else { continue };
        let Some(callee) = spec.pod_selector.as_ref().and_then(member_of) else {
            continue;
        };
        for rule in spec.ingress.iter().flatten() {
            for peer in rule.from.iter().flatten() {
                if let Some(caller) = peer.pod_selector.as_ref().and_then(member_of) {
                    out.insert((caller, callee.clone()));
                }
            }
        }
    }
    out
}
