//! The host against real wasmtime: the sample actors under `actors/` and the test components
//! under `src/capsule/testdata/`, all component-model WAT compiled at test time.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::*;
use crate::runner::*;

macro_rules! wat {
    ($path:literal) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $path)).as_slice()
    };
}

const ECHO: &[u8] = wat!("actors/echo/capsule.wat");
const TRAP: &[u8] = wat!("actors/trap/capsule.wat");
const SPIN: &[u8] = wat!("actors/spin/capsule.wat");
const HOG: &[u8] = wat!("actors/hog/capsule.wat");
const PROBE: &[u8] = wat!("src/capsule/testdata/probe.wat");
const RELAY: &[u8] = wat!("src/capsule/testdata/relay.wat");
const ASK: &[u8] = wat!("src/capsule/testdata/ask.wat");

/// One engine for every test, as in a session: what one test does to it must not break another.
fn engine() -> &'static CapsuleEngine {
    static ENGINE: OnceLock<CapsuleEngine> = OnceLock::new();
    ENGINE.get_or_init(|| CapsuleEngine::new().unwrap_or_else(|e| panic!("{e}")))
}

fn load(bytes: &[u8]) -> Capsule {
    Capsule::load(engine(), bytes).unwrap_or_else(|e| panic!("{e}"))
}

fn with_budget(budget: Duration) -> TaskEnv {
    TaskEnv {
        limits: Limits {
            time_budget: budget,
            ..Limits::default()
        },
        ..TaskEnv::default()
    }
}

#[tokio::test]
async fn echo_answers_with_exactly_the_task() {
    let echo = load(ECHO);
    let big: String = "0123456789abcdéf".repeat(1 << 16); // 1 MiB + 64 KiB of two-byte chars
    assert!(big.len() >= 1 << 20);
    for task in ["hello", "", "héllo — 你好 🌍\n\ttabs", big.as_str()] {
        assert_eq!(
            echo.run(task, TaskEnv::default()).await,
            RunOutcome::Completed(task.to_string())
        );
    }
}

#[tokio::test]
async fn a_trap_fails_the_task_with_its_reason() {
    let outcome = load(TRAP).run("anything", TaskEnv::default()).await;
    assert_eq!(
        outcome,
        RunOutcome::Failed("the capsule trapped: wasm `unreachable` instruction executed".into())
    );
}

/// An idle member must cost nothing: the epoch thread parks while no guest runs, and still
/// ticks for a guest that spins (without ticks its budget could not stop it).
#[tokio::test]
async fn the_epoch_ticks_only_while_a_guest_runs() {
    let engine = CapsuleEngine::new().unwrap_or_else(|e| panic!("{e}"));
    let spin = Capsule::load(&engine, SPIN).unwrap_or_else(|e| panic!("{e}"));
    let quiet = Duration::from_millis(60);
    tokio::time::sleep(quiet).await;
    assert_eq!(engine.ticks(), 0, "an engine with no guest running ticked");
    let outcome = spin.run("spin", with_budget(Duration::from_millis(100))).await;
    assert_eq!(
        outcome,
        RunOutcome::Failed("the capsule ran longer than its time budget of 100 ms and was stopped".into())
    );
    let after_run = engine.ticks();
    assert!(after_run > 0, "the spinning guest was stopped without a tick");
    tokio::time::sleep(quiet).await;
    // At most the tick that was already sleeping when the run ended.
    assert!(
        engine.ticks() <= after_run + 1,
        "{} ticks after the run ended at {after_run}",
        engine.ticks()
    );
}

