//! `tools:` of a model capsule (docs/reference/manifest.md#keys): what its model may call
//! besides the runtime's own tools. Every entry is a WebAssembly tool packed in the archive or an
//! MCP server reached over Streamable HTTP, never both; an MCP entry lists the server's tools the
//! model is offered (`allow`, required: there is no "all of them").

use crate::diag::{self, Diagnostic, shown};
use crate::manifest::{Language, ToolDecl, ToolSource, mcp_tool_name_ok, tool_name_ok};
use crate::yaml::Node;

use super::{R, Walker, api_key_var, bad, block, join, string, string_list, word};

/// The keys of one entry, whichever its kind; a key of the other kind is a conflict.
const ENTRY: &[&str] = &["name", "component", "build", "capabilities", "mcp", "api_key", "allow"];

/// The most entries a capsule declares: every tool's definition rides in every model request.
pub const MAX_TOOLS: usize = 32;
/// The most tools one MCP entry allows.
pub const MAX_ALLOWED: usize = 64;

pub(super) fn tools(w: &mut Walker, root: &Node) -> R<Vec<ToolDecl>> {
    let Some(n) = root.get("tools") else {
        return Ok(Vec::new());
    };
    let Some(items) = n.as_seq() else {
        return Err(bad("tools", format!("must be a list of tools, found {}", n.shape())));
    };
    if items.len() > MAX_TOOLS {
        return Err(bad(
            "tools",
            format!("lists {} tools; a capsule declares at most {MAX_TOOLS}", items.len()),
        ));
    }
    let mut out: Vec<ToolDecl> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        if item.as_map().is_none() {
            return Err(bad(&at, format!("must be a mapping, found {}", item.shape())));
        }
        w.unknown(item, &at, ENTRY, &[]);
        let tool = entry(w, item, &at)?;
        if out.iter().any(|t| t.name == tool.name) {
            return Err(bad(
                &join(&at, "name"),
                format!("'{}' names an earlier tool; tool names are unique", tool.name),
            ));
        }
        out.push(tool);
    }
    Ok(out)
}

fn entry(w: &mut Walker, item: &Node, at: &str) -> R<ToolDecl> {
    let name = match string(item, at, "name")? {
        Some(n) => n,
        None => return Err(bad(&join(at, "name"), "is required in a tool")),
    };
    if !tool_name_ok(&name) {
        return Err(bad(
            &join(at, "name"),
            format!(
                "'{}' is not a tool name: 1–32 characters of [a-z0-9-], starting with a letter, without '--'",
                shown(&name)
            ),
        ));
    }
    if crate::manifest::RUNTIME_TOOL_NAMES.contains(&name.as_str()) {
        return Err(bad(
            &join(at, "name"),
            format!("'{name}' is the name of a tool the runtime itself gives the model; choose another"),
        ));
    }
    let component = string(item, at, "component")?;
    let mcp = string(item, at, "mcp")?;
    let source = match (component, mcp) {
        (Some(_), Some(_)) => {
            return Err(Diagnostic::new(
                diag::E_MAN_003,
                format!(
                    "murmur.yaml: {at}.component: cannot be declared together with {at}.mcp: a tool is a WebAssembly component packed with the capsule or an MCP server, not both"
                ),
            )
            .with_hint("split it into two tools with different names, or remove one of the two keys"));
        }
        (None, None) => {
            return Err(bad(at, "needs `component` (a WebAssembly tool) or `mcp` (an MCP server URL)")
                .with_hint("e.g. `{name: words, component: tools/words/tool.wasm}` or `{name: calc, mcp: https://calc.example/mcp, allow: [add]}`"));
        }
        (Some(path), None) => wasm(w, item, at, path)?,
        (None, Some(url)) => mcp_server(item, at, &name, url)?,
    };
    Ok(ToolDecl { name, source })
}

/// One of the other kind's keys on an entry: E-MAN-003, naming both.
fn not_for(at: &str, key: &str, kind: &str, other: &str) -> Diagnostic {
    Diagnostic::new(
        diag::E_MAN_003,
        format!("murmur.yaml: {at}.{key}: cannot be declared together with {at}.{kind}: {key} is for {other}"),
    )
    .with_hint(format!("remove {key} from this tool"))
}

