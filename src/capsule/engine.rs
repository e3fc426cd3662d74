//! The wasmtime engine, component loading and one task's run. What a task's store holds is
//! `host_state`'s, its memory budget `limiter`'s, how a guest is stopped `interrupt`'s.
//!
//! The engine counts epochs on a ticker thread, which ticks only while some guest runs (an idle
//! member must not wake 100 times a second); `interrupt` arms every store to look at its task's
//! cancellation and budget at each tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store, Trap};

use super::bindings;
use super::compiled::{CompiledCache, Handed, Source, compile};
use super::host_state::{HostState, host_linker};
use super::interrupt::{Budget, Stop, Unanswered, arm, within};
use super::{RunOutcome, TaskEnv};

/// How often the epoch advances: the granularity of cancellation and time budgets.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The process's WebAssembly engine. Cheap to clone; the epoch ticker stops when the last clone
/// (including those held by loaded capsules) is dropped.
#[derive(Clone)]
pub struct CapsuleEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    linker: Linker<HostState>,
    ticker: Arc<Ticker>,
    ticker_thread: thread::Thread,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::Relaxed);
        self.ticker_thread.unpark();
    }
}

/// What the epoch thread shares with the runs: how many guests run now, and whether to stop.
#[derive(Default)]
struct Ticker {
    running: AtomicUsize,
    stop: AtomicBool,
    ticks: AtomicU64,
}

/// One guest counted as running; the ticker parks again once the last one is dropped.
pub(super) struct Running<'a> {
    engine: &'a EngineInner,
}

impl<'a> Running<'a> {
    fn start(engine: &'a EngineInner) -> Running<'a> {
        if engine.ticker.running.fetch_add(1, Ordering::SeqCst) == 0 {
            engine.ticker_thread.unpark();
        }
        Running { engine }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.engine.ticker.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CapsuleEngine {
    /// Builds the engine (component model, async, epoch interruption), links the host
    /// interfaces, and starts the epoch ticker thread.
    pub fn new() -> Result<CapsuleEngine, String> {
        let engine = Engine::new(&config()).map_err(|e| format!("the WebAssembly engine cannot start: {e}"))?;
        let linker =
            host_linker(&engine).map_err(|e| format!("the capsule host interfaces cannot be linked: {e:#}"))?;

        let ticker = Arc::new(Ticker::default());
        let (shared, ticking) = (Arc::clone(&ticker), engine.clone());
        let handle = thread::Builder::new()
            .name("mur-epoch".into())
            .spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) {
                    // An unpark between the load and the park is kept as a token, so a run that
                    // starts right then is never missed.
                    if shared.running.load(Ordering::SeqCst) == 0 {
                        thread::park();
                        continue;
                    }
                    thread::sleep(EPOCH_TICK);
                    ticking.increment_epoch();
                    shared.ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| format!("the WebAssembly epoch thread cannot start: {e}"))?;
        Ok(CapsuleEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                ticker,
                ticker_thread: handle.thread().clone(),
            }),
        })
    }
}

impl CapsuleEngine {
    pub(super) fn wasmtime(&self) -> &Engine {
        &self.inner.engine
    }

    /// Counts a guest as running while the guard lives, so the epoch ticks for it.
    pub(super) fn running(&self) -> Running<'_> {
        Running::start(&self.inner)
    }

    /// The check a component must pass before the cache stores it: the one [`Capsule`] makes.
    pub(super) fn check(&self) -> impl Fn(&Component) -> Result<(), String> + '_ {
        move |component| Capsule::checked(self, component).map(drop)
    }
}

/// The cache's entry points that take the engine (its wasmtime engine and its check). They are
/// here, not in `compiled.rs`, so that the cache knows nothing of the engine and the two files
/// do not depend on each other.
impl CompiledCache {
    /// Compiles `component`, the capsule.wasm of the archive hashing to `archive_sha256`, into
    /// the cache unless a usable entry is there (what `mur install` does).
    pub fn precompile(&self, engine: &CapsuleEngine, archive_sha256: &str, component: &[u8]) -> Result<(), String> {
        self.precompile_with(
            engine.wasmtime(),
            &engine.check(),
            &Source::capsule(archive_sha256),
            component,
        )
    }

