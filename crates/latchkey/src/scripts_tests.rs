//! Unit tests of `crate::scripts`.

use super::SOURCES;

/// A script unknown to the server is sent whole: every registered script's hash leads to
/// its source.
#[test]
fn every_script_can_be_sent_whole() {
    for source in SOURCES {
        let hash = redis::Script::new(source).get_hash().to_owned();
        let cmd = super::eval_cmd(&hash, true, [&b"k"[..]].into_iter(), std::iter::empty());
        let args: Vec<_> = cmd.args_iter().collect();
        assert_eq!(args[0], redis::Arg::Simple(&b"EVAL"[..]));
        assert_eq!(args[1], redis::Arg::Simple(source.as_bytes()));
        assert_eq!(args[2], redis::Arg::Simple(&b"1"[..]));
    }
}

/// Every script file is registered, once: its text ends exactly one of [`SOURCES`] (after
/// the prelude and its family's helpers, the files named `*prelude.lua`), so that every
/// script is declared here and a command refused in it can be named.
#[test]
fn every_script_is_registered_once() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".lua") || name.ends_with("prelude.lua") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if name.ends_with(".fast.lua") {
            let found = SOURCES.iter().filter(|s| s.starts_with(&text)).count();
            assert_eq!(found, 1, "{name} starts {found} scripts in scripts.rs");
            continue;
        }
        files += 1;
        let found = SOURCES.iter().filter(|s| s.ends_with(&text)).count();
        assert_eq!(found, 1, "{name} is registered {found} times in scripts.rs");
    }
    assert_eq!(files, SOURCES.len(), "a script is registered twice");
}
