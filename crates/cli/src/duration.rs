//! Durations on the command line (`500ms`, `10s`, `1.5s`, `2m`, `1h`, `0`) and in output.

use std::time::{Duration, Instant};

use latchkey_redis::{Client, DelayedQueue, MAX_LEASE};

/// Parses a duration: a number followed by `ms`, `s`, `m` or `h` (`0` needs no unit).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{text}` has no unit; write e.g. 500ms, 10s, 2m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" | "sec" | "secs" => value,
        "m" | "min" | "mins" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`; use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is out of range"))
}

/// Checks that `d` can be added to the clock (a deadline `now + d` must exist).
fn fits_the_clock(text: &str, d: Duration) -> Result<Duration, String> {
    Instant::now()
        .checked_add(d)
        .map(|_| d)
        .ok_or_else(|| format!("`{text}` is too long to count down on this machine's clock"))
}

/// `--wait`, `--timeout`: zero (try once) up to what the clock can count down.
pub fn wait(text: &str) -> Result<Duration, String> {
    fits_the_clock(text, parse(text)?)
}

/// `--lease`: at least one millisecond, at most the library's [`MAX_LEASE`].
pub fn lease(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d < Duration::from_millis(1) {
        return Err(format!(
            "`{text}` is shorter than 1ms; give a positive lease"
        ));
    }
    at_most(text, d, MAX_LEASE)
}

/// `--watchdog`: from the library's [`Client::MIN_WATCHDOG_TIMEOUT`] to [`MAX_LEASE`].
pub fn watchdog(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d < Client::MIN_WATCHDOG_TIMEOUT {
        return Err(format!(
            "`{text}` is shorter than {}, the shortest watchdog lease that can be renewed in time",
            human(Client::MIN_WATCHDOG_TIMEOUT)
        ));
    }
    at_most(text, d, MAX_LEASE)
}

/// `--grace`: zero (SIGKILL at once) up to [`MAX_LEASE`].
pub fn grace(text: &str) -> Result<Duration, String> {
    at_most(text, parse(text)?, MAX_LEASE)
}

/// `--delay`: zero up to the delayed queue's [`DelayedQueue::MAX_DELAY`].
pub fn delay(text: &str) -> Result<Duration, String> {
    at_most(text, parse(text)?, DelayedQueue::MAX_DELAY)
}

/// A run time that must not be zero (`latchkey-bench --duration`), up to what the clock can count down.
#[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
pub fn positive(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err(format!("`{text}` is zero; give a positive duration"));
    }
    fits_the_clock(text, d)
}

fn at_most(text: &str, d: Duration, max: Duration) -> Result<Duration, String> {
    if d > max {
        return Err(format!(
            "`{text}` is longer than the maximum of {} days",
            max.as_secs() / 86_400
        ));
    }
    fits_the_clock(text, d)
}

/// A short human form: `850 µs`, `12.3 ms`, `4.20 s`, `3 m 20 s`.
pub fn human(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else if micros < 100_000.0 {
        format!("{:.1} ms", micros / 1000.0)
    } else if d < Duration::from_secs(100) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        let secs = d.as_secs();
        format!("{} m {} s", secs / 60, secs % 60)
    }
}

/// The form the flags take, for a setting read back (`1s`, `500ms`, `2m`, `1h`, `1500ms`): the
/// largest unit that divides it, down to whole milliseconds.
pub fn compact(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0".to_owned(),
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse("10").is_err());
        assert!(parse("s").is_err());
        assert!(parse("3 weeks").is_err());
        assert!(parse("1e400s").is_err());
    }

    #[test]
    fn each_flag_keeps_to_its_limits() {
        let huge = "5000000000000000h";
        assert!(parse(huge).is_ok(), "fits a Duration, not the clock");
        for check in [wait, lease, watchdog, grace, delay, positive] {
            assert!(check(huge).is_err());
        }
        assert_eq!(wait("0"), Ok(Duration::ZERO));
        assert_eq!(grace("0"), Ok(Duration::ZERO));
        assert_eq!(delay("0"), Ok(Duration::ZERO));
        assert!(lease("0").is_err());
        assert!(positive("0").is_err());
        assert!(watchdog("0").is_err());
        assert!(watchdog("10ms").is_err());
        assert_eq!(watchdog("30s"), Ok(Duration::from_secs(30)));
        assert!(lease("9000h").is_err(), "over MAX_LEASE");
        assert_eq!(lease("8760h"), Ok(MAX_LEASE));
        assert!(grace("9000h").is_err());
        assert!(delay("90000h").is_err(), "over MAX_DELAY");
    }

    #[test]
    fn prints_short_forms() {
        assert_eq!(human(Duration::from_micros(850)), "850 µs");
        assert_eq!(human(Duration::from_micros(12_340)), "12.3 ms");
        assert_eq!(human(Duration::from_millis(4200)), "4.20 s");
        assert_eq!(human(Duration::from_secs(200)), "3 m 20 s");
    }

    #[test]
    fn settings_read_back_as_flags_write_them() {
        for text in ["0", "1s", "500ms", "1500ms", "2m", "90s", "1h", "36h"] {
            assert_eq!(compact(parse(text).unwrap()), text);
        }
    }
}
