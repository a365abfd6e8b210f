//! The gossipsub-interop script (test-plans' script_instruction.py): what a
//! node is told to do, in order, by `--params FILE`. `ifNodeIDEquals` is
//! resolved once, when the script is loaded, so the event loop only ever sees
//! this node's own instructions.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

/// One instruction, exactly as the params file spells it.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type")]
pub enum Instruction {
    #[serde(rename = "initGossipSub")]
    InitGossipSub {
        #[serde(rename = "gossipSubParams", default)]
        gossip_sub_params: Map<String, Value>,
        /// Our extension: go's PeerScoreParams; with it, the node scores.
        #[serde(rename = "peerScoreParams", default)]
        peer_score_params: Option<Map<String, Value>>,
        /// Our extension: go's PeerScoreThresholds (absent: go's defaults).
        #[serde(rename = "peerScoreThresholds", default)]
        peer_score_thresholds: Option<Map<String, Value>>,
    },
    #[serde(rename = "connect")]
    Connect {
        #[serde(rename = "connectTo")]
        connect_to: Vec<u32>,
    },
    #[serde(rename = "subscribeToTopic")]
    SubscribeToTopic {
        #[serde(rename = "topicID")]
        topic_id: String,
    },
    #[serde(rename = "publish")]
    Publish {
        #[serde(rename = "messageID")]
        message_id: u64,
        #[serde(rename = "messageSizeBytes")]
        message_size_bytes: usize,
        #[serde(rename = "topicID")]
        topic_id: String,
    },
    #[serde(rename = "waitUntil")]
    WaitUntil {
        #[serde(rename = "elapsedSeconds")]
        elapsed_seconds: u64,
    },
    /// Validating a message of the topic takes this long (validation_delays).
    #[serde(rename = "setTopicValidationDelay")]
    SetTopicValidationDelay {
        #[serde(rename = "topicID")]
        topic_id: String,
        #[serde(rename = "delaySeconds")]
        delay_seconds: f64,
    },
    #[serde(rename = "ifNodeIDEquals")]
    IfNodeIdEquals {
        #[serde(rename = "nodeID")]
        node_id: u32,
        instruction: Box<Instruction>,
    },
}

#[derive(Deserialize)]
struct Params {
    script: Vec<Instruction>,
}

/// Reads a params file: `{"script": [instruction, ...]}`.
pub fn load(path: &str) -> Result<Vec<Instruction>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let params: Params = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    Ok(params.script)
}

/// The instructions node `node` runs, in order, with every `ifNodeIDEquals`
/// replaced by its inner instruction or dropped.
pub fn for_node(script: Vec<Instruction>, node: u32) -> Vec<Instruction> {
    script.into_iter().filter_map(|instruction| resolve(instruction, node)).collect()
}

fn resolve(instruction: Instruction, node: u32) -> Option<Instruction> {
    match instruction {
        Instruction::IfNodeIdEquals { node_id, instruction } if node_id == node => resolve(*instruction, node),
        Instruction::IfNodeIdEquals { .. } => None,
        other => Some(other),
    }
}

/// The gossipsub parameters of this node's first `initGossipSub` (empty: the defaults).
pub fn gossipsub_params(script: &[Instruction]) -> Map<String, Value> {
    script
        .iter()
        .find_map(|i| match i {
            Instruction::InitGossipSub { gossip_sub_params, .. } => Some(gossip_sub_params.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The score parameters and thresholds of this node's first `initGossipSub`,
/// when it gives score parameters (None: the node does not score).
pub fn peer_score(script: &[Instruction]) -> Option<(Map<String, Value>, Map<String, Value>)> {
    script.iter().find_map(|i| match i {
        Instruction::InitGossipSub { peer_score_params: Some(params), peer_score_thresholds, .. } => {
            Some((params.clone(), peer_score_thresholds.clone().unwrap_or_default()))
        }
        _ => None,
    })
}

/// How long validating a message of each topic takes, from every
/// `setTopicValidationDelay` of the script (gossipsub must be told before it
/// is built that the application validates: `validate_messages`).
pub fn validation_delays(script: &[Instruction]) -> Result<HashMap<String, Duration>, String> {
    let mut out = HashMap::new();
    for i in script {
        if let Instruction::SetTopicValidationDelay { topic_id, delay_seconds } = i {
            let delay = Duration::try_from_secs_f64(*delay_seconds)
                .map_err(|e| format!("setTopicValidationDelay {topic_id}: delaySeconds {delay_seconds}: {e}"))?;
            out.insert(topic_id.clone(), delay);
        }
    }
    Ok(out)
}

/// The node index a `nodeN` hostname names.
pub fn node_id_from_hostname(hostname: &str) -> Result<u32, String> {
    hostname
        .strip_prefix("node")
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| format!("hostname {hostname:?} is not nodeN (and no --config gives the index)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_node_id_equals_keeps_only_this_nodes_instructions() {
        let script: Params = serde_json::from_str(
            r#"{"script": [
                {"type": "initGossipSub", "gossipSubParams": {"D": 4}},
                {"type": "ifNodeIDEquals", "nodeID": 1, "instruction":
                    {"type": "ifNodeIDEquals", "nodeID": 1, "instruction":
                        {"type": "publish", "messageID": 7, "messageSizeBytes": 9, "topicID": "t"}}},
                {"type": "ifNodeIDEquals", "nodeID": 2, "instruction": {"type": "waitUntil", "elapsedSeconds": 3}},
                {"type": "connect", "connectTo": [0, 2]}
            ]}"#,
        )
        .unwrap();
        let mine = for_node(script.script, 1);
        assert_eq!(mine.len(), 3);
        assert!(matches!(mine[1], Instruction::Publish { message_id: 7, message_size_bytes: 9, .. }));
        assert_eq!(gossipsub_params(&mine)["D"], 4);
    }

    #[test]
    fn validation_delays_by_topic() {
        let script: Params = serde_json::from_str(
            r#"{"script": [{"type": "setTopicValidationDelay", "topicID": "a-subnet", "delaySeconds": 0.005}]}"#,
        )
        .unwrap();
        let delays = validation_delays(&script.script).unwrap();
        assert_eq!(delays["a-subnet"], Duration::from_millis(5));
        let bad: Params = serde_json::from_str(
            r#"{"script": [{"type": "setTopicValidationDelay", "topicID": "t", "delaySeconds": -1}]}"#,
        )
        .unwrap();
        assert!(validation_delays(&bad.script).is_err());
    }

    #[test]
    fn hostnames() {
        assert_eq!(node_id_from_hostname("node12"), Ok(12));
        assert!(node_id_from_hostname("n12").is_err());
        assert!(node_id_from_hostname("node").is_err());
    }
}
