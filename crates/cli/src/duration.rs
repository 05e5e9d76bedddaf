//! Durations on the command line (`500ms`, `10s`, `1.5s`, `2m`, `1h`, `0`) and in output.

use std::time::Duration;

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
    fn prints_short_forms() {
        assert_eq!(human(Duration::from_micros(850)), "850 µs");
        assert_eq!(human(Duration::from_micros(12_340)), "12.3 ms");
        assert_eq!(human(Duration::from_millis(4200)), "4.20 s");
        assert_eq!(human(Duration::from_secs(200)), "3 m 20 s");
    }
}
