//! Fuzzes the door's JSON-RPC request decoding (docs/reference/door.md#request-pipeline steps 7–10,
//! docs/reference/door.md#errors).
//!
//! Input: the first byte's low bits choose how many `A2A-Version` values to split off the front
//! (separated by 0xFF); the rest is the body. Properties: no panic or stack overflow (deep
//! nesting included); a body that is not JSON is -32700; a JSON body that `decode` refuses is
//! -32600; an accepted request has a string, number or null id and the door can render both a
//! reply and an error for it as JSON that reads back; `decode` answers exactly as
//! `decode_via_value` does.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::wire::jsonrpc;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let headers = usize::from(mode & 0x03);
    let mut parts = rest.splitn(headers + 1, |b| *b == 0xFF);
    let versions: Vec<&[u8]> = parts.by_ref().take(headers).collect();
    let body = parts.next().unwrap_or_default();

    let ok = jsonrpc::version_ok(&versions);
    if ok {
        assert_eq!(versions.len(), 1);
        assert!(versions[0].starts_with(b"1.0"));
    }

    let is_json = serde_json::from_slice::<Value>(body).is_ok();
    // The direct reading of well-formed requests answers exactly as the Value reading does.
    let decoded = jsonrpc::decode(body);
    let by_value = jsonrpc::decode_via_value(body);
    assert_eq!(
        decoded.as_ref().map_err(|(id, e)| (id, e.code)),
        by_value.as_ref().map_err(|(id, e)| (id, e.code))
    );
    match decoded {
        Err((id, e)) => {
            let want = if is_json {
                jsonrpc::INVALID_REQUEST
            } else {
                jsonrpc::PARSE_ERROR
            };
            assert_eq!(e.code, want);
            assert!(matches!(id, Value::Null | Value::String(_) | Value::Number(_)));
            readback(&jsonrpc::error_value(&id, &e));
        }
        Ok(req) => {
            assert!(is_json);
            assert!(matches!(req.id, Value::Null | Value::String(_) | Value::Number(_)));
            if let Some(m) = jsonrpc::Method::resolve(&req.method) {
                let _ = m.scope();
            }
            readback(&jsonrpc::result_value(&req.id, json!({"ok": true})));
            readback(&jsonrpc::error_value(&req.id, &jsonrpc::RpcError::invalid_params()));
        }
    }
});

fn readback(v: &Value) {
    let bytes = jsonrpc::to_bytes(v);
    assert_eq!(serde_json::from_slice::<Value>(&bytes).ok().as_ref(), Some(v));
}
