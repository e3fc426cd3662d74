//! Tests whose real check needs something a run may lack: root (a second user, namespaces, a
//! bind mount). Such a test never passes quietly without its check: it fails and says what it
//! needs, unless the run was told to skip for want of it (`MUR_TEST_SKIP=root`, a comma-separated
//! list), and then the skip is recorded in `target/test-skips.txt`, which `.ci/run` prints in its
//! summary.

use std::io::Write;

use super::toolchains::target_dir;

/// Why this process cannot act as root, if it cannot.
pub fn not_root() -> Option<String> {
    (!nix::unistd::geteuid().is_root()).then(|| "not root".to_string())
}

/// Whether the calling test must return without its check: `Some(why)` is what it lacks, `need`
/// the name a skip list uses for it. Fails the test unless `MUR_TEST_SKIP` names `need`.
pub fn skip_for_want_of(need: &str, why: Option<String>) -> bool {
    let Some(why) = why else {
        return false;
    };
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if !skips_allowed(std::env::var("MUR_TEST_SKIP").ok().as_deref(), need) {
        panic!(
            "{test} needs {need} for its real check and cannot make it here ({why}); run the tests \
             as root, or set MUR_TEST_SKIP={need} to skip such checks on purpose"
        );
    }
    eprintln!("skipped on purpose (MUR_TEST_SKIP={need}): {test}: {why}");
    let record = target_dir().join("test-skips.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&record) {
        let _ = writeln!(f, "{test}: needs {need} ({why})");
    }
    true
}

/// Whether the skip list `list` names `need`.
fn skips_allowed(list: Option<&str>, need: &str) -> bool {
    list.is_some_and(|l| l.split(',').any(|n| n.trim() == need))
}

#[test]
fn a_skip_is_allowed_only_for_what_the_list_names() {
    assert!(!skips_allowed(None, "root"));
    assert!(!skips_allowed(Some(""), "root"));
    assert!(!skips_allowed(Some("rooted"), "root"));
    assert!(skips_allowed(Some("root"), "root"));
    assert!(skips_allowed(Some("chromium, root"), "root"));
}

#[test]
fn a_check_that_cannot_run_fails_unless_skipped_on_purpose() {
    assert!(!skip_for_want_of("root", None), "nothing lacking: the check runs");
    if std::env::var_os("MUR_TEST_SKIP").is_none() {
        let failed = std::panic::catch_unwind(|| skip_for_want_of("root", Some("not root".into())));
        let message = failed.expect_err("a lacking check fails the test");
        let text = message.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("MUR_TEST_SKIP=root"), "{text}");
    }
}
