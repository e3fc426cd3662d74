//! What `mur build` runs to make a component from a capsule's sources (`build.language`): the
//! tool of each language, where it is looked for, its argv and its environment, and the WIT
//! files the Python and JavaScript tools read. Pure: paths and facts in, commands out;
//! `crate::cli::build` gathers the facts and runs the commands.
//!
//! Rust builds one of two ways, whichever the first usable toolchain on `PATH` offers
//! ([`rust_build`]): for `wasm32-wasip2`, whose linker writes a component (rustup's target), or
//! for `wasm32-unknown-unknown` with the standard library compiled from the toolchain's own
//! sources (`-Zbuild-std`) and the core module linked into a component by the toolchain's
//! `wasm-component-ld` (Debian's `rustc-web`, which has no WebAssembly standard library).
//!
//! Invariants: a tool gets a fixed argv and an environment of a few named variables (never the
//! caller's tokens or keys); the WIT it reads is the runtime's own, written fresh for each build,
//! so a capsule is always built against the world the runtime hosts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::manifest::Language;

/// The entry file of a Python capsule (module `app`, class `WitWorld`).
pub const PYTHON_ENTRY: &str = "app.py";
/// The entry module of a JavaScript capsule (exports `run`).
pub const JAVASCRIPT_ENTRY: &str = "app.js";
/// The crate of a Rust capsule.
pub const RUST_ENTRY: &str = "Cargo.toml";

/// The pinned versions the hints install (the versions the tests build with).
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";
/// The Rust target whose output is a component, when the toolchain has its standard library.
pub const RUST_TARGET: &str = "wasm32-wasip2";
/// The Rust target built otherwise: its standard library is compiled from the toolchain's
/// sources, and its core module becomes a component in the link.
pub const RUST_SOURCE_TARGET: &str = "wasm32-unknown-unknown";
/// The Debian 12 packages of a Rust that builds components ([`RustBuild::FromSources`]): rustc
/// and cargo 1.96, the standard library's sources, `wasm-component-ld`, and `rust-lld`.
pub const RUST_DEBIAN_PACKAGES: &str = "rustc-web cargo-web rust-web-src rust-web-llvm lld-22";

/// What a build makes: a capsule's component or one of a model capsule's tools. Each has its
/// own WIT package and its own guest world: the host world plus the outgoing HTTP handler and the
/// environment, so the generated bindings can send requests and read `MURMUR_FORMATION_PEERS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    Capsule,
    Tool,
}

/// The WASI packages both worlds' guests import, as wasmtime's wasi-http 48.0.8 ships them.
const WASI_DEPS: [(&str, &str); 7] = [
    ("deps/cli.wit", include_str!("wit/deps/cli.wit")),
    ("deps/clocks.wit", include_str!("wit/deps/clocks.wit")),
    ("deps/filesystem.wit", include_str!("wit/deps/filesystem.wit")),
    ("deps/http.wit", include_str!("wit/deps/http.wit")),
    ("deps/io.wit", include_str!("wit/deps/io.wit")),
    ("deps/random.wit", include_str!("wit/deps/random.wit")),
    ("deps/sockets.wit", include_str!("wit/deps/sockets.wit")),
];

impl World {
    /// The world the Python and JavaScript tools build against.
    pub fn guest(self) -> &'static str {
        match self {
            World::Capsule => "capsule-guest",
            World::Tool => "tool-guest",
        }
    }

    /// Its WIT directory, by relative path: the package, its guest world, the WASI deps.
    pub fn wit_files(self) -> Vec<(&'static str, &'static str)> {
        let own = match self {
            World::Capsule => [
                ("capsule.wit", include_str!("../capsule/wit/capsule.wit")),
                ("guest.wit", include_str!("wit/guest.wit")),
            ],
            World::Tool => [
                ("tool.wit", include_str!("../tools/wit/tool.wit")),
                ("guest.wit", include_str!("wit/tool-guest.wit")),
            ],
        };
        own.into_iter().chain(WASI_DEPS).collect()
    }

    /// `capsule` or `tool`, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            World::Capsule => "capsule",
            World::Tool => "tool",
        }
    }
}

