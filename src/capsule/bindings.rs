//! The Rust side of the world in `wit/capsule.wit`, generated: the guest's `run` export and the
//! host's `call-member` and `identity` imports, all async.

wasmtime::component::bindgen!({
    path: "src/capsule/wit",
    world: "capsule",
    imports: { default: async },
    exports: { default: async },
});
