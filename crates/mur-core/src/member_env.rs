//! The variables the runtime itself hands a member (docs/reference/formation.md#member-environment,
//! docs/guide.md, "What a member's environment holds"), and the one rule every manifest field
//! naming a key's variable follows: it may not name one of them.
//!
//! A model capsule's key is sent to the endpoint its manifest names, and that manifest may be a
//! third party's. Were `api_key: ${OTEL_EXPORTER_OTLP_HEADERS}` accepted, the member would send
//! the collector's key to that endpoint; `${MURMUR_…}` or `${HOME}` would leak the formation's
//! wiring or the operator's paths the same way.

use crate::diag::{self, Diagnostic};

/// What a member inherits from the launcher's environment, besides what its manifest declares.
/// Each is here for a reason, and none is a credential: a capsule written by someone else runs
/// inside the member, and whatever it can read it can send to its endpoint.
pub const PASSED: [&str; 11] = [
    // Members find ~/.murmur (stores, records, running records) through it.
    "HOME",
    // The member program may be a wrapper script (MURMUR_MUR_BINARY,
    // docs/reference/formation.md#launch-sequence) that finds its tools through the search path.
    "PATH",
    // Locale and time zone: how libc and a wrapper script render text and local time.
    "LANG",
    "TZ",
    // Where temporary files go; a user who moved them off /tmp expects members to follow.
    "TMPDIR",
    // The entry writes to the user's terminal; how it may style that output.
    "TERM",
    "NO_COLOR",
    // The tracing filter every mur process installs, so a formation can be debugged as a whole;
    // the logs redact Authorization headers.
    "RUST_LOG",
    "RUST_BACKTRACE",
    // The spec's operator knobs that members read (docs/reference/manifest.md#keys,
    // docs/reference/capsules.md#calls-between-members).
    "MURMUR_A2A_TIMEOUT_SECS",
    "MURMUR_DELEGATION_TIMEOUT_SECS",
];

/// Whether the runtime itself may hand a member `name`: [`PASSED`], `LC_*`, every `OTEL_*` (the
/// exporter's, `trace::otel_env::FORWARDED`, and any it may read later), `MURMUR_*` (the
/// formation's variables) and the W3C trace context the entry is given (`TRACEPARENT`).
pub fn runtime_passes(name: &str) -> bool {
    PASSED.contains(&name)
        || ["LC_", "OTEL_", "MURMUR_"].iter().any(|p| name.starts_with(p))
        || name == "TRACEPARENT"
        || name == "TRACESTATE"
}

/// The rule for every manifest field that names the variable holding a key (`inference.api_key`
/// today; every future key field calls this too): `var` may not be one the runtime passes, else
/// E-MAN-004 naming `field` and the variable (never its value).
pub fn check_key_variable(field: &str, var: &str) -> Result<(), Diagnostic> {
    if !runtime_passes(var) {
        return Ok(());
    }
    Err(Diagnostic::new(
        diag::E_MAN_004,
        format!(
            "murmur.yaml: {field}: names {var}, a variable the runtime passes to every member, so the key's endpoint would be sent what it holds"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_the_runtime_passes_is_refused_as_a_key() {
        // (variable, refused)
        let table = [
            ("OTEL_EXPORTER_OTLP_HEADERS", true),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", true),
            ("OTEL_SOMETHING_NEW", true),
            ("MURMUR_FORMATION_CHANNEL", true),
            ("MURMUR_A2A_TIMEOUT_SECS", true),
            ("HOME", true),
            ("PATH", true),
            ("RUST_LOG", true),
            ("LC_ALL", true),
            ("TRACEPARENT", true),
            ("OPENAI_API_KEY", false),
            ("ANTHROPIC_API_KEY", false),
            ("MY_OTEL_KEY", false),
            ("home", false),
            ("_K9", false),
        ];
        for (var, refused) in table {
            let got = check_key_variable("inference.api_key", var);
            assert_eq!(got.is_err(), refused, "{var}");
            if let Err(d) = got {
                assert_eq!(d.code, diag::E_MAN_004, "{var}");
                assert!(
                    d.message
                        .starts_with(&format!("murmur.yaml: inference.api_key: names {var}, "))
                );
            }
        }
        // Whatever the launcher forwards of the exporter's is among them.
        for var in crate::trace::otel_env::FORWARDED.iter().chain(PASSED.iter()) {
            assert!(runtime_passes(var), "{var}");
        }
    }
}
