//! The compiled-component cache (issue 19, item 2), through the real binary: `mur install`
//! compiles a component into `~/.murmur/compiled`, a launch loads it and compiles nothing, and an
//! entry that is truncated, foreign, in a project directory or in a directory others may write is
//! never trusted. What a process did is read from its `RUST_LOG=mur=debug` lines: `compiled
//! component <sha12>` or `loaded compiled <sha12>`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::{Sandbox, stderr, stdout};

const ECHO: &str = "actors/echo/capsule.wat";
/// Answers `ok` whatever its task: an echo that answers `ok` ran shout's code.
const SHOUT: &str = "src/capsule/testdata/shout.wat";

/// What one launch did with the cache.
#[derive(Debug, PartialEq, Eq)]
enum Did {
    Compiled,
    Loaded,
}

/// Runs `mur run --capsule local/<name> --task hi` in `cwd`; checks it answered `want` and
/// returns what it did with the cache and its stderr.
#[track_caller]
fn launch(sb: &Sandbox, cwd: &Path, name: &str, want: &str) -> (Did, String) {
    let o = sb
        .mur(cwd)
        .args([
            "run",
            "--capsule",
            &format!("local/{name}"),
            "--capsule-version",
            "0.1.0",
        ])
        .args(["--task", "hi"])
        .env("RUST_LOG", "mur=debug")
        .output()
        .expect("spawn mur");
    let err = stderr(&o);
    assert_eq!(stdout(&o), format!("{want}\n"), "{err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
    let compiled = err.matches("compiled component ").count();
    let loaded = err.matches("loaded compiled ").count();
    let did = match (compiled, loaded) {
        (1, 0) => Did::Compiled,
        (0, 1) => Did::Loaded,
        _ => panic!("one compile or one load expected, found {compiled} and {loaded}: {err}"),
    };
    (did, err)
}

fn cache_dir(sb: &Sandbox) -> PathBuf {
    sb.home().join(".murmur/compiled")
}

/// The `(entry, record)` files in the cache, sorted.
fn entries(dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.extension().is_some_and(|e| e == "cwasm"));
    found.sort();
    found
        .into_iter()
        .map(|p| {
            let sum = p.with_extension("sum");
            (p, sum)
        })
        .collect()
}

/// The one entry in the cache.
#[track_caller]
fn only_entry(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let all = entries(&cache_dir(sb));
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().expect("one entry")
}

#[test]
fn install_compiles_once_and_every_launch_loads_it() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let (entry, record) = only_entry(&sb);
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&cache_dir(&sb)), 0o700);
    assert_eq!((mode(&entry), mode(&record)), (0o600, 0o600));
    let stamp = std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime");
    for _ in 0..2 {
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    }
    assert_eq!(
        std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime"),
        stamp,
        "a load rewrites nothing"
    );

    // Without the cache the first launch compiles and stores, the next one loads.
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    let (did, first) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled);
    let (did, second) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Loaded);
    let sha = |err: &str, what: &str| {
        let at = err.find(what).expect("log line") + what.len();
        err[at..at + 12].to_string()
    };
    assert_eq!(sha(&first, "compiled component "), sha(&second, "loaded compiled "));
    assert_eq!(only_entry(&sb).0, entry, "the same key names the entry");
}

