//! The testbed's NodeConfig (node/config.py), read from `--config FILE`: the
//! part an adapter uses (foreign.md B). Unknown fields are ignored, so the
//! orchestrator may add fields without breaking the adapter. Protocol
//! parameters and topics are deliberately absent: they come from the script
//! (initGossipSub, subscribeToTopic).

use std::collections::HashMap;

use libp2p::identity::Keypair;
use libp2p::PeerId;
use serde::Deserialize;

/// A peer to dial and the peer id (base58) it must prove it has.
#[derive(Debug, Clone, Deserialize)]
pub struct PeerAddress {
    pub host: String,
    pub port: u16,
    pub peer_id: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NodeConfig {
    pub name: String,
    pub index: u32,
    pub listen_host: String,
    pub listen_port: u16,
    pub control_host: String,
    pub control_port: u16,
    pub token: String,
    #[serde(default)]
    pub initial_peers: Vec<PeerAddress>,
    #[serde(default)]
    pub peer_names: HashMap<String, String>,
    #[serde(default = "strict")]
    pub authenticity: String,
    #[serde(default = "first_8_bytes")]
    pub message_id: String,
}

fn strict() -> String {
    "strict".into()
}

fn first_8_bytes() -> String {
    "first-8-bytes".into()
}

impl NodeConfig {
    pub fn load(path: &str) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let config: NodeConfig = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
        // rust-libp2p is run signed (strict) or as the contract's nodes run
        // (anonymous), always with test-plans' message ids.
        if config.authenticity != "strict" && config.authenticity != "anonymous" {
            return Err(format!(
                "{path}: authenticity {:?}: this adapter runs strict or anonymous only",
                config.authenticity
            ));
        }
        if config.message_id != "first-8-bytes" {
            return Err(format!("{path}: message_id {:?}: this adapter uses first-8-bytes only", config.message_id));
        }
        Ok(config)
    }

    /// Whether messages go out unsigned, without author and seqno, and
    /// arrive only so (go's StrictNoSign + WithNoAuthor).
    pub fn anonymous(&self) -> bool {
        self.authenticity == "anonymous"
    }
}

/// The identity of experiment node `index`: an ed25519 key whose secret seed
/// is the index as a little-endian u32, zero-padded to 32 bytes.
pub fn keypair_for_index(index: u32) -> Keypair {
    let mut seed = [0u8; 32];
    seed[..4].copy_from_slice(&index.to_le_bytes());
    Keypair::ed25519_from_bytes(seed).expect("32 bytes are a valid ed25519 seed")
}

pub fn peer_id_for_index(index: u32) -> PeerId {
    keypair_for_index(index).public().to_peer_id()
}

#[cfg(test)]
mod tests {
    use super::peer_id_for_index;

    #[test]
    fn identities_match_test_plans() {
        // node/libp2p/identity.py's identity_for_index(0), the same key test-plans derives.
        assert_eq!(peer_id_for_index(0).to_base58(), "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN");
    }
}
