//! Latency samples and their percentiles.

use std::time::Duration;

/// Latency samples in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    nanos: Vec<u64>,
    sorted: bool,
}

impl Samples {
    /// No samples.
    pub fn new() -> Samples {
        Samples::default()
    }

    /// Adds one sample.
    pub fn push(&mut self, d: Duration) {
        self.nanos
            .push(d.as_nanos().min(u128::from(u64::MAX)) as u64);
        self.sorted = false;
    }

    /// Adds every sample of `other`.
    pub fn extend(&mut self, other: Samples) {
        self.nanos.extend(other.nanos);
        self.sorted = false;
    }

    /// How many samples.
    #[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// The `p`-th percentile (0–100), nearest rank; zero without samples.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.nanos.is_empty() {
            return Duration::ZERO;
        }
        if !self.sorted {
            self.nanos.sort_unstable();
            self.sorted = true;
        }
        let rank = ((p / 100.0) * self.nanos.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.nanos.len()) - 1;
        Duration::from_nanos(self.nanos[index])
    }

    /// The largest sample; zero without samples.
    #[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.nanos.iter().copied().max().unwrap_or(0))
    }
}

/// `12,345` for counts and rates.
pub fn thousands(n: f64) -> String {
    let n = n.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut s = Samples::new();
        for ms in 1..=100 {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(s.max(), Duration::from_millis(100));
        assert_eq!(Samples::new().percentile(50.0), Duration::ZERO);
    }

    #[test]
    fn groups_thousands() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234.0), "1,234");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-4321.0), "-4,321");
    }
}