#[test]
fn list_shows_whether_each_component_is_compiled() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    sb.install_manifest("plain", "name: plain\nversion: 0.1.0\n");
    let list = |sb: &Sandbox| -> Vec<String> {
        let o = sb.run(&cwd, &["list"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
            .lines()
            .map(|l| l.rsplit("  ").next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(list(&sb), ["compiled", "-"]);
    let o = sb.run(&cwd, &["list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    assert_eq!(
        (&v["artifacts"][0]["compiled"], &v["artifacts"][1]["compiled"]),
        (&serde_json::json!(true), &serde_json::Value::Null),
        "{v}"
    );
    let (entry, _) = only_entry(&sb);
    std::fs::remove_file(&entry).expect("rm entry");
    assert_eq!(list(&sb), ["not-compiled", "-"]);
    launch(&sb, &cwd, "echo", "hi");
    assert_eq!(list(&sb), ["compiled", "-"]);
}

#[test]
fn a_truncated_entry_is_compiled_again_and_replaced() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let (entry, _) = only_entry(&sb);
    let whole = std::fs::read(&entry).expect("entry");
    for cut in [whole.len() / 2, 0] {
        std::fs::write(&entry, &whole[..cut]).expect("truncate");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled, "cut at {cut}");
        assert_eq!(std::fs::read(&entry).expect("entry").len(), whole.len(), "replaced");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    }
    // A record cut short is as bad as an entry cut short.
    let (_, record) = only_entry(&sb);
    let text = std::fs::read(&record).expect("record");
    std::fs::write(&record, &text[..text.len() / 2]).expect("truncate record");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled);
    assert_eq!(std::fs::read(&record).expect("record"), text);
}

#[test]
fn a_foreign_or_random_entry_is_compiled_again_never_run() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("shout", SHOUT, "");
    let (shout_entry, shout_record) = only_entry(&sb);
    sb.install_component("echo", ECHO, "");
    let (entry, record) = entries(&cache_dir(&sb))
        .into_iter()
        .find(|(e, _)| *e != shout_entry)
        .expect("echo's entry");
    let (echo_bytes, echo_record) = (
        std::fs::read(&entry).expect("entry"),
        std::fs::read(&record).expect("record"),
    );
    let shout_bytes = std::fs::read(&shout_entry).expect("shout entry");
    let random: Vec<u8> = (0..echo_bytes.len()).map(|i| (i * 7919 % 251) as u8).collect();
    // Each planted (entry, record) would run other code than echo's, or none; echo must still
    // answer `hi`, not shout's `ok`.
    let plants: [(&str, &[u8], Vec<u8>); 4] = [
        (
            "shout's entry and record",
            &shout_bytes,
            std::fs::read(&shout_record).expect("record"),
        ),
        ("shout's entry, echo's record", &shout_bytes, echo_record.clone()),
        ("random bytes of the right length", &random, echo_record.clone()),
        (
            "echo's entry, garbage record",
            &echo_bytes,
            b"mur-compiled 1\nid x\n".to_vec(),
        ),
    ];
    for (what, bytes, rec) in plants {
        std::fs::write(&entry, bytes).expect("plant entry");
        std::fs::write(&record, &rec).expect("plant record");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled, "{what}");
        assert_eq!(std::fs::read(&entry).expect("entry"), echo_bytes, "{what}: replaced");
        assert_eq!(std::fs::read(&record).expect("record"), echo_record, "{what}: replaced");
    }
    assert_eq!(
        launch(&sb, &cwd, "shout", "ok").0,
        Did::Loaded,
        "shout's own entry is untouched"
    );
}

#[test]
fn a_compiled_entry_in_a_project_directory_is_ignored() {
    let sb = Sandbox::unshared();
    let proj = sb.path("proj");
    sb.write("proj/murmur.yaml", "name: proj\nversion: 0.1.0\n");
    sb.install_component("echo", ECHO, "");
    let zip = sb.dir.path().join("src/echo/echo-0.1.0.mur.zip");
    let o = sb.run(&proj, &["install", zip.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !proj.join(".murmur/compiled").exists(),
        "install writes native code only to the home"
    );
    // The user's entry moves into the project, where the project store and lock live.
    let (entry, record) = only_entry(&sb);
    let planted = proj.join(".murmur/compiled");
    std::fs::create_dir_all(&planted).expect("mkdir");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    for f in [&entry, &record] {
        std::fs::rename(f, planted.join(f.file_name().expect("name"))).expect("move");
    }
    assert_eq!(launch(&sb, &proj, "echo", "hi").0, Did::Compiled);
    assert_eq!(launch(&sb, &proj, "echo", "hi").0, Did::Loaded, "from the home");
    assert_eq!(entries(&planted).len(), 1, "the project's copy is left alone");
}

#[test]
fn a_cache_directory_others_may_write_is_not_trusted() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let dir = cache_dir(&sb);
    let (entry, _) = only_entry(&sb);
    let stamp = std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime");
    for mode in [0o777, 0o770, 0o702] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let (did, err) = launch(&sb, &cwd, "echo", "hi");
        assert_eq!(did, Did::Compiled, "mode {mode:o}");
        assert_eq!(err.matches("warning[W-CMP-001]").count(), 1, "mode {mode:o}: {err}");
        assert!(err.contains(&format!("{} is not used", dir.display())), "{err}");
        assert_eq!(
            std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime"),
            stamp,
            "nothing is written into an untrusted directory"
        );
        let o = sb.run(&cwd, &["list"]);
        assert!(stdout(&o).ends_with("  not-compiled\n"), "{}", stdout(&o));
    }
    // A symlink to a directory of the user's own is not the cache either.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let real = sb.path("elsewhere");
    std::fs::rename(&dir, real.join("compiled")).expect("move");
    std::os::unix::fs::symlink(real.join("compiled"), &dir).expect("symlink");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled);
    assert!(err.contains("warning[W-CMP-001]"), "{err}");
    // Put back as it should be, it is used again.
    std::fs::remove_file(&dir).expect("rm link");
    std::fs::rename(real.join("compiled"), &dir).expect("move back");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
}

