//! The adapter's event loop: one rust-libp2p swarm (gossipsub + a block list
//! for isolation) driven by the script, the control endpoint and the network,
//! writing the contract's NDJSON lines. Everything that touches the swarm
//! happens here, in one task, so the order of the lines is the order of events.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance, MessageId, TopicHash};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, NetworkBehaviour, SwarmEvent};
use libp2p::{allow_block_list, Multiaddr, PeerId, Swarm};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::nodeconfig::{peer_id_for_index, NodeConfig};
use crate::out::{emit, message_id_text};
use crate::script::Instruction;
use crate::tap::SharedTap;

pub const ROUTER: &str = "rust-libp2p";
const CONTRACT_PORT: u16 = 9000;
const MAX_PAYLOAD: u64 = 16 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const REDIAL: Duration = Duration::from_millis(500);
/// How long a graceful shutdown keeps the swarm running to send its PRUNEs.
const FLUSH: Duration = Duration::from_millis(300);

#[derive(NetworkBehaviour)]
pub struct Behaviour {
    pub gossipsub: gossipsub::Behaviour,
    pub blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
}

/// What reaches the event loop from outside the swarm.
pub enum Command {
    Control { request: Value, reply: oneshot::Sender<Value> },
    Dial { peer: Option<PeerId>, addr: Multiaddr, reply: Option<oneshot::Sender<Value>> },
    Failed { what: String, reply: Option<oneshot::Sender<Value>> },
    Shutdown,
}

/// Who this node is and whom it knows.
pub struct Identity {
    pub name: String,
    pub index: u32,
    /// base58 peer id -> experiment name (status and isolate speak names).
    pub names: HashMap<PeerId, String>,
    /// Where to dial experiment node N's peer id, when --config said.
    pub addresses: HashMap<PeerId, (String, u16)>,
}

impl Identity {
    pub fn from_config(config: &NodeConfig) -> Self {
        let names = config
            .peer_names
            .iter()
            .filter_map(|(id, name)| id.parse().ok().map(|id: PeerId| (id, name.clone())))
            .collect();
        let addresses = config
            .initial_peers
            .iter()
            .filter_map(|p| p.peer_id.parse().ok().map(|id: PeerId| (id, (p.host.clone(), p.port))))
            .collect();
        Self { name: config.name.clone(), index: config.index, names, addresses }
    }

    pub fn bare(index: u32) -> Self {
        Self { name: format!("node{index}"), index, names: HashMap::new(), addresses: HashMap::new() }
    }
}

pub struct Node {
    swarm: Swarm<Behaviour>,
    tap: SharedTap,
    me: Identity,
    commands: mpsc::Sender<Command>,
    script: VecDeque<Instruction>,
    wait: Option<Instant>,
    start: Instant,
    listen_port: u16,
    topics: BTreeSet<String>,
    /// The mesh as last observed, for Graft/Prune lines.
    mesh: BTreeMap<TopicHash, BTreeSet<PeerId>>,
    /// Peers we dialled, redialled on rejoin.
    dialled: HashMap<PeerId, Multiaddr>,
    /// None: not isolated; Some(empty): isolated from everyone; else from these.
    isolated: Option<HashSet<PeerId>>,
    pending: HashMap<ConnectionId, oneshot::Sender<Value>>,
    /// Per topic, how long validating a message takes (empty: gossipsub
    /// validates itself, at once; else every message waits for `validate`).
    validation_delays: HashMap<String, Duration>,
    /// Messages in validation, by (when it ends, arrival order).
    validating: BTreeMap<(Instant, u64), (MessageId, PeerId)>,
    delivered: u64,
    published: u64,
    dials_failed: u64,
    shutting_down: bool,
    /// When the node scores its peers: how often it writes their scores (its
    /// heartbeat), and when next.
    scores_every: Option<Duration>,
    next_scores: Option<Instant>,
}

fn fail(error: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": error.to_string()})
}

