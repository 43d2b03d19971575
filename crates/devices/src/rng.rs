//! Seeded pseudo-random numbers for the device models, and for the
//! engine's seeded harnesses (which take the crate as a dev-dependency).
//!
//! SplitMix64, the same generator as the simulator's (`sluice-sim`'s
//! `rng.rs`), copied rather than depended on so the device crate stays
//! below the simulator. Fixed forever in this file: the same seed gives the
//! same rotational delays, and the same harness workloads, across crate
//! upgrades and machines. Not for cryptography.

/// A deterministic random number generator.
#[derive(Clone, Debug)]
pub struct DeviceRng {
    state: u64,
}

impl DeviceRng {
    /// A generator whose whole output is fixed by `seed`.
    pub fn new(seed: u64) -> DeviceRng {
        DeviceRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (0 when `n` is 0); the modulo's bias is
    /// nothing beside 2^64 for the small `n` of workloads.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Uniform in `[0, 1)`: the top 53 bits as the mantissa, so every value
    /// is exactly representable and 1.0 never comes out.
    pub(crate) fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = DeviceRng::new(9);
        let mut b = DeviceRng::new(9);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(DeviceRng::new(1).next_u64(), DeviceRng::new(2).next_u64());
    }

    #[test]
    fn unit_is_in_range_with_mean_one_half() {
        let mut rng = DeviceRng::new(5);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let u = rng.unit_f64();
            assert!((0.0..1.0).contains(&u));
            sum += u;
        }
        let mean = sum / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
    }
}
