//! The testbed's control endpoint (node/runtime/control.py's protocol):
//! newline-delimited JSON over TCP, one JSON line answered per request, every
//! request carrying the token. This module only frames, parses and
//! authenticates; the event loop (node.rs) carries out the commands, so a
//! malformed or hostile request can never reach the router.

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::node::Command;

const MAX_LINE: usize = 16 << 20;

/// Serves the control endpoint forever, one task per connection.
pub async fn serve(listener: TcpListener, token: String, commands: mpsc::Sender<Command>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, token.clone(), commands.clone()));
            }
            Err(e) => {
                eprintln!("control: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Token comparison whose time does not depend on where the texts differ.
fn same_token(given: &str, token: &str) -> bool {
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// A request that may be handed to the event loop, or the answer that refuses it.
pub fn check(line: &[u8], token: &str) -> Result<Value, Value> {
    let request: Value = serde_json::from_slice(line).map_err(|_| json!({"ok": false, "error": "not JSON"}))?;
    let Some(object) = request.as_object() else {
        return Err(json!({"ok": false, "error": "a request is a JSON object"}));
    };
    match object.get("token").and_then(Value::as_str) {
        Some(given) if same_token(given, token) => Ok(request),
        _ => Err(json!({"ok": false, "error": "unauthorized"})),
    }
}

async fn answer(request: Value, commands: &mpsc::Sender<Command>) -> Value {
    let (reply, answer) = oneshot::channel();
    if commands.send(Command::Control { request, reply }).await.is_err() {
        return json!({"ok": false, "error": "the node is shutting down"});
    }
    answer.await.unwrap_or_else(|_| json!({"ok": false, "error": "the node is shutting down"}))
}

async fn connection(mut stream: TcpStream, token: String, commands: mpsc::Sender<Command>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let reply = match check(&line, &token) {
                Ok(request) => answer(request, &commands).await,
                Err(refusal) => refusal,
            };
            let mut text = reply.to_string();
            text.push('\n');
            if stream.write_all(text.as_bytes()).await.is_err() {
                return;
            }
            if reply.get("shutdown") == Some(&Value::Bool(true)) {
                let _ = commands.send(Command::Shutdown).await;
                return;
            }
        }
        if buf.len() > MAX_LINE {
            let _ = stream.write_all(b"{\"ok\": false, \"error\": \"request line too long\"}\n").await;
            return;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn requests_are_json_objects_with_the_token() {
        assert_eq!(check(b"{", "k").unwrap_err()["error"], "not JSON");
        assert_eq!(check(b"[1]", "k").unwrap_err()["error"], "a request is a JSON object");
        assert_eq!(check(br#"{"cmd": "status", "token": "x"}"#, "k").unwrap_err()["error"], "unauthorized");
        assert_eq!(check(br#"{"cmd": "status"}"#, "k").unwrap_err()["error"], "unauthorized");
        assert_eq!(check(br#"{"cmd": "status", "token": "k"}"#, "k").unwrap()["cmd"], "status");
    }
}