#[tokio::test]
async fn a_runaway_loop_is_stopped_at_its_budget_and_the_engine_serves_on() {
    let spin = load(SPIN);
    let started = Instant::now();
    let outcome = spin.run("spin", with_budget(Duration::from_secs(1))).await;
    let took = started.elapsed();
    assert_eq!(
        outcome,
        RunOutcome::Failed("the capsule ran longer than its time budget of 1 s and was stopped".into())
    );
    // No upper bound: a loop the budget did not stop would never end, and how soon after its
    // budget it stops is a speed, measured in benches.
    assert!(took >= Duration::from_secs(1), "took {took:?}");
    // The same capsule and the same engine keep working.
    assert_eq!(
        load(ECHO).run("next", TaskEnv::default()).await,
        RunOutcome::Completed("next".into())
    );
    let outcome = spin.run("again", with_budget(Duration::from_millis(300))).await;
    assert_eq!(
        outcome,
        RunOutcome::Failed("the capsule ran longer than its time budget of 300 ms and was stopped".into())
    );
}

#[tokio::test]
async fn a_memory_hog_is_refused_and_fails() {
    let hog = load(HOG);
    let small = TaskEnv {
        limits: Limits {
            memory_bytes: 16 << 20,
            ..Limits::default()
        },
        ..TaskEnv::default()
    };
    assert_eq!(
        hog.run("eat", small).await,
        RunOutcome::Failed("the capsule needed more memory than its limit of 16 MiB and was stopped".into())
    );
    assert_eq!(
        hog.run("eat", TaskEnv::default()).await,
        RunOutcome::Failed("the capsule needed more memory than its limit of 256 MiB and was stopped".into())
    );
    // An instance whose initial memory does not fit never starts.
    let tiny = TaskEnv {
        limits: Limits {
            memory_bytes: 1 << 10,
            ..Limits::default()
        },
        ..TaskEnv::default()
    };
    assert_eq!(
        load(ECHO).run("x", tiny).await,
        RunOutcome::Failed("the capsule needed more memory than its limit of 1 KiB and was stopped".into())
    );
}

#[tokio::test]
async fn cancel_stops_a_spinning_capsule_promptly() {
    // An engine of its own, so its epoch moves only for this guest.
    let engine = CapsuleEngine::new().unwrap_or_else(|e| panic!("{e}"));
    let spin = Capsule::load(&engine, SPIN).unwrap_or_else(|e| panic!("{e}"));
    let env = with_budget(Duration::from_secs(30));
    let cancel = env.cancel.clone();
    let (outcome, ()) = tokio::join!(spin.run("spin", env), async {
        // Once the guest spins (its engine's epoch has moved), not after a guessed delay.
        while engine.ticks() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    });
    // Canceled, not the 30 s budget's failure: the cancel stopped it. How soon is a speed.
    assert_eq!(outcome, RunOutcome::Canceled);
    assert_eq!(
        load(ECHO).run("after", TaskEnv::default()).await,
        RunOutcome::Completed("after".into())
    );
}

#[tokio::test]
async fn a_task_cancelled_before_it_starts_never_runs() {
    let env = TaskEnv::default();
    env.cancel.cancel();
    assert_eq!(load(ECHO).run("x", env).await, RunOutcome::Canceled);
}

#[tokio::test]
async fn identity_and_the_peers_variable_reach_the_component() {
    let probe = load(PROBE);
    assert_eq!(
        probe.run("", TaskEnv::default()).await,
        RunOutcome::Completed("formation=- member=- env=".into()),
        "outside a formation: no identity and an empty environment"
    );
    let env = TaskEnv {
        formation_id: Some("frm_0199c4e2f1b7712a9d3e4f5061728394".into()),
        member_name: Some("lead".into()),
        peers_env: Some("coder=http://coder.formation.invalid reviewer=http://reviewer.formation.invalid".into()),
        ..TaskEnv::default()
    };
    assert_eq!(
        probe.run("", env).await,
        RunOutcome::Completed(
            "formation=frm_0199c4e2f1b7712a9d3e4f5061728394 member=lead env=MURMUR_FORMATION_PEERS=coder=http://coder.formation.invalid reviewer=http://reviewer.formation.invalid".into()
        )
    );
}

/// Member calls that answer from a script and record what they were asked.
struct Scripted {
    outcome: CallOutcome,
    started: Mutex<Vec<(String, String)>>,
}

