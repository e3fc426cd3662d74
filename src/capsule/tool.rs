//! WebAssembly tools of a model capsule (world `murmur:tool/tool`, `src/tools/wit/tool.wit`;
//! docs/reference/capsules.md#tools).
//!
//! A tool is compiled once through the compiled-component cache (keyed by the archive and the
//! tool's path in it), described once at load, and instantiated afresh for every call, so no
//! call sees another's memory. Its grant is its own and never the capsule's: no filesystem, no
//! sockets, no environment but `MURMUR_FORMATION_PEERS`, stdout and stderr dropped, outgoing
//! HTTP through its own policy, and per call a memory budget, a wall-clock budget (enforced at
//! epoch ticks, so a spinning guest is stopped too) and a cap on the result's bytes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Store, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::CapsuleEngine;
use super::compiled::{CompiledCache, Source};
use super::http::PolicyHooks;
use super::interrupt::{self, Stop};
use super::limiter::Limiter;
use crate::runner::{CancelSignal, HttpPolicy, NetworkPolicy};

mod bindings {
    wasmtime::component::bindgen!({
        path: "src/tools/wit",
        world: "tool",
        exports: { default: async },
    });
}

/// The most bytes of a description or a schema a tool may declare: both ride in every model
/// request.
pub const MAX_DESCRIPTION_BYTES: usize = 4 << 10;
pub const MAX_SCHEMA_BYTES: usize = 16 << 10;

/// The bounds of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Linear memory (and tables) of the call's instance.
    pub memory_bytes: u64,
    /// Wall-clock time from instantiation to the result.
    pub time_budget: Duration,
    /// The longest result (or error) text handed back; longer ones are refused, not cut, since
    /// a cut JSON result would mislead the model.
    pub result_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            memory_bytes: crate::limits::TOOL_MEMORY_BYTES,
            time_budget: Duration::from_secs(60),
            result_bytes: 64 << 10,
        }
    }
}

/// What a tool instance is granted besides its limits.
#[derive(Clone)]
pub struct ToolGrant {
    /// `MURMUR_FORMATION_PEERS`, when the member may call someone.
    pub peers_env: Option<String>,
    /// Its outgoing HTTP: its own `capabilities.network.allow`, never the capsule's.
    pub http: Arc<dyn HttpPolicy>,
    pub limits: ToolLimits,
}

impl Default for ToolGrant {
    /// No peers, no network, default limits.
    fn default() -> Self {
        ToolGrant {
            peers_env: None,
            http: Arc::new(NetworkPolicy::deny_all()),
            limits: ToolLimits::default(),
        }
    }
}

/// What the model is told about a tool: its `describe`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescription {
    pub name: String,
    pub description: String,
    /// A JSON object schema.
    pub input_schema: Value,
}

/// A loaded tool: compiled, checked against the world, described. Cheap to clone.
#[derive(Clone)]
pub struct WasmTool {
    engine: CapsuleEngine,
    pre: bindings::ToolPre<ToolState>,
    description: ToolDescription,
}

impl std::fmt::Debug for WasmTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmTool")
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

/// The host side every tool links: WASI preview 2 and outgoing HTTP, nothing of the capsule world.
fn linker(engine: &CapsuleEngine) -> Result<Linker<ToolState>, String> {
    let mut linker = Linker::new(engine.wasmtime());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker))
        .map_err(|e| format!("the tool host interfaces cannot be linked: {e:#}"))?;
    Ok(linker)
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRun {
    /// The tool's result text.
    Result(String),
    /// The tool's error, or why the host stopped it: shown to the model as a failed call.
    Error(String),
    /// The task was canceled while the call ran.
    Canceled,
}