#[test]
fn members_missing_at_once_leave_one_whole_entry() {
    let sb = Sandbox::unshared();
    sb.install_component("echo", ECHO, "");
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    let mut roster = String::from("roster_version: 1\nmembers:\n");
    for i in 0..4 {
        roster.push_str(&format!(
            "  - name: m{i}\n    capsule: local/echo\n    version: 0.1.0\n{}",
            if i == 0 { "    entry: true\n" } else { "" }
        ));
    }
    sb.write("f/roster.yaml", &roster);
    let dir = sb.path("f");
    let o = sb.run(&dir, &["run", "--roster", "--task", "hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("hi"), "{}", stdout(&o));
    // Whoever renamed last, the entry is whole and the next launch loads it.
    only_entry(&sb);
    let leftovers: Vec<_> = std::fs::read_dir(cache_dir(&sb))
        .expect("cache")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(launch(&sb, &sb.path("w"), "echo", "hi").0, Did::Loaded);
}

/// Ownership needs a second user: only root can hand a file to one, so elsewhere this test fails
/// unless the run skips such checks on purpose.
#[test]
fn a_cache_owned_by_another_user_is_not_trusted() {
    use nix::unistd::{Gid, Uid, chown};
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    if crate::support::needs::skip_for_want_of("root", crate::support::needs::not_root()) {
        return;
    }
    let nobody = (Some(Uid::from_raw(65534)), Some(Gid::from_raw(65534)));
    let (entry, record) = only_entry(&sb);
    // An entry or record of another user's is compiled again and replaced by one of this user's.
    for file in [&entry, &record] {
        chown(file, nobody.0, nobody.1).expect("chown");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled, "{}", file.display());
        let meta = std::fs::metadata(file).expect("stat");
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0, "replaced");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    }
    // A directory of another user's is not used at all.
    let dir = cache_dir(&sb);
    chown(&dir, nobody.0, nobody.1).expect("chown");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled);
    assert!(
        err.contains("warning[W-CMP-001]") && err.contains("owned by uid 65534"),
        "{err}"
    );
}

/// A hit is decided by the archive's sha256 alone: the component is neither inflated nor hashed.
/// The archive here holds a `capsule.wasm` that cannot be inflated (its CRC is wrong), and its
/// entry is planted (compiled from echo) under that archive's key: a member that reads the
/// component fails, one that does not answers `hi`.
#[test]
fn a_hit_does_not_read_the_component() {
    use mur::capsule::{CapsuleEngine, CompiledCache};
    use mur::store::{self, archive};
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let good = std::fs::read(sb.dir.path().join("src/echo/echo-0.1.0.mur.zip")).expect("zip");
    let crc = zip::ZipArchive::new(std::io::Cursor::new(&good[..]))
        .expect("zip")
        .by_name(archive::COMPONENT_ENTRY)
        .expect("capsule.wasm")
        .crc32();
    let mut damaged = good.clone();
    let (from, to) = (crc.to_le_bytes(), (crc ^ 1).to_le_bytes());
    let mut patched = 0;
    for i in 0..damaged.len() - 4 {
        if damaged[i..i + 4] == from {
            damaged[i..i + 4].copy_from_slice(&to);
            patched += 1;
        }
    }
    assert_eq!(patched, 2, "the local header's and the central directory's CRC");
    assert!(archive::open_index(&damaged).is_ok());
    let inflated = archive::read_component(&damaged).expect_err("a wrong CRC fails the read");
    let global = mur::paths::MurHome::at_home(&sb.home()).artifacts();
    let (_, sha) = store::install(&global, &mur::names::ArtifactName::local("echo"), "0.1.0", &damaged)
        .expect("store the damaged archive");

    // Planted as a miss would have written it, had the component read.
    let wat = std::fs::read(crate::support::repo_root().join(ECHO)).expect("echo");
    let engine = CapsuleEngine::new().expect("engine");
    CompiledCache::at(cache_dir(&sb))
        .precompile(&engine, &sha, &wat)
        .expect("plant");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Loaded, "{err}");
    assert!(err.contains("capsule.wasm not read"), "{err}");
    assert!(!err.contains("read capsule.wasm of"), "{err}");

    // Without the entry the component is read, and its damage refuses the launch.
    for (entry, record) in entries(&cache_dir(&sb)) {
        std::fs::remove_file(entry).expect("rm entry");
        std::fs::remove_file(record).expect("rm record");
    }
    let o = sb
        .mur(&cwd)
        .args([
            "run",
            "--capsule",
            "local/echo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ])
        .output()
        .expect("spawn mur");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E-RUN-002]") && err.contains("its component cannot be read") && err.contains(&inflated),
        "{err}"
    );
}