impl MemberCalls for Scripted {
    fn start<'a>(&'a self, member: &'a str, task: &'a str) -> BoxFuture<'a, Result<String, String>> {
        crate::sync::lock(&self.started).push((member.into(), task.into()));
        let id = self.outcome.call_id.clone();
        Box::pin(async move { Ok(id) })
    }

    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        let outcome = self.outcome.clone();
        Box::pin(async move {
            // A callee takes a while; the guest waits on the host meanwhile.
            tokio::time::sleep(Duration::from_millis(20)).await;
            vec![outcome]
        })
    }
}

fn scripted(status: CallStatus, output: &str) -> Arc<Scripted> {
    Arc::new(Scripted {
        outcome: CallOutcome {
            call_id: "mcl_0199c4e2f1b7712a9d3e4f5061728394".into(),
            member: "worker".into(),
            status,
            output: output.into(),
            truncated: false,
            asked_by: Vec::new(),
        },
        started: Mutex::new(Vec::new()),
    })
}

#[tokio::test]
async fn member_calls_go_through_the_host() {
    let relay = load(RELAY);
    // The default: a capsule that may call nobody gets the dispatch error as a failure.
    assert_eq!(
        relay.run("sum 2 and 2", TaskEnv::default()).await,
        RunOutcome::Failed("'worker' is not a member this capsule may call; it may call no member".into())
    );

    let calls = scripted(CallStatus::Completed, "4 — vier");
    let env = TaskEnv {
        calls: calls.clone(),
        ..TaskEnv::default()
    };
    assert_eq!(
        relay.run("sum 2 and 2", env).await,
        RunOutcome::Completed("4 — vier".into())
    );
    let started = crate::sync::lock(&calls.started).clone();
    assert_eq!(started, [("worker".to_string(), "sum 2 and 2".to_string())]);

    let env = TaskEnv {
        calls: scripted(CallStatus::NoAnswer, "nothing to say"),
        ..TaskEnv::default()
    };
    assert_eq!(relay.run("x", env).await, RunOutcome::NoAnswer("nothing to say".into()));
    let env = TaskEnv {
        calls: scripted(CallStatus::TimedOut, "no answer in time"),
        ..TaskEnv::default()
    };
    assert_eq!(
        relay.run("x", env).await,
        RunOutcome::Failed("no answer in time".into())
    );
}

/// Member calls whose `await-all` never returns, as when callees are slow.
/// Calls that never answer; `waiting` is notified once the guest waits on them.
#[derive(Default)]
struct Hanging {
    waiting: tokio::sync::Notify,
}

impl MemberCalls for Hanging {
    fn start<'a>(&'a self, _member: &'a str, _task: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async { Ok("mcl_x".to_string()) })
    }
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        self.waiting.notify_one();
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn cancel_and_budget_reach_a_component_waiting_on_the_host() {
    let relay = load(RELAY);
    let env = TaskEnv {
        calls: Arc::new(Hanging::default()),
        ..with_budget(Duration::from_millis(300))
    };
    assert_eq!(
        relay.run("x", env).await,
        RunOutcome::Failed("the capsule ran longer than its time budget of 300 ms and was stopped".into())
    );
    let hanging = Arc::new(Hanging::default());
    let env = TaskEnv {
        calls: hanging.clone(),
        ..with_budget(Duration::from_secs(30))
    };
    let cancel = env.cancel.clone();
    let (outcome, ()) = tokio::join!(relay.run("x", env), async {
        hanging.waiting.notified().await;
        cancel.cancel();
    });
    // Canceled rather than failed at the 30 s budget: the cancel reached the waiting guest.
    assert_eq!(outcome, RunOutcome::Canceled);
}

/// A board running one task, and the asker of that task.
async fn asking(timeout: Duration) -> (Arc<crate::tasks::Board>, String, crate::tasks::Asker) {
    let board = crate::tasks::Board::new(crate::manifest::Acceptance::Queue, 1);
    board.submit_local("the task");
    let work = board.next_work().await.expect("the task runs");
    let id = work.task_id.clone();
    // The slot stays taken for the test's length; the work only has to leave the queue.
    std::mem::forget(work);
    let asker = crate::tasks::Asker::new(Arc::clone(&board), &id, Some("coder".into()), timeout);
    (board, id, asker)
}

