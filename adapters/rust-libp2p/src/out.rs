//! The adapter's stdout: one JSON object per line, each with "time" and "msg"
//! first (the gossipsub-interop contract's lines and the testbed's extension
//! lines, foreign.md A and B). Everything else the adapter says goes to stderr.
//! One writer for the event loop and the tracing tap alike, so lines never
//! interleave.

use std::io::Write;

use serde_json::{Map, Value};

use crate::clock::now_rfc3339;

/// Writes one NDJSON line: `{"time": now, "msg": msg, ...fields}`.
pub fn emit(msg: &str, fields: &[(&str, Value)]) {
    let mut line = Map::new();
    line.insert("time".into(), Value::String(now_rfc3339()));
    line.insert("msg".into(), Value::String(msg.into()));
    for (key, value) in fields {
        line.insert((*key).into(), value.clone());
    }
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not kill the router: the lines are lost, the node runs on.
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}

/// A message id as the contract logs it: the first 8 bytes of the data as a
/// big-endian u64, in base 10. Shorter data is zero-padded on the right.
pub fn message_id_text(data: &[u8]) -> String {
    let mut head = [0u8; 8];
    let n = data.len().min(8);
    head[..n].copy_from_slice(&data[..n]);
    u64::from_be_bytes(head).to_string()
}

#[cfg(test)]
mod tests {
    use super::message_id_text;

    #[test]
    fn ids_are_big_endian_base_10() {
        assert_eq!(message_id_text(&31u64.to_be_bytes()), "31");
        assert_eq!(message_id_text(&[0, 0, 0, 0, 0, 0, 1, 0, 0xff]), "256");
        assert_eq!(message_id_text(&[1]), "72057594037927936");
    }
}