/// The variables a tool keeps from mur's environment: the search path (node, python, rustc),
/// a home for its caches, the temp directory, and Rust's own toolchain selection.
pub const PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
];

/// The file a language's sources start from, relative to the capsule's directory.
pub fn entry(lang: Language) -> &'static str {
    match lang {
        Language::Python => PYTHON_ENTRY,
        Language::JavaScript => JAVASCRIPT_ENTRY,
        Language::Rust => RUST_ENTRY,
    }
}

/// The program each language runs.
pub fn program(lang: Language) -> &'static str {
    match lang {
        Language::Python => "componentize-py",
        Language::JavaScript => "componentize-js",
        Language::Rust => "cargo",
    }
}

/// The one command that installs a missing tool, run in the capsule's directory.
pub fn install_hint(lang: Language) -> String {
    match lang {
        Language::Python => format!("python3 -m pip install {COMPONENTIZE_PY}"),
        Language::JavaScript => format!("npm install {COMPONENTIZE_JS}"),
        Language::Rust => format!("apt-get install {RUST_DEBIAN_PACKAGES}"),
    }
}

/// The hint when no Rust toolchain on `PATH` can build a component: the Debian install that
/// works without rustup, and rustup's own way.
pub fn rust_missing_hint() -> String {
    format!(
        "install a Rust that builds WebAssembly components: `{}` (Debian 12), or with rustup (https://rustup.rs) `rustup target add {RUST_TARGET}`",
        install_hint(Language::Rust)
    )
}

/// What a Rust toolchain's sysroot (`rustc --print sysroot`) holds for building a component.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sysroot {
    /// `lib/rustlib/wasm32-wasip2/` is there: the target's prebuilt standard library.
    pub wasip2_std: bool,
    /// `lib/rustlib/src/rust/library/std/` is there: the standard library's sources (Debian's
    /// `rust-web-src`, rustup's `rust-src`).
    pub std_sources: bool,
    /// The toolchain's `lib/rustlib/<host>/bin/wasm-component-ld`, if it has one.
    pub component_ld: Option<PathBuf>,
}

/// How cargo makes a component with one toolchain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RustBuild {
    /// `--target wasm32-wasip2`: the target's linker writes a component.
    Wasip2,
    /// `--target wasm32-unknown-unknown -Zbuild-std`, linked by `component_ld`, which writes a
    /// component. The module imports nothing of WASI's preview 1, so no adapter goes in.
    FromSources { component_ld: PathBuf },
}

/// How a toolchain with `sysroot` builds a component, if it can: with the prebuilt
/// `wasm32-wasip2` library when it has one, else from the library's sources when it has them
/// and `wasm-component-ld`.
pub fn rust_build(sysroot: &Sysroot) -> Option<RustBuild> {
    if sysroot.wasip2_std {
        return Some(RustBuild::Wasip2);
    }
    match (&sysroot.component_ld, sysroot.std_sources) {
        (Some(ld), true) => Some(RustBuild::FromSources {
            component_ld: ld.clone(),
        }),
        _ => None,
    }
}

/// The `rustc` a `cargo` found at `cargo` is paired with: the one beside it. cargo alone would
/// take the first `rustc` on `PATH`, which may belong to another toolchain (rustup's proxies
/// come before Debian's `/usr/bin`).
pub fn rustc_beside(cargo: &Path) -> PathBuf {
    cargo.with_file_name("rustc")
}

/// The Rust toolchain a build runs: `rustc` and how cargo makes the component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RustToolchain {
    pub rustc: PathBuf,
    pub build: RustBuild,
}

/// The toolchain of one build, as found: what [`args`] and [`env`] plan for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Toolchain {
    Python,
    JavaScript,
    Rust(RustToolchain),
}

impl Toolchain {
    pub fn language(&self) -> Language {
        match self {
            Toolchain::Python => Language::Python,
            Toolchain::JavaScript => Language::JavaScript,
            Toolchain::Rust(_) => Language::Rust,
        }
    }
}