/// The cache's entry points for a model capsule's WebAssembly tools: compiled and checked against
/// the tool world's linker, keyed by the archive and the tool's path in it, exactly as a session
/// start loads them ([`WasmTool::load`]).
impl CompiledCache {
    /// Compiles the tool `component` at `source` into the cache unless a usable entry is there
    /// (what `mur install` does for each tool).
    pub fn precompile_tool(&self, engine: &CapsuleEngine, source: &Source<'_>, component: &[u8]) -> Result<(), String> {
        let linker = linker(engine)?;
        let check = |c: &Component| checked(&linker, c).map(drop);
        self.precompile_with(engine.wasmtime(), &check, source, component)
    }

    /// Whether the component at `source` (a capsule's or a tool's) is compiled for `engine` and
    /// this runtime version (what `mur list` shows).
    pub fn is_compiled_at(&self, engine: &CapsuleEngine, source: &Source<'_>) -> bool {
        self.holds(engine.wasmtime(), source)
    }
}

impl WasmTool {
    /// Loads the tool at `source` (its bytes read with `read` only on a cache miss), checks it
    /// exports the tool world, and describes it in a fresh instance under `grant`: its name must
    /// be `name`, its schema a JSON object. `Err` says, for the operator, what is wrong.
    pub async fn load(
        engine: &CapsuleEngine,
        source: &Source<'_>,
        read: &mut dyn FnMut() -> Result<Vec<u8>, String>,
        cache: &CompiledCache,
        name: &str,
        grant: &ToolGrant,
    ) -> Result<WasmTool, String> {
        let linker = linker(engine)?;
        let check = |c: &Component| checked(&linker, c).map(drop);
        let component = cache.component(engine.wasmtime(), source, read, &check, None)?;
        WasmTool::described(engine, &linker, &component, name, grant).await
    }

    /// A tool compiled from `bytes` (binary or component-model WAT), without the cache: for
    /// tests and benches.
    pub async fn load_bytes(
        engine: &CapsuleEngine,
        bytes: &[u8],
        name: &str,
        grant: &ToolGrant,
    ) -> Result<WasmTool, String> {
        let linker = linker(engine)?;
        let component = Component::new(engine.wasmtime(), bytes)
            .map_err(|e| format!("it is not a WebAssembly component this runtime can compile: {e:#}"))?;
        WasmTool::described(engine, &linker, &component, name, grant).await
    }

    async fn described(
        engine: &CapsuleEngine,
        linker: &Linker<ToolState>,
        component: &Component,
        name: &str,
        grant: &ToolGrant,
    ) -> Result<WasmTool, String> {
        let mut tool = WasmTool {
            engine: engine.clone(),
            pre: checked(linker, component)?,
            description: ToolDescription {
                name: name.to_string(),
                description: String::new(),
                input_schema: Value::Null,
            },
        };
        tool.description = tool.describe(name, grant).await?;
        Ok(tool)
    }

    pub fn description(&self) -> &ToolDescription {
        &self.description
    }