fn with_asker(asker: &crate::tasks::Asker, budget: Duration) -> TaskEnv {
    TaskEnv {
        asker: Some(asker.clone()),
        ..with_budget(budget)
    }
}

/// The caller answers `text` once the task asks, after letting `wait` pass.
async fn answer_after(board: &crate::tasks::Board, id: &str, wait: Duration, text: &str) -> String {
    let asking = board.wait_settled(id).await.expect("the task is known");
    assert_eq!(asking.state, crate::tasks::TaskState::InputRequired);
    tokio::time::sleep(wait).await;
    board.answer(id, text, "m2", |_| true).expect("the answer is taken");
    asking.status_text.unwrap_or_default()
}

#[tokio::test]
async fn a_component_asks_and_gets_the_answer_as_sent_and_the_wait_costs_no_budget() {
    let ask = load(ASK);
    let (board, id, asker) = asking(Duration::from_secs(30)).await;
    let answer = "blue <b>— not fenced</b>";
    // The caller takes longer to answer than the whole budget: only the guest's own time counts.
    let budget = Duration::from_millis(100);
    let (outcome, question) = tokio::join!(
        ask.run("which colour?", with_asker(&asker, budget)),
        answer_after(&board, &id, budget * 3, answer)
    );
    assert_eq!(
        (outcome, question.as_str()),
        (RunOutcome::Completed(answer.into()), "which colour?")
    );
    let t = board.get(&id).expect("task");
    assert_eq!(t.state, crate::tasks::TaskState::Working, "answered, back at work");
    assert!(t.asked_by.is_empty());
}

#[tokio::test]
async fn a_component_that_may_not_ask_or_asks_nothing_gets_an_error_and_goes_on() {
    let ask = load(ASK);
    assert_eq!(
        ask.run("which colour?", TaskEnv::default()).await,
        RunOutcome::Failed(
            "request-input is not available: this capsule's murmur.yaml sets no lifecycle.input_timeout_secs".into()
        )
    );
    let (board, id, asker) = asking(Duration::from_secs(30)).await;
    let long = "?".repeat(crate::tasks::ask::MAX_QUESTION_BYTES + 1);
    for (question, why) in [
        (" ", "the question is empty: say what you need to know".to_string()),
        (
            long.as_str(),
            format!(
                "the question is {} bytes, more than the 16384 a question may hold; ask it shorter",
                long.len()
            ),
        ),
    ] {
        assert_eq!(
            ask.run(question, with_asker(&asker, Duration::from_secs(30))).await,
            RunOutcome::Failed(format!("request-input asked nothing: {why}"))
        );
    }
    assert_eq!(
        board.get(&id).map(|t| t.state),
        Some(crate::tasks::TaskState::Working),
        "nothing was asked"
    );
}

#[tokio::test]
async fn an_unanswered_question_fails_the_task_with_e_ask_001() {
    let ask = load(ASK);
    let timeout = Duration::from_millis(50);
    let (board, id, asker) = asking(timeout).await;
    assert_eq!(
        ask.run("which colour?", with_asker(&asker, Duration::from_secs(30)))
            .await,
        RunOutcome::Failed(crate::tasks::ask::no_answer_text(timeout))
    );
    assert!(crate::tasks::ask::no_answer_text(timeout).starts_with("error[E-ASK-001]"));
    // The question is withdrawn: a late answer is refused, and the guest never saw one.
    assert!(matches!(
        board.answer(&id, "late", "m2", |_| true),
        Err(crate::tasks::AnswerRefusal::NotAsking(_))
    ));
}

