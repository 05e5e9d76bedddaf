//! How the names of derived keys and channels are made from an object's name.
//!
//! Redisson's rules, kept so that Java and Rust clients find the same keys, and so that every
//! key and channel of one object lands in the same Redis Cluster slot as the object itself.

/// `<prefix>:{<name>}`, or `<prefix>:<name>` when `name` already has a `{` (its own hash tag):
/// Redisson's `prefixName`.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{<name>}:<suffix>`, or `<name>:<suffix>` when `name` already has a `{`: Redisson's
/// `suffixName`.
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_keep_one_hash_tag() {
        assert_eq!(
            prefix_name("redisson_lock_token", "a"),
            "redisson_lock_token:{a}"
        );
        assert_eq!(
            prefix_name("redisson_lock_token", "a{b}"),
            "redisson_lock_token:a{b}"
        );
        assert_eq!(suffix_name("a", "timeout"), "{a}:timeout");
        assert_eq!(suffix_name("x{a}", "timeout"), "x{a}:timeout");
    }
}
