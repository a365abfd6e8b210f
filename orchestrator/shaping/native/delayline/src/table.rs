//! The link table: which (source, destination) gets which delay, jitter and
//! loss. Written by the Python side as UTF-8 text, one rule per line:
//!
//! ```text
//! # src dst delay_us jitter_us loss_ppm
//! 10.77.0.1 10.77.0.2 20000 0 0
//! 10.77.0.2 * 5000 1000 100
//! ```
//!
//! `#` starts a comment; blank lines are skipped. A `*` destination is the
//! source's default: every destination without a rule of its own.

use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;

/// How packets of one link are shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub delay_us: u64,
    pub jitter_us: u64,
    pub loss_ppm: u32,
}

pub const PPM: u32 = 1_000_000;

/// A rule set with O(1) lookup.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Table {
    links: HashMap<(u32, u32), Rule>,
    defaults: HashMap<u32, Rule>,
}

/// Why a table was refused: the line (1-based), the field and what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct TableError {
    pub line: usize,
    pub field: &'static str,
    pub reason: String,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: field {}: {}", self.line, self.field, self.reason)
    }
}

const FIELDS: [&str; 5] = ["src", "dst", "delay_us", "jitter_us", "loss_ppm"];

impl Table {
    /// The rule for a packet from `src` to `dst`: the link's own, else the
    /// source's default, else none (the packet passes unshaped).
    pub fn lookup(&self, src: u32, dst: u32) -> Option<&Rule> {
        self.links.get(&(src, dst)).or_else(|| self.defaults.get(&src))
    }

    pub fn rule_count(&self) -> usize {
        self.links.len() + self.defaults.len()
    }

    pub fn parse(text: &str) -> Result<Table, TableError> {
        let mut table = Table::default();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or("");
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields.is_empty() {
                continue;
            }
            if fields.len() < FIELDS.len() {
                return Err(TableError {
                    line,
                    field: FIELDS[fields.len()],
                    reason: "missing".to_string(),
                });
            }
            if fields.len() > FIELDS.len() {
                return Err(TableError {
                    line,
                    field: "(after loss_ppm)",
                    reason: format!("unexpected extra field {:?}", fields[FIELDS.len()]),
                });
            }
            let err = |field: &'static str, reason: String| TableError { line, field, reason };
            let src = parse_addr(fields[0]).map_err(|r| err("src", r))?;
            let dst = if fields[1] == "*" {
                None
            } else {
                Some(parse_addr(fields[1]).map_err(|r| err("dst", r))?)
            };
            let rule = Rule {
                delay_us: parse_int(fields[2]).map_err(|r| err("delay_us", r))?,
                jitter_us: parse_int(fields[3]).map_err(|r| err("jitter_us", r))?,
                loss_ppm: parse_int(fields[4]).map_err(|r| err("loss_ppm", r))?,
            };
            if rule.loss_ppm > PPM {
                return Err(err("loss_ppm", format!("{} is more than {PPM}", rule.loss_ppm)));
            }
            let duplicate = match dst {
                Some(dst) => table.links.insert((src, dst), rule).is_some(),
                None => table.defaults.insert(src, rule).is_some(),
            };
            if duplicate {
                return Err(err("dst", format!("a second rule for {} {}", fields[0], fields[1])));
            }
        }
        Ok(table)
    }
}

fn parse_addr(field: &str) -> Result<u32, String> {
    field
        .parse::<Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| format!("{field:?} is not an IPv4 address"))
}

fn parse_int<T: std::str::FromStr>(field: &str) -> Result<T, String> {
    field
        .parse::<T>()
        .map_err(|_| format!("{field:?} is not an unsigned integer in range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    #[test]
    fn good_file() {
        let text = "# src dst delay_us jitter_us loss_ppm\n\n\
                    10.77.0.1 10.77.0.2 20000 0 0\n\
                    \t10.77.0.2   10.77.0.1 5000 100 250  # a comment\n\
                    10.77.0.2 * 7000 0 1000000\n";
        let table = Table::parse(text).unwrap();
        assert_eq!(table.rule_count(), 3);
        assert_eq!(
            table.lookup(ip("10.77.0.1"), ip("10.77.0.2")),
            Some(&Rule {
                delay_us: 20000,
                jitter_us: 0,
                loss_ppm: 0
            })
        );
        assert_eq!(
            table.lookup(ip("10.77.0.2"), ip("10.77.0.1")),
            Some(&Rule {
                delay_us: 5000,
                jitter_us: 100,
                loss_ppm: 250
            })
        );
        assert_eq!(
            table.lookup(ip("10.77.0.2"), ip("10.77.0.9")),
            Some(&Rule {
                delay_us: 7000,
                jitter_us: 0,
                loss_ppm: PPM
            })
        );
        assert_eq!(table.lookup(ip("10.77.0.1"), ip("10.77.0.9")), None);
        assert_eq!(table.lookup(ip("10.77.0.3"), ip("10.77.0.1")), None);
    }

    #[test]
    fn empty_file() {
        assert_eq!(Table::parse("# nothing\n\n").unwrap().rule_count(), 0);
    }

    fn error(text: &str) -> (usize, &'static str) {
        let e = Table::parse(text).unwrap_err();
        assert!(e
            .to_string()
            .starts_with(&format!("line {}: field {}: ", e.line, e.field)));
        (e.line, e.field)
    }

    #[test]
    fn bad_lines() {
        let good = "10.0.0.1 10.0.0.2 1 2 3\n";
        assert_eq!(error(&format!("{good}10.0.0.1 10.0.0.2 1 2\n")), (2, "loss_ppm"));
        assert_eq!(error(&format!("{good}10.0.0.1 * 1 2 3\n# c\n10.0.0.1\n")), (4, "dst"));
        assert_eq!(error("10.0.0.1 10.0.0.2 1 2 3 4\n"), (1, "(after loss_ppm)"));
        assert_eq!(error("10.0.0.256 10.0.0.2 1 2 3\n"), (1, "src"));
        assert_eq!(error("* 10.0.0.2 1 2 3\n"), (1, "src"));
        assert_eq!(error("10.0.0.1 host 1 2 3\n"), (1, "dst"));
        assert_eq!(error("10.0.0.1 10.0.0.2 -1 2 3\n"), (1, "delay_us"));
        assert_eq!(error("10.0.0.1 10.0.0.2 1.5 2 3\n"), (1, "delay_us"));
        assert_eq!(error("10.0.0.1 10.0.0.2 1 x 3\n"), (1, "jitter_us"));
        assert_eq!(error("10.0.0.1 10.0.0.2 1 2 4294967296\n"), (1, "loss_ppm"));
        assert_eq!(error("10.0.0.1 10.0.0.2 1 2 1000001\n"), (1, "loss_ppm"));
        assert_eq!(error(&format!("{good}{good}")), (2, "dst"));
        assert_eq!(error("10.0.0.1 * 1 2 3\n10.0.0.1 * 1 2 3\n"), (2, "dst"));
    }
}