    async fn describe(&self, name: &str, grant: &ToolGrant) -> Result<ToolDescription, String> {
        let cancel = CancelSignal::new();
        let d = self
            .in_fresh_instance(grant, &cancel, |instance, store| {
                Box::pin(instance.call_describe(store))
            })
            .await
            .map_err(|e| format!("its describe failed: {}", e.unwrap_or_else(|| "it was canceled".into())))?;
        if d.name != name {
            return Err(format!(
                "it describes itself as '{}', but its entry in murmur.yaml names it '{name}'",
                crate::text::head(&d.name, 64)
            ));
        }
        if d.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "its description is {} bytes, more than the {MAX_DESCRIPTION_BYTES} a tool may declare",
                d.description.len()
            ));
        }
        if d.input_schema.len() > MAX_SCHEMA_BYTES {
            return Err(format!(
                "its input schema is {} bytes, more than the {MAX_SCHEMA_BYTES} a tool may declare",
                d.input_schema.len()
            ));
        }
        let schema: Value =
            serde_json::from_str(&d.input_schema).map_err(|e| format!("its input schema is not JSON: {e}"))?;
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("its input schema is not an object schema (`\"type\": \"object\"`)".into());
        }
        Ok(ToolDescription {
            name: d.name,
            description: d.description,
            input_schema: schema,
        })
    }

    /// Runs one call in a fresh instance. Never panics on anything the tool does.
    pub async fn call(&self, input: &str, grant: &ToolGrant, cancel: &CancelSignal) -> ToolRun {
        let limit = grant.limits.result_bytes;
        let input = input.to_string();
        let ran = self
            .in_fresh_instance(grant, cancel, move |instance, store| {
                Box::pin(async move { instance.call_call(store, &input).await })
            })
            .await;
        let bounded = |kind: &str, text: String| {
            if text.len() > limit {
                ToolRun::Error(format!(
                    "the tool's {kind} was {} bytes, more than the {limit} a tool call may return",
                    text.len()
                ))
            } else if kind == "result" {
                ToolRun::Result(text)
            } else {
                ToolRun::Error(text)
            }
        };
        match ran {
            Ok(Ok(result)) => bounded("result", result),
            Ok(Err(error)) => bounded("error", error),
            Err(Some(why)) => ToolRun::Error(why),
            Err(None) => ToolRun::Canceled,
        }
    }

    /// Instantiates the tool in a new store under `grant` and runs `f` on it. `Err(None)`: the
    /// call was canceled; `Err(Some(why))`: the host stopped it or it trapped.
    async fn in_fresh_instance<T>(
        &self,
        grant: &ToolGrant,
        cancel: &CancelSignal,
        f: impl for<'s> FnOnce(
            &'s bindings::Tool,
            &'s mut Store<ToolState>,
        ) -> std::pin::Pin<Box<dyn Future<Output = wasmtime::Result<T>> + Send + 's>>,
    ) -> Result<T, Option<String>> {
        if cancel.is_canceled() {
            return Err(None);
        }
        let limits = grant.limits;
        let budget = interrupt::Budget::new(limits.time_budget);
        let _running = self.engine.running();
        let mut store = Store::new(self.engine.wasmtime(), ToolState::new(grant));
        store.limiter(|s| &mut s.limiter);
        interrupt::arm(&mut store, cancel, &budget);
        let result = {
            let store = &mut store;
            let pre = &self.pre;
            interrupt::within(cancel, &budget, async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                f(&instance, store).await
            })
            .await
        };
        let refused = store.data().limiter.refused;
        result.map_err(|e| classify(&e, refused, &limits))
    }
}

/// Why a call failed, for the model (or `None`: canceled).
fn classify(error: &wasmtime::Error, memory_refused: bool, limits: &ToolLimits) -> Option<String> {
    match error.downcast_ref::<Stop>() {
        Some(Stop::Canceled) => return None,
        Some(Stop::OverBudget) => {
            return Some(format!(
                "the tool ran longer than its time budget of {} s and was stopped",
                limits.time_budget.as_secs_f64()
            ));
        }
        None => {}
    }
    if memory_refused {
        return Some(format!(
            "the tool needed more memory than its limit of {} MiB and was stopped",
            limits.memory_bytes >> 20
        ));
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        let reason = trap.to_string();
        return Some(format!(
            "the tool trapped: {}",
            reason.strip_prefix("wasm trap: ").unwrap_or(&reason)
        ));
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Some(format!("the tool exited with status {} instead of answering", exit.0));
    }
    Some(format!(
        "the tool failed: {}",
        crate::text::head(&error.to_string(), 1024)
    ))
}

fn checked(linker: &Linker<ToolState>, component: &Component) -> Result<bindings::ToolPre<ToolState>, String> {
    let instance_pre = linker
        .instantiate_pre(component)
        .map_err(|e| format!("it needs something the tool host does not provide: {e:#}"))?;
    bindings::ToolPre::new(instance_pre).map_err(|e| {
        format!("it is not a tool: it does not export `describe` and `call` of world murmur:tool/tool@0.1.0: {e:#}")
    })
}

