//! The README's CLI walkthrough cannot drift from the CLI: every `$ jobwire ...` line of its
//! subsection "The CLI: a dead-letter incident" parses with the binary's own clap
//! definition, and docs/cli.md names every subcommand the parser has.

use clap::{CommandFactory, Parser};
use jobwire::config::Cli;

const README: &str = include_str!("../../README.md");
const DOCS: &str = include_str!("../../docs/cli.md");
const HEADING: &str = "### The CLI: a dead-letter incident";

/// The `jobwire ...` command lines (after `$ `) of the walkthrough.
fn walkthrough_commands() -> Vec<String> {
    let start = README
        .find(HEADING)
        .unwrap_or_else(|| panic!("README has no {HEADING:?}"));
    let body = &README[start + HEADING.len()..];
    let end = body
        .find("\n## ")
        .or_else(|| body.find("\n### "))
        .unwrap_or(body.len());
    body[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("$ "))
        .filter(|l| l.starts_with("jobwire "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_walkthrough_commands_parse() {
    let cmds = walkthrough_commands();
    assert!(
        cmds.len() >= 4,
        "list, show, replay, delete at least: {cmds:?}"
    );
    for want in ["dlq list", "dlq show", "dlq replay", "dlq delete"] {
        assert!(
            cmds.iter().any(|c| c.contains(want)),
            "the walkthrough has no `{want}`: {cmds:?}"
        );
    }
    for c in &cmds {
        let words = shlex::split(c).unwrap_or_else(|| panic!("unbalanced quotes: {c}"));
        if let Err(e) = Cli::try_parse_from(&words) {
            panic!("README command does not parse: {c}\n{e}");
        }
    }
}

#[test]
fn docs_cli_md_names_every_operator_subcommand() {
    let cli = Cli::command();
    for group in ["queues", "jobs", "dlq", "workers", "token"] {
        let g = cli
            .find_subcommand(group)
            .unwrap_or_else(|| panic!("no `jobwire {group}`"));
        for sub in g.get_subcommands() {
            let mut names = vec![format!("jobwire {group} {}", sub.get_name())];
            if sub.has_subcommands() {
                names = sub
                    .get_subcommands()
                    .map(|s| format!("jobwire {group} {} {}", sub.get_name(), s.get_name()))
                    .collect();
            }
            for n in names {
                assert!(DOCS.contains(&n), "docs/cli.md does not mention `{n}`");
            }
        }
    }
}