/// The key is the archive's sha256: an archive reinstalled under the same name and version with
/// another component is another key, so the old entry is never run for it.
#[test]
fn a_reinstalled_archive_never_runs_the_old_entry() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    // local/echo@0.1.0 now holds shout's component; echo's entry stays in the cache.
    std::fs::remove_dir_all(sb.path("src/echo")).expect("rm src");
    sb.install_component("echo", SHOUT, "");
    assert_eq!(entries(&cache_dir(&sb)).len(), 2);
    assert_eq!(launch(&sb, &cwd, "echo", "ok").0, Did::Loaded);
    // Without its entry, the new archive is compiled, not served by the old one's.
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    assert_eq!(launch(&sb, &cwd, "echo", "ok").0, Did::Compiled);
}

/// `n` members of local/echo, the first the entry.
fn echo_formation(sb: &Sandbox, n: usize) -> PathBuf {
    let mut roster = String::from("roster_version: 1\nmembers:\n");
    for i in 0..n {
        roster.push_str(&format!(
            "  - name: m{i}\n    capsule: local/echo\n    version: 0.1.0\n{}",
            if i == 0 { "    entry: true\n" } else { "" }
        ));
    }
    sb.write("f/roster.yaml", &roster);
    sb.path("f")
}

/// The launcher compiles a missing component once, checks its entry once and hands it, open, to
/// every member running it: with an empty cache, four members mean one compilation; the entry
/// (its task now) maps the launcher's entry at once, and each peer (stderr relayed with its
/// name) keeps it for its first task, which never comes here.
#[test]
fn a_formation_compiles_each_component_once_and_hands_every_member_its_entry() {
    let sb = Sandbox::unshared();
    sb.install_component("echo", ECHO, "");
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    let dir = echo_formation(&sb, 4);
    for round in ["empty cache", "warm cache"] {
        let o = sb
            .mur(&dir)
            .args(["run", "--roster", "--task", "hi"])
            .env("RUST_LOG", "mur=debug")
            .output()
            .expect("spawn mur");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{round}: {err}");
        assert_eq!(stdout(&o), "hi\n", "{round}: {err}");
        let compiled = err.matches("compiled component ").count();
        assert_eq!(compiled, usize::from(round == "empty cache"), "{round}: {err}");
        assert_eq!(
            err.matches("from the launcher's descriptor").count(),
            1,
            "{round}: {err}"
        );
        assert_eq!(err.matches("loaded compiled ").count(), 1, "{round}: {err}");
        assert_eq!(
            err.matches("the handed compiled entry is mapped at the first task")
                .count(),
            3,
            "{round}: {err}"
        );
        assert!(!err.contains("loaded the deferred component"), "{round}: {err}");
        assert!(!err.contains("not used"), "{round}: {err}");
        only_entry(&sb);
    }
}

