//! Provisioning the slow third-party parts early, when the whole suite runs.
//!
//! libtest starts tests in name order, a few at a time, and each toolchain or SDK is provisioned
//! by the first test that needs it: Chromium for `ui::`, the Python and JavaScript component
//! toolchains for `languages::` and `tools::`, and so on, each behind every test before it. They
//! mostly wait on downloads and on the programs they run, so the first sandbox of an unfiltered
//! run starts one thread per family that provisions them all at once, and a test that needs one
//! finds it ready, or waits on the same lock as before for the thread making it. A run filtered
//! to some tests (`cargo test --workspace --test it ui::`) provisions only what they ask for.

use std::sync::Once;

use super::{Sandbox, chromium, debian_rust, mcp, pins, python::python_with, toolchains};

static STARTED: Once = Once::new();

/// Starts the provisioning threads, once per test binary, unless the run is filtered or
/// `MUR_TEST_NO_WARM_UP` is set.
pub fn begin() {
    STARTED.call_once(|| {
        if std::env::var_os("MUR_TEST_NO_WARM_UP").is_some() || filtered(std::env::args().skip(1)) {
            return;
        }
        for (_, job) in jobs() {
            spawn(job);
        }
    });
}

type Job = Box<dyn FnOnce() + Send + std::panic::UnwindSafe + 'static>;

/// What a whole run provisions, by name, each on a thread of its own.
fn jobs() -> Vec<(&'static str, Job)> {
    let mut jobs: Vec<(&'static str, Job)> = vec![
        // The component toolchains first: the capsules built with them feed the longest tests.
        (
            "the Python component toolchain",
            Box::new(|| drop(toolchains::python_capsule())),
        ),
        (
            "the JavaScript component toolchain",
            Box::new(|| drop(toolchains::javascript_capsule())),
        ),
        (
            "Debian's Rust and the scaffold's build",
            Box::new(|| {
                let rust = debian_rust::debian_rust();
                // The standard library from its sources and the scaffold's dependencies: minutes
                // of CPU, built once into the target directory every Rust build of the suite
                // shares.
                let sb = Sandbox::new();
                let made = sb.run(sb.dir.path(), &["new", "--capsule", "warm-up", "--lang", "rust"]);
                if made.status.success() {
                    rust.share_target(&sb.dir.path().join("warm-up"));
                    let _ = sb
                        .mur(sb.dir.path())
                        .env("PATH", toolchains::path_with(&rust.bin))
                        .env("CARGO_HOME", &rust.cargo_home)
                        .args(["build", "warm-up"])
                        .output();
                }
            }),
        ),
        ("Chromium", Box::new(|| drop(chromium::chromium()))),
        (
            "the A2A JavaScript SDK",
            Box::new(|| drop(toolchains::node_with(pins::A2A_JS))),
        ),
    ];
    // One thread per environment: each is its own venv under its own lock, and one after
    // another they kept the last (the deploy tests' schema checker) minutes behind the first.
    for (name, set) in [
        ("the A2A Python SDK", pins::A2A_PY),
        ("the MCP Python SDK", mcp::MCP_SDK),
        ("the providers' SDKs", pins::PROVIDER_SDKS),
        ("jsonschema", pins::JSONSCHEMA),
        ("kubernetes-validate", pins::KUBERNETES_VALIDATE),
    ] {
        jobs.push((name, Box::new(move || drop(python_with(set, "sys")))));
    }
    jobs
}

/// A failure here is the failure of the test that needs the part, which provisions it again and
/// reports it; this thread only started early.
fn spawn(f: Job) {
    let started = std::thread::Builder::new()
        .name("warm-up".into())
        .spawn(move || drop(std::panic::catch_unwind(f)));
    drop(started);
}

/// Not a check: every part a whole run provisions, at once, waited for. `.ci/run` starts it as
/// soon as this binary is built, so the downloads overlap compiling the rest of the targets and
/// the suite finds them ready (each part is provisioned under a lock file, so a test that needs
/// one meanwhile waits for it). Fails naming the parts that could not be provisioned.
#[test]
#[ignore = "provisioning, run by .ci/run while the other targets build"]
fn provision_everything() {
    let running: Vec<_> = jobs()
        .into_iter()
        .map(|(name, job)| (name, std::thread::spawn(job)))
        .collect();
    let failed: Vec<&str> = running
        .into_iter()
        .filter_map(|(name, handle)| handle.join().is_err().then_some(name))
        .collect();
    assert!(failed.is_empty(), "could not provision: {}", failed.join(", "));
}

/// Whether libtest's arguments select some tests only: a name filter, `--exact`, `--skip`, or
/// ignored tests alone.
fn filtered(mut args: impl Iterator<Item = String>) -> bool {
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--exact" | "--skip" | "--ignored" | "--list" => return true,
            // Options whose value is the next argument.
            "--test-threads" | "--logfile" | "--format" | "--color" | "--shuffle-seed" | "-Z" => {
                args.next();
            }
            other if other.starts_with('-') => {}
            _ => return true,
        }
    }
    false
}

#[test]
fn only_a_whole_suite_run_is_unfiltered() {
    let run = |args: &[&str]| filtered(args.iter().map(|a| a.to_string()));
    assert!(!run(&[]));
    assert!(!run(&[
        "--test-threads",
        "4",
        "--nocapture",
        "--color=never",
        "-Z",
        "unstable-options"
    ]));
    assert!(!run(&["--report-time", "--format", "pretty"]));
    assert!(run(&["ui::"]));
    assert!(run(&["--test-threads", "2", "languages::"]));
    assert!(run(&["--exact", "a2a::x"]));
    assert!(run(&["--skip", "ui::"]));
    assert!(run(&["--ignored"]));
}
