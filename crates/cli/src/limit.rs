//! `latchkey limit`: a rate limiter's rate and the permits its window has left; with `--set`,
//! a new rate (Redisson's `setRate`: the config replaced, the window started again).

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use latchkey_redis::{Client, Kind, RateConfig, RateType};
use serde_json::json;

use crate::connect::{self, Target};
use crate::duration::compact;
use crate::exit::{self, coded};
use crate::opt::LimitOpt;

/// Shows the rate limiter `opt.name`, after setting its rate when `--set` is given. A name
/// without a rate exits 1; one that holds something else is refused, and nothing is changed.
pub async fn run(opt: LimitOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    // Read first: `set_rate` would turn any hash (a lock's too) into a limiter's config.
    let mut found = read(&client, &opt.name).await?;
    if let Some(spec) = opt.set {
        let rate_type = if opt.per_client {
            RateType::PerClient
        } else {
            RateType::Overall
        };
        let mut config = RateConfig::new(rate_type, spec.rate, spec.interval);
        if let Some(keep_alive) = opt.keep_alive {
            config = config.with_keep_alive(keep_alive);
        }
        client
            .rate_limiter(opt.name.clone())
            .set_rate_with(config)
            .await
            .map_err(|e| library(e, format!("setting the rate of `{}`", opt.name)))?;
        eprintln!(
            "latchkey: the rate of `{}` is now {} per {}; its window starts again, empty",
            opt.name,
            config.rate,
            compact(config.interval)
        );
        found = read(&client, &opt.name).await?;
    }
    let Some((config, available)) = found else {
        return Err(anyhow!(
            "`{}` has no rate set (no rate limiter there); set one with --set RATE/INTERVAL",
            opt.name
        ));
    };
    if opt.json {
        println!("{}", to_json(&opt.name, &config, available));
    } else {
        print!("{}", to_text(&opt.name, &config, available));
    }
    Ok(ExitCode::SUCCESS)
}

/// A library error with what was being done; a bad name or setting is a usage error.
fn library(error: latchkey_redis::Error, doing: String) -> anyhow::Error {
    let code = if error.is_invalid_argument() {
        exit::USAGE
    } else {
        exit::ERROR
    };
    coded(code, anyhow::Error::new(error).context(doing))
}

/// The limiter under `name`: its rate and, for an overall limiter, the permits left; `None`
/// when no rate is set. An error when the name holds something else.
async fn read(client: &Client, name: &str) -> Result<Option<(RateConfig, Option<i64>)>> {
    let found = client
        .inspect(name)
        .await
        .map_err(|e| library(e, format!("reading `{name}`")))?;
    match found {
        Some(found) => match (found.kind, found.rate) {
            (Kind::RateLimiter, Some(config)) => Ok(Some((config, found.available_permits))),
            // A job group keeps nothing under its own name: a limiter there is no conflict.
            (Kind::JobGroup, _) => Ok(None),
            (kind, _) => Err(anyhow!(
                "`{name}` holds a {}, not a rate limiter; it was left as it is",
                kind.as_str().replace('_', " ")
            )),
        },
        None => Ok(None),
    }
}

/// `overall` or `per_client`, as the JSON says it.
fn type_name(rate_type: RateType) -> &'static str {
    match rate_type {
        RateType::PerClient => "per_client",
        RateType::Overall => "overall",
    }
}

/// A limiter's lines, as `limit` and `status` print them.
pub fn to_text(name: &str, config: &RateConfig, available: Option<i64>) -> String {
    let interval = compact(config.interval);
    let mut out = format!("limiter   {name}\n");
    match config.rate_type {
        RateType::PerClient => {
            out.push_str(&format!(
                "rate      {} per {interval} for each client (per client)\n",
                config.rate
            ));
            out.push_str("available per client: each client has a window of its own\n");
        }
        RateType::Overall => {
            out.push_str(&format!(
                "rate      {} per {interval}, one budget for every client (overall)\n",
                config.rate
            ));
            if let Some(left) = available {
                out.push_str(&format!(
                    "available {left} of {} permits now (the last {interval})\n",
                    config.rate
                ));
            }
        }
    }
    match config.keep_alive {
        Some(keep_alive) => out.push_str(&format!(
            "keepalive {}: deleted once unused that long\n",
            compact(keep_alive)
        )),
        None => out.push_str("keepalive none: kept until deleted\n"),
    }
    out
}

/// A limiter as one JSON object (durations in milliseconds; `available` is `null` for a
/// per-client limiter).
pub fn to_json(name: &str, config: &RateConfig, available: Option<i64>) -> serde_json::Value {
    json!({
        "limiter": name,
        "kind": "rate_limiter",
        "rate": config.rate,
        "interval_ms": config.interval.as_millis() as u64,
        "rate_type": type_name(config.rate_type),
        "keep_alive_ms": config.keep_alive.map(|d| d.as_millis() as u64),
        "available": available,
    })
}
