//! The `murmur.yaml` walker: typed reads with E-MAN-001 messages, W-SEC-019 for unknown keys,
//! then the E-MAN-003 rule conflicts once every key has its type.

use crate::diag::{self, Diagnostic, shown};
use crate::wire::provider::dialect;
use crate::yaml::{self, Node, NodeKind, Resolved};

mod tools;

use super::{
    Acceptance, AfterTask, DEFAULT_DELEGATION_DEADLINE_SECS, DEFAULT_REMOTE_TIMEOUT_SECS, Inference, Kind, Language,
    Lifecycle, MAX_REMOTE_TIMEOUT_SECS, Manifest, Parsed, Provider, REASONING_EFFORTS, Remote, Retain, Skill,
    Transport,
};

/// Top-level keys: ours, then those only the reference implementation reads (known, ignored).
const TOP: &[&str] = &[
    "name",
    "version",
    "component",
    "build",
    "exports",
    "network",
    "lifecycle",
    "capabilities",
    "inference",
    "tools",
    "trace",
    "remote",
];
const TOP_IGNORED: &[&str] = &["runtime", "execution", "artifacts"];
const INFERENCE: &[&str] = &[
    "transport",
    "provider",
    "endpoint",
    "model",
    "api_key",
    "max_tokens",
    "max_turns",
    "max_session_tokens",
    "system_prompt",
    "reasoning_effort",
    "driver",
];

/// Longest version accepted: it names a store directory and a file.
const MAX_VERSION_LEN: usize = 128;

type R<T> = Result<T, Diagnostic>;

fn bad(path: &str, problem: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(diag::E_MAN_001, format!("murmur.yaml: {path}: {problem}"))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Whether a version can name a store directory: not blank, no path separators, whitespace or
/// control characters, not `.`/`..`, at most 128 bytes. Returns the reason when it cannot.
pub fn check_version(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err("must not be blank".into());
    }
    if v.len() > MAX_VERSION_LEN {
        return Err(format!("is longer than {MAX_VERSION_LEN} characters"));
    }
    if v == "."
        || v == ".."
        || v.chars()
            .any(|c| c == '/' || c == '\\' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "'{}' cannot name a store directory; a version holds no '/', '\\', spaces or control characters and is not '.' or '..'",
            shown(v)
        ));
    }
    Ok(())
}

struct Walker {
    warnings: Vec<Diagnostic>,
}

impl Walker {
    /// Warns once per key of `map` that is neither in `known` nor in `ignored`, in document order.
    fn unknown(&mut self, map: &Node, prefix: &str, known: &[&str], ignored: &[&str]) {
        for (k, _) in map.as_map().unwrap_or(&[]) {
            if !known.contains(&k.as_str()) && !ignored.contains(&k.as_str()) {
                let guess = crate::suggest::closest(k, known.iter().copied())
                    .map(|g| format!(" (did you mean `{}`?)", join(prefix, g)))
                    .unwrap_or_default();
                self.warnings.push(Diagnostic::new(
                    diag::W_SEC_019,
                    format!(
                        "murmur.yaml: {}: unknown key; it is ignored{guess}",
                        join(prefix, &shown(k))
                    ),
                ));
            }
        }
    }
}

/// `parent.key` as a mapping block; null is absent.
fn block<'a>(parent: &'a Node, prefix: &str, key: &str) -> R<Option<&'a Node>> {
    match parent.get(key) {
        None => Ok(None),
        Some(n) if n.as_map().is_some() => Ok(Some(n)),
        Some(n) => Err(bad(
            &join(prefix, key),
            format!("must be a mapping, found {}", n.shape()),
        )),
    }
}

fn string(parent: &Node, prefix: &str, key: &str) -> R<Option<String>> {
    match parent.get(key) {
        None => Ok(None),
        Some(n) => match n.as_str() {
            Some(s) => Ok(Some(s.to_string())),
            None => Err(bad(
                &join(prefix, key),
                format!("must be a string, found {}", n.shape()),
            )),
        },
    }
}

fn boolean(parent: &Node, prefix: &str, key: &str) -> R<Option<bool>> {
    match parent.get(key) {
        None => Ok(None),
        Some(n) => match n.as_bool() {
            Some(b) => Ok(Some(b)),
            None => Err(bad(
                &join(prefix, key),
                format!("must be true or false, found {}", n.shape()),
            )),
        },
    }
}

