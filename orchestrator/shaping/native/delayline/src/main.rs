//! gtb-delayline: per-link one-way delay, jitter and loss for the routers of
//! one testbed, without netem.
//!
//! Why: this host's kernel has no sch_netem (nor fq or etf), so links cannot
//! be shaped with `tc`. It has NFQUEUE: an iptables rule in mangle FORWARD
//! (`-i BRIDGE -o BRIDGE -j NFQUEUE --queue-num N`, with br_netfilter) hands
//! every IPv4 packet crossing the testbed's bridge to this process, which
//! holds it for its link's (source, destination) delay and then accepts it,
//! or drops it for loss. One process per testbed, for all its links.
//!
//! The loop: ppoll on the netlink socket and a signalfd, with a timeout up to
//! the earliest due packet; drain the socket (each packet: look up its rule, decide, hold or
//! answer at once); answer every packet now due, the verdicts of one round
//! sent back to back in as few send() calls as possible. CLOCK_MONOTONIC
//! throughout. SIGHUP reads the table again; SIGTERM or SIGINT accepts
//! everything held and exits. The statistics file is rewritten every second,
//! by a thread of its own.

mod hold;
mod nfqueue;
mod shaper;
mod stats;
mod sys;
mod table;

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hold::HoldQueue;
use nfqueue::{Message, Socket, Verdict, VERDICT_LEN};
use shaper::{Decision, Rng};
use stats::{Counters, Identity, LateHistogram};
use table::Table;

const USAGE: &str = "usage: gtb-delayline --queue N --table PATH --stats PATH --seed S";
const COPY_RANGE: u32 = 40; // bytes of each packet copied to us: the IPv4 header and a little more
const QUEUE_MAXLEN: u32 = 65_536; // packets the kernel keeps for us (held ones included)
const RCVBUF: i32 = 8 << 20;
const MAX_SEND: usize = 64 * 1024;
const RECV_BUF: usize = 64 * 1024;
const MAX_RECVS_PER_ROUND: usize = 256;
const STATS_EVERY_NS: u64 = 1_000_000_000;
const BIND_TIMEOUT_NS: u64 = 5_000_000_000;
const CONFIG_SEQ: u32 = 1;
/// How long before a distant due time the delay line wakes once, to sleep
/// the rest of the way from a short sleep (see `wait_ns`). No busy polling
/// after that: the process runs at real-time priority
/// (orchestrator/shaping/delayline.py), so its wake-up preempts whatever runs;
/// polling for the last 50 us before each release took a tenth of a core
/// from the routers of a 250-container run on two cores (and raised their
/// event-loop lag) to save about 20 us of lateness.
const APPROACH_NS: u64 = 1_000_000;

#[derive(Debug)]
struct Args {
    queue: u16,
    table: PathBuf,
    stats: PathBuf,
    seed: u64,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut queue, mut table, mut stats, mut seed) = (None, None, None, None);
    while let Some(flag) = args.next() {
        if !["--queue", "--table", "--stats", "--seed"].contains(&flag.as_str()) {
            return Err(format!("unknown argument {flag:?}"));
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let taken = match flag.as_str() {
            "--queue" => queue
                .replace(
                    value
                        .parse::<u16>()
                        .map_err(|_| format!("--queue {value:?} is not in 0..=65535"))?,
                )
                .is_some(),
            "--table" => table.replace(PathBuf::from(value)).is_some(),
            "--stats" => stats.replace(PathBuf::from(value)).is_some(),
            _ => seed
                .replace(
                    value
                        .parse::<u64>()
                        .map_err(|_| format!("--seed {value:?} is not an unsigned 64-bit integer"))?,
                )
                .is_some(),
        };
        if taken {
            return Err(format!("{flag} given twice"));
        }
    }
    Ok(Args {
        queue: queue.ok_or("--queue is missing")?,
        table: table.ok_or("--table is missing")?,
        stats: stats.ok_or("--stats is missing")?,
        seed: seed.ok_or("--seed is missing")?,
    })
}

