//! What `mur doctor` checks beyond admission (docs/reference/cli.md#mur-doctor): the endpoints a
//! member will dial (its model server, MCP servers, remote agent), each with the manifest line
//! that names it, and a kind key written wrong, which leaves a capsule with nothing to run.

use crate::diag::Diagnostic;
use crate::manifest::{Kind, Manifest, ToolSource};

/// One endpoint a member's session dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dial {
    /// The manifest key that names it: `inference.endpoint`, `tools.<name>.mcp`, `remote.url`.
    pub key: String,
    pub url: String,
    /// Its line in murmur.yaml (from 1), when the text is at hand and names it.
    pub line: Option<usize>,
}

/// Every endpoint a session of `m` dials, in manifest order (model, tools, remote); `text` is
/// its murmur.yaml, for the lines.
pub fn dials(m: &Manifest, text: Option<&str>) -> Vec<Dial> {
    let mut out = Vec::new();
    let mut add = |key: String, field: &str, url: &str| {
        let line = text.and_then(|t| line_of(t, field, url));
        out.push(Dial {
            key,
            url: url.to_string(),
            line,
        });
    };
    if m.kind == Kind::Model
        && let Some(url) = m.inference.as_ref().and_then(|i| i.endpoint.as_deref())
    {
        add("inference.endpoint".into(), "endpoint", url);
    }
    for t in &m.tools {
        if let ToolSource::Mcp { url, .. } = &t.source {
            add(format!("tools.{}.mcp", t.name), "mcp", url);
        }
    }
    if m.kind == Kind::Remote
        && let Some(r) = &m.remote
    {
        add("remote.url".into(), "url", &r.url);
    }
    out
}

/// The line (from 1) where `field: value` is written (as a list item too), or else the first
/// line holding `value`.
pub fn line_of(text: &str, field: &str, value: &str) -> Option<usize> {
    let lines = || text.lines().enumerate();
    lines()
        .find(|(_, l)| {
            let t = l.trim_start().trim_start_matches("- ").trim_start();
            t.strip_prefix(field)
                .and_then(|r| r.trim_start().strip_prefix(':'))
                .is_some_and(|r| r.contains(value))
        })
        .or_else(|| lines().find(|(_, l)| l.contains(value)))
        .map(|(i, _)| i + 1)
}

/// The keys that give a capsule something to run.
const KIND_KEYS: [&str; 3] = ["inference", "component", "remote"];

/// A kind key written wrong: for a capsule left manifest-only, the unknown key that was meant
/// as `inference`, `component` or `remote` (from its W-SEC-019 warning), with its line in
/// `text`. `(written, meant, line)`.
pub fn misspelt_kind(
    m: &Manifest,
    warnings: &[Diagnostic],
    text: Option<&str>,
) -> Option<(String, &'static str, Option<usize>)> {
    if m.kind != Kind::ManifestOnly {
        return None;
    }
    warnings.iter().find_map(|w| {
        let rest = w.message.strip_prefix("murmur.yaml: ")?;
        let (written, after) = rest.split_once(": unknown key")?;
        let meant = KIND_KEYS
            .into_iter()
            .find(|k| after.contains(&format!("(did you mean `{k}`?)")))?;
        let line = text.and_then(|t| {
            t.lines()
                .position(|l| l.starts_with(written) && l[written.len()..].trim_start().starts_with(':'))
                .map(|i| i + 1)
        });
        Some((written.to_string(), meant, line))
    })
}

/// Where a line is, for a message: ` (murmur.yaml line 5)`, or nothing.
pub fn at_line(line: Option<usize>) -> String {
    line.map(|n| format!(" (murmur.yaml line {n})")).unwrap_or_default()
}

