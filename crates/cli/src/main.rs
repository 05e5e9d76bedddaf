//! `latchkey`: distributed locks kept in Redis, from the shell.
//!
//! `main` only parses the options and hands them to [`cli::run`]; everything else lives in the
//! modules below (the shape of sqlx-cli).

mod cli;
mod connect;
mod cron;
mod demo;
mod duration;
mod elect;
mod exit;
mod limit;
mod list;
mod opt;
mod queue;
mod release;
mod run;
mod server;
mod stats;
mod status;
mod sys;
mod ui;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let opt = match opt::Opt::try_parse() {
        Ok(opt) => opt,
        // Help and version go to stdout and exit 0; usage errors exit 64.
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli::run(opt) {
        Ok(code) => code,
        Err(error) => exit::report(&error),
    }
}