#[tokio::test]
async fn a_task_cancelled_while_its_component_waits_for_an_answer_ends_canceled() {
    let ask = load(ASK);
    // Through the board (CancelTask, the deadline): the question ends with the task.
    // Canceled rather than failed at the 30 s budget: the cancel ended it, whenever it came.
    let (board, id, asker) = asking(Duration::from_secs(30)).await;
    let (outcome, ()) = tokio::join!(
        ask.run("which colour?", with_asker(&asker, Duration::from_secs(30))),
        async {
            board.wait_settled(&id).await;
            board.cancel(&id, "canceled by the caller");
        }
    );
    assert_eq!(outcome, RunOutcome::Canceled);
    // Through the task's own signal, the question still open.
    let (board, id, asker) = asking(Duration::from_secs(30)).await;
    let env = with_asker(&asker, Duration::from_secs(30));
    let cancel = env.cancel.clone();
    let (outcome, ()) = tokio::join!(ask.run("which colour?", env), async {
        board.wait_settled(&id).await;
        cancel.cancel();
    });
    assert_eq!(outcome, RunOutcome::Canceled);
}

#[test]
fn load_refuses_what_is_not_a_capsule() {
    let table: &[(&[u8], &str)] = &[
        (
            b"not wasm at all",
            "the capsule is not a WebAssembly component this runtime can compile: ",
        ),
        (
            b"(module)",
            "the capsule is not a WebAssembly component this runtime can compile: ",
        ),
        (
            b"(component)",
            "the capsule does not export `run: func(task: string) -> result<string, failure>` of world murmur:capsule/capsule@0.1.0: ",
        ),
        (
            b"(component (import \"acme:secret/vault@1.0.0\" (instance (export \"open\" (func)))))",
            "the capsule needs something this runtime does not provide: ",
        ),
    ];
    for (bytes, prefix) in table {
        match Capsule::load(engine(), bytes) {
            Ok(_) => panic!("{} loaded", String::from_utf8_lossy(bytes)),
            Err(e) => assert!(e.starts_with(prefix), "{e}"),
        }
    }
}

#[tokio::test]
async fn several_tasks_share_one_engine_at_once() {
    let echo = load(ECHO);
    let spin = load(SPIN);
    let (a, b, c) = tokio::join!(
        spin.run("s", with_budget(Duration::from_millis(300))),
        echo.run("one", TaskEnv::default()),
        echo.run("two", TaskEnv::default()),
    );
    assert!(matches!(a, RunOutcome::Failed(_)), "{a:?}");
    assert_eq!(
        (b, c),
        (RunOutcome::Completed("one".into()), RunOutcome::Completed("two".into()))
    );
}

/// Not a check: prints what compiling and running cost in this (debug) build.
/// `cargo test --workspace --lib capsule::tests::measure -- --ignored --nocapture`
#[tokio::test]
#[ignore]
async fn measure() {
    let engine = CapsuleEngine::new().unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let echo = Capsule::load(&engine, ECHO).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("compile echo: {:?}", t.elapsed());
    for _ in 0..10 {
        echo.run("warm", TaskEnv::default()).await;
    }
    let n = 200;
    let t = Instant::now();
    for _ in 0..n {
        echo.run("hello", TaskEnv::default()).await;
    }
    eprintln!("instantiate + run echo: {:?} per task", t.elapsed() / n);
}

const SHOUT: &[u8] = wat!("src/capsule/testdata/shout.wat");

#[tokio::test]
async fn stdout_goes_to_the_sink_within_the_task_cap() {
    let shout = load(SHOUT);
    let (sink, log) = OutputSink::memory();
    let env = TaskEnv {
        output: sink.clone(),
        ..TaskEnv::default()
    };
    assert_eq!(
        shout.run("héllo stdout\n", env).await,
        RunOutcome::Completed("ok".into())
    );
    assert_eq!(log.text(), "héllo stdout\n");
    let capped = TaskEnv {
        output: sink,
        limits: Limits {
            output_bytes: 5,
            ..Limits::default()
        },
        ..TaskEnv::default()
    };
    assert_eq!(
        shout.run("0123456789", capped).await,
        RunOutcome::Completed("ok".into())
    );
    assert_eq!(
        log.text(),
        "héllo stdout\n01234\n[capsule output cut at 5 bytes for this task]\n"
    );
}

