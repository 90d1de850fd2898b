//! Python package names and versions read from files (pins.toml, a
//! consumer's uv.lock), checked against their grammar before they reach a
//! requirement line, a command line or a file another tool reads (uv's
//! override file): a name is a PEP 508/503 name, a version a PEP 440 version
//! made only of its own characters. Nothing else (a space, `;` and a marker,
//! `#`, `@ file://`, a newline and `-e ...`) can ride along. Owns that grammar
//! and the one function that joins a checked name and version into a
//! requirement; must not read files.
use std::str::FromStr;

/// The longest name or version accepted (real ones are far shorter).
const MAX_LEN: usize = 128;

/// `name` is a PEP 508 project name: ASCII letters and digits, with `.`, `_`,
/// `-` only between them (PEP 503 normalises it by case and those runs).
pub fn check_name(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-');
    let ok = !b.is_empty()
        && b.len() <= MAX_LEN
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(inner);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a package name (PEP 508: letters, digits and `.`, `_`, `-` between them)",
            forge_os::input::excerpt(name, 80)
        ))
    }
}

/// `version` is a PEP 440 version written with its own characters only
/// (letters, digits, `.`, `!`, `+`, `-`, `_`): no space, marker or comment.
pub fn check_version(version: &str) -> Result<(), String> {
    let chars = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'!' | b'+' | b'-' | b'_');
    let ok = !version.is_empty()
        && version.len() <= MAX_LEN
        && version.bytes().all(chars)
        && pep440_rs::Version::from_str(version).is_ok();
    if ok {
        Ok(())
    } else {
        Err(format!("`{}` is not a PEP 440 version", forge_os::input::excerpt(version, 80)))
    }
}

/// How a requirement line binds its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Exact,
    AtLeast,
}

/// `name==version` (or `name>=version`), both checked: the only way a
/// requirement line is made from names and versions read from files.
pub fn requirement(name: &str, op: Op, version: &str) -> Result<String, String> {
    check_name(name)?;
    check_version(version)?;
    Ok(format!("{name}{}{version}", if op == Op::Exact { "==" } else { ">=" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_pep_508() {
        for ok in ["torch", "nvidia-nccl-cu13", "deep_ep", "a", "A.b-C_1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-e",
            "nvidia-nccl-cu13\n-e file:///tmp/x",
            "nvidia-nccl-cu13 @ file:///tmp/x",
            "nvidia-nvshmem-cu13 ; python_version < '0' # -cu13",
            "x\r::warning::y",
            "nccl-",
            "a b",
            "n\u{1b}[2J",
            &"a".repeat(200),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn versions_follow_pep_440_with_nothing_riding_along() {
        for ok in ["2.11.0", "2.30.7", "1.2.1+17cfb81", "1!2.0rc1.post2.dev3", "2.11.0+cu130"] {
            assert!(check_version(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            " 2.11.0",
            "2.11.0 ",
            "2.11.0 ; python_version < '0'",
            "2.11.0;python_version<'0'",
            "2.11.0 # c",
            "2.11.0\n-e file:///tmp/x",
            "2.11.0 @ file:///tmp/x",
            "v..1",
            "2.*",
            "latest",
        ] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn requirements_are_made_only_from_checked_parts() {
        assert_eq!(requirement("torch", Op::Exact, "2.11.0").unwrap(), "torch==2.11.0");
        assert_eq!(requirement("nvidia-nccl-cu13", Op::AtLeast, "2.30.4").unwrap(), "nvidia-nccl-cu13>=2.30.4");
        assert!(requirement("torch\n-e .", Op::Exact, "2.11.0").is_err());
        assert!(requirement("torch", Op::Exact, "2.11.0 ; python_version < '0'").is_err());
    }
}
