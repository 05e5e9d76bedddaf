//! Unit tests of `crate::inspect`.

use super::*;

#[test]
fn derived_keys_are_not_names() {
    let names: BTreeSet<String> = ["permits", "orders{eu}", "{permits}:timeout"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(is_derived("redisson_lock_token:{a}", &names));
    assert!(is_derived("latchkey_queue:{a}", &names));
    assert!(is_derived("{rw}:3f2a-uuid:1:rwlock_timeout:2", &names));
    assert!(is_derived("{permits}:timeout", &names));
    assert!(is_derived("orders{eu}:timeout", &names));
    assert!(!is_derived("{gone}:timeout", &names), "no object: kept");
    assert!(!is_derived("permits", &names));
    assert!(!is_derived("jobs:rwlock_timeout:x", &names));
}

#[test]
fn namespaces_are_escaped_in_patterns() {
    assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    assert_eq!(escape_glob("billing"), "billing");
}