/// The variables a tool gets beyond [`PASSED_ENV`]. For Rust: `RUSTC`, the `rustc` beside the
/// `cargo` that runs; building from sources, also the linker of `wasm32-unknown-unknown` and
/// `RUSTC_BOOTSTRAP=1`, which lets a stable cargo and rustc take the unstable `-Zbuild-std` and
/// `-Ztrim-paths`. It is set for that one cargo run only, never in mur's own environment.
pub fn env(toolchain: &Toolchain) -> Vec<(&'static str, OsString)> {
    let Toolchain::Rust(rust) = toolchain else {
        return Vec::new();
    };
    let mut out = vec![("RUSTC", rust.rustc.clone().into_os_string())];
    if let RustBuild::FromSources { component_ld } = &rust.build {
        out.push((
            "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER",
            component_ld.clone().into_os_string(),
        ));
        out.push(("RUSTC_BOOTSTRAP", "1".into()));
    }
    out
}

/// Whether `bytes` start as a component does (the binary encoding's header of the component
/// layer), not as a core module.
pub fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

/// Where the program is looked for, in order: the capsule's own environment (`.venv/bin`,
/// `node_modules/.bin`, as `npx` would), then each directory of `path` (the `PATH` value).
pub fn candidates(lang: Language, dir: &Path, path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let name = program(lang);
    let mut out = Vec::new();
    match lang {
        Language::Python => out.push(dir.join(".venv/bin").join(name)),
        Language::JavaScript => out.push(dir.join("node_modules/.bin").join(name)),
        Language::Rust => {}
    }
    if let Some(p) = path {
        out.extend(
            std::env::split_paths(p)
                .filter(|d| d.is_absolute())
                .map(|d| d.join(name)),
        );
    }
    out
}

/// The argv after the program: build `dir`'s sources into `out`, reading the WIT in `wit`.
/// Rust builds into `dir/target` and reports its artifact as JSON lines on stdout.
pub fn args(toolchain: &Toolchain, world: World, dir: &Path, wit: &Path, out: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    match toolchain {
        Toolchain::Python => {
            for s in ["--quiet", "-d"] {
                push(s);
            }
            a.push(wit.into());
            for s in ["-w", world.guest(), "componentize", "-p"] {
                a.push(s.into());
            }
            a.push(dir.into());
            for s in ["app", "-o"] {
                a.push(s.into());
            }
            a.push(out.into());
        }
        Toolchain::JavaScript => {
            push("--wit");
            a.push(wit.into());
            for s in ["--world-name", world.guest(), "-o"] {
                a.push(s.into());
            }
            a.push(out.into());
            a.push(dir.join(JAVASCRIPT_ENTRY).into());
        }
        Toolchain::Rust(rust) => {
            let target: &[&str] = match &rust.build {
                RustBuild::Wasip2 => &["--target", RUST_TARGET],
                // `trim-paths`: the component names no path of this machine (where the std
                // sources or the cargo home are), as a prebuilt std does not; the same crates
                // and toolchain give the same bytes anywhere.
                RustBuild::FromSources { .. } => &[
                    "--target",
                    RUST_SOURCE_TARGET,
                    "-Zbuild-std=std,panic_abort",
                    "-Ztrim-paths",
                    "--config",
                    "profile.release.trim-paths=\"all\"",
                ],
            };
            for s in ["build", "--release"].iter().chain(target).chain(&[
                "--message-format",
                "json-render-diagnostics",
                "--manifest-path",
            ]) {
                push(s);
            }
            a.push(dir.join(RUST_ENTRY).into());
            a.push("--target-dir".into());
            a.push(dir.join("target").into());
        }
    }
    a
}

/// Whether `component:` can name the file a build writes: a relative path inside the capsule's
/// directory (no root, no `..`), so a toolchain never writes outside it.
pub fn output_inside(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
        && p.file_name().is_some()
}