    /// For a launcher: the entry of the capsule.wasm of the archive hashing to `archive_sha256`,
    /// compiled with `read` and stored first if it is missing or bad (exactly as a member would),
    /// then checked once and held open to be handed to every member running it. `Err` when the
    /// cache cannot be trusted or the component cannot be compiled: members then do as they
    /// would alone (and report it).
    pub fn hand_out(
        &self,
        engine: &CapsuleEngine,
        archive_sha256: &str,
        read: &mut dyn FnMut() -> Result<Vec<u8>, String>,
    ) -> Result<Handed, String> {
        self.hand_out_with(engine.wasmtime(), &engine.check(), archive_sha256, read)
    }
}

#[cfg(test)]
impl CapsuleEngine {
    /// Epochs counted so far.
    pub(super) fn ticks(&self) -> u64 {
        self.inner.ticker.ticks.load(Ordering::Relaxed)
    }
}

/// The engine configuration every engine of this runtime uses (and so the one cache keys name).
fn config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // A task's fresh instance maps its memories' initial image copy-on-write (from the
    // compiled file when the component was loaded from the cache) instead of copying it:
    // a language runtime's heap of many MiB costs nothing until written, and idle members of
    // the same component share those pages.
    config.memory_init_cow(true);
    config
}

/// A component capsule a member maps at its first task rather than at its start: one whose
/// launcher handed over a checked entry for exactly this component. The cache stores an entry
/// only for a component that passed the host's check ([`CapsuleEngine::check`]), so a capsule
/// that cannot run never gets here: it is refused at start (E-RUN-002) as before. What waits is
/// the mapping and the host's pre-instantiation, which a peer that is never sent a task never
/// pays, and whose pages an idle one never holds. At the first task the entry is loaded from the
/// cache as a lone member loads it, its integrity checked again then: the task may come hours
/// after the launcher's check.
pub struct Deferred {
    archive_sha256: String,
    entry: String,
    read: Box<dyn Fn() -> Result<Vec<u8>, String> + Send + Sync>,
    loaded: std::sync::OnceLock<Result<Capsule, String>>,
}

impl Deferred {
    /// `Some` when `handed` was checked for this very component (`source`'s key under this
    /// runtime's engine configuration); `read` reads the component should the cache no longer
    /// hold it at the first task.
    pub fn new(
        source: &Source<'_>,
        handed: &Handed,
        read: Box<dyn Fn() -> Result<Vec<u8>, String> + Send + Sync>,
    ) -> Option<Deferred> {
        let engine = Engine::new(&config()).ok()?;
        if CompiledCache::key(&engine, source).id() != handed.key_id {
            return None;
        }
        Some(Deferred {
            archive_sha256: source.archive_sha256.to_string(),
            entry: source.entry.to_string(),
            read,
            loaded: std::sync::OnceLock::new(),
        })
    }

