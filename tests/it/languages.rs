//! Capsules written in Python, JavaScript and Rust: scaffolded by `mur new --capsule`, built by
//! `mur build` with the real toolchains (provisioned under `target/`, see
//! `support::toolchains` and `support::debian_rust`), run as formation members; and what `mur
//! build` does when a toolchain is missing, fails, or would see the caller's secrets.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::support::toolchains::{self, javascript_capsule, path_with, python_capsule};
use crate::support::{Sandbox, formation_pids, member_traces, stderr, stdout};

fn install(sb: &Sandbox, zip: &Path) {
    let out = sb.run(sb.dir.path(), &["install", "-g", zip.to_str().expect("utf-8")]);
    assert!(out.status.success(), "mur install {}: {}", zip.display(), stderr(&out));
}

/// The lines of the guide's section on Python and JavaScript capsules: its `console` commands
/// (without `$ `) and its `sh` block.
fn guide_section() -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(crate::support::repo_root().join("docs/guide.md")).expect("guide");
    let start = text.find("## Capsules in Python and JavaScript").expect("the section");
    let section = &text[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let (mut console, mut sh, mut block) = (Vec::new(), Vec::new(), "");
    for line in section.lines() {
        if let Some(lang) = line.strip_prefix("```") {
            block = if block.is_empty() {
                if lang.is_empty() { "other" } else { lang }
            } else {
                ""
            };
            continue;
        }
        match block {
            "console" => console.push(line.strip_prefix("$ ").expect("a command").to_string()),
            "sh" => sh.push(line.to_string()),
            _ => {}
        }
    }
    (console, sh)
}

