//! What the delay line says about itself: counters, a histogram of how late
//! packets were released, and the JSON object written to --stats.
//!
//! Counters: `packets` = `shaped` + `unshaped`; a shaped packet (its link
//! has a rule) is dropped for loss (`dropped_loss`) or held, and a held
//! packet is `released` (or still `held`). `unshaped`: no rule, not IPv4, or
//! too short to read the addresses; accepted at once. `enobufs`: how many
//! times the kernel could not queue packets to us (it dropped them).
//! `reloads`: tables read again on SIGHUP and taken; `reload_errors`: tables
//! refused then (the previous one stays). `late_us`: release time (when its
//! verdict is handed to the kernel) minus due time, over every packet
//! released when due (those released early at exit count in `released`
//! only).

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A histogram of lateness in nanoseconds: 1 us buckets below 100 us, then
/// 90 buckets per decade (10 us wide up to 1 ms, 100 us up to 10 ms, ... 100
/// ms up to 10 s), then one bucket for anything later.
pub struct LateHistogram {
    upper_ns: Vec<u64>,
    counts: Vec<u64>,
    total: u64,
    max_ns: u64,
}

impl Default for LateHistogram {
    fn default() -> LateHistogram {
        let mut upper_ns: Vec<u64> = (1..=100).map(|us| us * 1000).collect();
        let mut width = 10_000;
        while width <= 100_000_000 {
            for _ in 0..90 {
                upper_ns.push(upper_ns[upper_ns.len() - 1] + width);
            }
            width *= 10;
        }
        upper_ns.push(u64::MAX);
        let counts = vec![0; upper_ns.len()];
        LateHistogram {
            upper_ns,
            counts,
            total: 0,
            max_ns: 0,
        }
    }
}

impl LateHistogram {
    pub fn record(&mut self, late_ns: u64) {
        let bucket = self.upper_ns.partition_point(|&upper| upper <= late_ns);
        self.counts[bucket] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(late_ns);
    }

    /// The q-quantile (0 < q <= 1) in nanoseconds: the upper bound of the
    /// bucket that holds it, but never above the exact maximum (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return self.upper_ns[bucket].min(self.max_ns);
            }
        }
        self.max_ns
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }
}

/// Who is writing: fixed for the life of the process.
pub struct Identity {
    pub pid: u32,
    pub queue: u16,
    pub seed: u64,
}

#[derive(Default)]
pub struct Counters {
    pub packets: u64,
    pub shaped: u64,
    pub unshaped: u64,
    pub dropped_loss: u64,
    pub enobufs: u64,
    pub held_max: u64,
    pub released: u64,
    pub reloads: u64,
    pub reload_errors: u64,
}

fn us_ceil(ns: u64) -> u64 {
    ns.div_ceil(1000)
}

/// The stats object, on one line.
pub fn to_json(id: &Identity, c: &Counters, held: usize, late: &LateHistogram, running: bool) -> String {
    let mut out = String::with_capacity(400);
    let _ = write!(
        out,
        "{{\"pid\":{},\"queue\":{},\"seed\":{},\"packets\":{},\"shaped\":{},\"unshaped\":{},\"dropped_loss\":{},\
         \"enobufs\":{},\"held\":{},\"held_max\":{},\"released\":{},\
         \"late_us\":{{\"p50\":{},\"p99\":{},\"max\":{}}},\"reloads\":{},\"reload_errors\":{},\"running\":{}}}",
        id.pid,
        id.queue,
        id.seed,
        c.packets,
        c.shaped,
        c.unshaped,
        c.dropped_loss,
        c.enobufs,
        held,
        c.held_max,
        c.released,
        us_ceil(late.quantile_ns(0.5)),
        us_ceil(late.quantile_ns(0.99)),
        us_ceil(late.max_ns()),
        c.reloads,
        c.reload_errors,
        running,
    );
    out.push('\n');
    out
}