/// A member takes a handed descriptor only for its own key: one checked for another component (or
/// one that is no regular file) is not used, and the member checks the cache itself and runs its
/// own component (shout's code would answer `ok`).
#[test]
fn a_handed_entry_of_another_key_is_not_used() {
    use std::os::fd::AsRawFd;
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("shout", SHOUT, "");
    let (shout_entry, _) = only_entry(&sb);
    let shout_key = shout_entry
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("key")
        .to_string();
    sb.install_component("echo", ECHO, "");
    let echo_key = entries(&cache_dir(&sb))
        .into_iter()
        .map(|(e, _)| e.file_stem().and_then(|s| s.to_str()).expect("key").to_string())
        .find(|k| *k != shout_key)
        .expect("echo's entry");
    for (file, key, why) in [
        (&shout_entry, &shout_key, "checked for another archive"),
        (&PathBuf::from("/dev/null"), &echo_key, "not a regular file"),
    ] {
        let handed = std::fs::File::open(file).expect("open");
        let raw = handed.as_raw_fd();
        let mut cmd = sb.mur(&cwd);
        cmd.args([
            "run",
            "--capsule",
            "local/echo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ])
        .env("RUST_LOG", "mur=debug")
        .env("MURMUR_COMPILED_FD", raw.to_string())
        .env("MURMUR_COMPILED_KEY", key);
        // SAFETY: only an async-signal-safe fcntl runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let o = cmd.output().expect("spawn mur");
        let err = stderr(&o);
        assert_eq!(stdout(&o), "hi\n", "{err}");
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(err.contains("compiled entry is not used") && err.contains(why), "{err}");
        assert!(!err.contains("from the launcher's descriptor"), "{err}");
        assert_eq!(err.matches("loaded compiled ").count(), 1, "{err}");
    }
}

/// The parsed integrity record at `path`.
#[track_caller]
fn record_at(path: &Path) -> mur::compiled::Integrity {
    let text = std::fs::read_to_string(path).expect("record");
    mur::compiled::Integrity::parse(&text).expect("a record of this runtime's format")
}

/// Sets a cache file's mtime `ago` in the past (what a scan reads as age, or for a record, last use).
#[track_caller]
fn age(path: &Path, ago: std::time::Duration) {
    let f = std::fs::File::options().write(true).open(path).expect("open");
    f.set_modified(std::time::SystemTime::now() - ago).expect("set mtime");
}

fn mtime(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).expect("mtime")
}

/// Builds local/<name> from `wat` and runs `mur install -g` of it with `env`; returns its stderr.
fn install_with(sb: &Sandbox, name: &str, wat: &str, env: &[(&str, &str)]) -> String {
    let dir = sb.path(&format!("src/{name}"));
    let mut zip = dir.join(format!("{name}-0.1.0.mur.zip"));
    if !zip.exists() {
        zip = sb.build_component(name, wat, "");
    }
    let out = sb
        .mur(&dir)
        .args(["install", "-g", zip.to_str().expect("utf-8 path")])
        .env("RUST_LOG", "mur=debug")
        .envs(env.iter().copied())
        .output()
        .expect("spawn mur");
    assert!(out.status.success(), "mur install {name}: {}", stderr(&out));
    stderr(&out)
}

/// A record of format 1 (a sha256 of the entry, without the key's parts) is not read: its entry
/// is compiled again and the record rewritten in today's format.
#[test]
fn a_record_of_the_previous_format_is_compiled_again() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let (entry, record) = only_entry(&sb);
    let id = entry.file_stem().and_then(|s| s.to_str()).expect("id").to_string();
    let bytes = std::fs::read(&entry).expect("entry");
    let format_1 = format!(
        "mur-compiled 1\nid {id}\nlen {}\nsha256 {}\n",
        bytes.len(),
        mur::digest::sha256_hex(&bytes)
    );
    std::fs::write(&record, &format_1).expect("plant a format-1 record");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled, "{err}");
    assert!(
        err.contains("its integrity record is unreadable: it does not start with the format line"),
        "{err}"
    );
    let text = std::fs::read_to_string(&record).expect("record");
    assert!(
        text.starts_with("mur-compiled 3\n") && text.contains("\nblake3 "),
        "{text}"
    );
    assert_eq!(record_at(&record).id(), id);
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
}

