//! rust-libp2p gossipsub as a gossip-testbed router: a node that follows
//! libp2p/test-plans' gossipsub-interop contract (hostname nodeN, `--params`
//! script, TCP 9000, NDJSON on stdout) and the testbed's extensions
//! (`--config`, the control endpoint, extra event lines). See
//! docs/foreign-routers.md and issue #12.
//!
//! Exit status: 0 after a graceful shutdown, 2 for bad arguments or files,
//! 1 when the node cannot listen.

mod clock;
mod control;
mod node;
mod nodeconfig;
mod out;
mod params;
mod score;
mod script;
mod tap;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libp2p::gossipsub::{self, MessageAuthenticity, MessageId, ValidationMode};
use libp2p::multiaddr::Protocol;
use libp2p::{allow_block_list, noise, tcp, yamux, Multiaddr};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use crate::node::{Behaviour, Identity, Node};
use crate::nodeconfig::{keypair_for_index, NodeConfig};
use crate::out::emit;
use crate::tap::{SharedTap, Tap, TapLayer};

/// Large enough for the testbed's largest payload (16 MiB) and its framing.
const MAX_TRANSMIT_SIZE: usize = (16 << 20) + (64 << 10);
const USAGE: &str = "usage: rust-libp2p-adapter --params FILE [--config FILE]";

struct Args {
    params: String,
    config: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut params = None;
    let mut config = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--params" => &mut params,
            "--config" => &mut config,
            _ => return Err(format!("unknown argument {arg:?}; {USAGE}")),
        };
        *slot = Some(args.next().ok_or_else(|| format!("{arg} needs a value; {USAGE}"))?);
    }
    Ok(Args { params: params.ok_or_else(|| USAGE.to_owned())?, config })
}

fn bad_input(message: &str) -> ! {
    eprintln!("rust-libp2p-adapter: {message}");
    std::process::exit(2);
}