#[test]
fn capsules_and_task_futures_can_move_across_threads() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_shared<T: Send + Sync + Clone>(_: &T) {}
    let echo = load(ECHO);
    assert_shared(&echo);
    assert_shared(engine());
    let task = echo.run("x", TaskEnv::default());
    assert_send(&task);
}

/// A component whose core module declares `tables` (WAT table definitions) and whose `run` grows
/// table `$t` by `step` elements until refused, then traps; a `step` of 0 traps at once. `extra`
/// is more component text (modules and their instances).
fn table_component(tables: &str, step: u32, extra: &str) -> String {
    format!(
        r#"(component
  (core module $m
    (memory (export "memory") 1)
    (table $t 0 funcref)
    {tables}
    (global $heap (mut i32) (i32.const 1024))
    ;; A bump allocator for the task text, which is small here.
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
      (local $ptr i32)
      (local.set $ptr (global.get $heap))
      (global.set $heap (i32.add (global.get $heap) (i32.add (local.get 3) (i32.const 8))))
      (local.get $ptr))
    (func (export "run") (param i32 i32) (result i32)
      (if (i32.ne (i32.const {step}) (i32.const 0))
        (then
          (loop $more
            (br_if $more (i32.ne (table.grow $t (ref.null func) (i32.const {step})) (i32.const -1))))))
      unreachable))
  (core instance $i (instantiate $m))
  {extra}
  (alias core export $i "memory" (core memory $memory))
  (alias core export $i "cabi_realloc" (core func $realloc))
  (alias core export $i "run" (core func $run-core))
  (type $failure-def (variant (case "error" string) (case "no-answer" string)))
  (export $failure "failure" (type $failure-def))
  (type $run-type (func (param "task" string) (result (result string (error $failure)))))
  (func $run (type $run-type) (canon lift (core func $run-core) (memory $memory) (realloc $realloc)))
  (export "run" (func $run)))"#
    )
}

/// Table elements count against the memory limit with linear memory: declared or grown, a
/// table that does not fit is refused, whatever the number of tables.
#[tokio::test]
async fn tables_count_against_the_memory_limit() {
    let million = "(table 1000000 funcref)";
    let env = || TaskEnv {
        limits: Limits {
            memory_bytes: 16 << 20,
            ..Limits::default()
        },
        ..TaskEnv::default()
    };
    let refused = RunOutcome::Failed("the capsule needed more memory than its limit of 16 MiB and was stopped".into());
    // (tables declared, growth step of `run`, outcome)
    let trapped = RunOutcome::Failed("the capsule trapped: wasm `unreachable` instruction executed".into());
    let table: Vec<(String, u32, &RunOutcome)> = vec![
        // One table of a million pointers fits in 16 MiB; three do not.
        (million.into(), 0, &trapped),
        (million.repeat(3), 0, &refused),
        // Growing by a million at a time stops at the limit.
        (String::new(), 1_000_000, &refused),
        (String::new(), 4096, &refused),
        // A table larger than the host can address is refused too.
        ("(table 0xffffffff funcref)".into(), 0, &refused),
    ];
    for (tables, step, want) in table {
        let wat = table_component(&tables, step, "");
        let outcome = load(wat.as_bytes()).run("t", env()).await;
        assert_eq!(
            &outcome,
            want,
            "{} table(s) declared, growing by {step}",
            tables.matches("table").count()
        );
    }
    // More tables, or more instances, than a store may hold never instantiate: 1 + 2 × 60
    // tables; 1 + 100 instances.
    let sixty = format!(
        "(core module $tabs {}) (core instance (instantiate $tabs)) (core instance (instantiate $tabs))",
        "(table 0 funcref)".repeat(60)
    );
    let hundred = format!(
        "(core module $empty) {}",
        "(core instance (instantiate $empty))".repeat(100)
    );
    for (extra, what) in [(sixty, "table"), (hundred, "instance")] {
        match load(table_component("", 0, &extra).as_bytes()).run("t", env()).await {
            RunOutcome::Failed(why) => assert!(why.contains(what), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
