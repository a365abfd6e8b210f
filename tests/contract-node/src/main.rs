//! A minimal gossipsub-interop node: what libp2p/test-plans'
//! gossipsub-interop/test-specs/implementation.md asks of an implementation
//! and nothing more, so the testbed's conformance test runs a node that is
//! not its own router (tests/test_contract_node.py).
//!
//! - node id N from the hostname `nodeN`; the ed25519 key's seed is N as a
//!   little-endian integer, zero-padded to 32 bytes;
//! - the only input is `--params FILE`: `{"script": [instruction, ...]}`,
//!   run in order (initGossipSub, connect, subscribeToTopic, publish,
//!   waitUntil, ifNodeIDEquals, setTopicValidationDelay); when the script
//!   ends, the node exits (status 0);
//! - listens on TCP 9000 (noise, yamux); `connect` dials nodeN:9000 and
//!   keeps that connection up;
//! - messages are unsigned, without author or sequence number, and only such
//!   messages are accepted (go's StrictNoSign + WithNoAuthor); the message id
//!   is the data's first 8 bytes as a big-endian u64; a published message
//!   has exactly messageSizeBytes bytes, the id first;
//! - stdout carries only the contract's NDJSON lines ("PeerID" at start,
//!   "Received Message" for every copy received, duplicates included, with
//!   the id in base 10); diagnostics go to stderr.
//!
//! Every received copy: rust-libp2p's gossipsub computes the message id
//! exactly once for each message it receives (before it drops a duplicate)
//! and once for each message this node publishes; the id function below
//! logs the received ones. The line has the topic but no `from` (a SHOULD
//! the analysis does not use). A copy that then fails validation is logged
//! too; on a wire where every node signs nothing there is none.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::stream::{FuturesUnordered, StreamExt};
use futures::Future;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance, MessageAuthenticity, MessageId, ValidationMode};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::SwarmEvent;
use libp2p::{noise, tcp, yamux, Multiaddr, PeerId};
use serde_json::{json, Map, Value};

const PORT: u16 = 9000;
const REDIAL: Duration = Duration::from_secs(1);
/// Room for large test payloads (test-plans' blob scenario sends 96 KiB).
const MAX_TRANSMIT_SIZE: usize = 4 << 20;

type Timer = Pin<Box<dyn Future<Output = Wake>>>;

enum Wake {
    Dial(u32, Option<IpAddr>),
    Validated(MessageId, PeerId),
}

fn fail(message: &str) -> ! {
    eprintln!("contract-node: {message}");
    std::process::exit(2);
}

/// RFC 3339 UTC with nanoseconds, from the system clock.
fn now_rfc3339() -> String {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_nanos()
    )
}

fn log_line(msg: &str, fields: Value) {
    let mut line = Map::new();
    line.insert("time".into(), json!(now_rfc3339()));
    line.insert("msg".into(), json!(msg));
    if let Value::Object(rest) = fields {
        line.extend(rest);
    }
    println!("{}", Value::Object(line));
}

fn first_8_bytes(data: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let n = data.len().min(8);
    head[..n].copy_from_slice(&data[..n]);
    u64::from_be_bytes(head)
}

fn keypair(node: u32) -> Keypair {
    let mut seed = [0u8; 32];
    seed[..4].copy_from_slice(&node.to_le_bytes());
    Keypair::ed25519_from_bytes(seed).expect("any 32 bytes are an ed25519 seed")
}

fn node_id() -> u32 {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    name.strip_prefix("node")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| fail(&format!("the hostname must be nodeN, not {name:?}")))
}

/// The script, with ifNodeIDEquals resolved for this node.
fn script(path: &str, me: u32) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
    let params: Value = serde_json::from_str(&text).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
    let Some(Value::Array(items)) = params.get("script") else { fail(&format!("{path}: no \"script\" list")) };
    let mut out = Vec::new();
    for item in items {
        let mut item = item.clone();
        while item["type"] == "ifNodeIDEquals" {
            if item["nodeID"].as_u64() != Some(u64::from(me)) {
                break;
            }
            item = item["instruction"].clone();
        }
        if item["type"] != "ifNodeIDEquals" {
            out.push(item);
        }
    }
    out
}

