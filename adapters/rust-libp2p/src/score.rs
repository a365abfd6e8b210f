//! go-libp2p-pubsub's PeerScoreParams and PeerScoreThresholds (initGossipSub's
//! `peerScoreParams` and `peerScoreThresholds`, our extension of the contract:
//! go's names, durations as integer nanoseconds, one TopicScoreParams per
//! topic under `Topics`) mapped onto rust-libp2p's, for
//! `Behaviour::with_peer_score`. The one place where go's score words become
//! rust's. Every name must be one this adapter maps (an unknown one is an
//! error: the orchestrator sends only what it validated for this adapter).
//!
//! What go has no word for is switched off: rust-libp2p's slow-peer penalty
//! weighs 0. rust-libp2p wants the P4 decay in (0, 1) even when P4 weighs 0
//! (the spec's default decay of 1, "no decay", is refused); a P4 that weighs
//! 0 is given rust-libp2p's own default decay, which changes no score.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::gossipsub::{PeerScoreParams, PeerScoreThresholds, TopicHash, TopicScoreParams};
use serde_json::{Map, Value};

fn number(key: &str, value: &Value) -> Result<f64, String> {
    value
        .as_f64()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("initGossipSub: {key} must be a number, not {value}"))
}

fn nanos(key: &str, value: &Value) -> Result<Duration, String> {
    match value.as_f64() {
        Some(ns) if ns >= 0.0 && ns.is_finite() => Ok(Duration::from_nanos(ns as u64)),
        _ => Err(format!("initGossipSub: {key} must be a duration in nanoseconds, not {value}")),
    }
}

fn unknown(what: &str, key: &str) -> String {
    format!("initGossipSub: {what}.{key} is no go name this adapter maps")
}

/// rust-libp2p's thresholds from go's PeerScoreThresholds.
pub fn thresholds(go: &Map<String, Value>) -> Result<PeerScoreThresholds, String> {
    let mut t = PeerScoreThresholds::default();
    for (key, value) in go {
        let v = number(key, value)?;
        match key.as_str() {
            "GossipThreshold" => t.gossip_threshold = v,
            "PublishThreshold" => t.publish_threshold = v,
            "GraylistThreshold" => t.graylist_threshold = v,
            "AcceptPXThreshold" => t.accept_px_threshold = v,
            "OpportunisticGraftThreshold" => t.opportunistic_graft_threshold = v,
            _ => return Err(unknown("peerScoreThresholds", key)),
        }
    }
    Ok(t)
}

/// One topic's parameters from go's TopicScoreParams.
pub fn topic_params(go: &Map<String, Value>) -> Result<TopicScoreParams, String> {
    let mut t = TopicScoreParams::default();
    let mut p4_decay = None;
    for (key, value) in go {
        let k = key.as_str();
        match k {
            "TimeInMeshQuantum" => t.time_in_mesh_quantum = nanos(k, value)?,
            "MeshMessageDeliveriesWindow" => t.mesh_message_deliveries_window = nanos(k, value)?,
            "MeshMessageDeliveriesActivation" => t.mesh_message_deliveries_activation = nanos(k, value)?,
            "InvalidMessageDeliveriesDecay" => p4_decay = Some(number(k, value)?),
            _ => {
                let v = number(k, value)?;
                match k {
                    "TopicWeight" => t.topic_weight = v,
                    "TimeInMeshWeight" => t.time_in_mesh_weight = v,
                    "TimeInMeshCap" => t.time_in_mesh_cap = v,
                    "FirstMessageDeliveriesWeight" => t.first_message_deliveries_weight = v,
                    "FirstMessageDeliveriesDecay" => t.first_message_deliveries_decay = v,
                    "FirstMessageDeliveriesCap" => t.first_message_deliveries_cap = v,
                    "MeshMessageDeliveriesWeight" => t.mesh_message_deliveries_weight = v,
                    "MeshMessageDeliveriesDecay" => t.mesh_message_deliveries_decay = v,
                    "MeshMessageDeliveriesThreshold" => t.mesh_message_deliveries_threshold = v,
                    "MeshMessageDeliveriesCap" => t.mesh_message_deliveries_cap = v,
                    "MeshFailurePenaltyWeight" => t.mesh_failure_penalty_weight = v,
                    "MeshFailurePenaltyDecay" => t.mesh_failure_penalty_decay = v,
                    "InvalidMessageDeliveriesWeight" => t.invalid_message_deliveries_weight = v,
                    _ => return Err(unknown("peerScoreParams.Topics", k)),
                }
            }
        }
    }
    // go's names give every weight; rust-libp2p's defaults weigh P1-P4, so a
    // weight left out is go's zero value, not rust's default.
    for (name, weight) in [
        ("TopicWeight", &mut t.topic_weight),
        ("TimeInMeshWeight", &mut t.time_in_mesh_weight),
        ("FirstMessageDeliveriesWeight", &mut t.first_message_deliveries_weight),
        ("MeshMessageDeliveriesWeight", &mut t.mesh_message_deliveries_weight),
        ("MeshFailurePenaltyWeight", &mut t.mesh_failure_penalty_weight),
        ("InvalidMessageDeliveriesWeight", &mut t.invalid_message_deliveries_weight),
    ] {
        if !go.contains_key(name) {
            *weight = 0.0;
        }
    }
    match p4_decay {
        Some(decay) if t.invalid_message_deliveries_weight != 0.0 || (0.0 < decay && decay < 1.0) => {
            t.invalid_message_deliveries_decay = decay;
        }
        _ => {} // P4 weighs 0: rust-libp2p's default decay, which no score shows
    }
    Ok(t)
}

