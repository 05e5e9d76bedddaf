//! Exit codes, and how an error becomes one.

use std::fmt;
use std::process::ExitCode;

/// An error (Redis unreachable, a Redis error, a failed benchmark check, a refused
/// confirmation, …), for every subcommand but `run`.
pub const ERROR: u8 = 1;
/// A usage error: a bad flag or value (sysexits' `EX_USAGE`).
pub const USAGE: u8 = 64;
/// `run` could not get the lock within `--wait`; `queue take` got nothing within `--timeout`.
pub const BUSY: u8 = 75;
/// `run`: the lock was lost while the command ran; the command was stopped.
pub const LOST: u8 = 76;
/// `run`: latchkey itself failed (bad input, Redis unreachable, …); the command did not run,
/// or its status could not be told.
pub const RUN_FAILED: u8 = 125;
/// `run`: the command was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: u8 = 127;
/// `128 + N`: interrupted by signal N (for `run`: the command was killed by signal N).
pub const SIGNAL_BASE: u8 = 128;

/// The exit-code table shown at the end of `latchkey --help` and `latchkey run --help`.
pub const TABLE: &str = "\
Exit codes:
    0    success (run, elect: the command exited 0)
    1    error: Redis unreachable, a Redis error, a failed check (all but run, elect)
   64    usage error: a bad flag or value
   75    busy: run got no lock (elect: did not lead) within --wait; queue take got no item
         within --timeout
   76    run, elect: the lock (leadership) was lost while the command ran; it was stopped
  125    run, elect: latchkey itself failed (the command did not run)
  126    run, elect: the command cannot be executed
  127    run, elect: the command was not found
 128+N   interrupted by signal N (run, elect: the command was killed by signal N)
  else   run, elect: the command's own exit status";

/// An error that carries its exit code (any other error exits with [`ERROR`]).
#[derive(Debug)]
pub struct Coded {
    /// The exit code.
    pub code: u8,
    /// What went wrong.
    pub error: anyhow::Error,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&one_line(&*self.error))
    }
}

/// `error` and all its causes (`source()`), "outer: inner: root" on one line. latchkey's errors
/// leave their cause out of their message, so it is printed here. A cause whose text the line
/// already holds is left out: `redis::RedisError` prints the error it wraps and also returns it
/// from `source()`, and so do some other libraries' errors.
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        next = cause.source();
        if cause.is::<Coded>() {
            continue;
        }
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

impl std::error::Error for Coded {}

/// Wraps an error with an exit code.
pub fn coded(code: u8, error: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(Coded {
        code,
        error: error.into(),
    })
}

/// Prints `error` to stderr and returns its exit code.
pub fn report(error: &anyhow::Error) -> ExitCode {
    let code = match error.downcast_ref::<Coded>() {
        Some(coded) => {
            eprintln!("latchkey: {coded}");
            coded.code
        }
        None => {
            eprintln!("latchkey: {}", one_line(&**error));
            ERROR
        }
    };
    ExitCode::from(code)
}
