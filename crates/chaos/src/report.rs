//! Rendering of check results for humans.

use crate::checker::Report;

/// Header of the Markdown table whose rows [`markdown_row`] renders
/// (two lines, without a trailing newline).
pub fn markdown_header() -> &'static str {
    "| scenario | operations | faults injected | violations | leftovers | command |\n\
     | --- | --- | --- | --- | --- | --- |"
}

/// Renders one Markdown table row (without a trailing newline) with the
/// columns of [`markdown_header`]: the scenario name, the operation counts of
/// `report`, the faults injected as described by the caller, the violations
/// (count, kinds and mode), the leftovers, and the command that reproduces
/// the run as inline code.
///
/// Cell text is escaped so that pipes and line breaks cannot break the
/// table.
pub fn markdown_row(
    scenario: &str,
    report: &Report,
    faults_injected: &str,
    command: &str,
) -> String {
    let ops = report.counts.operations();
    let operations = format!(
        "{} ({} ok, {} failed, {} unknown); {} holds",
        ops.attempted, ops.succeeded, ops.failed, ops.unknown, report.counts.holds
    );
    let leftovers = report
        .leftovers
        .as_ref()
        .map_or_else(|| "not checked".to_owned(), |l| l.summary());
    let command = if command.trim().is_empty() {
        String::new()
    } else {
        code_span(command)
    };
    format!(
        "| {} | {} | {} | {} | {} | {} |",
        cell(scenario),
        cell(&operations),
        cell(faults_injected),
        cell(&violations(report)),
        cell(&leftovers),
        cell(&command),
    )
}

/// `0 (strict)` or `3 (conservative): 2 overlapping holds, 1 token inversion`.
fn violations(report: &Report) -> String {
    let counts = &report.violation_counts;
    let mut text = format!("{} ({})", counts.total(), report.mode);
    let parts: Vec<String> = [
        (counts.overlapping_holds, "overlapping holds"),
        (counts.duplicate_tokens, "duplicate tokens"),
        (counts.token_inversions, "token inversions"),
        (counts.stale_writes_accepted, "stale writes accepted"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if !parts.is_empty() {
        text.push_str(": ");
        text.push_str(&parts.join(", "));
    }
    text
}

/// Escapes text for a table cell: pipes are backslash-escaped (also inside
/// code spans, as GitHub Markdown requires) and line breaks become spaces.
fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '\r' | '\n' => out.push(' '),
            _ => out.push(c),
        }
    }
    if out.trim().is_empty() {
        "-".to_owned()
    } else {
        out
    }
}

/// Wraps `text` in a code span whose fence is longer than any run of
/// backticks inside it.
fn code_span(text: &str) -> String {
    let mut longest = 0usize;
    let mut run = 0usize;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest + 1);
    if text.starts_with('`') || text.ends_with('`') {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{check, CheckOptions, Leftovers, Mode};
    use crate::history::{Event, EventKind};

    fn cells(row: &str) -> Vec<String> {
        // Split on pipes not escaped with a backslash.
        let mut cells = Vec::new();
        let mut current = String::new();
        let mut escaped = false;
        for c in row.chars() {
            if c == '|' && !escaped {
                cells.push(current.trim().to_owned());
                current.clear();
            } else {
                current.push(c);
            }
            escaped = c == '\\';
        }
        cells.push(current.trim().to_owned());
        cells[1..cells.len() - 1].to_vec()
    }

    fn overlapping_report() -> crate::checker::Report {
        let e =
            |w: u32, op: u64, t: u64, kind: EventKind| Event::new(w, format!("p{w}"), op, t, kind);
        let events = vec![
            e(1, 0, 0, EventKind::AcquireInvoke),
            e(1, 0, 10, EventKind::AcquireOk { fencing_token: 2 }),
            e(2, 0, 11, EventKind::AcquireInvoke),
            e(2, 0, 12, EventKind::AcquireOk { fencing_token: 1 }),
            e(2, 1, 13, EventKind::AcquireInvoke),
        ];
        check(&events, &CheckOptions::default()).unwrap()
    }

    #[test]
    fn header_and_row_have_six_columns() {
        let header = markdown_header();
        let lines: Vec<&str> = header.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            cells(lines[0]),
            [
                "scenario",
                "operations",
                "faults injected",
                "violations",
                "leftovers",
                "command"
            ]
        );
        assert_eq!(cells(lines[1]).len(), 6);

        let report = overlapping_report();
        let row = markdown_row("kill -9 holder", &report, "3× SIGKILL", "cargo run -p x");
        assert!(!row.contains('\n'));
        let c = cells(&row);
        assert_eq!(c.len(), 6);
        assert_eq!(c[0], "kill -9 holder");
        assert_eq!(c[1], "3 (2 ok, 0 failed, 1 unknown); 2 holds");
        assert_eq!(c[2], "3× SIGKILL");
        assert_eq!(c[3], "2 (strict): 1 overlapping holds, 1 token inversions");
        assert_eq!(c[4], "not checked");
        assert_eq!(c[5], "`cargo run -p x`");
    }

    #[test]
    fn row_shows_clean_runs_and_leftovers() {
        let report = check(
            &[],
            &CheckOptions {
                mode: Mode::Conservative,
                ..CheckOptions::default()
            },
        )
        .unwrap();
        let clean = report.clone().with_leftovers(Leftovers::default());
        let c = cells(&markdown_row("idle", &clean, "none", ""));
        assert_eq!(c[3], "0 (conservative)");
        assert_eq!(c[4], "clean");
        assert_eq!(c[5], "-");
        let dirty = report.with_leftovers(Leftovers {
            queue_entries: vec!["q".into()],
            ..Leftovers::default()
        });
        assert_eq!(
            cells(&markdown_row("idle", &dirty, "none", "x"))[4],
            "1 queue entry"
        );
    }

    #[test]
    fn cells_are_escaped() {
        let report = overlapping_report();
        let row = markdown_row(
            "a|b\nc",
            &report,
            "pause | kill",
            "sh -c 'echo `date` | tee log'",
        );
        assert!(!row.contains('\n'));
        let c = cells(&row);
        assert_eq!(c.len(), 6, "{row}");
        assert_eq!(c[0], "a\\|b c");
        assert_eq!(c[2], "pause \\| kill");
        assert_eq!(c[5], "``sh -c 'echo `date` \\| tee log'``");
        assert_eq!(code_span("`x`"), "`` `x` ``");
    }
}