/// gossipsub's debug events go to the tap (duplicates, peer protocols);
/// $RUST_LOG (default: warnings) decides what reaches stderr.
fn init_tracing(tap: SharedTap) {
    let gossipsub_debug = tracing_subscriber::filter::filter_fn(|meta| {
        meta.target().starts_with("libp2p_gossipsub") && *meta.level() == tracing::Level::DEBUG
    });
    let stderr_filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let subscriber = tracing_subscriber::registry()
        .with(TapLayer::new(tap).with_filter(gossipsub_debug))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_filter(stderr_filter),
        );
    if tracing::subscriber::set_global_default(subscriber).is_err() {
        eprintln!("rust-libp2p-adapter: a tracing subscriber was already set");
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

fn main() {
    let start = Instant::now();
    let args = parse_args().unwrap_or_else(|e| bad_input(&e));
    let config = args.config.as_deref().map(NodeConfig::load).transpose().unwrap_or_else(|e| bad_input(&e));
    let index = match &config {
        Some(config) => config.index,
        None => script::node_id_from_hostname(&hostname()).unwrap_or_else(|e| bad_input(&e)),
    };
    let script = script::for_node(script::load(&args.params).unwrap_or_else(|e| bad_input(&e)), index);
    let delays = script::validation_delays(&script).unwrap_or_else(|e| bad_input(&e));
    let (mut builder, warnings) =
        params::config_builder(&script::gossipsub_params(&script)).unwrap_or_else(|e| bad_input(&e));
    for warning in warnings {
        eprintln!("rust-libp2p-adapter: initGossipSub: {warning} (ignored)");
    }

    let tap: SharedTap = Arc::new(Mutex::new(Tap::default()));
    init_tracing(tap.clone());
    let id_tap = tap.clone();
    // Without --config the node runs the contract's own wire: unsigned, no
    // author (test-plans' nodes: StrictNoSign + WithNoAuthor).
    let anonymous = config.as_ref().is_none_or(NodeConfig::anonymous);
    builder
        .validation_mode(if anonymous { ValidationMode::Anonymous } else { ValidationMode::Strict })
        .max_transmit_size(MAX_TRANSMIT_SIZE)
        .message_id_fn(move |m: &gossipsub::Message| MessageId::new(&tap::message_id(&id_tap, &m.data, m.topic.as_str())));
    if !delays.is_empty() {
        // Every received message then waits for the node's verdict (node.rs `validate`).
        builder.validate_messages();
    }
    let gossipsub_config = builder.build().unwrap_or_else(|e| bad_input(&format!("initGossipSub: {e}")));
    let peer_score = script::peer_score(&script)
        .map(|(params, thresholds)| Ok::<_, String>((score::params(&params)?, score::thresholds(&thresholds)?)))
        .transpose()
        .unwrap_or_else(|e| bad_input(&e));

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let code = runtime.block_on(run(config, index, script, delays, gossipsub_config, peer_score, anonymous, tap, start));
    std::process::exit(code);
}

async fn run(
    config: Option<NodeConfig>,
    index: u32,
    script: Vec<script::Instruction>,
    delays: HashMap<String, Duration>,
    gossipsub_config: gossipsub::Config,
    peer_score: Option<(gossipsub::PeerScoreParams, gossipsub::PeerScoreThresholds)>,
    anonymous: bool,
    tap: SharedTap,
    start: Instant,
) -> i32 {
    let key = keypair_for_index(index);
    let (scoring, heartbeat) = (peer_score.is_some(), gossipsub_config.heartbeat_interval());
    let authenticity =
        if anonymous { MessageAuthenticity::Anonymous } else { MessageAuthenticity::Signed(key.clone()) };
    let mut gossipsub = match gossipsub::Behaviour::new(authenticity, gossipsub_config) {
        Ok(gossipsub) => gossipsub,
        Err(e) => bad_input(&format!("gossipsub: {e}")),
    };
    if let Some((params, thresholds)) = peer_score {
        gossipsub.with_peer_score(params, thresholds).unwrap_or_else(|e| bad_input(&format!("initGossipSub: peer score: {e}")));
    }
    let swarm = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default);
    let swarm = match swarm {
        Ok(swarm) => swarm,
        Err(e) => {
            eprintln!("rust-libp2p-adapter: transport: {e}");
            return 1;
        }
    };
    let behaviour = Behaviour { gossipsub, blocked: allow_block_list::Behaviour::default() };
    let mut swarm = swarm
        .with_behaviour(|_| behaviour)
        .expect("an infallible behaviour")
        // Connections stay up without traffic, as the testbed's own routers keep them.
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(365 * 86_400)))
        .build();

    let (listen_ip, listen_port) = match &config {
        Some(c) => (c.listen_host.clone(), c.listen_port),
        None => ("0.0.0.0".to_owned(), 9000),
    };
    let listen_ip: IpAddr =
        listen_ip.parse().unwrap_or_else(|_| bad_input(&format!("listen_host {listen_ip:?} is no IP")));
    if let Err(e) = swarm.listen_on(Multiaddr::from(listen_ip).with(Protocol::Tcp(listen_port))) {
        eprintln!("rust-libp2p-adapter: cannot listen on {listen_ip}:{listen_port}: {e}");
        return 1;
    }
    emit("PeerID", &[("id", json!(swarm.local_peer_id().to_base58())), ("node_id", json!(index))]);

    let scores_every = scoring.then_some(heartbeat);
    let (commands, receiver) = tokio::sync::mpsc::channel(64);
    let me = match &config {
        Some(config) => {
            let listener = match tokio::net::TcpListener::bind((config.control_host.as_str(), config.control_port)).await {
                Ok(listener) => listener,
                Err(e) => {
                    eprintln!(
                        "rust-libp2p-adapter: cannot serve control on {}:{}: {e}",
                        config.control_host, config.control_port
                    );
                    return 1;
                }
            };
            tokio::spawn(control::serve(listener, config.token.clone(), commands.clone()));
            Identity::from_config(config)
        }
        None => Identity::bare(index),
    };
    Node::new(swarm, tap, me, commands, script, delays, start, scores_every).run(receiver).await;
    0
}