/// What one call's store holds.
struct ToolState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: PolicyHooks,
    table: ResourceTable,
    limiter: Limiter,
}

impl ToolState {
    fn new(grant: &ToolGrant) -> ToolState {
        let mut wasi = WasiCtx::builder();
        // No preopens, arguments, sockets or output; clocks and random are the builder's defaults.
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        if let Some(peers) = &grant.peers_env {
            wasi.env("MURMUR_FORMATION_PEERS", peers);
        }
        ToolState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            hooks: PolicyHooks {
                policy: grant.http.clone(),
            },
            table: ResourceTable::new(),
            limiter: Limiter::new(usize::try_from(grant.limits.memory_bytes).unwrap_or(usize::MAX)),
        }
    }
}

impl WasiView for ToolState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ToolState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const WORDS: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/capsule/testdata/words-tool.wat"
    ));
    const CAPSULE: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/actors/echo/capsule.wat"));
    /// The Rust tool `mur new --tool words --lang rust` scaffolds, as `mur build` makes it
    /// (`testdata/rust-tool/build.sh` rebuilds it).
    const RUST_WORDS: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/capsule/testdata/rust-tool/tool.wasm"
    ));

    fn engine() -> &'static CapsuleEngine {
        static ENGINE: std::sync::OnceLock<CapsuleEngine> = std::sync::OnceLock::new();
        ENGINE.get_or_init(|| CapsuleEngine::new().unwrap_or_else(|e| panic!("{e}")))
    }

    fn grant(memory_bytes: u64, time_budget: Duration) -> ToolGrant {
        ToolGrant {
            limits: ToolLimits {
                memory_bytes,
                time_budget,
                result_bytes: 64 << 10,
            },
            ..ToolGrant::default()
        }
    }

    #[tokio::test]
    async fn a_tool_describes_itself_and_answers_each_call_in_a_fresh_instance() {
        let g = ToolGrant::default();
        let tool = WasmTool::load_bytes(engine(), WORDS, "words", &g)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let d = tool.description();
        assert_eq!(
            (d.name.as_str(), d.description.as_str()),
            ("words", "Counts the words of a text.")
        );
        assert_eq!(d.input_schema["properties"]["text"]["type"], "string");
        let cancel = CancelSignal::new();
        assert_eq!(
            tool.call(r#"{"text": "one two three"}"#, &g, &cancel).await,
            ToolRun::Result("4".into())
        );
        assert_eq!(tool.call("a", &g, &cancel).await, ToolRun::Result("1".into()));
        assert_eq!(
            tool.call(r#"{"fail": 1}"#, &g, &cancel).await,
            ToolRun::Error("asked to fail".into())
        );
    }

    #[tokio::test]
    async fn the_rust_tool_of_the_scaffold_answers_as_the_python_and_javascript_ones() {
        let g = ToolGrant::default();
        let tool = WasmTool::load_bytes(engine(), RUST_WORDS, "words", &g)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let d = tool.description();
        assert_eq!(
            (d.name.as_str(), d.description.as_str()),
            (
                "words",
                "Counts the words of a text: the number of whitespace-separated words in `text`."
            )
        );
        assert_eq!(d.input_schema["properties"]["text"]["type"], "string");
        assert_eq!(d.input_schema["required"], serde_json::json!(["text"]));
        let cancel = CancelSignal::new();
        let table: &[(&str, ToolRun)] = &[
            (r#"{"text": "the quick brown fox"}"#, ToolRun::Result("4".into())),
            (r#"{"text": " \n\t "}"#, ToolRun::Result("0".into())),
            (r#"{"text": "ünïcode\u00a0words"}"#, ToolRun::Result("2".into())),
            (r#"{"text": 3}"#, ToolRun::Error("`text` must be a string".into())),
            (r#"["text"]"#, ToolRun::Error("`text` must be a string".into())),
        ];
        for (input, want) in table {
            assert_eq!(tool.call(input, &g, &cancel).await, *want, "{input}");
        }
        match tool.call("not json", &g, &cancel).await {
            ToolRun::Error(e) => assert!(e.starts_with("the input is not JSON: "), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    /// The committed component is the current scaffold's: `scaffold.sha256` is the digest
    /// `build.sh` takes of the files `mur new` writes (each as path NUL bytes NUL, in byte order
    /// of the paths), so a change to the template without a rebuild fails here.
    #[test]
    fn the_committed_rust_tool_is_built_from_the_current_scaffold() {
        use sha2::{Digest, Sha256};
        let dir = format!("{}/", crate::scaffold::tool::dir("words"));
        let mut files: Vec<(String, Vec<u8>)> = crate::scaffold::tool::files("words", crate::manifest::Language::Rust)
            .into_iter()
            .map(|f| (f.path.strip_prefix(&dir).unwrap_or(&f.path).to_string(), f.bytes))
            .collect();
        files.sort();
        let mut h = Sha256::new();
        for (path, bytes) in &files {
            h.update(path.as_bytes());
            h.update([0]);
            h.update(bytes);
            h.update([0]);
        }
        let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let recorded = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/capsule/testdata/rust-tool/scaffold.sha256"
        ));
        assert_eq!(
            digest,
            recorded.trim(),
            "the Rust tool scaffold changed since src/capsule/testdata/rust-tool/tool.wasm was built: run its build.sh and commit the result"
        );
    }

    #[tokio::test]
    async fn what_is_not_this_tool_is_refused_at_load() {
        let g = ToolGrant::default();
        let cases: &[(&[u8], &str, &str)] = &[
            (WORDS, "other", "describes itself as 'words'"),
            (CAPSULE, "words", "it is not a tool"),
            (b"(component)", "words", "it is not a tool"),
            (b"not wasm", "words", "not a WebAssembly component"),
        ];
        for (bytes, name, words) in cases {
            let e = WasmTool::load_bytes(engine(), bytes, name, &g)
                .await
                .err()
                .unwrap_or_default();
            assert!(e.contains(words), "{name}: {e:?} lacks {words:?}");
        }
    }

    #[tokio::test]
    async fn faults_of_a_tool_come_back_as_tool_errors_and_the_host_serves_on() {
        let g = grant(8 << 20, Duration::from_millis(300));
        let tool = WasmTool::load_bytes(engine(), WORDS, "words", &g)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let cancel = CancelSignal::new();
        let cases: &[(&str, &str)] = &[
            (r#"{"spin": 1}"#, "ran longer than its time budget"),
            (r#"{"grow": 1}"#, "needed more memory than its limit of 8 MiB"),
            (r#"{"trap": 1}"#, "the tool trapped"),
            (r#"{"big": 1}"#, "more than the 65536 a tool call may return"),
        ];
        for (input, words) in cases {
            let started = Instant::now();
            match tool.call(input, &g, &cancel).await {
                ToolRun::Error(e) => assert!(e.contains(words), "{input}: {e:?} lacks {words:?}"),
                other => panic!("{input}: {other:?}"),
            }
            assert!(started.elapsed() < Duration::from_secs(10), "{input} was stopped late");
        }
        assert_eq!(tool.call("still here", &g, &cancel).await, ToolRun::Result("2".into()));
    }

    #[tokio::test]
    async fn cancelling_stops_a_spinning_call() {
        let g = grant(8 << 20, Duration::from_secs(600));
        let tool = WasmTool::load_bytes(engine(), WORDS, "words", &g)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let cancel = CancelSignal::new();
        let later = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            later.cancel();
        });
        let started = Instant::now();
        assert_eq!(tool.call(r#"{"spin": 1}"#, &g, &cancel).await, ToolRun::Canceled);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
