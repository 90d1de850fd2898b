//! A wheel's core metadata (METADATA, PEP 566; also served as PEP 658
//! `.metadata`): the `Requires-Dist` headers, bounded. Must not resolve or judge.

/// Most `Requires-Dist` headers read.
const MAX_REQUIRES: usize = 256;

/// The `Requires-Dist` values of `text`'s header block (before the first empty line).
pub fn requires_dist(text: &str) -> Vec<String> {
    text.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.strip_prefix("Requires-Dist:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty() && v.len() <= 512)
        .take(MAX_REQUIRES)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_header_block_counts() {
        let t = "Name: deep-ep\nRequires-Dist: torch==2.11.0\nRequires-Dist:  nvidia-nccl-cu13==2.30.7 \n\nRequires-Dist: in-the-body\n";
        assert_eq!(super::requires_dist(t), ["torch==2.11.0", "nvidia-nccl-cu13==2.30.7"]);
    }
}