    /// The capsule, loaded on the first call; later calls get the same one (or the same refusal).
    pub fn capsule(&self) -> Result<&Capsule, &str> {
        self.loaded
            .get_or_init(|| {
                let started = Instant::now();
                let engine = CapsuleEngine::new()?;
                let source = Source {
                    archive_sha256: &self.archive_sha256,
                    entry: &self.entry,
                };
                let mut read = || (self.read)();
                let loaded = Capsule::load_cached(&engine, &source, &mut read, &CompiledCache::user(), None);
                tracing::debug!(
                    "loaded the deferred component at the first task in {} ms",
                    started.elapsed().as_millis()
                );
                loaded
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// A compiled, pre-instantiated component. Cheap to clone; every [`Capsule::run`] instantiates
/// it afresh.
#[derive(Clone)]
pub struct Capsule {
    engine: CapsuleEngine,
    pre: bindings::CapsulePre<HostState>,
}

impl Capsule {
    /// Compiles a component (binary, or component-model WAT text) and checks it against the
    /// host: every import must be one the host provides, and `run` must be exported with the
    /// world's signature.
    pub fn load(engine: &CapsuleEngine, bytes: &[u8]) -> Result<Capsule, String> {
        let component = compile(&engine.inner.engine, bytes)?;
        Capsule::checked(engine, &component)
    }

    /// [`Capsule::load`] through the compiled-component cache: loads the stored native code of
    /// `source`, or reads its bytes with `read`, compiles them and stores the result.
    pub fn load_cached(
        engine: &CapsuleEngine,
        source: &Source<'_>,
        read: &mut dyn FnMut() -> Result<Vec<u8>, String>,
        cache: &CompiledCache,
        handed: Option<&Handed>,
    ) -> Result<Capsule, String> {
        let component = cache.component(&engine.inner.engine, source, read, &engine.check(), handed)?;
        Capsule::checked(engine, &component)
    }

    /// The entry a launcher handed over, for `source`'s key only: `None`, without touching the
    /// cache, when it was checked for another key. A member maps it on a second thread while
    /// its own thread still resolves and hashes the archive (the archive's sha256 is part of
    /// the key, so `source` names the admitted one until that check confirms it). The
    /// component's bytes are never read here: should the handed entry prove unusable and the
    /// cache hold none, this fails, and the member loads on its own thread as without it.
    pub fn load_handed(
        engine: &CapsuleEngine,
        source: &Source<'_>,
        handed: &Handed,
        cache: &CompiledCache,
    ) -> Option<Result<Capsule, String>> {
        if handed.key_id != CompiledCache::key(&engine.inner.engine, source).id() {
            return None;
        }
        let mut read = || Err("its bytes are read only once its archive is checked".to_string());
        Some(Capsule::load_cached(engine, source, &mut read, cache, Some(handed)))
    }

    fn checked(engine: &CapsuleEngine, component: &Component) -> Result<Capsule, String> {
        let instance_pre = engine
            .inner
            .linker
            .instantiate_pre(component)
            .map_err(|e| format!("the capsule needs something this runtime does not provide: {e:#}"))?;
        let pre = bindings::CapsulePre::new(instance_pre).map_err(|e| {
            format!(
                "the capsule does not export `run: func(task: string) -> result<string, failure>` of world murmur:capsule/capsule@0.1.0: {e:#}"
            )
        })?;
        Ok(Capsule {
            engine: engine.clone(),
            pre,
        })
    }

    /// Runs one task in a fresh store and instance, and reports how it ended. Never panics on
    /// anything the component does.
    pub async fn run(&self, task: &str, env: TaskEnv) -> RunOutcome {
        if env.cancel.is_canceled() {
            return RunOutcome::Canceled;
        }
        let limits = env.limits;
        let budget = Budget::new(limits.time_budget);
        let cancel = env.cancel.clone();
        let _running = Running::start(&self.engine.inner);
        let mut store = Store::new(&self.engine.inner.engine, HostState::new(&env, Arc::clone(&budget)));
        store.limiter(|s| &mut s.limiter);
        arm(&mut store, &cancel, &budget);
        let result = {
            let store = &mut store;
            let pre = &self.pre;
            within(&cancel, &budget, async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.call_run(&mut *store, task).await
            })
            .await
        };
        classify(result, store.data().limiter.refused, &limits)
    }
}

fn classify(
    result: wasmtime::Result<Result<String, bindings::Failure>>,
    memory_refused: bool,
    limits: &super::Limits,
) -> RunOutcome {
    let error = match result {
        Ok(Ok(answer)) => return RunOutcome::Completed(answer),
        Ok(Err(bindings::Failure::Error(message))) => return RunOutcome::Failed(message),
        Ok(Err(bindings::Failure::NoAnswer(reason))) => return RunOutcome::NoAnswer(reason),
        Err(e) => e,
    };
    if let Some(Unanswered(timeout)) = error.downcast_ref::<Unanswered>() {
        return RunOutcome::Failed(crate::tasks::ask::no_answer_text(*timeout));
    }
    if let Some(stop) = error.downcast_ref::<Stop>() {
        return match stop {
            Stop::Canceled => RunOutcome::Canceled,
            Stop::OverBudget => RunOutcome::Failed(format!(
                "the capsule ran longer than its time budget of {} and was stopped",
                show_duration(limits.time_budget)
            )),
        };
    }
    // A refused growth explains whatever failure followed it (typically a trap in the guest's
    // allocator), so it is named first.
    if memory_refused {
        return RunOutcome::Failed(format!(
            "the capsule needed more memory than its limit of {} and was stopped",
            show_bytes(limits.memory_bytes)
        ));
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return RunOutcome::Failed(format!(
            "the capsule exited with status {} instead of answering",
            exit.0
        ));
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        let reason = trap.to_string();
        let reason = reason.strip_prefix("wasm trap: ").unwrap_or(&reason);
        return RunOutcome::Failed(format!("the capsule trapped: {reason}"));
    }
    RunOutcome::Failed(format!("the capsule failed: {error}"))
}

/// `600 s`, `1.5 s`, `250 ms`.
fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

/// `256 MiB`, `64 KiB`, `1000 bytes`.
fn show_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn shows_durations_and_sizes() {
        assert_eq!(show_duration(Duration::from_secs(600)), "600 s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(show_duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(show_bytes(256 << 20), "256 MiB");
        assert_eq!(show_bytes(64 << 10), "64 KiB");
        assert_eq!(show_bytes(1000), "1000 bytes");
    }
}