fn integer(parent: &Node, prefix: &str, key: &str, min: i128, max: i128) -> R<Option<i128>> {
    let path = join(prefix, key);
    match parent.get(key) {
        None => Ok(None),
        Some(n) => match n.as_int() {
            Some(i) if i < min => Err(bad(&path, format!("must be at least {min}, found {i}"))),
            Some(i) if i > max => Err(bad(&path, format!("must be at most {max}, found {i}"))),
            Some(i) => Ok(Some(i)),
            None => Err(bad(&path, format!("must be an integer, found {}", n.shape()))),
        },
    }
}

/// One of a fixed set of words.
fn word<T>(parent: &Node, prefix: &str, key: &str, words: &[&str], pick: impl Fn(&str) -> Option<T>) -> R<Option<T>> {
    let Some(n) = parent.get(key) else {
        return Ok(None);
    };
    let choices = words.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(", ");
    let found = match n.as_str() {
        Some(s) => match pick(s) {
            Some(v) => return Ok(Some(v)),
            None => format!("'{}'", shown(s)),
        },
        None => n.shape().to_string(),
    };
    Err(bad(
        &join(prefix, key),
        format!("must be one of {choices}, found {found}"),
    ))
}

fn string_list(parent: &Node, prefix: &str, key: &str) -> R<Vec<String>> {
    let path = join(prefix, key);
    let Some(n) = parent.get(key) else {
        return Ok(Vec::new());
    };
    let Some(items) = n.as_seq() else {
        return Err(bad(&path, format!("must be a list of strings, found {}", n.shape())));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_str() {
            Some(s) => Ok(s.to_string()),
            None => Err(bad(
                &format!("{path}[{i}]"),
                format!("must be a string, found {}", item.shape()),
            )),
        })
        .collect()
}

