//! The Rust side of the world in `wit/capsule.wit`, generated: the guest's `run` export and the
//! host's `call-member`, `identity` and `ask` imports, all async. `request-input` may trap: a
//! question left unanswered ends the task whatever the guest would do next.

wasmtime::component::bindgen!({
    path: "src/capsule/wit",
    world: "capsule",
    imports: {
        "murmur:capsule/ask.request-input": async | trappable,
        default: async,
    },
    exports: { default: async },
});