fn nanos(value: &Value) -> Option<Duration> {
    value.as_f64().filter(|ns| *ns >= 0.0).map(|ns| Duration::from_nanos(ns as u64))
}

/// gossipsub's configuration from initGossipSub's go GossipSubParams (the
/// ones rust-libp2p has a knob for; others are named on stderr).
fn config(params: &Map<String, Value>, received: Arc<dyn Fn(&gossipsub::Message) + Send + Sync>) -> gossipsub::Config {
    let mut b = gossipsub::ConfigBuilder::default();
    for (key, value) in params {
        let n = value.as_u64().map(|v| v as usize);
        match (key.as_str(), n, nanos(value)) {
            ("D", Some(v), _) => { b.mesh_n(v); }
            ("Dlo", Some(v), _) => { b.mesh_n_low(v); }
            ("Dhi", Some(v), _) => { b.mesh_n_high(v); }
            ("Dlazy", Some(v), _) => { b.gossip_lazy(v); }
            ("Dout", Some(v), _) => { b.mesh_outbound_min(v); }
            ("HistoryLength", Some(v), _) => { b.history_length(v); }
            ("HistoryGossip", Some(v), _) => { b.history_gossip(v); }
            ("HeartbeatInterval", _, Some(d)) => { b.heartbeat_interval(d); }
            ("HeartbeatInitialDelay", _, Some(d)) => { b.heartbeat_initial_delay(d); }
            ("FanoutTTL", _, Some(d)) => { b.fanout_ttl(d); }
            ("PruneBackoff", _, Some(d)) => { b.prune_backoff(d); }
            _ => eprintln!("contract-node: initGossipSub {key}={value}: not applied"),
        }
    }
    if !params.contains_key("Dout") {
        let d = params.get("D").and_then(Value::as_u64).unwrap_or(6) as usize;
        let lo = params.get("Dlo").and_then(Value::as_u64).unwrap_or(5) as usize;
        b.mesh_outbound_min(2.min(d / 2).min(lo));
    }
    b.validation_mode(ValidationMode::Anonymous)
        .validate_messages()
        .max_transmit_size(MAX_TRANSMIT_SIZE)
        .message_id_fn(move |m: &gossipsub::Message| {
            received(m);
            MessageId::new(&first_8_bytes(&m.data).to_be_bytes())
        });
    b.build().unwrap_or_else(|e| fail(&format!("initGossipSub: {e}")))
}

fn resolve_later(node: u32, after: Duration) -> Timer {
    Box::pin(async move {
        tokio::time::sleep(after).await;
        let found = tokio::net::lookup_host((format!("node{node}"), PORT)).await.ok().and_then(|mut a| a.next());
        Wake::Dial(node, found.map(|a| a.ip()))
    })
}