fn load_table(path: &Path) -> Result<Table, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Table::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The next ppoll timeout: until the earliest due packet, or until the next
/// statistics write. A ppoll timeout T may fire up to T/1000 late (the slack
/// of a task that is not real-time; the timer slack is set to 1 ns here), so
/// that much is taken off. A wait longer than APPROACH_NS ends APPROACH_NS
/// early: waking from a long sleep took this host (a VM) longer than from a
/// short one, and the second, short wait ends at the due time.
fn wait_ns(now: u64, next_due: Option<u64>, next_stats: u64) -> u64 {
    let for_stats = next_stats.saturating_sub(now);
    match next_due.map(|due| due.saturating_sub(now)) {
        Some(left) if left > 2 * APPROACH_NS => for_stats.min(left - left / 1000 - APPROACH_NS),
        Some(left) => for_stats.min(left - left / 1000),
        None => for_stats,
    }
}

/// Problems that happen per message (netlink error replies, malformed
/// messages, failed sends): counted, and logged at most once a second.
#[derive(Default)]
struct Complaints {
    count: u64,
    reported: u64,
    last: String,
}

impl Complaints {
    fn note(&mut self, what: String) {
        self.count += 1;
        self.last = what;
    }

    fn report(&mut self) {
        if self.count > self.reported {
            eprintln!(
                "gtb-delayline: {} problem(s) so far, the last: {}",
                self.count, self.last
            );
            self.reported = self.count;
        }
    }
}

struct Delayline {
    identity: Identity,
    socket: Socket,
    table: Table,
    rng: Rng,
    hold: HoldQueue,
    counters: Counters,
    late: LateHistogram,
    complaints: Complaints,
    stats_writer: stats::Writer,
    out: Vec<u8>,
    out_dues: Vec<u64>,
    recv_buf: Vec<u8>,
}

impl Delayline {
    /// Receives until the socket is empty (or MAX_RECVS_PER_ROUND datagrams,
    /// so that a flood cannot hold up the releases: the next ppoll returns at
    /// once), deciding each packet. Returns the errno of the ack to our
    /// configuration request, if one came.
    fn drain(&mut self) -> io::Result<Option<i32>> {
        let mut buf = std::mem::take(&mut self.recv_buf);
        let result = self.drain_with(&mut buf);
        self.recv_buf = buf;
        result
    }

    fn drain_with(&mut self, buf: &mut [u8]) -> io::Result<Option<i32>> {
        let mut config_ack = None;
        for _ in 0..MAX_RECVS_PER_ROUND {
            let len = match self.socket.recv(buf) {
                Ok(len) => len,
                Err(e) => match e.raw_os_error() {
                    Some(sys::EAGAIN) => return Ok(config_ack),
                    Some(sys::ENOBUFS) => {
                        self.counters.enobufs += 1;
                        continue;
                    }
                    Some(sys::EINTR) => continue,
                    _ => return Err(e),
                },
            };
            let now = sys::monotonic_ns();
            for message in nfqueue::messages(&buf[..len]) {
                match message {
                    Ok(Message::Packet { id, payload }) => self.on_packet(id, payload, now),
                    Ok(Message::Ack { seq: CONFIG_SEQ, errno }) => config_ack = Some(errno),
                    Ok(Message::Ack { errno: 0, .. }) | Ok(Message::Other) => {}
                    Ok(Message::Ack { seq, errno }) => self.complaints.note(format!(
                        "netlink error reply to seq {seq}: {}",
                        io::Error::from_raw_os_error(errno)
                    )),
                    Err(e) => self.complaints.note(format!("malformed netlink message: {}", e.0)),
                }
            }
        }
        Ok(config_ack)
    }

    fn on_packet(&mut self, id: u32, payload: &[u8], now: u64) {
        self.counters.packets += 1;
        let rule = nfqueue::ipv4_addrs(payload)
            .and_then(|(src, dst)| self.table.lookup(src, dst))
            .copied();
        let Some(rule) = rule else {
            self.counters.unshaped += 1;
            self.emit(id, Verdict::Accept, None);
            return;
        };
        self.counters.shaped += 1;
        match shaper::decide(&rule, &mut self.rng) {
            Decision::Drop => {
                self.counters.dropped_loss += 1;
                self.emit(id, Verdict::Drop, None);
            }
            Decision::Hold(ns) => {
                self.hold.push(now.saturating_add(ns), id);
                self.counters.held_max = self.counters.held_max.max(self.hold.held() as u64);
            }
        }
    }