/// test-plans' and the testbed's message data: the sequence number as a
/// big-endian u64, then `msg-<seq>:` repeated, cut to `size` bytes (node/wire/rpc.py).
pub fn workload_data(seq: u64, size: usize) -> Vec<u8> {
    let head = format!("msg-{seq}:");
    let mut data = seq.to_be_bytes().to_vec();
    while data.len() < size {
        data.extend_from_slice(head.as_bytes());
    }
    data.truncate(size);
    data
}

fn tcp_addr(ip: IpAddr, port: u16) -> Multiaddr {
    Multiaddr::from(ip).with(Protocol::Tcp(port))
}

impl Node {
    pub fn new(
        swarm: Swarm<Behaviour>,
        tap: SharedTap,
        me: Identity,
        commands: mpsc::Sender<Command>,
        script: Vec<Instruction>,
        validation_delays: HashMap<String, Duration>,
        start: Instant,
        scores_every: Option<Duration>,
    ) -> Self {
        Self {
            swarm,
            tap,
            me,
            commands,
            script: script.into(),
            wait: None,
            start,
            listen_port: 0,
            topics: BTreeSet::new(),
            mesh: BTreeMap::new(),
            dialled: HashMap::new(),
            isolated: None,
            pending: HashMap::new(),
            validation_delays,
            validating: BTreeMap::new(),
            delivered: 0,
            published: 0,
            dials_failed: 0,
            shutting_down: false,
            scores_every,
            next_scores: scores_every.map(|every| Instant::now() + every),
        }
    }

    fn label(&self, peer: &PeerId) -> String {
        self.me.names.get(peer).cloned().unwrap_or_else(|| peer.to_base58())
    }

    /// An experiment name or a base58 peer id.
    fn peer_for(&self, label: &str) -> Option<PeerId> {
        self.me.names.iter().find(|(_, name)| *name == label).map(|(id, _)| *id).or_else(|| label.parse().ok())
    }

