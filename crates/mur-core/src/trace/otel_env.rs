//! Whether a process exports OpenTelemetry spans, read from the standard `OTEL_*` variables, and
//! which of them a member inherits from its launcher.
//!
//! Export is on only when a traces endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`): a process that was not asked to export dials nobody.
//! `OTEL_SDK_DISABLED=true` and `OTEL_TRACES_EXPORTER=none` turn it off whatever else is set.
//! Only OTLP over HTTP with uncompressed protobuf bodies is spoken; another protocol or a
//! compression asked for is a warning and no export, never a guess.

/// The variables a member inherits when the launcher has them set (and only then): what the
/// exporter reads, nothing more. `OTEL_EXPORTER_OTLP_HEADERS` may hold a collector's key: it is
/// passed in the environment (never argv), read only by the exporter, and never reaches a
/// WebAssembly guest, whose environment the runtime builds from nothing.
pub const FORWARDED: [&str; 18] = [
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT",
];

/// The one protocol spoken.
pub const PROTOCOL: &str = "http/protobuf";

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Export {
    /// No endpoint set, or export turned off: no span is made, nothing is dialled.
    Off,
    /// Export over OTLP/HTTP; the exporter reads the endpoint, headers and timeout itself.
    On,
    /// Asked for, but not in a form this runtime speaks: the reason, for a warning.
    Refused(String),
}

/// Decides from `get` (the environment).
pub fn decide(get: impl Fn(&str) -> Option<String>) -> Export {
    let set = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Export::Off;
    }
    if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
        return Export::Off;
    }
    if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
        return Export::Off;
    }
    if let Some(e) = set("OTEL_TRACES_EXPORTER").filter(|v| !v.eq_ignore_ascii_case("otlp")) {
        return Export::Refused(format!(
            "OTEL_TRACES_EXPORTER is '{e}', but only 'otlp' (or 'none') is supported"
        ));
    }
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .map(|p| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p))
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p)));
    if let Some((var, p)) = protocol.filter(|(_, p)| p != PROTOCOL) {
        return Export::Refused(format!("{var} is '{p}', but only '{PROTOCOL}' is supported"));
    }
    let compression = set("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION")
        .map(|c| ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", c))
        .or_else(|| set("OTEL_EXPORTER_OTLP_COMPRESSION").map(|c| ("OTEL_EXPORTER_OTLP_COMPRESSION", c)));
    if let Some((var, c)) = compression.filter(|(_, c)| !c.eq_ignore_ascii_case("none")) {
        return Export::Refused(format!(
            "{var} is '{c}', but bodies are sent uncompressed only (set it to 'none' or unset it)"
        ));
    }
    Export::On
}

/// A queue bound from `OTEL_BSP_MAX_QUEUE_SIZE`, kept within 1..=65536 spans (the default 2048
/// when unset or unreadable): the queue holds spans in memory, so its size is bounded here
/// whatever the variable says.
pub fn queue_bound(value: Option<&str>) -> usize {
    const DEFAULT: usize = 2048;
    const MAX: usize = 65536;
    value
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(DEFAULT, |n| n.clamp(1, MAX))
}

/// Whether `s` is a W3C `traceparent` of version `00`: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase,
/// ids not all zero. A caller's header that is not is ignored (the task starts a trace of its
/// own), whatever a lenient parser would make of it.
pub fn well_formed_traceparent(s: &str) -> bool {
    // `00-` + 32 + `-` + 16 + `-` + 2: anything longer is refused before it is split.
    if s.len() != 55 {
        return false;
    }
    let parts: Vec<&str> = s.split('-').collect();
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let nonzero = |p: &str| p.bytes().any(|b| b != b'0');
    matches!(parts[..], [v, t, p, f]
        if v == "00" && hex(t, 32) && hex(p, 16) && hex(f, 2) && nonzero(t) && nonzero(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_checked_for_their_w3c_shape() {
        let t = "0af7651916cd43dd8448eb211c80319c";
        let p = "b7ad6b7169203331";
        for (s, ok) in [
            (format!("00-{t}-{p}-01"), true),
            (format!("00-{t}-{p}-00"), true),
            (format!("00-{}-{p}-01", "0".repeat(32)), false),
            (format!("00-{t}-{}-01", "0".repeat(16)), false),
            (format!("00-{}-{p}-01", &t[..16]), false),
            (format!("00-{}-{p}-01", t.to_uppercase()), false),
            (format!("01-{t}-{p}-01"), false),
            (format!("00-{t}-{p}-01-extra"), false),
            (format!("00-{t}-{p}-1"), false),
            (String::new(), false),
            ("not a traceparent".to_string(), false),
        ] {
            assert_eq!(well_formed_traceparent(&s), ok, "{s:?}");
        }
    }

    #[test]
    fn the_environment_decides() {
        let on = Export::On;
        let cases: Vec<(Vec<(&str, &str)>, Export)> = vec![
            (vec![], Export::Off),
            (vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "")], Export::Off),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")],
                on.clone(),
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c/v1/traces")],
                on.clone(),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_SDK_DISABLED", "TRUE"),
                ],
                Export::Off,
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_SDK_DISABLED", "false"),
                ],
                on.clone(),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_TRACES_EXPORTER", "none"),
                ],
                Export::Off,
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_TRACES_EXPORTER", "otlp"),
                ],
                on.clone(),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_TRACES_EXPORTER", "zipkin"),
                ],
                Export::Refused("OTEL_TRACES_EXPORTER is 'zipkin', but only 'otlp' (or 'none') is supported".into()),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                Export::Refused("OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc', but only 'http/protobuf' is supported".into()),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ],
                on.clone(),
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
                Export::Refused(
                    "OTEL_EXPORTER_OTLP_COMPRESSION is 'gzip', but bodies are sent uncompressed only (set it to 'none' or unset it)"
                        .into(),
                ),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
                    ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"),
                ],
                on.clone(),
            ),
        ];
        for (env, want) in cases {
            let got = decide(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
            assert_eq!(got, want, "{env:?}");
        }
    }

    #[test]
    fn the_queue_is_bounded() {
        for (v, want) in [
            (None, 2048),
            (Some("100"), 100),
            (Some(" 7 "), 7),
            (Some("0"), 1),
            (Some("99999999999"), 65536),
            (Some("lots"), 2048),
        ] {
            assert_eq!(queue_bound(v), want, "{v:?}");
        }
    }

    #[test]
    fn every_forwarded_variable_is_an_otel_one() {
        assert!(FORWARDED.iter().all(|v| v.starts_with("OTEL_")));
        assert!(FORWARDED.contains(&"OTEL_EXPORTER_OTLP_HEADERS"));
    }
}