    /// Queues a verdict for the next send; `due` (a held packet released on
    /// time) puts its lateness in the histogram when the batch is sent.
    fn emit(&mut self, id: u32, verdict: Verdict, due: Option<u64>) {
        if self.out.len() + VERDICT_LEN > MAX_SEND {
            self.flush();
        }
        nfqueue::encode_verdict(&mut self.out, self.identity.queue, id, verdict);
        if let Some(due) = due {
            self.out_dues.push(due);
        }
    }

    /// Sends the queued verdicts in one datagram. The release time of their
    /// packets is when the batch is handed to the kernel.
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let released = sys::monotonic_ns();
        for due in self.out_dues.drain(..) {
            self.late.record(released.saturating_sub(due));
        }
        if let Err(e) = self.socket.send(&self.out) {
            self.complaints.note(format!(
                "sending {} verdict(s) failed: {e}",
                self.out.len() / VERDICT_LEN
            ));
        }
        self.out.clear();
    }

    fn release_due(&mut self, now: u64) {
        while let Some((due, id)) = self.hold.pop_due(now) {
            self.counters.released += 1;
            self.emit(id, Verdict::Accept, Some(due));
        }
    }

    /// Accepts every held packet, due or not, and sends the verdicts.
    fn release_all(&mut self) {
        self.release_due(sys::monotonic_ns());
        while let Some((_, id)) = self.hold.pop_due(u64::MAX) {
            self.counters.released += 1;
            self.emit(id, Verdict::Accept, None);
        }
        self.flush();
    }

    /// Binds the queue (one config message, acked) and waits for the answer;
    /// packets arriving meanwhile are handled as usual.
    fn bind(&mut self) -> Result<(), String> {
        let queue = self.identity.queue;
        let request = nfqueue::encode_config(queue, CONFIG_SEQ, COPY_RANGE, QUEUE_MAXLEN);
        self.socket
            .send(&request)
            .map_err(|e| format!("sending the NFQUEUE {queue} bind request failed: {e}"))?;
        let deadline = sys::monotonic_ns() + BIND_TIMEOUT_NS;
        loop {
            let now = sys::monotonic_ns();
            if now >= deadline {
                return Err(format!("the kernel did not answer the NFQUEUE {queue} bind request"));
            }
            let mut fds = [sys::PollFd::new(self.socket.fd(), sys::POLLIN)];
            match sys::poll(&mut fds, Some(deadline - now)) {
                Err(e) if e.raw_os_error() != Some(sys::EINTR) => return Err(format!("ppoll: {e}")),
                _ => {}
            }
            match self
                .drain()
                .map_err(|e| format!("receiving from NFQUEUE {queue}: {e}"))?
            {
                Some(0) => return Ok(()),
                Some(errno) => {
                    return Err(format!(
                    "binding NFQUEUE {queue} failed: {} (EPERM: another process has this queue, or no CAP_NET_ADMIN)",
                    io::Error::from_raw_os_error(errno)
                ))
                }
                None => {}
            }
        }
    }

    fn reload(&mut self, path: &Path) {
        match load_table(path) {
            Ok(table) => {
                self.counters.reloads += 1;
                eprintln!(
                    "gtb-delayline: reloaded {}: {} rule(s)",
                    path.display(),
                    table.rule_count()
                );
                self.table = table;
            }
            Err(e) => {
                self.counters.reload_errors += 1;
                eprintln!("gtb-delayline: reload refused, keeping the previous table: {e}");
            }
        }
    }

    fn write_stats(&mut self, running: bool) {
        self.stats_writer.write(stats::to_json(
            &self.identity,
            &self.counters,
            self.hold.held(),
            &self.late,
            running,
        ));
        self.complaints.report();
    }
}

