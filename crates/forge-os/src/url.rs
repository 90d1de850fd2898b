//! URLs the user gives or a file holds (an index, a mirror, a repository),
//! handed on byte for byte: the one place that changes one where the tool
//! means to, a path joined onto a base ([`join`]) or a folder's trailing
//! slash ([`folder`]). Works on the text and never re-serialises through a
//! parser (which lower-cases the host, adds a `/` to a bare host and
//! re-encodes the path): the query and the fragment stay where they are,
//! after the path, and the userinfo is kept (it is shown only through
//! [`crate::http::redact`]). Must not fetch, validate or show anything.
use std::borrow::Cow;

/// A URL's text cut where its path ends: `head` is the scheme, authority and
/// path, `query` the `?...` (empty when none) and `fragment` the `#...`
/// (empty when none); `head + query + fragment` is the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts<'a> {
    pub head: &'a str,
    pub query: &'a str,
    pub fragment: &'a str,
}

/// `url` cut into its [`Parts`] (RFC 3986: the fragment starts at the first
/// `#`, the query at the first `?` before it).
pub fn parts(url: &str) -> Parts<'_> {
    let (rest, fragment) = url.find('#').map_or((url, ""), |i| url.split_at(i));
    let (head, query) = rest.find('?').map_or((rest, ""), |i| rest.split_at(i));
    Parts { head, query, fragment }
}

/// `url` with the relative `path` (`dists/bookworm/Release`, `deep-ep/x.whl`)
/// added to its path: one `/` between them, the query and the fragment kept
/// after it. `join("http://h/simple/?v=1", "deep-ep/")` is
/// `http://h/simple/deep-ep/?v=1`.
pub fn join(url: &str, path: &str) -> String {
    let p = parts(url);
    let path = path.trim_start_matches('/');
    let sep = if p.head.ends_with('/') || path.is_empty() { "" } else { "/" };
    format!("{}{sep}{path}{}{}", p.head, p.query, p.fragment)
}

/// `url` as a folder: its path ending in `/` (added before the query and
/// fragment when missing); otherwise the same text.
pub fn folder(url: &str) -> Cow<'_, str> {
    let p = parts(url);
    if p.head.ends_with('/') {
        return Cow::Borrowed(url);
    }
    Cow::Owned(format!("{}/{}{}", p.head, p.query, p.fragment))
}

/// `url` with `suffix` added to the end of its path (a file beside another:
/// `<wheel>.intoto.json`), the query and the fragment kept after it.
pub fn with_suffix(url: &str, suffix: &str) -> String {
    let p = parts(url);
    format!("{}{suffix}{}{}", p.head, p.query, p.fragment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_goes_on_the_path() {
        assert_eq!(with_suffix("http://h/d/x.whl#sha256=ab", ".intoto.json"), "http://h/d/x.whl.intoto.json#sha256=ab");
        assert_eq!(with_suffix("http://h/d/x.whl?t=1", ".metadata"), "http://h/d/x.whl.metadata?t=1");
        assert_eq!(with_suffix("http://h/d/x.whl", ".metadata"), "http://h/d/x.whl.metadata");
    }

    #[test]
    fn a_path_joins_before_the_query_and_the_fragment() {
        for (base, path, want) in [
            ("http://h/simple/?v=1", "deep-ep/", "http://h/simple/deep-ep/?v=1"),
            ("http://h/simple?v=1#f", "deep-ep/", "http://h/simple/deep-ep/?v=1#f"),
            ("http://h/simple#x", "a.whl", "http://h/simple/a.whl#x"),
            ("http://h/debian", "dists/bookworm/Release", "http://h/debian/dists/bookworm/Release"),
            ("http://h/debian/", "/dists/x", "http://h/debian/dists/x"),
            ("http://h", "dists/x", "http://h/dists/x"),
            ("http://h:8080?q", "x", "http://h:8080/x?q"),
            ("https://u:p%40ss@h:1/p/?a=b&c=d#e", "x", "https://u:p%40ss@h:1/p/x?a=b&c=d#e"),
            ("http://h/a/", "", "http://h/a/"),
        ] {
            assert_eq!(join(base, path), want, "{base} + {path}");
        }
    }

    #[test]
    fn a_folder_gets_its_slash_on_the_path_and_nothing_else_changes() {
        for (url, want) in [
            ("http://h/simple/?v=1", "http://h/simple/?v=1"),
            ("http://h/simple?v=1", "http://h/simple/?v=1"),
            ("http://h/simple#f", "http://h/simple/#f"),
            ("http://h/simple/", "http://h/simple/"),
            ("http://HOST:80/Simple/%7e/", "http://HOST:80/Simple/%7e/"),
            ("http://h", "http://h/"),
            ("http://user:secret@h/s", "http://user:secret@h/s/"),
        ] {
            assert_eq!(folder(url), want, "{url}");
        }
        let p = parts("http://h/a?b?c#d#e");
        assert_eq!((p.head, p.query, p.fragment), ("http://h/a", "?b?c", "#d#e"));
    }
}