fn wasm(w: &mut Walker, item: &Node, at: &str, path: String) -> R<ToolSource> {
    for key in ["api_key", "allow"] {
        if item.get(key).is_some() {
            return Err(not_for(at, key, "component", "an MCP tool (`mcp:`)"));
        }
    }
    let p = join(at, "component");
    if path.trim().is_empty() {
        return Err(bad(&p, "must not be blank"));
    }
    // It names a file of the capsule's source directory, packed at the same path.
    if path.starts_with('/') || path.contains('\\') || path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(bad(
            &p,
            format!(
                "'{}' must be a relative path inside the capsule's directory, such as tools/words/tool.wasm",
                shown(&path)
            ),
        ));
    }
    let mut network_allow = Vec::new();
    if let Some(caps) = block(item, at, "capabilities")? {
        let cp = join(at, "capabilities");
        w.unknown(caps, &cp, &["network"], &[]);
        if let Some(net) = block(caps, &cp, "network")? {
            let np = join(&cp, "network");
            w.unknown(net, &np, &["allow"], &[]);
            network_allow = string_list(net, &np, "allow")?;
            for (i, rule) in network_allow.iter().enumerate() {
                crate::address::allow::AllowRule::parse(rule).map_err(|why| bad(&format!("{np}.allow[{i}]"), why))?;
            }
        }
    }
    let build = match block(item, at, "build")? {
        None => None,
        Some(b) => {
            let bp = join(at, "build");
            w.unknown(b, &bp, &["language"], &[]);
            match word(b, &bp, "language", Language::WORDS, Language::from_word)? {
                Some(l) => Some(l),
                None => return Err(bad(&join(&bp, "language"), "is required whenever build is present")),
            }
        }
    };
    Ok(ToolSource::Wasm {
        component: path,
        build,
        network_allow,
    })
}

fn mcp_server(item: &Node, at: &str, name: &str, url: String) -> R<ToolSource> {
    for key in ["capabilities", "build"] {
        if item.get(key).is_some() {
            return Err(not_for(at, key, "mcp", "a WebAssembly tool (`component:`)"));
        }
    }
    let p = join(at, "mcp");
    if crate::manifest::endpoint::split(&url).is_none() {
        return Err(bad(
            &p,
            format!("must be an http:// or https:// URL, found '{}'", shown(&url)),
        ));
    }
    if !url.starts_with("https://") && !crate::manifest::endpoint::plain_http_allowed(&url) {
        return Err(bad(
            &p,
            format!(
                "'{}' would reach an MCP server over plain http on another machine; plain http:// is allowed only to loopback (127.0.0.0/8, [::1], localhost)",
                shown(&url)
            ),
        )
        .with_hint("use https:// for a server on another machine"));
    }
    let api_key_var = api_key_var(item, &join(at, "api_key"))?;
    let ap = join(at, "allow");
    if item.get("allow").is_none() {
        return Err(bad(
            &ap,
            "is required for an MCP tool: it lists the server's tools the model may call",
        )
        .with_hint("e.g. `allow: [search, fetch]`; there is no way to allow every tool a server has"));
    }
    let allow = string_list(item, at, "allow")?;
    if allow.is_empty() {
        return Err(bad(&ap, "must name at least one of the server's tools"));
    }
    if allow.len() > MAX_ALLOWED {
        return Err(bad(&ap, format!("names {} tools; at most {MAX_ALLOWED}", allow.len())));
    }
    for (i, tool) in allow.iter().enumerate() {
        if !mcp_tool_name_ok(name, tool) {
            return Err(bad(
                &format!("{ap}[{i}]"),
                format!(
                    "'{}' is not a tool name the providers take: [A-Za-z0-9_-], and '{name}__<tool>' at most 64 characters",
                    shown(tool)
                ),
            ));
        }
        if allow[..i].contains(tool) {
            return Err(bad(&format!("{ap}[{i}]"), format!("'{tool}' is listed twice")));
        }
    }
    Ok(ToolSource::Mcp {
        url,
        api_key_var,
        allow,
    })
}