pub(super) fn parse(bytes: &[u8]) -> R<Parsed> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Diagnostic::new(diag::E_MAN_001, format!("murmur.yaml: is not UTF-8 text ({e})")))?;
    let root = yaml::load(text, yaml::Limits::default()).map_err(|e| {
        Diagnostic::new(
            diag::E_MAN_001,
            format!(
                "murmur.yaml: YAML syntax error at line {}, column {}: {}",
                e.line, e.col, e.message
            ),
        )
    })?;
    if root.as_map().is_none() {
        return Err(Diagnostic::new(
            diag::E_MAN_001,
            format!(
                "murmur.yaml: must be a mapping with `name` and `version`, found {}",
                root.shape()
            ),
        ));
    }
    let mut w = Walker { warnings: Vec::new() };
    w.unknown(&root, "", TOP, TOP_IGNORED);

    let name = match string(&root, "", "name")? {
        None => return Err(bad("name", "is required")),
        Some(n) => n,
    };
    crate::names::check_part(&name).map_err(|e| {
        bad(
            "name",
            format!(
                "'{}' {e}; a capsule name is 1–100 characters of [a-z0-9-], not starting or ending in '-'",
                shown(&name)
            ),
        )
    })?;
    let version = version(&root)?;
    let component = match string(&root, "", "component")? {
        Some(p) if p.trim().is_empty() => return Err(bad("component", "must not be blank")),
        other => other,
    };

    let build = build(&mut w, &root)?;
    let (peer_tasks_accept, skills, input_modes) = exports(&mut w, &root)?;
    let authentication = network(&mut w, &root)?;
    let lifecycle = lifecycle(&mut w, &root)?;
    let (network_allow, spawn_allow) = capabilities(&mut w, &root)?;
    let inference = inference(&mut w, &root)?;
    let retain = trace(&mut w, &root)?;
    let tools = tools::tools(&mut w, &root)?;
    let remote = remote(&mut w, &root)?;

    // Conflicts are checked only once every key has its type, so a type error is reported first.
    if inference.is_some() && component.is_some() {
        return Err(Diagnostic::new(
            diag::E_MAN_003,
            "inference: cannot be declared together with component: a capsule either runs a model (inference) or a WebAssembly component (component), not both",
        )
        .with_hint("remove `component` to build a model capsule, or `inference` to build a component capsule"));
    }
    if let Some(inf) = &inference
        && let Some(provider) = inf.provider
        && !dialect(provider).takes_reasoning_effort()
        && let Some(effort) = &inf.reasoning_effort
    {
        let takers: Vec<&str> = Provider::ALL
            .into_iter()
            .filter(|p| dialect(*p).takes_reasoning_effort())
            .map(Provider::as_str)
            .collect();
        return Err(Diagnostic::new(
            diag::E_MAN_003,
            format!(
                "inference.reasoning_effort: cannot be declared together with inference.provider: {}: '{effort}' is a field of OpenAI's Chat Completions API, and {} has no such field",
                provider.as_str(),
                dialect(provider).api_name()
            ),
        )
        .with_hint(format!(
            "remove inference.reasoning_effort, or use inference.provider: {}",
            takers.join(" or ")
        )));
    }
    if remote.is_some() && (inference.is_some() || component.is_some()) {
        let other = if inference.is_some() { "inference" } else { "component" };
        return Err(Diagnostic::new(
            diag::E_MAN_003,
            format!(
                "remote: cannot be declared together with {other}: a remote capsule forwards its tasks to an agent someone else runs, and runs nothing itself"
            ),
        )
        .with_hint(format!("remove `{other}` to keep the remote agent, or `remote` to run the capsule here")));
    }
    if !tools.is_empty() && inference.is_none() {
        return Err(Diagnostic::new(
            diag::E_MAN_003,
            "tools: needs inference: beside it: tools are what a model may call, and this capsule runs no model",
        )
        .with_hint("add an `inference` block to make it a model capsule, or remove `tools`; a component capsule reaches services through capabilities.network.allow"));
    }
    if lifecycle.task_acceptance == Acceptance::Queue && lifecycle.queue_depth == 0 {
        return Err(Diagnostic::new(
            diag::E_MAN_003,
            "lifecycle.queue_depth: must be at least 1 when lifecycle.task_acceptance is queue: a queue of depth 0 holds no waiting task",
        )
        .with_hint("set lifecycle.queue_depth to 1 or more, or use lifecycle.task_acceptance: single"));
    }
    if authentication && !spawn_allow.is_empty() {
        let listed = spawn_allow
            .iter()
            .map(|s| format!("'{}'", shown(s)))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Diagnostic::new(
            diag::E_MAN_003,
            format!(
                "network.authentication: cannot be declared together with capabilities.spawn.allow: this capsule may delegate to {listed}, but a capsule whose door requires authentication serves a formation, and a formation member cannot delegate to child capsules"
            ),
        )
        .with_hint("remove capabilities.spawn.allow to keep the authenticated door, or remove network.authentication to keep delegation"));
    }

    let kind = match (&inference, component) {
        _ if remote.is_some() => Kind::Remote,
        (Some(_), _) => Kind::Model,
        (None, Some(path)) => Kind::Component { path },
        (None, None) => Kind::ManifestOnly,
    };
    let manifest = Manifest {
        name,
        version,
        kind,
        build,
        peer_tasks_accept,
        authentication,
        lifecycle,
        network_allow,
        spawn_allow,
        inference,
        retain,
        skills,
        input_modes,
        tools,
        remote,
    };
    Ok(Parsed {
        manifest,
        warnings: w.warnings,
    })
}

/// `version`, read as text: any scalar keeps its spelling (`1.10`, `2`, `true`).
fn version(root: &Node) -> R<String> {
    let Some(n) = root.get("version") else {
        return Err(bad("version", "is required"));
    };
    let text = match &n.kind {
        NodeKind::Scalar(s) if s.resolve() != Resolved::Null => s.text.clone(),
        _ => {
            return Err(bad("version", format!("must be a version string, found {}", n.shape())));
        }
    };
    check_version(&text).map_err(|why| bad("version", why))?;
    Ok(text)
}

/// `build`: how `mur build` makes the component; `language` is required in the block.
fn build(w: &mut Walker, root: &Node) -> R<Option<Language>> {
    let Some(b) = block(root, "", "build")? else {
        return Ok(None);
    };
    w.unknown(b, "build", &["language"], &[]);
    match word(b, "build", "language", Language::WORDS, Language::from_word)? {
        Some(l) => Ok(Some(l)),
        None => Err(bad("build.language", "is required whenever build is present")),
    }
}

