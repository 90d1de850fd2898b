//! A platform tag in words a cluster admin reads: the glibc it needs and the
//! distributions that have it (`loads where glibc >= 2.34 (e.g. RHEL 9, Ubuntu
//! 22.04, Debian 12, Amazon Linux 2023; not RHEL 8, Ubuntu 20.04 or Debian 11)`).
//! The one place this sentence is made; every command that shows a tag shows it.
//! The table's sources are in docs/platform-tags.md.

/// A distribution release and the glibc it ships: (family, release, glibc).
pub const DISTRIBUTIONS: &[(&str, &str, (u32, u32))] = &[
    ("RHEL", "8", (2, 28)),
    ("RHEL", "9", (2, 34)),
    ("RHEL", "10", (2, 39)),
    ("Ubuntu", "20.04", (2, 31)),
    ("Ubuntu", "22.04", (2, 35)),
    ("Ubuntu", "24.04", (2, 39)),
    ("Debian", "11", (2, 31)),
    ("Debian", "12", (2, 36)),
    ("Debian", "13", (2, 41)),
    ("Amazon Linux", "2023", (2, 34)),
];

/// The families in the order they are named.
const FAMILIES: &[&str] = &["RHEL", "Ubuntu", "Debian", "Amazon Linux"];

/// The tag set in words: the oldest glibc any of its manylinux tags admits, and
/// for each family the oldest release that loads it and the newest that does not.
pub fn loads_where(tag_set: &str) -> String {
    let floors = super::judge::parts(tag_set).into_iter().filter_map(|p| match p.family {
        super::judge::Family::Manylinux(a, b) => Some((a, b)),
        _ => None,
    });
    match floors.min() {
        Some(g) => glibc_words(g),
        None if tag_set.split('.').any(|t| t.starts_with("linux_")) => {
            "loads only where it was built: a linux_* tag states no glibc floor".to_string()
        }
        None if tag_set == "any" => "loads anywhere (pure Python)".to_string(),
        None => format!("{tag_set}: not a manylinux tag"),
    }
}

/// `loads where glibc >= 2.X (e.g. ...; not ...)`.
pub fn glibc_words(g: (u32, u32)) -> String {
    let (mut yes, mut no) = (Vec::new(), Vec::new());
    for fam in FAMILIES {
        let rel = DISTRIBUTIONS.iter().filter(|(f, _, _)| f == fam);
        if let Some((f, r, _)) = rel.clone().filter(|(_, _, have)| *have >= g).min_by_key(|(_, _, have)| *have) {
            yes.push(format!("{f} {r}"));
        }
        if let Some((f, r, _)) = rel.filter(|(_, _, have)| *have < g).max_by_key(|(_, _, have)| *have) {
            no.push(format!("{f} {r}"));
        }
    }
    let mut words = format!("loads where glibc >= {}.{}", g.0, g.1);
    let not = match no.as_slice() {
        [] => String::new(),
        [one] => format!("; not {one}"),
        [first @ .., last] => format!("; not {} or {last}", first.join(", ")),
    };
    match yes.is_empty() {
        true => words.push_str(&format!(" (none of {}{not})", FAMILIES.join(", "))),
        false => words.push_str(&format!(" (e.g. {}{not})", yes.join(", "))),
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_in_words_names_who_loads_it_and_who_does_not() {
        assert_eq!(
            loads_where("manylinux_2_34_x86_64"),
            "loads where glibc >= 2.34 (e.g. RHEL 9, Ubuntu 22.04, Debian 12, Amazon Linux 2023; not RHEL 8, \
             Ubuntu 20.04 or Debian 11)"
        );
        assert_eq!(
            loads_where("manylinux_2_17_x86_64.manylinux2014_x86_64"),
            "loads where glibc >= 2.17 (e.g. RHEL 8, Ubuntu 20.04, Debian 11, Amazon Linux 2023)"
        );
        assert_eq!(
            loads_where("manylinux_2_39_aarch64"),
            "loads where glibc >= 2.39 (e.g. RHEL 10, Ubuntu 24.04, Debian 13; not RHEL 9, Ubuntu 22.04, Debian 12 \
             or Amazon Linux 2023)"
        );
        assert!(loads_where("linux_x86_64").contains("no glibc floor"));
        assert!(loads_where("linux_x86_64.manylinux_2_28_x86_64").starts_with("loads where glibc >= 2.28"));
    }
}
