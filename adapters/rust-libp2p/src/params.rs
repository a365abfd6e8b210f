//! go-libp2p-pubsub's GossipSubParams (the names initGossipSub uses, durations
//! as integer nanoseconds: go's time.Duration in JSON) mapped onto
//! rust-libp2p's gossipsub::ConfigBuilder. The one place where go's words
//! become rust's: D is mesh_n, Dlo mesh_n_low, Dhi mesh_n_high, Dlazy
//! gossip_lazy, Dout mesh_outbound_min, Dscore retain_scores.
//! A parameter rust-libp2p has no knob for is reported on stderr, never
//! silently dropped.

use std::time::Duration;

use libp2p::gossipsub::ConfigBuilder;
use serde_json::{Map, Value};

/// go parameters rust-libp2p's gossipsub has no setting for.
const UNSUPPORTED: &[&str] = &[
    "SlowHeartbeatWarning",
    "Connectors",
    "MaxPendingConnections",
    "ConnectionTimeout",
    "DirectConnectTicks",
    "DirectConnectInitialDelay",
    "MaxIHaveLength",
    "MaxIDontWantLength",
    "MaxIDontWantMessages",
    "IDontWantMessageTTL",
];

fn count(key: &str, value: &Value) -> Result<usize, String> {
    value
        .as_u64()
        .map(|v| v as usize)
        .ok_or_else(|| format!("initGossipSub: {key} must be a non-negative integer, not {value}"))
}

fn flag(key: &str, value: &Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| format!("initGossipSub: {key} must be true or false, not {value}"))
}

fn nanos(key: &str, value: &Value) -> Result<Duration, String> {
    match value.as_f64() {
        Some(ns) if ns >= 0.0 && ns.is_finite() => Ok(Duration::from_nanos(ns as u64)),
        _ => Err(format!("initGossipSub: {key} must be a duration in nanoseconds, not {value}")),
    }
}

