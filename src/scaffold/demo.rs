//! The demo formation (`actors/demo/`), built into the binary so `mur demo` runs from anywhere:
//! its roster and, per member, the `murmur.yaml` and prebuilt `capsule.wasm` that `mur build`
//! would pack. The members' Rust sources and `build.sh` stay in the repository.

/// The task `mur demo` gives the formation when none is given. Two sentences: planner hands the
/// first to analyst and the second to writer.
pub const DEFAULT_TASK: &str = "Mur launches formations of capsules that call each other. \
Every call is checked at the callee's door and recorded in the trace.";

/// The entry member, as `roster.yaml` names it.
pub const ENTRY: &str = "planner";

/// The member source directories, in roster order.
pub const MEMBERS: &[&str] = &["planner", "analyst", "writer"];

/// Every file of the demo formation, by its path relative to the formation directory.
pub const FILES: &[(&str, &[u8])] = &[
    ("roster.yaml", include_bytes!("../../actors/demo/roster.yaml")),
    (
        "planner/murmur.yaml",
        include_bytes!("../../actors/demo/planner/murmur.yaml"),
    ),
    (
        "planner/capsule.wasm",
        include_bytes!("../../actors/demo/planner/capsule.wasm"),
    ),
    (
        "analyst/murmur.yaml",
        include_bytes!("../../actors/demo/analyst/murmur.yaml"),
    ),
    (
        "analyst/capsule.wasm",
        include_bytes!("../../actors/demo/analyst/capsule.wasm"),
    ),
    (
        "writer/murmur.yaml",
        include_bytes!("../../actors/demo/writer/murmur.yaml"),
    ),
    (
        "writer/capsule.wasm",
        include_bytes!("../../actors/demo/writer/capsule.wasm"),
    ),
];
