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
        // The component toolchains first: the capsules built with them feed the longest tests.
        spawn(|| {
            toolchains::python_capsule();
        });
        spawn(|| {
            toolchains::javascript_capsule();
        });
        spawn(|| {
            let rust = debian_rust::debian_rust();
            // The standard library from its sources and the scaffold's dependencies: minutes of
            // CPU, built once into the target directory every Rust build of the suite shares.
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
        });
        spawn(|| {
            chromium::chromium();
        });
        // One thread per environment: each is its own venv under its own lock, and one after
        // another they kept the last (the deploy tests' schema checker) minutes behind the first.
        for set in [
            pins::A2A_PY,
            mcp::MCP_SDK,
            pins::PROVIDER_SDKS,
            pins::JSONSCHEMA,
            pins::KUBERNETES_VALIDATE,
        ] {
            spawn(move || {
                python_with(set, "sys");
            });
        }
        spawn(|| {
            toolchains::node_with(pins::A2A_JS);
        });
    });
}

/// A failure here is the failure of the test that needs the part, which provisions it again and
/// reports it; this thread only started early.
fn spawn(f: impl FnOnce() + Send + std::panic::UnwindSafe + 'static) {
    let started = std::thread::Builder::new()
        .name("warm-up".into())
        .spawn(move || drop(std::panic::catch_unwind(f)));
    drop(started);
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