fn main() {
    let start = Instant::now();
    let mut args = std::env::args().skip(1);
    let params = match (args.next().as_deref(), args.next(), args.next()) {
        (Some("--params"), Some(path), None) => path,
        _ => fail("usage: contract-node --params FILE"),
    };
    let me = node_id();
    let script = script(&params, me);
    let init = script.iter().find(|i| i["type"] == "initGossipSub");
    let gs_params = init.and_then(|i| i["gossipSubParams"].as_object()).cloned().unwrap_or_default();

    let publishing = Arc::new(AtomicBool::new(false));
    let subscribed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let (flag, topics) = (publishing.clone(), subscribed.clone());
    let received = Arc::new(move |m: &gossipsub::Message| {
        let topic = m.topic.to_string();
        if !flag.load(Ordering::SeqCst) && topics.lock().is_ok_and(|t| t.contains(&topic)) {
            log_line("Received Message", json!({"id": first_8_bytes(&m.data).to_string(), "topic": topic}));
        }
    });
    let key = keypair(me);
    let behaviour: gossipsub::Behaviour = gossipsub::Behaviour::new(MessageAuthenticity::Anonymous, config(&gs_params, received))
        .unwrap_or_else(|e| fail(&format!("gossipsub: {e}")));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(async move {
        let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
            .unwrap_or_else(|e| fail(&format!("transport: {e}")))
            .with_behaviour(|_| behaviour)
            .expect("an infallible behaviour")
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(86_400)))
            .build();
        let listen = Multiaddr::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).with(Protocol::Tcp(PORT));
        if let Err(e) = swarm.listen_on(listen) {
            eprintln!("contract-node: cannot listen on TCP {PORT}: {e}");
            std::process::exit(1);
        }
        log_line("PeerID", json!({"id": swarm.local_peer_id().to_base58(), "node_id": me}));

        let mut delays: HashMap<String, Duration> = HashMap::new();
        let mut targets: HashMap<PeerId, u32> = HashMap::new();
        let mut timers: FuturesUnordered<Timer> = FuturesUnordered::new();
        let mut steps = script.into_iter();
        let mut until: Option<Instant> = None;
        loop {
            while until.is_none() {
                let Some(step) = steps.next() else { return };
                match step["type"].as_str().unwrap_or_default() {
                    "connect" => {
                        for n in step["connectTo"].as_array().into_iter().flatten().filter_map(Value::as_u64) {
                            targets.insert(keypair(n as u32).public().to_peer_id(), n as u32);
                            timers.push(resolve_later(n as u32, Duration::ZERO));
                        }
                    }
                    "subscribeToTopic" => {
                        let topic = step["topicID"].as_str().unwrap_or_default().to_owned();
                        subscribed.lock().expect("not poisoned").insert(topic.clone());
                        if let Err(e) = swarm.behaviour_mut().subscribe(&IdentTopic::new(topic)) {
                            eprintln!("contract-node: subscribe: {e}");
                        }
                    }
                    "setTopicValidationDelay" => {
                        let delay = step["delaySeconds"].as_f64().filter(|s| *s >= 0.0).unwrap_or(0.0);
                        delays.insert(step["topicID"].as_str().unwrap_or_default().to_owned(), Duration::from_secs_f64(delay));
                    }
                    "publish" => {
                        let id = step["messageID"].as_u64().unwrap_or(0);
                        let mut data = vec![0u8; step["messageSizeBytes"].as_u64().unwrap_or(0) as usize];
                        let n = data.len().min(8);
                        data[..n].copy_from_slice(&id.to_be_bytes()[..n]);
                        publishing.store(true, Ordering::SeqCst);
                        let result = swarm.behaviour_mut().publish(IdentTopic::new(step["topicID"].as_str().unwrap_or_default()), data);
                        publishing.store(false, Ordering::SeqCst);
                        if let Err(e) = result {
                            eprintln!("contract-node: publish {id}: {e}");
                        }
                    }
                    "waitUntil" => {
                        let at = start + Duration::from_secs(step["elapsedSeconds"].as_u64().unwrap_or(0));
                        until = (at > Instant::now()).then_some(at);
                    }
                    "initGossipSub" => {}
                    other => eprintln!("contract-node: instruction {other:?} not supported; skipped"),
                }
            }
            let wait = until.expect("set above");
            tokio::select! {
                () = tokio::time::sleep_until(wait.into()) => until = None,
                Some(wake) = timers.next(), if !timers.is_empty() => match wake {
                    Wake::Dial(n, Some(ip)) => {
                        let peer = keypair(n).public().to_peer_id();
                        if !swarm.is_connected(&peer) {
                            let addr = Multiaddr::from(ip).with(Protocol::Tcp(PORT));
                            let _ = swarm.dial(DialOpts::peer_id(peer).addresses(vec![addr]).build());
                        }
                    }
                    Wake::Dial(n, None) => timers.push(resolve_later(n, REDIAL)),
                    Wake::Validated(id, source) => {
                        swarm.behaviour_mut().report_message_validation_result(&id, &source, MessageAcceptance::Accept);
                    }
                },
                event = swarm.select_next_some() => match event {
                    SwarmEvent::Behaviour(gossipsub::Event::Message { propagation_source, message_id, message }) => {
                        let delay = delays.get(message.topic.as_str()).copied().unwrap_or_default();
                        timers.push(Box::pin(async move {
                            tokio::time::sleep(delay).await;
                            Wake::Validated(message_id, propagation_source)
                        }));
                    }
                    SwarmEvent::OutgoingConnectionError { peer_id: Some(peer), .. }
                    | SwarmEvent::ConnectionClosed { peer_id: peer, num_established: 0, .. } => {
                        if let Some(&n) = targets.get(&peer) {
                            timers.push(resolve_later(n, REDIAL));
                        }
                    }
                    _ => {}
                },
            }
        }
    });
}