/// Writes `text` to PATH.tmp, then renames it over PATH: readers see the
/// old file or the new one, never a part.
pub fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Writes the stats file from a thread of its own, so that a slow file
/// system (an ext4 write and rename can take milliseconds) never holds up a
/// release. Only the newest of several pending texts is written.
pub struct Writer {
    sender: mpsc::Sender<String>,
    thread: JoinHandle<()>,
}

impl Writer {
    /// Starts the thread. It inherits the caller's signal mask: spawn it
    /// after blocking the signals that the signalfd reads.
    pub fn spawn(path: PathBuf) -> io::Result<Writer> {
        let (sender, receiver) = mpsc::channel::<String>();
        let thread = std::thread::Builder::new().name("stats".to_string()).spawn(move || {
            while let Ok(first) = receiver.recv() {
                let text = receiver.try_iter().last().unwrap_or(first);
                if let Err(e) = write_atomic(&path, &text) {
                    eprintln!("gtb-delayline: writing {} failed: {e}", path.display());
                }
            }
        })?;
        Ok(Writer { sender, thread })
    }

    pub fn write(&self, text: String) {
        // The thread only ends when the sender is dropped (in finish).
        let _ = self.sender.send(text);
    }

    /// Writes what is pending and ends the thread.
    pub fn finish(self) {
        drop(self.sender);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds() {
        let h = LateHistogram::default();
        assert_eq!(h.upper_ns.len(), 100 + 5 * 90 + 1);
        assert_eq!(h.upper_ns[99], 100_000);
        assert_eq!(h.upper_ns[189], 1_000_000);
        assert_eq!(h.upper_ns[549], 10_000_000_000);
        assert!(h.upper_ns.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn empty_histogram() {
        let h = LateHistogram::default();
        assert_eq!((h.quantile_ns(0.5), h.quantile_ns(0.99), h.max_ns()), (0, 0, 0));
    }

    #[test]
    fn percentiles() {
        let mut h = LateHistogram::default();
        for us in 1..=1000u64 {
            h.record(us * 1000 - 1);
        }
        let p50 = h.quantile_ns(0.5);
        let p99 = h.quantile_ns(0.99);
        assert!((500_000..=510_000).contains(&p50), "{p50}");
        assert!((990_000..=1_000_000).contains(&p99), "{p99}");
        assert_eq!(h.max_ns(), 999_999);
        assert_eq!(h.quantile_ns(1.0), 999_999);
    }

    #[test]
    fn small_and_huge_values() {
        let mut h = LateHistogram::default();
        for _ in 0..98 {
            h.record(3_500);
        }
        h.record(2_000_000);
        h.record(50_000_000_000);
        assert_eq!(h.quantile_ns(0.5), 4_000);
        assert_eq!(h.quantile_ns(0.98), 4_000);
        assert_eq!(h.quantile_ns(0.99), 2_100_000);
        assert_eq!(h.quantile_ns(1.0), 50_000_000_000);
    }

    #[test]
    fn writer_keeps_the_last_text() {
        let dir = std::env::temp_dir().join(format!("gtb-delayline-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.json");
        let writer = Writer::spawn(path.clone()).unwrap();
        for n in 0..100 {
            writer.write(format!("{n}\n"));
        }
        writer.finish();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "99\n");
        assert!(!dir.join("stats.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_shape() {
        let id = Identity {
            pid: 12,
            queue: 77,
            seed: 5,
        };
        let c = Counters {
            packets: 10,
            shaped: 8,
            unshaped: 2,
            released: 7,
            dropped_loss: 1,
            held_max: 3,
            ..Counters::default()
        };
        let mut h = LateHistogram::default();
        h.record(12_300);
        assert_eq!(
            to_json(&id, &c, 0, &h, false),
            "{\"pid\":12,\"queue\":77,\"seed\":5,\"packets\":10,\"shaped\":8,\"unshaped\":2,\"dropped_loss\":1,\
             \"enobufs\":0,\"held\":0,\"held_max\":3,\"released\":7,\"late_us\":{\"p50\":13,\"p99\":13,\"max\":13},\
             \"reloads\":0,\"reload_errors\":0,\"running\":false}\n"
        );
    }
}
