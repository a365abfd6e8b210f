//! What rust-libp2p's gossipsub does not tell its user, observed honestly.
//!
//! `gossipsub::Event::Message` is deduplicated: a copy that arrives after the
//! first is dropped inside the behaviour. The behaviour does log it, at debug
//! level, from `handle_received_message` ("Message already received,
//! ignoring", with the message id), right after it computed the id with our
//! message-id function (which sees the topic) and while it handles one RPC
//! whose sender it logged first ("Received gossipsub message", peer=...). All
//! three happen in order inside one call of the swarm's poll, so this tracing
//! layer can write the contract's "Received Message" line for every duplicate
//! with its sender and topic. The same layer reports "Peer Added" when the
//! behaviour learns which gossipsub protocol a peer speaks.
//!
//! Each log site is recognised once, by its message text (cached per
//! callsite), so the payload-sized fields of other debug events are never
//! formatted. The texts are those of libp2p-gossipsub 0.50 (Cargo.lock pins
//! it); tests/test_rust_adapter.py fails when duplicates stop being seen.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::out::{emit, message_id_text};

const RPC_RECEIVED: &str = "Received gossipsub message";
const DUPLICATE: &str = "Message already received, ignoring";
const PEER_KIND: &str = "New peer type found for peer";

/// State shared by the message-id function, this layer and the event loop.
#[derive(Default)]
pub struct Tap {
    /// The id and topic of the message the behaviour last computed an id for.
    last_message: Option<(Vec<u8>, String)>,
    /// The sender (base58) of the RPC being handled.
    rpc_peer: String,
    /// Topics we are subscribed to: copies on other topics are no deliveries.
    pub subscribed: HashSet<String>,
    pub duplicates: u64,
    /// Peers a "Peer Added" line was written for.
    pub peers_added: HashSet<String>,
}

pub type SharedTap = Arc<Mutex<Tap>>;

/// The network's message-id function (test-plans': the first 8 bytes of the
/// data; shorter data is its own id), noting what it was asked about.
pub fn message_id(tap: &SharedTap, data: &[u8], topic: &str) -> Vec<u8> {
    let id = data[..data.len().min(8)].to_vec();
    if let Ok(mut tap) = tap.lock() {
        tap.last_message = Some((id.clone(), topic.to_owned()));
    }
    id
}

#[derive(Clone, Copy, PartialEq)]
enum Site {
    RpcReceived,
    Duplicate,
    PeerKind,
    Other,
}

pub struct TapLayer {
    tap: SharedTap,
    sites: Mutex<HashMap<Identifier, Site>>,
}

impl TapLayer {
    pub fn new(tap: SharedTap) -> Self {
        Self { tap, sites: Mutex::new(HashMap::new()) }
    }

    fn site(&self, event: &Event<'_>) -> Site {
        let key = event.metadata().callsite();
        if let Some(site) = self.sites.lock().ok().and_then(|s| s.get(&key).copied()) {
            return site;
        }
        let mut texts = Fields::wanting(&["message"]);
        event.record(&mut texts);
        let site = texts
            .values
            .iter()
            .find_map(|(_, text)| match text.as_str() {
                RPC_RECEIVED => Some(Site::RpcReceived),
                DUPLICATE => Some(Site::Duplicate),
                PEER_KIND => Some(Site::PeerKind),
                _ => None,
            })
            .unwrap_or(Site::Other);
        if let Ok(mut sites) = self.sites.lock() {
            sites.insert(key, site);
        }
        site
    }
}

/// A visitor that formats only the fields it is asked for.
struct Fields {
    wanted: &'static [&'static str],
    values: Vec<(&'static str, String)>,
}

impl Fields {
    fn wanting(wanted: &'static [&'static str]) -> Self {
        Self { wanted, values: Vec::new() }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if let Some(name) = self.wanted.iter().find(|w| **w == field.name()) {
            self.values.push((name, format!("{value:?}")));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(name) = self.wanted.iter().find(|w| **w == field.name()) {
            self.values.push((name, value.to_owned()));
        }
    }
}

/// go-libp2p-pubsub's protocol id for a rust-libp2p PeerKind text.
fn protocol_id(kind: &str) -> String {
    match kind.strip_prefix("Gossipsub v") {
        Some(version) => format!("/meshsub/{version}.0"),
        None if kind == "Floodsub" => "/floodsub/1.0.0".into(),
        None => kind.into(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl<S: Subscriber> Layer<S> for TapLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        match self.site(event) {
            Site::Other => {}
            Site::RpcReceived => {
                let mut fields = Fields::wanting(&["peer"]);
                event.record(&mut fields);
                if let (Some(peer), Ok(mut tap)) = (fields.get("peer"), self.tap.lock()) {
                    tap.rpc_peer = peer.to_owned();
                }
            }
            Site::Duplicate => {
                let mut fields = Fields::wanting(&["message_id"]);
                event.record(&mut fields);
                let Ok(mut tap) = self.tap.lock() else { return };
                let Some((id, topic)) = tap.last_message.clone() else { return };
                if fields.get("message_id") != Some(hex(&id).as_str()) || !tap.subscribed.contains(&topic) {
                    return;
                }
                tap.duplicates += 1;
                emit(
                    "Received Message",
                    &[("id", json!(message_id_text(&id))), ("from", json!(tap.rpc_peer)), ("topic", json!(topic))],
                );
            }
            Site::PeerKind => {
                let mut fields = Fields::wanting(&["peer", "peer_type"]);
                event.record(&mut fields);
                let (Some(peer), Some(kind)) = (fields.get("peer"), fields.get("peer_type")) else { return };
                let Ok(mut tap) = self.tap.lock() else { return };
                if tap.peers_added.insert(peer.to_owned()) {
                    emit("Peer Added", &[("peer", json!(peer)), ("protocol", json!(protocol_id(kind)))]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::protocol_id;

    #[test]
    fn protocol_ids() {
        assert_eq!(protocol_id("Gossipsub v1.2"), "/meshsub/1.2.0");
        assert_eq!(protocol_id("Floodsub"), "/floodsub/1.0.0");
    }
}