/// `exports`: peer consent, the card's skills and the accepted file media types.
fn exports(w: &mut Walker, root: &Node) -> R<(bool, Vec<Skill>, Vec<String>)> {
    let Some(ex) = block(root, "", "exports")? else {
        return Ok((false, Vec::new(), Vec::new()));
    };
    w.unknown(ex, "exports", &["peer_tasks", "skills", "input_modes"], &[]);
    let skills = skills(w, ex)?;
    let input_modes = string_list(ex, "exports", "input_modes")?;
    for (i, m) in input_modes.iter().enumerate() {
        if !super::media_range_ok(m) {
            return Err(bad(
                &format!("exports.input_modes[{i}]"),
                format!("'{}' is not a media type such as image/png or image/*", shown(m)),
            ));
        }
    }
    let Some(pt) = block(ex, "exports", "peer_tasks")? else {
        return Ok((false, skills, input_modes));
    };
    w.unknown(pt, "exports.peer_tasks", &["accept"], &[]);
    match boolean(pt, "exports.peer_tasks", "accept")? {
        Some(b) => Ok((b, skills, input_modes)),
        None => Err(bad(
            "exports.peer_tasks.accept",
            "is required whenever exports.peer_tasks is present",
        )),
    }
}

/// `exports.skills`: a list of `{id, name, description, tags?, examples?}`, ids unique.
fn skills(w: &mut Walker, ex: &Node) -> R<Vec<Skill>> {
    let Some(n) = ex.get("skills") else {
        return Ok(Vec::new());
    };
    let Some(items) = n.as_seq() else {
        return Err(bad(
            "exports.skills",
            format!("must be a list of skills, found {}", n.shape()),
        ));
    };
    let mut out: Vec<Skill> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("exports.skills[{i}]");
        if item.as_map().is_none() {
            return Err(bad(&at, format!("must be a mapping, found {}", item.shape())));
        }
        w.unknown(item, &at, &["id", "name", "description", "tags", "examples"], &[]);
        let required = |key: &str| -> R<String> {
            match string(item, &at, key)? {
                Some(s) if !s.trim().is_empty() => Ok(s),
                Some(_) => Err(bad(&join(&at, key), "must not be blank")),
                None => Err(bad(&join(&at, key), "is required in a skill")),
            }
        };
        let skill = Skill {
            id: required("id")?,
            name: required("name")?,
            description: required("description")?,
            tags: string_list(item, &at, "tags")?,
            examples: string_list(item, &at, "examples")?,
        };
        if out.iter().any(|s| s.id == skill.id) {
            return Err(bad(
                &join(&at, "id"),
                format!(
                    "'{}' is the id of an earlier skill; skill ids are unique",
                    shown(&skill.id)
                ),
            ));
        }
        out.push(skill);
    }
    Ok(out)
}

/// Whether `network.authentication` is declared (its scheme, when written, must be `bearer`).
fn network(w: &mut Walker, root: &Node) -> R<bool> {
    let Some(net) = block(root, "", "network")? else {
        return Ok(false);
    };
    w.unknown(net, "network", &["authentication"], &[]);
    let Some(auth) = block(net, "network", "authentication")? else {
        return Ok(false);
    };
    w.unknown(auth, "network.authentication", &["scheme"], &[]);
    word(auth, "network.authentication", "scheme", &["bearer"], |s| {
        (s == "bearer").then_some(())
    })?;
    Ok(true)
}

fn lifecycle(w: &mut Walker, root: &Node) -> R<Lifecycle> {
    let mut l = Lifecycle::default();
    let Some(lc) = block(root, "", "lifecycle")? else {
        return Ok(l);
    };
    let p = "lifecycle";
    w.unknown(
        lc,
        p,
        &[
            "task_acceptance",
            "after_task",
            "queue_depth",
            "delegation_deadline_secs",
            "input_timeout_secs",
            "repeatable_tasks",
        ],
        &[],
    );
    if let Some(a) = word(
        lc,
        p,
        "task_acceptance",
        &["none", "single", "queue"],
        Acceptance::from_word,
    )? {
        l.task_acceptance = a;
    }
    if let Some(a) = word(lc, p, "after_task", &["exit", "sleep"], AfterTask::from_word)? {
        l.after_task = a;
    }
    if let Some(d) = integer(lc, p, "queue_depth", 0, u32::MAX.into())? {
        l.queue_depth = d as u32;
    }
    l.delegation_deadline_secs = integer(lc, p, "delegation_deadline_secs", 1, u64::MAX.into())?
        .map_or(DEFAULT_DELEGATION_DEADLINE_SECS, |d| d as u64);
    l.input_timeout_secs = integer(lc, p, "input_timeout_secs", 1, u64::MAX.into())?.map(|d| d as u64);
    l.repeatable_tasks = boolean(lc, p, "repeatable_tasks")?.unwrap_or(false);
    Ok(l)
}

