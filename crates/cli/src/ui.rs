//! Progress bars (stderr, hidden when it is not a terminal) and plain-text tables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `len` units, e.g. units of stock sold.
pub fn count_bar(len: u64, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>22} [{bar:32.cyan/blue}] {pos:>6}/{len:6} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_owned());
    bar
}

/// A bar that fills over `duration` while `counter` counts operations; the message shows the
/// count and the rate so far. Stops when dropped.
#[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
pub struct TimedBar {
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
impl TimedBar {
    /// Starts the bar; `unit` names what `counter` counts ("pairs", "sections").
    pub fn start(
        prefix: &str,
        duration: Duration,
        counter: Arc<AtomicU64>,
        unit: &'static str,
    ) -> TimedBar {
        let bar = ProgressBar::new(duration.as_millis().max(1) as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>26} [{bar:32.cyan/blue}] {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(prefix.to_owned());
        let ticking = bar.clone();
        let started = Instant::now();
        let ticker = tokio::spawn(async move {
            loop {
                let elapsed = started.elapsed();
                let n = counter.load(Ordering::Relaxed);
                ticking.set_position(elapsed.as_millis() as u64);
                ticking.set_message(format!(
                    "{} {unit} ({}/s)",
                    crate::stats::thousands(n as f64),
                    crate::stats::thousands(n as f64 / elapsed.as_secs_f64().max(1e-3))
                ));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        TimedBar { bar, ticker }
    }
}

impl Drop for TimedBar {
    fn drop(&mut self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}

/// A text table: the first `left` columns are left-aligned, the others right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    left: usize,
}

impl Table {
    /// A table with this header.
    pub fn new(header: &[&str], left: usize) -> Table {
        Table {
            rows: vec![header.iter().map(|s| (*s).to_owned()).collect()],
            left,
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, with a rule under the header.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for (r, row) in self.rows.iter().enumerate() {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = width - cell.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if i < self.left {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if r == 0 {
                let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(&["name", "n"], 1);
        t.row(vec!["a".into(), "1000".into()]);
        t.row(vec!["longer".into(), "7".into()]);
        assert_eq!(
            t.render(),
            "name       n\n------------\na       1000\nlonger     7\n"
        );
    }
}
