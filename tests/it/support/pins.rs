//! The third-party packages the tests install, pinned, in one place. Every test that drives a
//! door with an official A2A SDK, or serves an agent with one, shares one environment per
//! language: a set of its own would be another install for the same code. A new release is a
//! deliberate bump here (the interop scripts use the 1.x APIs).

/// The A2A Python SDK with its HTTP server, and the server that runs its Starlette app.
pub const A2A_PY: &[&str] = &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.54.0"];

/// The A2A JS SDK, and express for the agents it serves.
pub const A2A_JS: &[&str] = &["@a2a-js/sdk@1.3.0", "express@5.3.0"];

/// The model providers' SDKs whose types the request bodies are checked against.
pub const PROVIDER_SDKS: &[&str] = &["openai==3.57.0", "anthropic==2.14.0", "pydantic==2.14.4"];

/// The agent card's JSON Schema validator.
pub const JSONSCHEMA: &[&str] = &["jsonschema==4.26.0"];

/// The official Kubernetes JSON schemas (1.25–1.37, strict variants included) and their checker,
/// against which every object `mur deploy` renders in the tests is validated.
pub const KUBERNETES_VALIDATE: &[&str] = &["kubernetes-validate==1.37.0"];