fn capabilities(w: &mut Walker, root: &Node) -> R<(Vec<String>, Vec<String>)> {
    let Some(caps) = block(root, "", "capabilities")? else {
        return Ok((Vec::new(), Vec::new()));
    };
    w.unknown(caps, "capabilities", &["network", "spawn"], &[]);
    let mut lists = [Vec::new(), Vec::new()];
    for (slot, key) in lists.iter_mut().zip(["network", "spawn"]) {
        let prefix = format!("capabilities.{key}");
        if let Some(b) = block(caps, "capabilities", key)? {
            w.unknown(b, &prefix, &["allow"], &[]);
            *slot = string_list(b, &prefix, "allow")?;
        }
    }
    let [net, spawn] = lists;
    Ok((net, spawn))
}

fn inference(w: &mut Walker, root: &Node) -> R<Option<Inference>> {
    let Some(inf) = block(root, "", "inference")? else {
        return Ok(None);
    };
    let p = "inference";
    w.unknown(inf, p, INFERENCE, &[]);
    let mut out = Inference::default();
    if let Some(t) = word(inf, p, "transport", &["http", "process"], |s| match s {
        "http" => Some(Transport::Http),
        "process" => Some(Transport::Process),
        _ => None,
    })? {
        out.transport = t;
    }
    out.provider = word(inf, p, "provider", &Provider::ALL.map(Provider::as_str), |s| {
        Provider::ALL.into_iter().find(|v| v.as_str() == s)
    })?;
    if let Some(e) = string(inf, p, "endpoint")? {
        if !(e.starts_with("http://") || e.starts_with("https://")) || e.len() <= "https://".len() {
            return Err(bad(
                "inference.endpoint",
                format!("must be an http:// or https:// URL, found '{}'", shown(&e)),
            ));
        }
        if !e.starts_with("https://") && !super::endpoint::plain_http_allowed(&e) {
            return Err(bad(
                "inference.endpoint",
                format!(
                    "'{}' would send the API key over plain http to a host that is not this machine; plain http:// is allowed only to loopback (127.0.0.0/8, [::1], localhost)",
                    shown(&e)
                ),
            )
            .with_hint("use https:// for a provider on another machine, or reach a local model server at http://127.0.0.1:<port> or http://localhost:<port>"));
        }
        out.endpoint = Some(e);
    }
    out.model = string(inf, p, "model")?;
    out.api_key_var = api_key(inf)?;
    if let Some(m) = integer(inf, p, "max_tokens", 1, u32::MAX.into())? {
        out.max_tokens = m as u32;
    }
    out.max_turns = integer(inf, p, "max_turns", 1, u32::MAX.into())?.map(|m| m as u32);
    out.max_session_tokens =
        integer(inf, p, "max_session_tokens", 1, crate::budget::MAX_BUDGET_TOKENS.into())?.map(|m| m as u64);
    out.system_prompt = string(inf, p, "system_prompt")?.unwrap_or_default();
    out.reasoning_effort = word(inf, p, "reasoning_effort", REASONING_EFFORTS, |s| {
        REASONING_EFFORTS.contains(&s).then(|| s.to_string())
    })?;
    Ok(Some(out))
}

/// `inference.api_key: ${VAR}` → `VAR`.
fn api_key(inf: &Node) -> R<Option<String>> {
    api_key_var(inf, "inference.api_key")
}

/// `api_key: ${VAR}` of `parent` → `VAR`, reported at `path`. The value is never echoed: it may
/// be a pasted key.
fn api_key_var(parent: &Node, path: &str) -> R<Option<String>> {
    let Some(n) = parent.get("api_key") else {
        return Ok(None);
    };
    let var = n
        .as_str()
        .and_then(|s| s.strip_prefix("${"))
        .and_then(|s| s.strip_suffix('}'))
        .filter(|v| {
            let mut b = v.bytes();
            matches!(b.next(), Some(c) if c == b'_' || c.is_ascii_alphabetic())
                && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
        });
    match var {
        // What the runtime hands a member is not the operator's to send to an endpoint.
        Some(v) => crate::member_env::check_key_variable(path, v).map(|()| Some(v.to_string())),
        None => Err(bad(
            path,
            "must be written `${VAR}`, naming the environment variable that holds the key; a key itself is never written into murmur.yaml",
        )),
    }
}