/// An install scans the cache: entries of another runtime version or engine and records this
/// runtime cannot read, once unused for a week, interrupted writes and old unpaired halves go;
/// the current entries, another version's recently used ones (two versions side by side), young
/// halves (a writer between its two renames), other names and symlinks stay.
#[test]
fn an_install_removes_what_this_runtime_cannot_load_and_leaves_the_rest() {
    use mur::compiled::{Integrity, temp_name};
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let dir = cache_dir(&sb);
    let (entry, record) = only_entry(&sb);
    let echo = record_at(&record);
    let bytes = std::fs::read(&entry).expect("entry");
    let ten_minutes = std::time::Duration::from_secs(600);
    // A whole pair as another `mur`, or this one with another engine, would have written it.
    let plant = |key: &mur::compiled::Key| {
        let rec = Integrity {
            key: key.clone(),
            ..echo.clone()
        };
        std::fs::write(dir.join(key.entry_name()), &bytes).expect("plant entry");
        std::fs::write(dir.join(key.record_name()), rec.render()).expect("plant record");
        (dir.join(key.entry_name()), dir.join(key.record_name()))
    };
    let other = |f: &dyn Fn(&mut mur::compiled::Key)| {
        let mut k = echo.key.clone();
        f(&mut k);
        k
    };
    let old_version = plant(&other(&|k| k.version = "0.0.1".into()));
    let old_engine = plant(&other(&|k| k.engine = mur::digest::sha256_hex(b"another engine")));
    let format_1 = plant(&other(&|k| k.archive_sha256 = mur::digest::sha256_hex(b"format 1")));
    std::fs::write(&format_1.1, "mur-compiled 1\nid x\nlen 1\nsha256 y\n").expect("format 1");
    let eight_days = std::time::Duration::from_secs(8 * 24 * 3600);
    for unused in [&old_version.1, &old_engine.1, &format_1.1] {
        age(unused, eight_days);
    }
    let recent_version = plant(&other(&|k| k.version = "0.0.3".into()));
    age(&recent_version.1, std::time::Duration::from_secs(6 * 24 * 3600));
    let nonce = "0123456789abcdef0123456789abcdef";
    let stale_tmp = dir.join(temp_name(&echo.key.entry_name(), nonce));
    let fresh_tmp = dir.join(temp_name(&echo.key.record_name(), nonce));
    let old_unpaired = plant(&other(&|k| k.archive_sha256 = mur::digest::sha256_hex(b"old")));
    let young_unpaired = plant(&other(&|k| k.archive_sha256 = mur::digest::sha256_hex(b"young")));
    std::fs::remove_file(&old_unpaired.1).expect("unpair");
    std::fs::remove_file(&young_unpaired.1).expect("unpair");
    for f in [&stale_tmp, &fresh_tmp] {
        std::fs::write(f, b"half").expect("temp");
    }
    age(&stale_tmp, ten_minutes);
    age(&old_unpaired.0, ten_minutes);
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "mine").expect("notes");
    // A symlink under an entry's name of another version: the link is not followed, and neither
    // it nor what it points to is removed.
    let outside = sb.path("outside").join("precious");
    std::fs::write(&outside, "keep").expect("outside");
    let link = dir.join(other(&|k| k.version = "0.0.2".into()).entry_name());
    std::os::unix::fs::symlink(&outside, &link).expect("symlink");

    let err = install_with(&sb, "shout", SHOUT, &[]);
    let gone = [
        &old_version.0,
        &old_version.1,
        &old_engine.0,
        &old_engine.1,
        &format_1.0,
        &format_1.1,
        &stale_tmp,
        &old_unpaired.0,
    ];
    for f in gone {
        assert!(!f.exists(), "{} should be gone: {err}", f.display());
    }
    let stay = [
        &entry,
        &record,
        &recent_version.0,
        &recent_version.1,
        &fresh_tmp,
        &young_unpaired.0,
        &notes,
        &outside,
    ];
    for f in stay {
        assert!(f.exists(), "{} should stay: {err}", f.display());
    }
    assert!(std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()));
    assert_eq!(std::fs::read_to_string(&outside).expect("outside"), "keep");
    assert!(err.contains("compiled by another mur version"), "{err}");
    assert!(err.contains("pruned the compiled cache: 8 files removed"), "{err}");
    // Both current components load; neither was compiled again.
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    assert_eq!(launch(&sb, &cwd, "shout", "ok").0, Did::Loaded);
}