    /// Runs until shutdown (control endpoint, SIGTERM or SIGINT): the script
    /// first, then whatever the control endpoint asks.
    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        self.run_script();
        while !self.shutting_down {
            let wait = self.wait;
            let validated = self.validating.keys().next().map(|(at, _)| *at);
            let scores = self.next_scores;
            // The rare commands, timers and signals first, then the swarm.
            tokio::select! {
                biased;
                Some(command) = commands.recv() => self.on_command(command),
                () = tokio::time::sleep_until(wait.unwrap_or_else(Instant::now).into()), if wait.is_some() => {
                    self.wait = None;
                    self.run_script();
                }
                () = tokio::time::sleep_until(validated.unwrap_or_else(Instant::now).into()), if validated.is_some() => {
                    self.finish_validations();
                }
                () = tokio::time::sleep_until(scores.unwrap_or_else(Instant::now).into()), if scores.is_some() => {
                    self.write_scores();
                }
                _ = tokio::signal::ctrl_c() => self.shutting_down = true,
                Some(()) = async { terminate.as_mut()?.recv().await } => self.shutting_down = true,
                step = next_step(&mut self.swarm, &self.mesh) => {
                    if let Step::Event(event) = step {
                        self.on_swarm_event(event);
                    }
                }
            }
            self.observe_mesh();
        }
        self.leave_gracefully().await;
    }

    /// Unsubscribes (PRUNE to every mesh peer) and lets the swarm send it.
    async fn leave_gracefully(&mut self) {
        for topic in self.topics.clone() {
            self.unsubscribe(&topic);
        }
        self.observe_mesh();
        let deadline = tokio::time::sleep(FLUSH);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                event = self.swarm.select_next_some() => self.on_swarm_event(event),
                () = &mut deadline => break,
            }
        }
    }

    fn run_script(&mut self) {
        while let Some(instruction) = self.script.pop_front() {
            match instruction {
                Instruction::WaitUntil { elapsed_seconds } => {
                    let at = self.start + Duration::from_secs(elapsed_seconds);
                    if at > Instant::now() {
                        self.wait = Some(at);
                        return;
                    }
                }
                Instruction::Connect { connect_to } => connect_to.into_iter().for_each(|n| self.connect_to(n)),
                Instruction::SubscribeToTopic { topic_id } => self.subscribe(&topic_id),
                Instruction::Publish { message_id, message_size_bytes, topic_id } => {
                    if let Err(e) = self.publish(&topic_id, workload_data(message_id, message_size_bytes)) {
                        eprintln!("script: publish {message_id} on {topic_id}: {e}");
                    }
                }
                // Both are applied before the swarm is built (main.rs).
                Instruction::InitGossipSub { .. } | Instruction::SetTopicValidationDelay { .. } => {}
                Instruction::IfNodeIdEquals { .. } => unreachable!("script::for_node resolved it"),
            }
        }
    }

    /// Dials experiment node `n`: the --config address for its peer id, else nodeN:9000.
    fn connect_to(&mut self, n: u32) {
        let peer = peer_id_for_index(n);
        let (host, port) = self.me.addresses.get(&peer).cloned().unwrap_or((format!("node{n}"), CONTRACT_PORT));
        self.dial_host(Some(peer), host, port, None);
    }

    fn dial_host(&mut self, peer: Option<PeerId>, host: String, port: u16, reply: Option<oneshot::Sender<Value>>) {
        if let Ok(ip) = host.parse::<IpAddr>() {
            self.dial(peer, tcp_addr(ip, port), reply);
            return;
        }
        let commands = self.commands.clone();
        tokio::spawn(async move {
            let found = tokio::net::lookup_host((host.as_str(), port)).await.map(|mut a| a.next());
            let command = match found {
                Ok(Some(addr)) => Command::Dial { peer, addr: tcp_addr(addr.ip(), port), reply },
                Ok(None) => Command::Failed { what: format!("connect: {host} has no address"), reply },
                Err(e) => Command::Failed { what: format!("connect: cannot resolve {host}: {e}"), reply },
            };
            let _ = commands.send(command).await;
        });
    }

    fn dial(&mut self, peer: Option<PeerId>, addr: Multiaddr, reply: Option<oneshot::Sender<Value>>) {
        if let Some(peer) = peer {
            if self.swarm.is_connected(&peer) {
                if let Some(reply) = reply {
                    let _ = reply.send(json!({"ok": true, "peer": self.label(&peer)}));
                }
                return;
            }
            self.dialled.insert(peer, addr.clone());
        }
        let opts = match peer {
            // A new source port: reusing the listening port fails between
            // nodes that all listen on the same port of different 127.0.0.x.
            Some(peer) => DialOpts::peer_id(peer)
                .addresses(vec![addr.clone()])
                .condition(PeerCondition::Always)
                .allocate_new_port()
                .build(),
            None => DialOpts::unknown_peer_id().address(addr.clone()).allocate_new_port().build(),
        };
        let id = opts.connection_id();
        match self.swarm.dial(opts) {
            Ok(()) => {
                if let Some(reply) = reply {
                    self.pending.insert(id, reply);
                }
            }
            Err(e) => {
                self.dials_failed += 1;
                eprintln!("dial {addr}: {e}");
                if let Some(reply) = reply {
                    let _ = reply.send(fail(format!("connect: {e}")));
                }
            }
        }
    }

    /// A peer the script told us to connect to is redialled until it answers
    /// (it may start after us, or restart), unless it is isolated or already
    /// connected.
    fn redial_later(&mut self, peer: PeerId) {
        let Some(addr) = self.dialled.get(&peer).cloned() else { return };
        if self.blocked(&peer) || self.swarm.is_connected(&peer) {
            return;
        }
        let commands = self.commands.clone();
        tokio::spawn(async move {
            tokio::time::sleep(REDIAL).await;
            let _ = commands.send(Command::Dial { peer: Some(peer), addr, reply: None }).await;
        });
    }

    fn subscribe(&mut self, topic: &str) {
        match self.swarm.behaviour_mut().gossipsub.subscribe(&IdentTopic::new(topic)) {
            Ok(_) => {
                if self.topics.insert(topic.to_owned()) {
                    if let Ok(mut tap) = self.tap.lock() {
                        tap.subscribed.insert(topic.to_owned());
                    }
                    emit("Joined", &[("topic", json!(topic))]);
                }
            }
            Err(e) => eprintln!("subscribe {topic}: {e}"),
        }
    }

    fn unsubscribe(&mut self, topic: &str) {
        self.swarm.behaviour_mut().gossipsub.unsubscribe(&IdentTopic::new(topic));
        if self.topics.remove(topic) {
            if let Ok(mut tap) = self.tap.lock() {
                tap.subscribed.remove(topic);
            }
            emit("Left", &[("topic", json!(topic))]);
        }
    }

    fn publish(&mut self, topic: &str, data: Vec<u8>) -> Result<String, String> {
        let id = message_id_text(&data);
        let message_id =
            self.swarm.behaviour_mut().gossipsub.publish(IdentTopic::new(topic), data).map_err(|e| e.to_string())?;
        self.published += 1;
        emit("Published Message", &[("id", json!(id)), ("topic", json!(topic))]);
        Ok(message_id.0.iter().map(|b| format!("{b:02x}")).collect())
    }

    fn blocked(&self, peer: &PeerId) -> bool {
        self.isolated.as_ref().is_some_and(|set| set.is_empty() || set.contains(peer))
    }

    fn isolate(&mut self, labels: Option<Vec<String>>) -> Result<Vec<String>, String> {
        let peers = labels.map(|l| self.peers_for(&l)).transpose()?;
        self.isolated = match (self.isolated.take(), peers) {
            (Some(set), Some(peers)) if !set.is_empty() => Some(set.into_iter().chain(peers).collect()),
            (Some(set), Some(_)) => Some(set),
            (_, Some(peers)) => Some(peers.into_iter().collect()),
            (_, None) => Some(HashSet::new()),
        };
        let mut closed = Vec::new();
        let known: Vec<PeerId> = self.swarm.connected_peers().copied().chain(self.me.names.keys().copied()).collect();
        for peer in known {
            if self.blocked(&peer) {
                if self.swarm.is_connected(&peer) {
                    closed.push(self.label(&peer));
                }
                self.swarm.behaviour_mut().blocked.block_peer(peer);
            }
        }
        closed.sort();
        closed.dedup();
        Ok(closed)
    }

    fn rejoin(&mut self, labels: Option<Vec<String>>) -> Result<(), String> {
        let peers = labels.map(|l| self.peers_for(&l)).transpose()?;
        // As our router: rejoining some peers while isolated from everyone rejoins all.
        self.isolated = match (self.isolated.take(), peers) {
            (Some(set), Some(peers)) if !set.is_empty() => {
                let left: HashSet<PeerId> = set.into_iter().filter(|p| !peers.contains(p)).collect();
                (!left.is_empty()).then_some(left)
            }
            _ => None,
        };
        let unblocked: Vec<PeerId> =
            self.swarm.behaviour().blocked.blocked_peers().iter().filter(|p| !self.blocked(p)).copied().collect();
        for peer in unblocked {
            self.swarm.behaviour_mut().blocked.unblock_peer(peer);
            if let Some(addr) = self.dialled.get(&peer).cloned() {
                self.dial(Some(peer), addr, None);
            }
        }
        Ok(())
    }

    fn peers_for(&self, labels: &[String]) -> Result<Vec<PeerId>, String> {
        labels.iter().map(|l| self.peer_for(l).ok_or_else(|| format!("unknown peer {l:?}"))).collect()
    }

    fn status(&self) -> Value {
        let gossipsub = &self.swarm.behaviour().gossipsub;
        let mut peers: Vec<String> = self.swarm.connected_peers().map(|p| self.label(p)).collect();
        peers.sort();
        let mesh: BTreeMap<String, Vec<String>> = gossipsub
            .topics()
            .map(|t| {
                let mut names: Vec<String> = gossipsub.mesh_peers(t).map(|p| self.label(p)).collect();
                names.sort();
                (t.to_string(), names)
            })
            .collect();
        let isolated = self.isolated.as_ref().map(|set| {
            let mut names: Vec<String> = set.iter().map(|p| self.label(p)).collect();
            names.sort();
            names
        });
        let duplicates = self.tap.lock().map(|t| t.duplicates).unwrap_or(0);
        json!({
            "ok": true,
            "name": self.me.name,
            "node_id": self.me.index,
            "peer_id": self.swarm.local_peer_id().to_base58(),
            "router": ROUTER,
            "pid": std::process::id(),
            "uptime_s": (self.start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            "listen_port": self.listen_port,
            "peers": peers,
            "topics": self.topics,
            "mesh": mesh,
            "isolated": isolated,
            "counters": {"delivered": self.delivered, "published": self.published, "duplicates": duplicates,
                         "dials_failed": self.dials_failed},
        })
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Control { request, reply } => {
                let cmd = request.get("cmd").and_then(Value::as_str).unwrap_or("").to_owned();
                if cmd == "connect" {
                    self.control_connect(&request, reply);
                    return;
                }
                let answer = self.control(&cmd, &request).unwrap_or_else(|e| fail(format!("{cmd}: {e}")));
                let _ = reply.send(answer);
            }
            Command::Dial { peer, addr, reply } => self.dial(peer, addr, reply),
            Command::Failed { what, reply } => {
                self.dials_failed += 1;
                eprintln!("{what}");
                if let Some(reply) = reply {
                    let _ = reply.send(fail(what));
                }
            }
            Command::Shutdown => self.shutting_down = true,
        }
    }

    fn control(&mut self, cmd: &str, request: &Value) -> Result<Value, String> {
        let text = |key: &str| -> Result<String, String> {
            match request.get(key).and_then(Value::as_str) {
                Some(s) if !s.is_empty() => Ok(s.to_owned()),
                _ => Err(format!("'{key}' must be a non-empty string")),
            }
        };
        let labels = |key: &str| -> Result<Option<Vec<String>>, String> {
            match request.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(items)) if items.is_empty() => Ok(None),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned).ok_or_else(|| format!("'{key}' must be a list of names")))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(_) => Err(format!("'{key}' must be a list of names")),
            }
        };
        match cmd {
            "status" => Ok(self.status()),
            "subscribe" => {
                self.subscribe(&text("topic")?);
                Ok(json!({"ok": true}))
            }
            "unsubscribe" => {
                self.unsubscribe(&text("topic")?);
                Ok(json!({"ok": true}))
            }
            "publish" => {
                let topic = text("topic")?;
                let data = match request.get("data") {
                    Some(Value::String(s)) => s.clone().into_bytes(),
                    Some(_) => return Err("'data' must be a string".into()),
                    None => {
                        let int = |key: &str, hi: u64| match request.get(key) {
                            None => Ok(0),
                            Some(v) => v.as_u64().filter(|n| *n <= hi).ok_or(format!("'{key}' must be an integer in [0, {hi}]")),
                        };
                        workload_data(int("seq", u64::MAX)?, int("size", MAX_PAYLOAD)? as usize)
                    }
                };
                Ok(json!({"ok": true, "message_id": self.publish(&topic, data)?}))
            }
            "disconnect" => {
                let peer = self.peer_for(&text("peer")?);
                let closed = peer.is_some_and(|p| self.swarm.disconnect_peer_id(p).is_ok());
                Ok(json!({"ok": true, "closed": closed}))
            }
            "isolate" => Ok(json!({"ok": true, "closed": self.isolate(labels("peers")?)?})),
            "rejoin" => {
                self.rejoin(labels("peers")?)?;
                Ok(json!({"ok": true}))
            }
            "shutdown" => Ok(json!({"ok": true, "shutdown": true})),
            "inject" => Ok(fail(format!("unsupported: inject on {ROUTER}"))),
            other => Ok(fail(format!("unknown command {other:?}"))),
        }
    }

    fn control_connect(&mut self, request: &Value, reply: oneshot::Sender<Value>) {
        let host = request.get("host").and_then(Value::as_str).filter(|h| !h.is_empty());
        let port = request.get("port").and_then(Value::as_u64).filter(|p| (1..=65535).contains(p));
        let name = request.get("name");
        let peer = match name {
            None | Some(Value::Null) => None,
            Some(Value::String(label)) => match self.peer_for(label) {
                Some(peer) => Some(peer),
                None => {
                    let _ = reply.send(fail(format!("connect: unknown peer {label:?}")));
                    return;
                }
            },
            Some(_) => {
                let _ = reply.send(fail("connect: 'name' must be a string"));
                return;
            }
        };
        let (Some(host), Some(port)) = (host, port) else {
            let _ = reply.send(fail("connect: 'host' must be a non-empty string and 'port' an integer in [1, 65535]"));
            return;
        };
        // The control task waits at most CONNECT_TIMEOUT for the answer.
        let (inner, answer) = oneshot::channel();
        self.dial_host(peer, host.to_owned(), port as u16, Some(inner));
        tokio::spawn(async move {
            let value = match tokio::time::timeout(CONNECT_TIMEOUT, answer).await {
                Ok(Ok(value)) => value,
                Ok(Err(_)) => fail("connect: the node is shutting down"),
                Err(_) => fail("connect: timed out"),
            };
            let _ = reply.send(value);
        });
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            })) => {
                self.delivered += 1;
                self.validate(message.topic.as_str(), message_id, propagation_source);
                emit(
                    "Received Message",
                    &[
                        ("id", json!(message_id_text(&message.data))),
                        ("from", json!(propagation_source.to_base58())),
                        ("topic", json!(message.topic.as_str())),
                    ],
                );
            }
            SwarmEvent::ConnectionEstablished { peer_id, connection_id, .. } => {
                if self.blocked(&peer_id) {
                    self.swarm.behaviour_mut().blocked.block_peer(peer_id);
                }
                if let Some(reply) = self.pending.remove(&connection_id) {
                    let _ = reply.send(json!({"ok": true, "peer": self.label(&peer_id)}));
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                let gone = self.tap.lock().is_ok_and(|mut t| t.peers_added.remove(&peer_id.to_base58()));
                if gone {
                    emit("Peer Removed", &[("peer", json!(peer_id.to_base58()))]);
                }
                // As our router keeps its overlay: a peer we dialled that went
                // away (killed, restarted) is dialled again until it answers.
                self.redial_later(peer_id);
            }
            SwarmEvent::OutgoingConnectionError { connection_id, peer_id, error } => {
                self.dials_failed += 1;
                eprintln!("dial {}: {error}", peer_id.map(|p| self.label(&p)).unwrap_or_default());
                if let Some(reply) = self.pending.remove(&connection_id) {
                    let _ = reply.send(fail(format!("connect: {error}")));
                } else if let Some(peer) = peer_id {
                    self.redial_later(peer);
                }
            }
            SwarmEvent::NewListenAddr { address, .. } => {
                if let Some(Protocol::Tcp(port)) = address.iter().last() {
                    self.listen_port = port;
                }
            }
            SwarmEvent::IncomingConnectionError { error, .. } => eprintln!("incoming connection: {error}"),
            _ => {}
        }
    }

    /// With validation delays, gossipsub holds every message until told:
    /// at once for a topic without a delay, else when its delay is over.
    fn validate(&mut self, topic: &str, id: MessageId, source: PeerId) {
        if self.validation_delays.is_empty() {
            return;
        }
        match self.validation_delays.get(topic) {
            Some(delay) => {
                // `delivered` counts arrivals: a unique order for equal due times.
                self.validating.insert((Instant::now() + *delay, self.delivered), (id, source));
            }
            None => self.accept(&id, &source),
        }
    }

    fn finish_validations(&mut self) {
        let now = Instant::now();
        while let Some(entry) = self.validating.first_entry() {
            if entry.key().0 > now {
                return;
            }
            let (id, source) = entry.remove();
            self.accept(&id, &source);
        }
    }

    fn accept(&mut self, id: &MessageId, source: &PeerId) {
        self.swarm.behaviour_mut().gossipsub.report_message_validation_result(id, source, MessageAcceptance::Accept);
    }

    /// Writes a "Peer Scores" line: the score gossipsub gives each connected
    /// peer now (rust-libp2p shows the total, not its components), once per
    /// heartbeat interval, as our scoring routers write theirs at every
    /// heartbeat (docs/foreign-routers.md).
    fn write_scores(&mut self) {
        let Some(every) = self.scores_every else { return };
        self.next_scores = Some(Instant::now() + every);
        let gossipsub = &self.swarm.behaviour().gossipsub;
        let scores: serde_json::Map<String, Value> = self
            .swarm
            .connected_peers()
            .filter_map(|peer| gossipsub.peer_score(peer).map(|score| (peer.to_base58(), json!(score))))
            .collect();
        if !scores.is_empty() {
            emit("Peer Scores", &[("scores", Value::Object(scores))]);
        }
    }

    /// Writes Graft/Prune for every change of the mesh since the last look
    /// (go's GRAFT/PRUNE trace: a peer added to or removed from our mesh). A
    /// peer that left the mesh because it disconnected is no PRUNE, as in go.
    fn observe_mesh(&mut self) {
        let gossipsub = &self.swarm.behaviour().gossipsub;
        let now: BTreeMap<TopicHash, BTreeSet<PeerId>> =
            gossipsub.topics().map(|t| (t.clone(), gossipsub.mesh_peers(t).copied().collect())).collect();
        if now == self.mesh {
            return;
        }
        let empty = BTreeSet::new();
        let topics: BTreeSet<&TopicHash> = now.keys().chain(self.mesh.keys()).collect();
        for topic in topics {
            let (before, after) = (self.mesh.get(topic).unwrap_or(&empty), now.get(topic).unwrap_or(&empty));
            for peer in after.difference(before) {
                emit("Graft", &[("peer", json!(peer.to_base58())), ("topic", json!(topic.as_str()))]);
            }
            for peer in before.difference(after).filter(|p| self.swarm.is_connected(p)) {
                emit("Prune", &[("peer", json!(peer.to_base58())), ("topic", json!(topic.as_str()))]);
            }
        }
        self.mesh = now;
    }
}

