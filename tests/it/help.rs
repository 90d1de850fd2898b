//! Every command's `--help` teaches by example, and the examples read right on
//! an 80-column terminal: clap wraps help text at the terminal's width, so an
//! example line longer than that continues on a line of its own, which reads
//! as another command (or a comment's tail as one). Here: every command has an
//! `Examples:` section with at least one `deepep-forge ...` line, each comment
//! sits on its own `#` line, and every line of it fits 78 columns, so the help
//! rendered at 80 columns shows it unchanged. (tests/it/docs.rs parses each
//! example with today's command line.)
use clap::CommandFactory;

const WIDTH: usize = 80;

/// (path, command) for every command and subcommand except clap's `help`.
fn commands() -> Vec<(String, clap::Command)> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let p = format!("{path} {}", sub.get_name());
            out.push((p.clone(), sub.clone()));
            walk(sub, &p, out);
        }
    }
    let mut out = Vec::new();
    walk(&deepep_forge::cli::Cli::command(), "deepep-forge", &mut out);
    out
}

#[test]
fn every_command_has_an_example() {
    let mut without = Vec::new();
    for (path, cmd) in commands() {
        let text = cmd.get_after_help().map(|t| t.to_string()).unwrap_or_default();
        let examples = text.split_once("Examples:").map(|(_, e)| e).unwrap_or("");
        if !examples.lines().any(|l| l.trim_start().starts_with("deepep-forge ")) {
            without.push(path);
        }
    }
    assert!(without.is_empty(), "`--help` without an `Examples:` section: {without:?}");
}

#[test]
fn examples_fit_80_columns_and_comments_stand_on_their_own_lines() {
    let mut bad = Vec::new();
    for (path, cmd) in commands() {
        let Some(text) = cmd.get_after_help().map(|t| t.to_string()) else { continue };
        for line in text.lines() {
            if line.chars().count() > WIDTH - 2 {
                bad.push(format!("{path}: {} columns: {line}", line.chars().count()));
            }
            let t = line.trim_start();
            if t.starts_with("deepep-forge ") && t.contains(" # ") {
                bad.push(format!("{path}: a comment after the command (put it on a `#` line above): {line}"));
            }
        }
        // Rendered as a terminal of 80 columns shows it: no line of it is wrapped.
        let rendered = cmd.clone().term_width(WIDTH).render_help().to_string();
        let mut at = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match rendered[at..].find(line) {
                Some(i) => at += i + line.len(),
                None => bad.push(format!("{path}: wrapped at {WIDTH} columns: {line}")),
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_width_check_catches_a_long_example() {
    // The check above can fail: a command whose example is too long is wrapped by clap.
    let long = format!("Examples:\n  deepep-forge plan {}", "--variant h100 ".repeat(8));
    let cmd = clap::Command::new("x").after_help(long.clone());
    let rendered = cmd.term_width(WIDTH).render_help().to_string();
    assert!(!rendered.contains(long.lines().nth(1).unwrap()), "{rendered}");
}