/// The host and port an `http(s)://` URL is dialled at (80 or 443 when it names none), and
/// whether it is TLS; `None` for another scheme or a port that is not a number from 1 to 65535.
pub fn target(url: &str) -> Option<(String, u16, bool)> {
    let e = crate::manifest::endpoint::split(url)?;
    let default = if e.tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = e.authority.strip_prefix('[') {
        let (inner, after) = v6.split_once(']')?;
        (inner, after.strip_prefix(':'))
    } else {
        match e.authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (e.authority, None),
        }
    };
    let port = match port {
        None => default,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0)?,
    };
    (!host.is_empty()).then(|| (host.to_string(), port, e.tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(text: &str) -> crate::manifest::Parsed {
        crate::manifest::parse(text.as_bytes()).expect("parses")
    }

    #[test]
    fn every_endpoint_a_session_dials_with_its_line() {
        let text = "name: a\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: http://127.0.0.1:9\n  model: m\n\
                    tools:\n  - {name: web, mcp: 'http://127.0.0.1:7/mcp', allow: [x]}\n";
        let p = manifest(text);
        let got = dials(&p.manifest, Some(text));
        assert_eq!(
            got,
            vec![
                Dial {
                    key: "inference.endpoint".into(),
                    url: "http://127.0.0.1:9".into(),
                    line: Some(5)
                },
                Dial {
                    key: "tools.web.mcp".into(),
                    url: "http://127.0.0.1:7/mcp".into(),
                    line: Some(8)
                },
            ]
        );
        let remote = "name: r\nversion: 0.1.0\nremote:\n  url: https://agent.example/a2a\n";
        assert_eq!(
            dials(&manifest(remote).manifest, Some(remote)),
            vec![Dial {
                key: "remote.url".into(),
                url: "https://agent.example/a2a".into(),
                line: Some(4)
            }]
        );
        assert!(dials(&manifest("name: c\nversion: 0.1.0\n").manifest, None).is_empty());
    }

    #[test]
    fn lines_are_found_by_field_then_by_value() {
        let cases = [
            ("a: 1\nendpoint: x\n", "endpoint", "x", Some(2)),
            ("  - url: http://h\n", "url", "http://h", Some(1)),
            ("note: http://h\nurl: http://h\n", "url", "http://h", Some(2)),
            ("note: http://h\n", "url", "http://h", Some(1)),
            ("url: other\n", "url", "http://h", None),
        ];
        for (text, field, value, want) in cases {
            assert_eq!(line_of(text, field, value), want, "{text:?}");
        }
        assert_eq!(at_line(Some(3)), " (murmur.yaml line 3)");
        assert_eq!(at_line(None), "");
    }

    #[test]
    fn a_misspelt_kind_key_is_named_with_what_was_meant() {
        let text = "name: a\nversion: 0.1.0\ninfrence:\n  provider: openai\n";
        let p = manifest(text);
        assert_eq!(
            misspelt_kind(&p.manifest, &p.warnings, Some(text)),
            Some(("infrence".to_string(), "inference", Some(3)))
        );
        let text = "name: a\nversion: 0.1.0\ncomponnet: x.wasm\n";
        let p = manifest(text);
        assert_eq!(
            misspelt_kind(&p.manifest, &p.warnings, None),
            Some(("componnet".to_string(), "component", None))
        );
        // Another unknown key, or a capsule that runs, is not a kind written wrong.
        for text in [
            "name: a\nversion: 0.1.0\ncolour: red\n",
            "name: a\nversion: 0.1.0\ncomponent: x.wasm\ninfrence: {}\n",
        ] {
            let p = manifest(text);
            assert_eq!(misspelt_kind(&p.manifest, &p.warnings, Some(text)), None, "{text}");
        }
    }

    #[test]
    fn targets() {
        let cases = [
            ("http://127.0.0.1:8080/v1", Some(("127.0.0.1", 8080, false))),
            ("https://api.example.com", Some(("api.example.com", 443, true))),
            ("http://localhost", Some(("localhost", 80, false))),
            ("http://[::1]:9/x", Some(("::1", 9, false))),
            ("https://u@h.example:8443/", Some(("h.example", 8443, true))),
            ("http://h:0", None),
            ("http://h:99999", None),
            ("ftp://h", None),
        ];
        for (url, want) in cases {
            assert_eq!(target(url), want.map(|(h, p, t)| (h.to_string(), p, t)), "{url}");
        }
    }
}
