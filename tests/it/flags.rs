//! A flag several commands take is declared once (`src/args.rs`, flattened
//! where used): the same long name, value name, default and help text in every
//! command. Every `--source` takes PATH|URL; a value enum offers only what
//! works (`probe --image-builder`: podman or buildah); no flag is accepted
//! that the command never reads (`diff --wheel`).

use crate::support::*;
use clap::{CommandFactory, Parser};
use deepep_forge::cli::Cli;

/// (command path, arg) for every argument of every command.
fn args() -> Vec<(String, clap::Arg)> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for a in cmd.get_arguments() {
            out.push((path.to_string(), a.clone()));
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut out = Vec::new();
    let mut root = Cli::command();
    root.build();
    walk(&root, "deepep-forge", &mut out);
    out
}

fn shape(a: &clap::Arg) -> String {
    format!(
        "value {:?}, default {:?}, help {:?}",
        a.get_value_names(),
        a.get_default_values(),
        a.get_help().map(|h| h.to_string())
    )
}

#[test]
fn each_shared_flag_is_one_declaration() {
    for flag in ["pins", "trusted-key", "cache-url", "cache-dir", "project"] {
        let found: Vec<(String, String)> =
            args().into_iter().filter(|(_, a)| a.get_long() == Some(flag)).map(|(p, a)| (p, shape(&a))).collect();
        assert!(found.len() >= 2, "--{flag} is shared: {found:?}");
        let first = &found[0].1;
        let differ: Vec<&(String, String)> = found.iter().filter(|(_, s)| s != first).collect();
        assert!(differ.is_empty(), "--{flag} differs between commands:\n{}: {first}\n{differ:#?}", found[0].0);
    }
}

#[test]
fn every_source_takes_a_path_or_a_url() {
    let sources: Vec<(String, String)> = args()
        .into_iter()
        .filter(|(_, a)| a.get_long() == Some("source"))
        .map(|(p, a)| (p, format!("{:?}", a.get_value_names())))
        .collect();
    assert!(sources.len() >= 5, "{sources:?}");
    assert!(sources.iter().all(|(_, v)| v.contains("PATH|URL")), "{sources:#?}");
    // `docker build --source URL` parses and is not refused as a missing folder.
    let parsed = Cli::try_parse_from([
        "deepep-forge",
        "docker",
        "build",
        "--variant",
        "h100",
        "--builder",
        "podman",
        "--source",
        "https://github.com/deepseek-ai/DeepEP.git",
    ]);
    assert!(parsed.is_ok(), "{:?}", parsed.err());
}

#[test]
fn what_a_command_cannot_do_is_not_offered() {
    // probe --image reads through podman or buildah only.
    let e = Cli::try_parse_from(["deepep-forge", "probe", "--image", "x", "--image-builder", "docker"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{e}");
    assert!(Cli::try_parse_from(["deepep-forge", "probe", "--image", "x", "--image-builder", "buildah"]).is_ok());
    // diff has no --wheel (it was never read).
    let e = Cli::try_parse_from(["deepep-forge", "diff", "a.whl", "b.whl", "--wheel", "x"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{e}");
    // The binary says so: usage error, exit 2.
    let o = bin().args(["probe", "--image", "x", "--image-builder", "docker"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("[possible values: podman, buildah]"), "{}", stderr(&o));
}

#[test]
fn the_pins_default_is_the_same_where_it_applies() {
    // `cache push` requires --cache-url (or DEEPEP_FORGE_CACHE_URL) without another declaration.
    let o = bin().args(["cache", "push"]).env_remove("DEEPEP_FORGE_CACHE_URL").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--cache-url <URL>"), "{}", stderr(&o));
    // `pins check` without --pins reads ./pins.toml, as every command does.
    let dir = tempfile::tempdir().unwrap();
    let o = bin().args(["pins", "check"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("pins.toml"), "{}", stderr(&o));
}