/// `remote`: `url` (required; https, or http to loopback), `api_key: ${VAR}`, `timeout` seconds,
/// `card_key` (the key its card must be signed with).
fn remote(w: &mut Walker, root: &Node) -> R<Option<Remote>> {
    let Some(r) = block(root, "", "remote")? else {
        return Ok(None);
    };
    let p = "remote";
    w.unknown(r, p, &["url", "api_key", "timeout", "card_key"], &[]);
    let Some(url) = string(r, p, "url")? else {
        return Err(bad(
            "remote.url",
            "is required: the remote agent's card URL or JSON-RPC endpoint",
        )
        .with_hint("e.g. `url: https://agent.example/.well-known/agent-card.json`"));
    };
    if super::endpoint::split(&url).is_none() || url.contains(char::is_whitespace) {
        return Err(bad(
            "remote.url",
            format!("must be an http:// or https:// URL, found '{}'", shown(&url)),
        ));
    }
    if !url.starts_with("https://") && !super::endpoint::plain_http_allowed(&url) {
        return Err(bad(
            "remote.url",
            format!(
                "'{}' would reach the remote agent, and send it its credential, over plain http on another machine; plain http:// is allowed only to loopback (127.0.0.0/8, [::1], localhost)",
                shown(&url)
            ),
        )
        .with_hint("use https:// for an agent on another machine"));
    }
    let api_key_var = api_key_var(r, "remote.api_key")?;
    let timeout_secs =
        integer(r, p, "timeout", 1, MAX_REMOTE_TIMEOUT_SECS.into())?.map_or(DEFAULT_REMOTE_TIMEOUT_SECS, |t| t as u64);
    let card_key = string(r, p, "card_key")?;
    if let Some(k) = &card_key
        && crate::card_sig::CardVerifyKey::from_b64(k).is_none()
    {
        return Err(bad(
            "remote.card_key",
            format!(
                "must be an Ed25519 public key in base64url (43 characters), found '{}'",
                shown(k)
            ),
        )
        .with_hint(
            "the key is the `x` of the `jwk` in the agent card's signature header, as its operator publishes it",
        ));
    }
    Ok(Some(Remote {
        url,
        api_key_var,
        timeout_secs,
        card_key,
    }))
}

fn trace(w: &mut Walker, root: &Node) -> R<Option<Retain>> {
    let Some(tr) = block(root, "", "trace")? else {
        return Ok(None);
    };
    w.unknown(tr, "trace", &["retain"], &[]);
    let Some(rt) = block(tr, "trace", "retain")? else {
        return Ok(None);
    };
    let p = "trace.retain";
    w.unknown(rt, p, &["max_sessions", "max_age"], &[]);
    let max_sessions = integer(rt, p, "max_sessions", 1, u32::MAX.into())?.map(|m| m as u32);
    let max_age_secs = match rt.get("max_age") {
        None => None,
        Some(n) => Some(max_age(n)?),
    };
    if max_sessions.is_none() && max_age_secs.is_none() {
        return Err(bad(p, "must set max_sessions, max_age or both"));
    }
    Ok(Some(Retain {
        max_sessions,
        max_age_secs,
    }))
}

/// `N`, `Ns`, `Nm`, `Nh` or `Nd`, N > 0; a bare N is seconds.
fn max_age(n: &Node) -> R<u64> {
    let path = "trace.retain.max_age";
    let expected = "must be a duration such as 3600, 90s, 30m, 12h or 7d";
    let text = match &n.kind {
        NodeKind::Scalar(s) if matches!(s.resolve(), Resolved::Int(_) | Resolved::Str) => s.text.as_str(),
        _ => return Err(bad(path, format!("{expected}, found {}", n.shape()))),
    };
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    let per = match unit {
        's' => 1u64,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => 0,
    };
    if per == 0 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(path, format!("{expected}, found '{}'", shown(text))));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| bad(path, format!("'{}' is too large", shown(text))))?;
    if n == 0 {
        return Err(bad(path, "must be greater than zero"));
    }
    n.checked_mul(per)
        .ok_or_else(|| bad(path, format!("'{}' is too large", shown(text))))
}
