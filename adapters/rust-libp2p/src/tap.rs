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
//! IDONTWANT (gossipsub v1.2) is in no event either. The behaviour logs each
//! RPC it receives whole ("Received gossipsub message", message=RpcIn) and
//! each one it hands to a connection ("Sending Rpc", rpc=RpcOut; every
//! RpcOut goes out as an RPC of its own). Their Debug texts name the
//! IDONTWANT ids (`IDontWant(IDontWant { message_ids: [MessageId(hex), ..] })`;
//! a message's Debug shows its data's length, never the data), so the layer
//! writes "RPC Received" and "RPC Sent" lines with the ids for the RPCs that
//! carry IDONTWANT, and no line for the others. An RpcOut is formatted only
//! as far as its variant's name unless it is an IDONTWANT.
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
const RPC_SENDING: &str = "Sending Rpc";
/// How IDONTWANT begins in the Debug text of an RpcIn's control and of an RpcOut.
const IDONTWANT: &str = "IDontWant(IDontWant { message_ids: [";

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
    RpcSending,
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
                RPC_SENDING => Some(Site::RpcSending),
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

/// The first bytes of a Debug text, and no more: formatting stops with an
/// error once `limit` bytes are written.
struct Prefix {
    text: String,
    limit: usize,
}

impl std::fmt::Write for Prefix {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.limit - self.text.len();
        let cut = (0..=s.len().min(room)).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        self.text.push_str(&s[..cut]);
        if cut < s.len() { Err(std::fmt::Error) } else { Ok(()) }
    }
}

/// A visitor that formats one RpcOut field only when it is an IDONTWANT.
struct IdontwantOut {
    peer: Option<String>,
    rpc: Option<String>,
}

impl Visit for IdontwantOut {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        match field.name() {
            "peer_id" => self.peer = Some(format!("{value:?}")),
            "rpc" => {
                let mut head = Prefix { text: String::new(), limit: IDONTWANT.len() };
                let _ = std::fmt::write(&mut head, format_args!("{value:?}"));
                if head.text == IDONTWANT {
                    self.rpc = Some(format!("{value:?}"));
                }
            }
            _ => {}
        }
    }
}

/// Every message id in the IDONTWANTs of a Debug text of rust-libp2p's
/// RpcIn or RpcOut, as the contract writes ids.
fn idontwant_ids(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(IDONTWANT) {
        rest = &rest[at + IDONTWANT.len()..];
        let end = rest.find(']').unwrap_or(rest.len());
        for item in rest[..end].split(", ") {
            if let Some(bytes) = item.strip_prefix("MessageId(").and_then(|s| s.strip_suffix(')')).and_then(unhex) {
                ids.push(message_id_text(&bytes));
            }
        }
        rest = &rest[end..];
    }
    ids
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
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
                let mut fields = Fields::wanting(&["peer", "message"]);
                event.record(&mut fields);
                let Some(peer) = fields.get("peer") else { return };
                if let Ok(mut tap) = self.tap.lock() {
                    tap.rpc_peer = peer.to_owned();
                }
                // "message" names both the RpcIn and the event's own text
                let ids: Vec<String> =
                    fields.values.iter().filter(|(n, _)| *n == "message").flat_map(|(_, v)| idontwant_ids(v)).collect();
                if !ids.is_empty() {
                    emit("RPC Received", &[("peer", json!(peer)), ("idontwant", json!(ids))]);
                }
            }
            Site::RpcSending => {
                let mut fields = IdontwantOut { peer: None, rpc: None };
                event.record(&mut fields);
                if let (Some(peer), Some(rpc)) = (fields.peer, fields.rpc) {
                    emit("RPC Sent", &[("peer", json!(peer)), ("idontwant", json!(idontwant_ids(&rpc)))]);
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
    use super::{idontwant_ids, protocol_id, Prefix, IDONTWANT};

    #[test]
    fn protocol_ids() {
        assert_eq!(protocol_id("Gossipsub v1.2"), "/meshsub/1.2.0");
        assert_eq!(protocol_id("Floodsub"), "/floodsub/1.0.0");
    }

    // The texts are libp2p-gossipsub 0.50's derived Debug of RpcOut::IDontWant
    // and its RpcIn's, with MessageId's own Debug (hex).
    #[test]
    fn idontwant_ids_from_an_rpc_out() {
        let text = "IDontWant(IDontWant { message_ids: [MessageId(0000000000000001), MessageId(00000000000000ff)] })";
        assert_eq!(idontwant_ids(text), ["1", "255"]);
    }

    #[test]
    fn idontwant_ids_from_an_rpc_in_skip_ihave_and_iwant() {
        let text = "GossipsubRpc { messages: [RawMessage { source: None, data length: 8192 }], control_msgs: \
                    [IHave(IHave { topic_hash: TopicHash { hash: \"t\" }, message_ids: [MessageId(0000000000000009)] }), \
                    IDontWant(IDontWant { message_ids: [MessageId(0000000000000002)] }), \
                    IWant(IWant { message_ids: [MessageId(0000000000000003)] })] }";
        assert_eq!(idontwant_ids(text), ["2"]);
        assert!(idontwant_ids("GossipsubRpc { subscriptions: [] }").is_empty());
    }

    #[test]
    fn prefix_stops_formatting_at_its_limit() {
        let mut head = Prefix { text: String::new(), limit: IDONTWANT.len() };
        let result = std::fmt::write(&mut head, format_args!("{}", "Publish { message_id: MessageId(00), message: .. }"));
        assert!(result.is_err());
        assert_eq!(head.text.len(), IDONTWANT.len());
    }
}
