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
    assert!(
        !is_derived("permits:timeout", &names),
        "not a key Redisson makes"
    );
}

#[test]
fn a_rate_limiters_windows_are_not_names() {
    let names: BTreeSet<String> = ["geocoder", "orders{eu}", "value"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let id = "6f1c64d4-6a8b-4f8e-9d4e-2c1a9b7e5f00";
    assert!(is_derived("{geocoder}:value", &names));
    assert!(is_derived("{geocoder}:permits", &names));
    assert!(is_derived(&format!("{{geocoder}}:value:{id}"), &names));
    assert!(is_derived(&format!("{{geocoder}}:permits:{id}"), &names));
    assert!(is_derived("orders{eu}:value", &names));
    assert!(is_derived(&format!("orders{{eu}}:permits:{id}"), &names));
    assert!(!is_derived("{gone}:value", &names), "no object: kept");
    assert!(
        !is_derived("geocoder:value", &names),
        "not a key Redisson makes"
    );
    assert!(!is_derived("{geocoder}:value:", &names), "no client id");
    assert!(!is_derived("value", &names));
}

#[test]
fn job_groups_are_found_by_their_index() {
    assert_eq!(job_group_of("latchkey_jobs:{cron}"), Some("cron"));
    assert_eq!(
        job_group_of("latchkey_jobs:{billing:cron}"),
        Some("billing:cron")
    );
    assert_eq!(
        job_group_of("latchkey_jobs:reports{eu}"),
        Some("reports{eu}")
    );
    assert_eq!(
        job_group_of("latchkey_jobs:cron"),
        None,
        "not a key latchkey makes"
    );
    assert_eq!(job_group_of("latchkey_job:{cron}:sweep"), None);
    assert_eq!(job_group_of("latchkey_jobs_x:{cron}"), None);
}

#[test]
fn globs_match_as_redis_matches() {
    let cases: &[(&str, &str, bool)] = &[
        ("*", "", true),
        ("*", "anything", true),
        ("job:*", "job:1", true),
        ("job:*", "jobs", false),
        ("*:1", "job:1", true),
        ("a*b*c", "axxbyyc", true),
        ("a*b*c", "axxbyy", false),
        ("?", "a", true),
        ("?", "", false),
        ("a?c", "abc", true),
        ("job:[12]", "job:2", true),
        ("job:[12]", "job:3", false),
        ("job:[^12]", "job:3", true),
        ("job:[^12]", "job:1", false),
        ("[a-c]x", "bx", true),
        ("[c-a]x", "bx", true),
        ("[a-c]x", "dx", false),
        ("[\\]]", "]", true),
        ("a\\*", "a*", true),
        ("a\\*", "ab", false),
        ("a\\", "a\\", true),
        ("[ab", "a", true),
        ("abc", "ab", false),
        ("ab", "abc", false),
        ("a**", "a", true),
    ];
    for &(pattern, text, expected) in cases {
        assert_eq!(
            glob_match(pattern.as_bytes(), text.as_bytes()),
            expected,
            "`{pattern}` on `{text}`"
        );
    }
}

#[test]
fn namespaces_are_escaped_in_patterns() {
    assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    assert_eq!(escape_glob("billing"), "billing");
}
