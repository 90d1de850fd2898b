//! Reading a Dockerfile: [`parse`] (instructions: continuations, comments,
//! heredocs, `# escape=`, words split as the shell quotes them), [`expand`]
//! (ARG/ENV values and sh parameter expansion), [`model`] (stages with their
//! platform and ARG/ENV scopes, RUN lines expanded, each scope's DeepEP build
//! settings). The one Dockerfile reader: `lock check`'s rules and the
//! daemonless image build read through it. Must not judge, run docker or read
//! files.
pub mod expand;
pub mod model;
pub mod parse;

use std::collections::BTreeSet;

pub use model::Model;
pub use parse::instructions_named;

/// The ARG names the Dockerfile declares (`ARG NAME` / `ARG NAME=default`,
/// several per instruction, in any stage or before the first FROM).
pub fn declared_args(text: &str) -> BTreeSet<String> {
    let (ins, escape) = parse::instructions(text);
    ins.iter()
        .filter(|i| i.keyword == "ARG")
        .flat_map(|i| parse::split_words(&i.args, escape))
        .map(|w| w.split_once('=').map_or(w.as_str(), |(n, _)| n).trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::expand::*;
    use super::parse::*;
    use super::*;
    use std::rc::Rc;

    #[test]
    fn continuations_comments_and_heredocs() {
        let (ins, _) =
            instructions("FROM x AS a\nRUN echo a \\\n  # comment\n\n  b\nRUN <<EOF\ngit checkout abc\nEOF\nENV A=1\n");
        assert_eq!(ins.len(), 4);
        assert_eq!(ins[1], Instruction { keyword: "RUN".into(), args: "echo a   b".into(), line: 2 });
        assert_eq!(ins[2].args, "<<EOF\ngit checkout abc\n");
        assert_eq!((ins[3].keyword.as_str(), ins[3].line), ("ENV", 9));
        let (ins, esc) = instructions("# escape=`\nFROM x\nRUN a `\n b\n");
        assert_eq!((esc, ins[1].args.as_str()), ('`', "a  b"));
    }
    #[test]
    fn expansion_follows_quotes_defaults_and_scopes() {
        let d = Rc::new(Def {
            kw: "ARG",
            name: "A".into(),
            line: 3,
            value: Some("9.0 10.0".into()),
            via: None,
            stage: None,
        });
        let lookup = |n: &str| (n == "A").then(|| d.clone());
        let e = expand("\"${A}\"", '\\', &lookup);
        assert_eq!(e.text.as_deref(), Some("9.0 10.0"));
        assert_eq!(e.single.unwrap().line, 3);
        assert_eq!(expand("'$A'", '\\', &lookup).text.as_deref(), Some("$A"));
        assert_eq!(expand("x$A", '\\', &lookup).text.as_deref(), Some("x9.0 10.0"));
        assert!(expand("x$A", '\\', &lookup).single.is_none());
        assert_eq!(expand("${B:-9.0}", '\\', &lookup).text.as_deref(), Some("9.0"));
        assert_eq!(expand("${A:+set}", '\\', &lookup).text.as_deref(), Some("set"));
        assert_eq!(expand("\\$A", '\\', &lookup).text.as_deref(), Some("$A"));
        assert!(expand("$B", '\\', &lookup).text.is_none(), "an undeclared variable is only known at build time");
    }
    #[test]
    fn globs_match_as_sh_does() {
        let g = |p: &str, s: &str| glob(&p.chars().collect::<Vec<_>>(), &s.chars().collect::<Vec<_>>());
        assert!(g("*", "") && g("a*c", "abbc") && g("?b", "ab") && g("[!x]y", "ay") && g("\\*", "*"));
        assert!(!g("a*c", "abbd") && !g("[a-c]", "d") && !g("\\*", "x") && !g("?", ""));
        assert!(g("[", "[") && g("*.*", "1.2.3"));
        assert_eq!(strip_pattern("1.2.3", "*.", "#").as_deref(), Some("2.3"));
        assert_eq!(strip_pattern("1.2.3", "*.", "##").as_deref(), Some("3"));
        assert_eq!(strip_pattern("1.2.3", ".*", "%").as_deref(), Some("1.2"));
        assert_eq!(strip_pattern("1.2.3", ".*", "%%").as_deref(), Some("1"));
    }

    #[test]
    fn declared_args_are_every_arg_name() {
        let text = "ARG A\nFROM x\nARG B=1 C=\"2 3\"\nRUN echo ARG D\nENV E=1\n";
        let names: Vec<String> = declared_args(text).into_iter().collect();
        assert_eq!(names, ["A", "B", "C"]);
    }
}