enum Step {
    Event(SwarmEvent<BehaviourEvent>),
    MeshChanged,
}

/// The swarm's next event, or MeshChanged when a poll that yielded no event
/// left the mesh different from `seen` (the heartbeat GRAFTs and PRUNEs
/// inside such a poll).
fn next_step<'a>(
    swarm: &'a mut Swarm<Behaviour>,
    seen: &'a BTreeMap<TopicHash, BTreeSet<PeerId>>,
) -> impl std::future::Future<Output = Step> + 'a {
    futures::future::poll_fn(move |cx| match swarm.poll_next_unpin(cx) {
        Poll::Ready(Some(event)) => Poll::Ready(Step::Event(event)),
        Poll::Ready(None) | Poll::Pending => {
            let gossipsub = &swarm.behaviour().gossipsub;
            let same = gossipsub.topics().count() == seen.len()
                && seen.iter().all(|(topic, peers)| {
                    gossipsub.mesh_peers(topic).count() == peers.len()
                        && gossipsub.mesh_peers(topic).all(|p| peers.contains(p))
                });
            if same {
                Poll::Pending
            } else {
                Poll::Ready(Step::MeshChanged)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::workload_data;

    #[test]
    fn workload_data_matches_node_wire() {
        // node/wire/rpc.py: workload_data(3, 20)
        assert_eq!(workload_data(3, 20), b"\0\0\0\0\0\0\0\x03msg-3:msg-3:".to_vec());
        assert_eq!(workload_data(3, 4), vec![0; 4]);
        assert_eq!(workload_data(300, 8), 300u64.to_be_bytes().to_vec());
    }
}