#[test]
fn the_guides_python_and_javascript_formation_runs_and_is_traced() {
    let (console, mut sh) = guide_section();
    // The toolchains, provisioned once with exactly the versions the guide installs.
    assert_eq!(
        sh.drain(..2).collect::<Vec<_>>(),
        [
            format!("python3 -m pip install {}", toolchains::COMPONENTIZE_PY),
            format!("(cd helper && npm install {})", toolchains::COMPONENTIZE_JS),
        ]
    );
    let tools = [toolchains::componentize_py_dir(), toolchains::componentize_js_dir()];
    let sb = Sandbox::new();
    let cwd = sb.path("guide");
    std::fs::create_dir_all(sb.home()).expect("home");
    let mut dirs = vec![crate::support::mur_bin().parent().expect("bin dir").to_path_buf()];
    dirs.extend(tools);
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    let script = format!("set -euo pipefail\n{}\n{}\n", console.join("\n"), sh.join("\n"));
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", std::env::join_paths(dirs).expect("PATH"))
        .env("HOME", sb.home())
        .env("TMPDIR", std::env::temp_dir())
        .output()
        .expect("bash");
    let (out_text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{out_text}\n--- stderr\n{err}");
    // Scout (Python) called helper (JavaScript) and rust; helper called rust in turn.
    assert!(
        out_text.ends_with(
            "helper [completed]: rust [completed]: rust handled: three languages\nrust [completed]: rust handled: three languages\n"
        ),
        "{out_text}\n--- stderr\n{err}"
    );
    if let Some(frm) = err.lines().find_map(|l| l.strip_prefix("formation: ")) {
        assert!(formation_pids(frm).is_empty(), "members of {frm} still running");
    }
    // Built again with nothing changed, scout ran no toolchain; every installed capsule was
    // compiled at install.
    assert!(
        err.contains(&format!("Unchanged {}/scout/capsule.wasm (", cwd.display())),
        "{err}"
    );
    for name in ["local/helper", "local/scout", "local/trio-worker"] {
        assert!(
            out_text
                .lines()
                .any(|l| l.starts_with(&format!("{name} ")) && l.ends_with("  compiled")),
            "{name}: {out_text}"
        );
    }

    // The trace holds each call on both sides.
    let calls = |member: &str| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = member_traces(&sb, member)
            .into_iter()
            .flatten()
            .filter(|r| r["event_type"] == "member_call")
            .map(|r| {
                (
                    r["member"].as_str().unwrap_or_default().to_string(),
                    r["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let done = |m: &str| (m.to_string(), "completed".to_string());
    assert_eq!(calls("scout"), [done("helper"), done("rust")]);
    assert_eq!(calls("helper"), [done("rust")]);
    let callers = |member: &str| -> Vec<String> {
        let mut v: Vec<String> = member_traces(&sb, member)
            .into_iter()
            .flatten()
            .filter(|r| r["event_type"] == "a2a_task_received")
            .filter_map(|r| r["caller_member"].as_str().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    assert_eq!(callers("helper"), ["scout"]);
    assert_eq!(callers("rust"), ["helper", "scout"]);
}

/// A one-shot HTTP server on 127.0.0.1 answering `200` with `body`; counts connections.
struct Loopback {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Loopback {
    fn start(body: &'static str) -> Loopback {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Loopback { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn python_and_javascript_capsules_fetch_through_wasi_http_only_what_their_grant_names() {
    for (lang, built) in [("python", python_capsule()), ("javascript", javascript_capsule())] {
        let sb = Sandbox::new();
        let service = Loopback::start("hello from loopback");
        let port = service.port;
        // The scaffold's component, packed with a grant naming the service's port.
        let dir = sb.path("fetcher");
        std::fs::copy(&built.wasm, dir.join("capsule.wasm")).expect("component");
        std::fs::write(
            dir.join("murmur.yaml"),
            format!(
                "name: fetcher\nversion: 0.1.0\ncomponent: capsule.wasm\ncapabilities:\n  network:\n    allow: [\"localhost:{port}\"]\n"
            ),
        )
        .expect("manifest");
        let out = sb.run(sb.dir.path(), &["build", "fetcher"]);
        assert!(out.status.success(), "{}", stderr(&out));
        install(&sb, &dir.join("fetcher-0.1.0.mur.zip"));
        let run = |url: &str| {
            sb.run(
                &dir,
                &[
                    "run",
                    "--capsule",
                    "local/fetcher",
                    "--capsule-version",
                    "0.1.0",
                    "--task",
                    url,
                ],
            )
        };
        let out = run(&format!("http://localhost:{port}/hello"));
        assert_eq!(
            (out.status.code(), stdout(&out).as_str()),
            (Some(0), "status 200: hello from loopback\n"),
            "{lang}: {}",
            stderr(&out)
        );
        assert_eq!(service.hits(), 1, "{lang}");
        // Another port is refused before any connection, and the task fails with the reason.
        let other = if port == u16::MAX { port - 1 } else { port + 1 };
        let out = run(&format!("http://localhost:{other}/hello"));
        assert_ne!(out.status.code(), Some(0), "{lang}: {}", stdout(&out));
        assert!(stderr(&out).contains("could not fetch"), "{lang}: {}", stderr(&out));
        assert_eq!(service.hits(), 1, "{lang}: nothing reached the service");
    }
}

/// A directory holding only what a toolchain-free PATH needs: none of the tools.
fn bare_path(sb: &Sandbox) -> PathBuf {
    sb.path("bare-bin")
}

#[test]
fn a_missing_toolchain_is_a_coded_error_whose_hint_installs_it() {
    let sb = Sandbox::new();
    let js_dir = sb.dir.path().join("ja-cap");
    let js_hint = format!(
        "run it inside the capsule's directory, where mur build looks for node_modules/.bin: `(cd {} && npm install @bytecodealliance/componentize-js@0.23.0)`",
        js_dir.display()
    );
    let table = [
        ("python", "python3 -m pip install componentize-py==0.25.1"),
        ("javascript", js_hint.as_str()),
        // No cargo at all: Debian's packages, or rustup and its target.
        (
            "rust",
            "install a Rust that builds WebAssembly components: `apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld-22` (Debian 12), or with rustup (https://rustup.rs) `rustup target add wasm32-wasip2`",
        ),
    ];
    for (lang, hint) in table {
        let name = format!("{}-cap", &lang[..2]);
        let out = sb.run(sb.dir.path(), &["new", "--capsule", &name, "--lang", lang]);
        assert!(out.status.success(), "{}", stderr(&out));
        let out = sb
            .mur(sb.dir.path())
            .env("PATH", bare_path(&sb))
            .args(["build", &name])
            .output()
            .expect("spawn");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{lang}: {err}");
        assert!(err.starts_with("error[E-BLD-002]: "), "{lang}: {err}");
        assert!(err.ends_with(&format!("  hint: {hint}\n")), "{lang}: {err}");
        let dir = sb.dir.path().join(&name);
        assert!(!dir.join("capsule.wasm").exists(), "{lang}");
        assert!(!dir.join(format!("{name}-0.1.0.mur.zip")).exists(), "{lang}");
    }
}

/// A fake `componentize-py` that records its argv and environment, writes `big` bytes of
/// output, and either writes the component it was asked for or fails.
fn fake_tool(sb: &Sandbox, succeed: bool) -> PathBuf {
    let bin = sb.path("fake-bin");
    let log = sb.dir.path().join("tool.log");
    let script = format!(
        "#!/bin/sh\nenv > '{log}.env'\nprintf '%s\\n' \"$@\" > '{log}.argv'\n\
         head -c 200000 /dev/zero | tr '\\0' x >&2\necho ' the last line of the tool' >&2\n\
         {}\n",
        if succeed {
            // The argument after -o is the output path.
            "while [ \"$1\" != -o ]; do shift; done; printf '(component)' > \"$2\"; exit 0"
        } else {
            "exit 3"
        },
        log = log.display()
    );
    write_script(&bin.join("componentize-py"), &script);
    bin
}

/// Writes an executable shell script.
fn write_script(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, script).expect("script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn a_toolchain_runs_with_a_minimal_environment_and_its_failure_shows_a_bounded_tail() {
    let sb = Sandbox::new();
    let out = sb.run(sb.dir.path(), &["new", "--capsule", "tool-probe", "--lang", "python"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = sb.dir.path().join("tool-probe");
    std::fs::write(dir.join("capsule.wasm"), "previous").expect("previous build");
    let build = |bin: &Path| {
        sb.mur(sb.dir.path())
            .env("PATH", path_with(bin))
            .env("OPENAI_API_KEY", "sk-test-secret-key")
            .env("MURMUR_FORMATION_TOKEN", "mft1.secret")
            .env("GITHUB_TOKEN", "ghp_secret")
            .args(["build", "tool-probe"])
            .output()
            .expect("spawn")
    };

    // A failure: E-BLD-002 with the tool's last output, bounded; the previous component stays.
    let out = build(&fake_tool(&sb, false));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // A progress line, then the error.
    let (progress, err) = err.split_once('\n').expect("two parts");
    assert!(
        progress.starts_with("Building ") && progress.ends_with("/fake-bin/componentize-py"),
        "{progress}"
    );
    assert!(err.starts_with("error[E-BLD-002]: componentize-py could not build the component: it exited with exit status: 3; its last output:\n"), "{}", &err[..200.min(err.len())]);
    assert!(
        err.contains(" the last line of the tool\n  hint: fix what the output above names in app.py"),
        "{}",
        &err[err.len().saturating_sub(300)..]
    );
    assert!(
        err.len() < 10_000,
        "the tool's 200 KB of output is cut to its tail: {} bytes",
        err.len()
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("capsule.wasm")).expect("kept"),
        "previous"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A success: the component it wrote is packed.
    let out = build(&fake_tool(&sb, true));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("capsule.wasm")).expect("built"),
        "(component)"
    );
    assert!(dir.join("tool-probe-0.1.0.mur.zip").exists());

    // Built again with the same tool and sources: the tool does not run, the component stays.
    let bin = sb.path("fake-bin");
    let argv_log = sb.dir.path().join("tool.log").with_extension("log.argv");
    std::fs::remove_file(&argv_log).expect("reset");
    let out = build(&bin);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.starts_with("Unchanged ") && err.contains("/tool-probe/capsule.wasm ("),
        "{err}"
    );
    assert!(!argv_log.exists(), "the tool ran: {err}");
    // An edited source builds again, and the progress line says why.
    std::fs::write(dir.join("app.py"), "# edited\n").expect("edit");
    let out = build(&bin);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines().next().is_some_and(|l| l.ends_with(" (app.py changed)")),
        "{err}"
    );
    assert!(argv_log.exists(), "the tool did not run: {err}");

    // The tool saw a fixed argv and none of the caller's secrets or runtime variables.
    let log = sb.dir.path().join("tool.log");
    let env = std::fs::read_to_string(log.with_extension("log.env")).expect("env");
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    for name in &names {
        assert!(
            ["PATH", "HOME", "TMPDIR", "LANG", "PWD", "SHLVL", "_", "OLDPWD"].contains(name),
            "the tool saw {name}"
        );
    }
    assert!(!env.contains("secret"), "{env}");
    let argv = std::fs::read_to_string(log.with_extension("log.argv")).expect("argv");
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(argv[..4], ["--quiet", "-d", argv[2], "-w"]);
    assert_eq!(argv[4..7], ["capsule-guest", "componentize", "-p"]);
    assert_eq!(argv[7], dir.display().to_string());
    assert_eq!(argv[8..10], ["app", "-o"]);
    // The WIT it read was written for this build alone and is gone.
    assert!(!Path::new(argv[2]).exists(), "{}", argv[2]);

    // A component path outside the capsule's directory is refused before any tool runs.
    std::fs::remove_file(log.with_extension("log.argv")).expect("reset");
    let manifest = std::fs::read_to_string(dir.join("murmur.yaml")).expect("manifest");
    std::fs::write(
        dir.join("murmur.yaml"),
        manifest.replace("component: capsule.wasm", "component: ../escaped.wasm"),
    )
    .expect("manifest");
    let out = build(&fake_tool(&sb, true));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error[E-BLD-001]: component: '../escaped.wasm' is not a path inside the capsule's directory"),
        "{err}"
    );
    assert!(!log.with_extension("log.argv").exists(), "the tool ran");
    assert!(!sb.dir.path().join("escaped.wasm").exists());
}

#[test]
fn new_capsule_scaffolds_sources_and_refuses_what_new_roster_refuses() {
    let sb = Sandbox::new();
    let cwd = sb.path("work");
    let out = sb.run(&cwd, &["new", "--capsule", "scout", "--lang", "javascript"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "Scaffolded javascript capsule 'scout' in ./scout\n  scout/murmur.yaml\n  scout/app.js\n  scout/package.json\n  scout/.gitignore\n  scout/.schemas/murmur.schema.json\n\nNext:\n  (cd scout && npm install @bytecodealliance/componentize-js@0.23.0)   (once: the toolchain mur build runs)\n  mur build scout && mur install -g scout/scout-0.1.0.mur.zip\n  mur run --capsule local/scout --capsule-version 0.1.0 --task \"<your task>\"\n"
    );
    // Its sources pass `mur doctor` in their directory: a clean manifest.
    let out = sb.run(&cwd.join("scout"), &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    // Rust by default.
    let out = sb.run(&cwd, &["new", "--capsule", "crab"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(cwd.join("crab/src/lib.rs").is_file() && cwd.join("crab/wit/capsule.wit").is_file());
    // --lang on a formation: both members' sources.
    let out = sb.run(&cwd, &["new", "--roster", "duo", "--lang", "python"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(cwd.join("duo/lead/app.py").is_file() && cwd.join("duo/worker/app.py").is_file());

    let refused = |args: &[&str], code: &str| {
        let out = sb.run(&cwd, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with(&format!("error[{code}]: ")), "{args:?}: {err}");
        err
    };
    let err = refused(&["new", "--capsule", "Scout", "--lang", "python"], "E-NEW-002");
    assert!(err.contains("'Scout' cannot name a capsule"), "{err}");
    refused(&["new", "--capsule", "scout", "--lang", "python"], "E-NEW-003");
    // Usage errors: an unknown language, two things at once, a language for model capsules.
    for args in [
        &["new", "--capsule", "x", "--lang", "go"][..],
        &["new", "--capsule", "x", "--roster", "y"],
        &["new", "--roster", "y", "--lang", "python", "--inference", "openai"],
        &["new", "--lang", "python"],
    ] {
        assert_eq!(sb.run(&cwd, args).status.code(), Some(2), "{args:?}");
    }
    assert!(!cwd.join("x").exists() && !cwd.join("y").exists());
}

/// What the sysroot of a [`fake_cargo`] holds.
#[derive(Clone, Copy, PartialEq)]
enum FakeSysroot {
    /// The `wasm32-wasip2` target's library (rustup with the target added).
    Wasip2,
    /// The standard library's sources and `wasm-component-ld` (Debian's rustc-web).
    Sources,
    /// Neither (rustup's default toolchain here).
    Bare,
}

/// A `cargo` that stands in for a Rust toolchain (rustup here has no WebAssembly target): it
/// records its argv and environment, copies `artifact` to where cargo would
/// put it for the target it was given, and reports it in cargo's JSON message format; beside it
/// a `rustc` whose sysroot holds what `kind` says.
fn fake_cargo(sb: &Sandbox, kind: FakeSysroot, artifact: &Path) -> PathBuf {
    let bin = sb.path("cargo-bin");
    let sysroot = sb.path("sysroot");
    match kind {
        FakeSysroot::Wasip2 => {
            std::fs::create_dir_all(sysroot.join("lib/rustlib/wasm32-wasip2")).expect("sysroot");
        }
        FakeSysroot::Sources => {
            std::fs::create_dir_all(sysroot.join("lib/rustlib/src/rust/library/std")).expect("sources");
            let tools = sysroot.join("lib/rustlib/x86_64-unknown-linux-gnu/bin");
            std::fs::create_dir_all(&tools).expect("host tools");
            write_script(
                &tools.join("wasm-component-ld"),
                "#!/bin/sh
exit 9
",
            );
        }
        FakeSysroot::Bare => {
            std::fs::create_dir_all(sysroot.join("lib/rustlib/x86_64-unknown-linux-gnu/lib")).expect("sysroot");
        }
    }
    let log = sb.dir.path().join("cargo.argv");
    let cargo = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{log}'\nenv > '{log}.env'\n\
         while [ \"$1\" != --target ]; do shift; done; target=\"$2\"\n\
         while [ \"$1\" != --target-dir ]; do shift; done\n\
         out=\"$2/$target/release\"; mkdir -p \"$out\"; cp '{artifact}' \"$out/rs_cap.wasm\"\n\
         echo '{{\"reason\":\"compiler-artifact\",\"target\":{{\"kind\":[\"lib\"]}},\"filenames\":[\"/elsewhere/libdep.rlib\"]}}'\n\
         printf '{{\"reason\":\"compiler-artifact\",\"target\":{{\"kind\":[\"cdylib\"]}},\"filenames\":[\"%s\"]}}\\n' \"$out/rs_cap.wasm\"\n\
         echo '{{\"reason\":\"build-finished\",\"success\":true}}'\n",
        log = log.display(),
        artifact = artifact.display()
    );
    let rustc = format!(
        "#!/bin/sh\n[ \"$1 $2\" = '--print sysroot' ] && echo '{}'\n",
        sysroot.display()
    );
    write_script(&bin.join("cargo"), &cargo);
    write_script(&bin.join("rustc"), &rustc);
    bin
}

/// The demo worker, a component Rust built.
fn worker() -> PathBuf {
    crate::support::repo_root().join("actors/demo/scaffold/worker/capsule.wasm")
}

#[test]
fn a_rust_capsule_is_built_by_cargo_for_wasm32_wasip2_and_packs_the_component_cargo_reports() {
    let sb = Sandbox::new();
    let out = sb.run(sb.dir.path(), &["new", "--capsule", "rs-cap", "--lang", "rust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb
        .mur(sb.dir.path())
        .env("PATH", path_with(&fake_cargo(&sb, FakeSysroot::Wasip2, &worker())))
        .args(["build", "rs-cap"])
        .output()
        .expect("spawn");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let dir = sb.dir.path().join("rs-cap");
    let argv = std::fs::read_to_string(sb.dir.path().join("cargo.argv")).expect("cargo ran");
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(
        argv[..6],
        [
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format",
            "json-render-diagnostics"
        ]
    );
    assert_eq!(
        argv[6..8],
        ["--manifest-path", dir.join("Cargo.toml").to_str().expect("utf-8")]
    );
    // The archive holds the artifact cargo reported (not the rlib before it), and it runs.
    let zip = dir.join("rs-cap-0.1.0.mur.zip");
    let bytes = std::fs::read(&zip).expect("archive");
    let packed = mur::store::archive::read_component(&bytes)
        .expect("archive")
        .expect("component");
    let worker = std::fs::read(worker()).expect("worker");
    assert!(packed == worker, "the packed component is the one cargo reported");
    install(&sb, &zip);
    let out = sb.run(
        sb.dir.path(),
        // The scaffold serves on after a door task (`after_task: sleep`); a `--task` run ends.
        &[
            "run",
            "--capsule",
            "local/rs-cap",
            "--capsule-version",
            "0.1.0",
            "--task",
            "from cargo",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("handled: from cargo"), "{}", stdout(&out));
}

/// The Rust scaffold built by Debian's Rust (provisioned under `target/test-rust/`), which has
/// no wasm32-wasip2 library: for wasm32-unknown-unknown from the standard library's sources. It
/// finds its peers in the environment there too, and calls them.
#[test]
fn a_rust_capsule_built_from_the_std_sources_calls_its_peers() {
    let rust = crate::support::debian_rust::debian_rust();
    let sb = Sandbox::new();
    let out = sb.run(sb.dir.path(), &["new", "--capsule", "rs-cap", "--lang", "rust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = sb.dir.path().join("rs-cap");
    rust.share_target(&dir);
    let out = sb
        .mur(sb.dir.path())
        .env("PATH", path_with(&rust.bin))
        .env("CARGO_HOME", &rust.cargo_home)
        .args(["build", "rs-cap"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    install(&sb, &dir.join("rs-cap-0.1.0.mur.zip"));
    let out = sb.run(sb.dir.path(), &["new", "--roster", "trio"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb.run(sb.dir.path(), &["build", "trio/worker"]);
    assert!(out.status.success(), "{}", stderr(&out));
    install(&sb, &sb.dir.path().join("trio/worker/trio-worker-0.1.0.mur.zip"));
    sb.write(
        "pair/roster.yaml",
        "roster_version: 1\nmembers:\n  - {name: rs-cap, capsule: local/rs-cap, version: 0.1.0, entry: true}\n  \
         - {name: rust, capsule: local/trio-worker, version: 0.1.0}\nreachability:\n  - {from: rs-cap, to: [rust]}\n",
    );
    let out = sb.run(
        sb.dir.path(),
        &["run", "--roster", "pair", "--task", "from the sources"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "rust [completed]: rust handled: from the sources\n",
        "{}",
        stderr(&out)
    );
}

/// `mur build` of a fresh `mur new --capsule rs-cap --lang rust` with `bin` first on PATH.
fn build_rust_capsule(sb: &Sandbox, bin: &Path) -> std::process::Output {
    let out = sb.run(sb.dir.path(), &["new", "--capsule", "rs-cap", "--lang", "rust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    sb.mur(sb.dir.path())
        .env("PATH", path_with(bin))
        .args(["build", "rs-cap"])
        .output()
        .expect("spawn")
}

#[test]
fn a_rust_without_the_wasip2_target_builds_from_its_std_sources_linked_by_wasm_component_ld() {
    let sb = Sandbox::new();
    let bin = fake_cargo(&sb, FakeSysroot::Sources, &worker());
    let out = build_rust_capsule(&sb, &bin);
    assert!(out.status.success(), "{}", stderr(&out));
    let argv = std::fs::read_to_string(sb.dir.path().join("cargo.argv")).expect("cargo ran");
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(
        argv[..8],
        [
            "build",
            "--release",
            "--target",
            "wasm32-unknown-unknown",
            "-Zbuild-std=std,panic_abort",
            "-Ztrim-paths",
            "--config",
            "profile.release.trim-paths=\"all\""
        ]
    );
    // cargo gets the rustc beside it, the toolchain's component linker, and the switch that lets
    // a stable cargo take -Zbuild-std; mur itself runs without that switch.
    let env = std::fs::read_to_string(sb.dir.path().join("cargo.argv.env")).expect("cargo's environment");
    let linker = sb
        .dir
        .path()
        .join("sysroot/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld");
    for want in [
        format!("RUSTC={}", bin.join("rustc").display()),
        format!("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER={}", linker.display()),
        "RUSTC_BOOTSTRAP=1".to_string(),
    ] {
        assert!(env.lines().any(|l| l == want), "{want} not in:\n{env}");
    }
    let zip = sb.dir.path().join("rs-cap/rs-cap-0.1.0.mur.zip");
    let packed = mur::store::archive::read_component(&std::fs::read(&zip).expect("archive"))
        .expect("archive")
        .expect("component");
    assert!(packed == std::fs::read(worker()).expect("worker"));
}

#[test]
fn a_rust_that_cannot_make_a_component_is_named_and_a_core_module_is_refused() {
    // A toolchain with neither the wasip2 library nor the std sources: cargo never runs.
    let sb = Sandbox::new();
    let bin = fake_cargo(&sb, FakeSysroot::Bare, &worker());
    let out = build_rust_capsule(&sb, &bin);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "error[E-BLD-002]: no Rust toolchain on PATH has the wasm32-wasip2 target's library, nor the standard library's sources and wasm-component-ld to build for wasm32-unknown-unknown: {} (sysroot {})",
            bin.join("cargo").display(),
            sb.dir.path().join("sysroot").display()
        )),
        "{err}"
    );
    assert!(
        err.ends_with(&format!("  hint: {}\n", mur::scaffold::toolchain::rust_missing_hint())),
        "{err}"
    );
    assert!(!sb.dir.path().join("cargo.argv").exists(), "cargo ran");

    // A build whose linker wrote a core module, not a component: refused, nothing packed.
    let sb = Sandbox::new();
    let core = sb.write("core.wasm", "\0asm\u{1}\0\0\0");
    let bin = fake_cargo(&sb, FakeSysroot::Sources, &core);
    let out = build_rust_capsule(&sb, &bin);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E-BLD-002]: cargo could not build the component: ")
            && err.contains("rs_cap.wasm is a core WebAssembly module, not a component"),
        "{err}"
    );
    let dir = sb.dir.path().join("rs-cap");
    assert!(!dir.join("capsule.wasm").exists() && !dir.join("rs-cap-0.1.0.mur.zip").exists());
}