/// A ConfigBuilder carrying every parameter given; the warnings name what was ignored.
pub fn config_builder(params: &Map<String, Value>) -> Result<(ConfigBuilder, Vec<String>), String> {
    let mut builder = ConfigBuilder::default();
    let mut warnings = Vec::new();
    for (key, value) in params {
        let k = key.as_str();
        match k {
            "D" => { builder.mesh_n(count(k, value)?); }
            "Dlo" => { builder.mesh_n_low(count(k, value)?); }
            "Dhi" => { builder.mesh_n_high(count(k, value)?); }
            "Dscore" => { builder.retain_scores(count(k, value)?); }
            "Dout" => { builder.mesh_outbound_min(count(k, value)?); }
            "Dlazy" => { builder.gossip_lazy(count(k, value)?); }
            "HistoryLength" => { builder.history_length(count(k, value)?); }
            "HistoryGossip" => { builder.history_gossip(count(k, value)?); }
            "GossipFactor" => match value.as_f64() {
                Some(f) if (0.0..=1.0).contains(&f) => { builder.gossip_factor(f); }
                _ => return Err(format!("initGossipSub: GossipFactor must be in [0, 1], not {value}")),
            },
            "GossipRetransmission" => { builder.gossip_retransimission(count(k, value)? as u32); }
            "HeartbeatInitialDelay" => { builder.heartbeat_initial_delay(nanos(k, value)?); }
            "HeartbeatInterval" => { builder.heartbeat_interval(nanos(k, value)?); }
            "FanoutTTL" => { builder.fanout_ttl(nanos(k, value)?); }
            "PrunePeers" => { builder.prune_peers(count(k, value)?); }
            "PruneBackoff" => { builder.prune_backoff(nanos(k, value)?); }
            "UnsubscribeBackoff" => { builder.unsubscribe_backoff(nanos(k, value)?); }
            "OpportunisticGraftTicks" => { builder.opportunistic_graft_ticks(count(k, value)? as u64); }
            "OpportunisticGraftPeers" => { builder.opportunistic_graft_peers(count(k, value)?); }
            "GraftFloodThreshold" => { builder.graft_flood_threshold(nanos(k, value)?); }
            "MaxIHaveMessages" => { builder.max_ihave_messages_heartbeat(count(k, value)?); }
            "IWantFollowupTime" => { builder.iwant_followup_time(nanos(k, value)?); }
            "IDontWantMessageThreshold" => { builder.idontwant_message_size_threshold(count(k, value)?); }
            // go's WithFloodPublish and WithPeerExchange options, by these names
            "FloodPublish" => { builder.flood_publish(flag(k, value)?); }
            "DoPX" => {
                if flag(k, value)? {
                    builder.do_px();
                }
            }
            _ if UNSUPPORTED.contains(&k) => warnings.push(format!("{k}: rust-libp2p gossipsub has no such setting")),
            _ => warnings.push(format!("{k}: not a go GossipSubParams name this adapter knows")),
        }
    }
    // go's default Dout is 2 whatever D is; rust-libp2p refuses 2 * Dout > D.
    // Without an explicit Dout, take the largest value both accept.
    if !params.contains_key("Dout") {
        let mesh_n = params.get("D").and_then(Value::as_u64).unwrap_or(6) as usize;
        let mesh_n_low = params.get("Dlo").and_then(Value::as_u64).unwrap_or(5) as usize;
        builder.mesh_outbound_min(2.min(mesh_n / 2).min(mesh_n_low));
    }
    Ok((builder, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(json: &str) -> Result<(libp2p::gossipsub::Config, Vec<String>), String> {
        let params: Map<String, Value> = serde_json::from_str(json).unwrap();
        let (builder, warnings) = config_builder(&params)?;
        Ok((builder.build().map_err(|e| e.to_string())?, warnings))
    }

    #[test]
    fn go_names_and_nanoseconds() {
        let (config, warnings) = build(
            r#"{"D": 3, "Dlo": 2, "Dhi": 5, "Dlazy": 4, "HistoryLength": 7, "HistoryGossip": 2,
                "GossipFactor": 0.5, "HeartbeatInterval": 300000000, "HeartbeatInitialDelay": 100000000,
                "FanoutTTL": 60000000000, "Connectors": 8}"#,
        )
        .unwrap();
        assert_eq!((config.mesh_n(), config.mesh_n_low(), config.mesh_n_high()), (3, 2, 5));
        assert_eq!((config.gossip_lazy(), config.history_length(), config.history_gossip()), (4, 7, 2));
        assert_eq!(config.gossip_factor(), 0.5);
        assert_eq!(config.heartbeat_interval(), Duration::from_millis(300));
        assert_eq!(config.heartbeat_initial_delay(), Duration::from_millis(100));
        assert_eq!(config.fanout_ttl(), Duration::from_secs(60));
        assert_eq!(config.mesh_outbound_min(), 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn v11_and_v12_names() {
        let (config, warnings) = build(
            r#"{"D": 6, "Dlo": 4, "Dhi": 12, "Dscore": 3, "Dout": 1, "PrunePeers": 7, "PruneBackoff": 30000000000,
                "UnsubscribeBackoff": 5000000000, "OpportunisticGraftTicks": 30, "OpportunisticGraftPeers": 3,
                "GraftFloodThreshold": 8000000000, "MaxIHaveMessages": 4, "IWantFollowupTime": 2000000000,
                "GossipRetransmission": 2, "IDontWantMessageThreshold": 2048, "FloodPublish": false, "DoPX": true}"#,
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!((config.retain_scores(), config.mesh_outbound_min(), config.prune_peers()), (3, 1, 7));
        assert_eq!(config.prune_backoff(), Duration::from_secs(30));
        assert_eq!(config.unsubscribe_backoff(), Duration::from_secs(5));
        assert_eq!((config.opportunistic_graft_ticks(), config.opportunistic_graft_peers()), (30, 3));
        assert_eq!(config.graft_flood_threshold(), Duration::from_secs(8));
        assert_eq!(config.max_ihave_messages_heartbeat(), 4);
        assert_eq!(config.iwant_followup_time(), Duration::from_secs(2));
        assert_eq!(config.gossip_retransimission(), 2);
        assert_eq!(config.idontwant_message_size_threshold(), 2048);
        assert!(!config.flood_publish() && config.do_px());
        assert!(build(r#"{"FloodPublish": 1}"#).is_err());
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(build(r#"{"D": -1}"#).is_err());
        assert!(build(r#"{"HeartbeatInterval": "1s"}"#).is_err());
        assert!(build(r#"{"GossipFactor": 2}"#).is_err());
    }
}