/// rust-libp2p's peer-score parameters from go's PeerScoreParams; weights go
/// leaves out are go's zero value, as for the topics.
pub fn params(go: &Map<String, Value>) -> Result<PeerScoreParams, String> {
    let mut p = PeerScoreParams {
        app_specific_weight: 0.0,
        ip_colocation_factor_weight: 0.0,
        behaviour_penalty_weight: 0.0,
        slow_peer_weight: 0.0,
        topic_score_cap: 0.0,
        ..PeerScoreParams::default()
    };
    for (key, value) in go {
        let k = key.as_str();
        match k {
            "Topics" => {
                let topics = value.as_object().ok_or_else(|| format!("initGossipSub: Topics must be an object, not {value}"))?;
                let mut mapped = HashMap::new();
                for (topic, params) in topics {
                    let params = params
                        .as_object()
                        .ok_or_else(|| format!("initGossipSub: Topics.{topic} must be an object, not {params}"))?;
                    mapped.insert(TopicHash::from_raw(topic.as_str()), topic_params(params)?);
                }
                p.topics = mapped;
            }
            "DecayInterval" => p.decay_interval = nanos(k, value)?,
            "RetainScore" => p.retain_score = nanos(k, value)?,
            _ => {
                let v = number(k, value)?;
                match k {
                    "TopicScoreCap" => p.topic_score_cap = v,
                    "AppSpecificWeight" => p.app_specific_weight = v,
                    "IPColocationFactorWeight" => p.ip_colocation_factor_weight = v,
                    "IPColocationFactorThreshold" => p.ip_colocation_factor_threshold = v,
                    "BehaviourPenaltyWeight" => p.behaviour_penalty_weight = v,
                    "BehaviourPenaltyThreshold" => p.behaviour_penalty_threshold = v,
                    "BehaviourPenaltyDecay" => p.behaviour_penalty_decay = v,
                    "DecayToZero" => p.decay_to_zero = v,
                    _ => return Err(unknown("peerScoreParams", k)),
                }
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn thresholds_in_go_names() {
        let t = thresholds(&obj(
            r#"{"GossipThreshold": -4, "PublishThreshold": -8, "GraylistThreshold": -16,
                "AcceptPXThreshold": 100, "OpportunisticGraftThreshold": 5}"#,
        ))
        .unwrap();
        assert_eq!(
            (t.gossip_threshold, t.publish_threshold, t.graylist_threshold, t.accept_px_threshold,
             t.opportunistic_graft_threshold),
            (-4.0, -8.0, -16.0, 100.0, 5.0)
        );
        assert!(t.validate().is_ok());
        assert!(thresholds(&obj(r#"{"Gossip": -1}"#)).is_err());
    }

    #[test]
    fn peer_and_topic_params_in_go_names_and_nanoseconds() {
        let p = params(&obj(
            r#"{"TopicScoreCap": 10, "AppSpecificWeight": 1, "IPColocationFactorWeight": -2,
                "IPColocationFactorThreshold": 3, "BehaviourPenaltyWeight": -1, "BehaviourPenaltyThreshold": 2,
                "BehaviourPenaltyDecay": 0.9, "DecayInterval": 1000000000, "DecayToZero": 0.01,
                "RetainScore": 30000000000,
                "Topics": {"t": {"TopicWeight": 0.5, "TimeInMeshWeight": 0.1, "TimeInMeshQuantum": 1000000000,
                  "TimeInMeshCap": 3600, "FirstMessageDeliveriesWeight": 1, "FirstMessageDeliveriesDecay": 0.5,
                  "FirstMessageDeliveriesCap": 100, "MeshMessageDeliveriesWeight": -1,
                  "MeshMessageDeliveriesDecay": 0.5, "MeshMessageDeliveriesThreshold": 4,
                  "MeshMessageDeliveriesCap": 20, "MeshMessageDeliveriesActivation": 5000000000,
                  "MeshMessageDeliveriesWindow": 10000000, "MeshFailurePenaltyWeight": -1,
                  "MeshFailurePenaltyDecay": 0.5, "InvalidMessageDeliveriesWeight": -10,
                  "InvalidMessageDeliveriesDecay": 0.3}}}"#,
        ))
        .unwrap();
        assert_eq!((p.topic_score_cap, p.app_specific_weight, p.slow_peer_weight), (10.0, 1.0, 0.0));
        assert_eq!((p.ip_colocation_factor_weight, p.ip_colocation_factor_threshold), (-2.0, 3.0));
        assert_eq!((p.behaviour_penalty_weight, p.behaviour_penalty_threshold, p.behaviour_penalty_decay), (-1.0, 2.0, 0.9));
        assert_eq!((p.decay_interval, p.decay_to_zero, p.retain_score), (Duration::from_secs(1), 0.01, Duration::from_secs(30)));
        let t = &p.topics[&TopicHash::from_raw("t")];
        assert_eq!((t.topic_weight, t.time_in_mesh_weight, t.time_in_mesh_cap), (0.5, 0.1, 3600.0));
        assert_eq!(t.time_in_mesh_quantum, Duration::from_secs(1));
        assert_eq!((t.first_message_deliveries_weight, t.first_message_deliveries_decay, t.first_message_deliveries_cap), (1.0, 0.5, 100.0));
        assert_eq!((t.mesh_message_deliveries_weight, t.mesh_message_deliveries_threshold, t.mesh_message_deliveries_cap), (-1.0, 4.0, 20.0));
        assert_eq!(t.mesh_message_deliveries_activation, Duration::from_secs(5));
        assert_eq!(t.mesh_message_deliveries_window, Duration::from_millis(10));
        assert_eq!((t.mesh_failure_penalty_weight, t.invalid_message_deliveries_weight, t.invalid_message_deliveries_decay), (-1.0, -10.0, 0.3));
        assert!(p.validate().is_ok());
    }

    #[test]
    fn weights_left_out_are_zero_and_an_unweighted_p4_decay_of_1_is_accepted() {
        // the testbed's defaults: every weight 0, every decay 1 ("no decay")
        let p = params(&obj(
            r#"{"DecayInterval": 1000000000, "Topics": {"t": {"TimeInMeshQuantum": 1000000000,
                "FirstMessageDeliveriesDecay": 1, "InvalidMessageDeliveriesWeight": 0,
                "InvalidMessageDeliveriesDecay": 1}}}"#,
        ))
        .unwrap();
        let t = &p.topics[&TopicHash::from_raw("t")];
        assert_eq!((t.topic_weight, t.time_in_mesh_weight, t.first_message_deliveries_weight), (0.0, 0.0, 0.0));
        assert_eq!((t.mesh_message_deliveries_weight, t.mesh_failure_penalty_weight), (0.0, 0.0));
        assert!(t.invalid_message_deliveries_decay < 1.0);
        assert_eq!((p.app_specific_weight, p.ip_colocation_factor_weight, p.behaviour_penalty_weight), (0.0, 0.0, 0.0));
        assert!(p.validate().is_ok(), "{:?}", p.validate());
        assert!(params(&obj(r#"{"Topics": {"t": {"Weight": 1}}}"#)).is_err());
        assert!(params(&obj(r#"{"DecayInterval": "1s"}"#)).is_err());
    }
}
