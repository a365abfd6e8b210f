//! What happens to one shaped packet, as netem would decide it: lost with
//! probability loss_ppm / 1e6, else held for delay plus a jitter drawn
//! uniformly from [-jitter, +jitter] (netem's jitter without a distribution
//! table), never less than zero. Packets of one link may be reordered by the
//! jitter, as with netem. Pure: the randomness comes from a seeded PRNG, so
//! the same seed and the same packets give the same decisions.

use crate::table::{Rule, PPM};

/// splitmix64 (Steele, Lea, Flood 2014): small, fast, and good enough for
/// loss and jitter draws.
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n) (n > 0), by multiply-and-shift.
    fn below(&mut self, n: u128) -> u128 {
        (u128::from(self.next_u64()) * n) >> 64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Drop,
    /// Hold for this many nanoseconds after reception.
    Hold(u64),
}

/// The fate of one packet of a link shaped by `rule`. Draws from `rng` only
/// what the rule needs (a loss draw when loss_ppm > 0, a jitter draw when
/// jitter_us > 0).
pub fn decide(rule: &Rule, rng: &mut Rng) -> Decision {
    if rule.loss_ppm > 0 && rng.below(u128::from(PPM)) < u128::from(rule.loss_ppm) {
        return Decision::Drop;
    }
    let delay_ns = u128::from(rule.delay_us) * 1000;
    let jitter_ns = u128::from(rule.jitter_us) * 1000;
    let held = if jitter_ns == 0 {
        delay_ns
    } else {
        (delay_ns + rng.below(2 * jitter_ns + 1)).saturating_sub(jitter_ns)
    };
    Decision::Hold(u64::try_from(held).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(delay_us: u64, jitter_us: u64, loss_ppm: u32) -> Rule {
        Rule {
            delay_us,
            jitter_us,
            loss_ppm,
        }
    }

    #[test]
    fn no_loss_never_drops_and_no_jitter_is_exact() {
        let mut rng = Rng::new(1);
        for _ in 0..100_000 {
            assert_eq!(decide(&rule(20_000, 0, 0), &mut rng), Decision::Hold(20_000_000));
        }
    }

    #[test]
    fn full_loss_always_drops() {
        let mut rng = Rng::new(2);
        for _ in 0..100_000 {
            assert_eq!(decide(&rule(20_000, 5_000, PPM), &mut rng), Decision::Drop);
        }
    }

    #[test]
    fn partial_loss_rate() {
        let mut rng = Rng::new(3);
        let drops = (0..200_000)
            .filter(|_| decide(&rule(0, 0, 100_000), &mut rng) == Decision::Drop)
            .count();
        assert!((19_000..21_000).contains(&drops), "{drops} drops of 200000 at 10%");
    }

    #[test]
    fn jitter_within_bounds_both_signs() {
        let mut rng = Rng::new(4);
        let (mut below, mut above, mut min, mut max) = (0, 0, u64::MAX, 0);
        for _ in 0..100_000 {
            let Decision::Hold(ns) = decide(&rule(20_000, 5_000, 0), &mut rng) else {
                panic!("dropped")
            };
            assert!((15_000_000..=25_000_000).contains(&ns), "{ns}");
            below += usize::from(ns < 20_000_000);
            above += usize::from(ns > 20_000_000);
            min = min.min(ns);
            max = max.max(ns);
        }
        assert!(below > 45_000 && above > 45_000, "{below} below, {above} above");
        assert!(min < 15_100_000 && max > 24_900_000, "range {min}..{max}");
    }

    #[test]
    fn jitter_larger_than_delay_clamps_at_zero() {
        let mut rng = Rng::new(5);
        let holds: Vec<u64> = (0..10_000)
            .map(|_| match decide(&rule(1_000, 5_000, 0), &mut rng) {
                Decision::Hold(ns) => ns,
                Decision::Drop => panic!("dropped"),
            })
            .collect();
        assert!(holds.iter().all(|&ns| ns <= 6_000_000));
        assert!(holds.contains(&0));
    }

    #[test]
    fn same_seed_same_decisions() {
        let r = rule(10_000, 3_000, 200_000);
        let run = |seed: u64| {
            let mut rng = Rng::new(seed);
            (0..1000).map(|_| decide(&r, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}
