//! `mur doctor`'s `env:` lines [ours]: per model member, the variable it reads from the
//! launcher's environment and the host its requests (and so that variable's value) go to.
//!
//! A member starts with only the variables its own manifest declares (docs/guide.md, "What a
//! member's environment holds"), so these lines are everything a capsule can take from the
//! user's environment and where it can send it; the user reads them before the first launch.

use crate::diag::shown;
use crate::manifest::{Manifest, ToolSource};
use crate::roster::Admitted;

/// The lines for an admitted roster's members, in roster order.
pub fn roster_lines(a: &Admitted) -> Vec<String> {
    lines(a.members.iter().map(|m| (m.name.as_str(), &m.manifest)))
}

/// `  env: <member> reads <VAR>, sent to <host>` per model member; members that run no model
/// read nothing and get no line.
pub fn lines<'a>(members: impl IntoIterator<Item = (&'a str, &'a Manifest)>) -> Vec<String> {
    members
        .into_iter()
        .flat_map(|(name, m)| {
            // A remote member's credential goes to the remote agent's host alone.
            if let Some(r) = &m.remote {
                let host =
                    crate::manifest::endpoint::split(&r.url).map_or_else(|| shown(&r.url), |e| shown(e.authority));
                return vec![match &r.api_key_var {
                    Some(var) => format!("  env: {name} reads {var}, sent to {host} (remote agent)"),
                    None => format!("  env: {name} reads no variable; its tasks go to {host} (remote agent)"),
                }];
            }
            let Some(inf) = m.inference.as_ref() else {
                return Vec::new();
            };
            let to = inf.receiver().map_or_else(|| "no endpoint".to_string(), shown);
            let mut out = vec![match &inf.api_key_var {
                Some(var) => format!("  env: {name} reads {var}, sent to {to}"),
                None => format!("  env: {name} reads no variable; its requests go to {to}"),
            }];
            // Each MCP server's key goes to that server alone.
            for t in &m.tools {
                // Written out for every kind, so a new kind is a decision here too.
                let (url, var) = match &t.source {
                    ToolSource::Mcp {
                        url,
                        api_key_var: Some(var),
                        ..
                    } => (url, var),
                    ToolSource::Mcp { api_key_var: None, .. } | ToolSource::Wasm { .. } => continue,
                };
                let host = crate::manifest::endpoint::split(url).map_or_else(|| shown(url), |e| shown(e.authority));
                out.push(format!("  env: {name} reads {var}, sent to {host}"));
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Inference, Provider};

    fn model(f: impl FnOnce(&mut Inference)) -> Manifest {
        let mut m = Manifest::minimal("m", "1.0.0");
        let mut inf = Inference::default();
        f(&mut inf);
        m.inference = Some(inf);
        m
    }

    #[test]
    fn a_remote_members_key_is_named_with_the_remote_host() {
        let mut m = Manifest::minimal("far", "1.0.0");
        m.remote = Some(crate::manifest::Remote {
            url: "https://agent.example:8443/.well-known/agent-card.json".into(),
            api_key_var: Some("FAR_KEY".into()),
            timeout_secs: 30,
            card_key: None,
        });
        let mut open = m.clone();
        if let Some(r) = open.remote.as_mut() {
            r.api_key_var = None;
        }
        assert_eq!(
            lines([("far", &m), ("open", &open)]),
            [
                "  env: far reads FAR_KEY, sent to agent.example:8443 (remote agent)",
                "  env: open reads no variable; its tasks go to agent.example:8443 (remote agent)",
            ]
        );
    }

    #[test]
    fn each_mcp_key_is_named_with_the_server_it_goes_to() {
        use crate::manifest::{ToolDecl, ToolSource};
        let mut m = model(|i| {
            i.provider = Some(Provider::OpenAi);
            i.api_key_var = Some("OPENAI_API_KEY".into());
        });
        let mcp = |name: &str, url: &str, var: Option<&str>| ToolDecl {
            name: name.into(),
            source: ToolSource::Mcp {
                url: url.into(),
                api_key_var: var.map(str::to_string),
                allow: vec!["a".into()],
            },
        };
        m.tools = vec![
            mcp("calc", "https://calc.example:8443/mcp", Some("CALC_KEY")),
            mcp("open", "http://127.0.0.1:9000/mcp", None),
        ];
        assert_eq!(
            lines([("lead", &m)]),
            [
                "  env: lead reads OPENAI_API_KEY, sent to api.openai.com",
                "  env: lead reads CALC_KEY, sent to calc.example:8443",
            ]
        );
        assert_eq!(
            m.key_vars(),
            ["OPENAI_API_KEY", "CALC_KEY"],
            "what the launcher passes the member"
        );
    }

    #[test]
    fn one_line_per_model_member() {
        let lead = model(|i| {
            i.provider = Some(Provider::OpenAi);
            i.api_key_var = Some("OPENAI_API_KEY".into());
        });
        let local = model(|i| {
            i.provider = Some(Provider::Anthropic);
            i.endpoint = Some("http://127.0.0.1:8080/v1".into());
        });
        let odd = model(|i| {
            i.api_key_var = Some("K".into());
            i.endpoint = Some("https://evil.example\u{1b}[2J/".into());
        });
        let nothing = model(|_| {});
        let component = Manifest::minimal("c", "1.0.0");
        let got = lines([
            ("lead", &lead),
            ("coder", &component),
            ("local", &local),
            ("odd", &odd),
            ("bare", &nothing),
        ]);
        assert_eq!(
            got,
            [
                "  env: lead reads OPENAI_API_KEY, sent to api.openai.com",
                "  env: local reads no variable; its requests go to 127.0.0.1:8080",
                "  env: odd reads K, sent to evil.example\\u{1b}[2J",
                "  env: bare reads no variable; its requests go to no endpoint",
            ]
        );
    }
}