/// The `.wasm` a `cargo --message-format json` line reports for a `cdylib` target, if any.
pub fn cargo_artifact(line: &str) -> Option<PathBuf> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["reason"] != "compiler-artifact" {
        return None;
    }
    let kinds = v["target"]["kind"].as_array()?;
    if !kinds.iter().any(|k| k == "cdylib" || k == "bin") {
        return None;
    }
    v["filenames"]
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".wasm"))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: Vec<OsString>) -> Vec<String> {
        a.into_iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    fn rust(build: RustBuild) -> Toolchain {
        Toolchain::Rust(RustToolchain {
            rustc: PathBuf::from("/usr/bin/rustc"),
            build,
        })
    }

    fn from_sources() -> RustBuild {
        RustBuild::FromSources {
            component_ld: PathBuf::from("/usr/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld"),
        }
    }

    #[test]
    fn argv_per_language() {
        let (dir, wit, out) = (Path::new("/p/cap"), Path::new("/t/wit"), Path::new("/p/cap/c.tmp"));
        let table: &[(Toolchain, &str)] = &[
            (
                Toolchain::Python,
                "--quiet -d /t/wit -w capsule-guest componentize -p /p/cap app -o /p/cap/c.tmp",
            ),
            (
                Toolchain::JavaScript,
                "--wit /t/wit --world-name capsule-guest -o /p/cap/c.tmp /p/cap/app.js",
            ),
            (
                rust(RustBuild::Wasip2),
                "build --release --target wasm32-wasip2 --message-format json-render-diagnostics --manifest-path /p/cap/Cargo.toml --target-dir /p/cap/target",
            ),
            (
                rust(from_sources()),
                "build --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort -Ztrim-paths --config profile.release.trim-paths=\"all\" --message-format json-render-diagnostics --manifest-path /p/cap/Cargo.toml --target-dir /p/cap/target",
            ),
        ];
        for (toolchain, want) in table {
            assert_eq!(
                strings(args(toolchain, World::Capsule, dir, wit, out)).join(" "),
                *want,
                "{toolchain:?}"
            );
            let tool = want.replace("capsule-guest", "tool-guest");
            assert_eq!(
                strings(args(toolchain, World::Tool, dir, wit, out)).join(" "),
                tool,
                "{toolchain:?}"
            );
        }
    }

    #[test]
    fn a_rust_toolchain_builds_with_its_wasip2_library_else_from_its_sources() {
        let ld = PathBuf::from("/sys/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld");
        let sysroot = |wasip2_std, std_sources, component_ld: bool| Sysroot {
            wasip2_std,
            std_sources,
            component_ld: component_ld.then(|| ld.clone()),
        };
        let sources = Some(RustBuild::FromSources {
            component_ld: ld.clone(),
        });
        let table: &[(Sysroot, Option<RustBuild>)] = &[
            // rustup with `rustup target add wasm32-wasip2` (it also ships wasm-component-ld).
            (sysroot(true, false, true), Some(RustBuild::Wasip2)),
            (sysroot(true, true, true), Some(RustBuild::Wasip2)),
            (sysroot(true, false, false), Some(RustBuild::Wasip2)),
            // Debian's rustc-web with rust-web-src and rust-web-llvm; rustup with rust-src.
            (sysroot(false, true, true), sources),
            // The sources without the linker that makes a component, or neither.
            (sysroot(false, true, false), None),
            (sysroot(false, false, true), None),
            (Sysroot::default(), None),
        ];
        for (s, want) in table {
            assert_eq!(rust_build(s), *want, "{s:?}");
        }
        assert_eq!(rustc_beside(Path::new("/usr/bin/cargo")), Path::new("/usr/bin/rustc"));
    }

    #[test]
    fn only_a_build_from_sources_gets_the_bootstrap_switch_and_the_component_linker() {
        let shown = |t: &Toolchain| {
            env(t)
                .into_iter()
                .map(|(k, v)| format!("{k}={}", v.to_string_lossy()))
                .collect::<Vec<_>>()
        };
        assert!(shown(&Toolchain::Python).is_empty());
        assert!(shown(&Toolchain::JavaScript).is_empty());
        assert_eq!(shown(&rust(RustBuild::Wasip2)), ["RUSTC=/usr/bin/rustc"]);
        assert_eq!(
            shown(&rust(from_sources())),
            [
                "RUSTC=/usr/bin/rustc",
                "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=/usr/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld",
                "RUSTC_BOOTSTRAP=1"
            ]
        );
        // Nothing the plan adds is one of the variables passed through from mur's environment.
        for (k, _) in env(&rust(from_sources())) {
            assert!(!PASSED_ENV.contains(&k), "{k}");
        }
    }

    #[test]
    fn a_component_is_told_from_a_core_module_by_its_header() {
        let table: &[(&[u8], bool)] = &[
            (b"\0asm\x0d\x00\x01\x00rest", true),
            (b"\0asm\x01\x00\x00\x00rest", false),
            (b"\0asm\x0d\x00", false),
            (b"(component)", false),
            (b"", false),
        ];
        for (bytes, want) in table {
            assert_eq!(is_component(bytes), *want, "{bytes:?}");
        }
    }

    #[test]
    fn hints_are_one_install_command() {
        let table: &[(Language, &str)] = &[
            (Language::Python, "python3 -m pip install componentize-py==0.25.1"),
            (
                Language::JavaScript,
                "npm install @bytecodealliance/componentize-js@0.23.0",
            ),
            (
                Language::Rust,
                "apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld-22",
            ),
        ];
        for (lang, want) in table {
            assert_eq!(install_hint(*lang), *want);
        }
        assert_eq!(
            rust_missing_hint(),
            "install a Rust that builds WebAssembly components: `apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld-22` (Debian 12), or with rustup (https://rustup.rs) `rustup target add wasm32-wasip2`"
        );
    }

    #[test]
    fn the_capsules_own_environment_comes_before_path() {
        let dir = Path::new("/p/cap");
        let path = std::ffi::OsString::from("/usr/bin:relative:/opt/bin");
        let got = |lang| {
            candidates(lang, dir, Some(&path))
                .into_iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            got(Language::Python),
            [
                "/p/cap/.venv/bin/componentize-py",
                "/usr/bin/componentize-py",
                "/opt/bin/componentize-py"
            ]
        );
        assert_eq!(
            got(Language::JavaScript),
            [
                "/p/cap/node_modules/.bin/componentize-js",
                "/usr/bin/componentize-js",
                "/opt/bin/componentize-js"
            ]
        );
        assert_eq!(got(Language::Rust), ["/usr/bin/cargo", "/opt/bin/cargo"]);
        assert_eq!(candidates(Language::Rust, dir, None), Vec::<PathBuf>::new());
    }

    #[test]
    fn cargo_reports_the_component() {
        let table: &[(&str, Option<&str>)] = &[
            (
                r#"{"reason":"compiler-artifact","target":{"kind":["cdylib"]},"filenames":["/t/x.d","/t/wasm32-wasip2/release/cap.wasm"]}"#,
                Some("/t/wasm32-wasip2/release/cap.wasm"),
            ),
            (
                r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libdep.rlib"]}"#,
                None,
            ),
            (r#"{"reason":"build-finished","success":true}"#, None),
            ("not json", None),
        ];
        for (line, want) in table {
            assert_eq!(cargo_artifact(line), want.map(PathBuf::from), "{line}");
        }
    }

    #[test]
    fn a_build_writes_only_inside_the_capsule() {
        for ok in ["capsule.wasm", "out/capsule.wasm", "./capsule.wasm"] {
            assert!(output_inside(ok), "{ok}");
        }
        for bad in [
            "",
            "/tmp/capsule.wasm",
            "../capsule.wasm",
            "out/../../x.wasm",
            ".",
            "out/..",
        ] {
            assert!(!output_inside(bad), "{bad}");
        }
    }

    #[test]
    fn each_wit_has_its_world_and_guest_world() {
        for (world, host, guest) in [
            (World::Capsule, "world capsule {", "world capsule-guest {"),
            (World::Tool, "world tool {", "world tool-guest {"),
        ] {
            let text: String = world.wit_files().iter().map(|(_, t)| *t).collect();
            assert!(text.contains(host) && text.contains(guest), "{world:?}");
            assert!(text.contains("package wasi:http@0.2.12;"));
        }
    }
}