/// Over its size budget (shrunk for the test) the cache evicts the least recently used entry,
/// where a launch's use of an entry refreshes its record's mtime, and never the entry the scan's
/// own process just wrote or found.
#[test]
fn over_its_budget_the_cache_evicts_the_least_recently_used() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let (echo_entry, echo_record) = only_entry(&sb);
    install_with(&sb, "shout", SHOUT, &[]);
    install_with(&sb, "copy", ECHO, &[]);
    let all = entries(&cache_dir(&sb));
    assert_eq!(all.len(), 3, "{all:?}");
    let size = |p: &Path| std::fs::metadata(p).expect("stat").len();
    let total: u64 = all.iter().map(|(e, r)| size(e) + size(r)).sum();
    // Echo was used longest ago; shout and copy an hour later.
    let hour = std::time::Duration::from_secs(3600);
    for (_, record) in &all {
        age(record, if *record == echo_record { 3 * hour } else { 2 * hour });
    }
    // A launch uses echo's entry: its record becomes the most recent.
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    assert!(mtime(&echo_record) > before, "a use refreshes the record's mtime");
    // Reinstalling `copy` (its entry is there) scans with a budget one byte short of the total:
    // one entry must go, the least recently used other than copy's own: shout's.
    let budget = (total - 1).to_string();
    let err = install_with(&sb, "copy", ECHO, &[(mur::compiled::BUDGET_ENV, budget.as_str())]);
    assert!(err.contains("warning[W-ENV-001]"), "{err}");
    assert!(err.contains("the cache is over its size budget"), "{err}");
    let left = entries(&cache_dir(&sb));
    assert_eq!(left.len(), 2, "{left:?}: {err}");
    assert!(left.contains(&(echo_entry.clone(), echo_record.clone())), "{left:?}");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    assert_eq!(launch(&sb, &cwd, "copy", "hi").0, Did::Loaded);
    assert_eq!(launch(&sb, &cwd, "shout", "ok").0, Did::Compiled, "shout's was evicted");
}

/// A component the host refuses (no `run` export) is never stored, neither by `mur install` nor
/// by the launcher, so no member is handed an entry of it (and none defers its check): the member
/// loads it itself and refuses it before readiness, E-RUN-002, so the launch fails naming it.
#[test]
fn a_component_that_cannot_run_is_never_stored_and_is_refused_before_readiness() {
    let sb = Sandbox::unshared();
    sb.install_component("echo", ECHO, "");
    sb.install_component("runless", "tests/it/testdata/runless.wat", "");
    let dir = sb.path("runless");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: odd, capsule: local/runless, version: 0.1.0}\n",
    )
    .expect("roster");
    let o = sb
        .mur(&dir)
        .args(["run", "--roster", "--task", "hi"])
        .env("RUST_LOG", "mur=debug")
        .output()
        .expect("spawn mur");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error[E-RUN-045]"), "{err}");
    assert!(
        err.contains("'odd' (local/runless@0.1.0): its process exited with status 1 before reporting"),
        "{err}"
    );
    assert!(
        err.contains("error[E-RUN-002]: capsule 'local/runless@0.1.0' cannot be run: the capsule does not export `run: func(task: string) -> result<string, failure>` of world murmur:capsule/capsule@0.1.0"),
        "{err}"
    );
    // Only echo's entry is stored; the launcher compiled runless, and refused to store it.
    only_entry(&sb);
    assert!(
        err.contains("no compiled entry of local/runless is handed to members"),
        "{err}"
    );
    assert!(!err.contains("mapped at the first task"), "{err}");
}

/// A peer handed its entry maps it at its first task, checking it again then, and answers it: the
/// relay's call reaches a worker that had not mapped its component until then.
#[test]
fn a_peer_maps_its_handed_entry_at_its_first_task() {
    let sb = Sandbox::unshared();
    sb.install_component("echo", ECHO, "exports:\n  peer_tasks:\n    accept: true\n");
    sb.install_component(
        "relay",
        "src/capsule/testdata/relay.wat",
        "capabilities:\n  network:\n    allow: [localhost]\n",
    );
    let dir = sb.path("relayed");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .expect("roster");
    let o = sb
        .mur(&dir)
        .args(["run", "--roster", "--task", "carried"])
        .env("RUST_LOG", "mur=debug")
        .output()
        .expect("spawn mur");
    let err = stderr(&o);
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "carried\n"), "{err}");
    let worker: Vec<&str> = err.lines().filter(|l| l.starts_with("[worker]")).collect();
    let at = |needle: &str| worker.iter().position(|l| l.contains(needle));
    let deferred = at("the handed compiled entry is mapped at the first task").expect("deferred at start");
    let loaded = at("loaded the deferred component at the first task").expect("loaded at its task");
    assert!(deferred < loaded, "{err}");
    // At its task the worker checks the entry again, as a lone member does: hours may have passed.
    let checked = at("bytes hashed in").expect("the entry checked at the first task");
    assert!(deferred < checked && checked < loaded, "{err}");
}
