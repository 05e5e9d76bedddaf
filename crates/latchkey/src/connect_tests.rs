//! Unit tests of `crate::connect`.

use super::*;

/// A URL whose deployment the build leaves out is refused, typed, naming the feature to
/// enable and the URL without its password; with every feature it is accepted. (The tests
/// are built with every feature: the builds without are `cargo check`ed by `.ci/run`.)
#[test]
fn a_url_whose_feature_is_off_names_the_feature() {
    let cases = [
        ("redis+cluster://u:secret@127.0.0.1:7000", "cluster"),
        ("rediss+cluster://u:secret@127.0.0.1:7000", "cluster"),
        (
            "redis+sentinel://u:secret@127.0.0.1:26379/mymaster",
            "sentinel",
        ),
        ("rediss://u:secret@127.0.0.1:6380", "tls"),
    ];
    for (url, feature) in cases {
        let topology = Topology::parse(url).expect("a valid url");
        assert!(missing_feature(url, &topology, |_| true).is_ok(), "{url}");
        let err = missing_feature(url, &topology, |f| f != feature).unwrap_err();
        assert!(err.is_feature_disabled(), "{url}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("features = [\"{feature}\"]")),
            "{message}"
        );
        assert!(
            message.contains("***@127.0.0.1") && !message.contains("secret"),
            "{message}"
        );
    }
    // `rediss+cluster://` needs both: either one missing is named.
    let url = "rediss+cluster://127.0.0.1:7000";
    let topology = Topology::parse(url).unwrap();
    let err = missing_feature(url, &topology, |f| f != "tls").unwrap_err();
    assert!(
        matches!(err, Error::FeatureDisabled { feature: "tls", .. }),
        "{err}"
    );
    // A plain server needs none.
    let url = "redis://127.0.0.1:6379";
    let topology = Topology::parse(url).unwrap();
    assert!(missing_feature(url, &topology, |_| false).is_ok());
    assert!(["tls", "cluster", "sentinel"].into_iter().all(built_with));
}

#[test]
fn redacts_passwords() {
    assert_eq!(
        redact("redis://user:secret@host:1/0"),
        "redis://***@host:1/0"
    );
    assert_eq!(redact("redis://host:1"), "redis://host:1");
}

#[test]
fn cluster_nodes_give_each_primary_its_slots() {
    let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5461->-67ed]
6ec2 127.0.0.1:30003@40003 master - 0 0 3 connected
9a1b 127.0.0.1:30005@40005 master,fail - 0 0 5 disconnected 12001-16383
";
    assert_eq!(
        parse_cluster_nodes(text),
        vec![vec![(5461, 10922)], vec![(0, 5460), (12000, 12000)],]
    );
    assert!(parse_cluster_nodes("").is_empty());
}