fn run(args: &Args, table: Table) -> Result<(), String> {
    let signals = sys::signal_fd(&[sys::SIGHUP, sys::SIGINT, sys::SIGTERM]).map_err(|e| format!("signalfd: {e}"))?;
    if let Err(e) = sys::set_timer_slack(1) {
        eprintln!("gtb-delayline: cannot lower the timer slack (releases may be up to 50 us later): {e}");
    }
    let (socket, forced) = Socket::open(RCVBUF).map_err(|e| format!("netlink socket: {e}"))?;
    if !forced {
        eprintln!("gtb-delayline: SO_RCVBUFFORCE refused: the receive buffer is capped by net.core.rmem_max");
    }
    let mut dl = Delayline {
        identity: Identity {
            pid: std::process::id(),
            queue: args.queue,
            seed: args.seed,
        },
        socket,
        table,
        rng: Rng::new(args.seed),
        hold: HoldQueue::default(),
        counters: Counters::default(),
        late: LateHistogram::default(),
        complaints: Complaints::default(),
        stats_writer: stats::Writer::spawn(args.stats.clone())
            .map_err(|e| format!("starting the stats thread: {e}"))?,
        out: Vec::with_capacity(MAX_SEND),
        out_dues: Vec::new(),
        recv_buf: vec![0; RECV_BUF],
    };
    dl.bind()?;
    dl.flush();
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "ready queue={}", args.queue)
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    eprintln!(
        "gtb-delayline: queue {} bound, {} rule(s) from {}",
        args.queue,
        dl.table.rule_count(),
        args.table.display()
    );
    dl.write_stats(true);
    let mut next_stats = sys::monotonic_ns() + STATS_EVERY_NS;
    let result = loop {
        let wait = wait_ns(sys::monotonic_ns(), dl.hold.next_due(), next_stats);
        let mut fds = [
            sys::PollFd::new(dl.socket.fd(), sys::POLLIN),
            sys::PollFd::new(&signals, sys::POLLIN),
        ];
        match sys::poll(&mut fds, Some(wait)) {
            Err(e) if e.raw_os_error() != Some(sys::EINTR) => break Err(format!("ppoll: {e}")),
            _ => {}
        }
        let mut stop = false;
        if fds[1].revents() & sys::POLLIN != 0 {
            loop {
                match sys::read_signal(&signals) {
                    Ok(Some(sys::SIGHUP)) => dl.reload(&args.table),
                    Ok(Some(_)) => stop = true,
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("gtb-delayline: reading the signalfd: {e}");
                        break;
                    }
                }
            }
        }
        if fds[0].revents() & (sys::POLLIN | sys::POLLERR) != 0 {
            if let Err(e) = dl.drain() {
                break Err(format!("receiving from NFQUEUE {}: {e}", args.queue));
            }
        }
        let now = sys::monotonic_ns();
        dl.release_due(now);
        dl.flush();
        if stop {
            break Ok(());
        }
        if now >= next_stats {
            dl.write_stats(true);
            next_stats = now + STATS_EVERY_NS;
        }
    };
    dl.release_all();
    dl.write_stats(false);
    dl.stats_writer.finish();
    result
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("gtb-delayline: {e} ({USAGE})");
            return ExitCode::from(2);
        }
    };
    let table = match load_table(&args.table) {
        Ok(table) => table,
        Err(e) => {
            eprintln!("gtb-delayline: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args, table) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gtb-delayline: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let a = args(&["--seed", "7", "--queue", "77", "--table", "t", "--stats", "s"]).unwrap();
        assert_eq!(
            (a.queue, a.table, a.stats, a.seed),
            (77, PathBuf::from("t"), PathBuf::from("s"), 7)
        );
        assert!(args(&["--queue", "77", "--table", "t", "--stats", "s"])
            .unwrap_err()
            .contains("--seed"));
        assert!(args(&["--queue", "70000"]).unwrap_err().contains("--queue"));
        assert!(args(&["--queue", "1", "--queue", "2"]).unwrap_err().contains("twice"));
        assert!(args(&["--verbose"]).unwrap_err().contains("unknown"));
        assert!(args(&["--table"]).unwrap_err().contains("needs a value"));
    }

    #[test]
    fn waits() {
        let s = 1_000_000_000;
        assert_eq!(wait_ns(100, None, s), s - 100);
        assert_eq!(wait_ns(0, Some(5 * s), s), s);
        assert_eq!(wait_ns(100, Some(5_000_100), s), 5_000_000 - 5_000 - APPROACH_NS);
        assert_eq!(wait_ns(0, Some(2 * APPROACH_NS), s), 2 * APPROACH_NS - 2 * APPROACH_NS / 1000);
        assert_eq!(wait_ns(100, Some(100), s), 0);
        assert_eq!(wait_ns(100, Some(50), s), 0);
    }
}
