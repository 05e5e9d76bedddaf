//! The fencing store: a resource that refuses writes carrying a fencing
//! token older than one it already accepted.
//!
//! In a real run the store is a Redis hash updated by the Lua script
//! [`FENCED_WRITE_LUA`]; [`FencedStore`] is a pure Rust model of the same
//! rule, for unit tests and simulations.

/// Text of `scripts/fenced_write.lua`, the store's write as a Redis script.
///
/// `KEYS[1]` is the hash of the store, `ARGV[1]` the writer's fencing token
/// (decimal `u64`), `ARGV[2]` the value. The script accepts the write only
/// if the token is at least the largest token accepted so far; it then
/// stores value and token and returns 1, otherwise it returns 0 and changes
/// nothing.
pub const FENCED_WRITE_LUA: &str = include_str!("../scripts/fenced_write.lua");

/// In-memory model of the fencing store, with the rule of
/// [`FENCED_WRITE_LUA`]: accept a write iff its token is `>=` the largest
/// token accepted so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FencedStore {
    max_token: Option<u64>,
    value: Option<String>,
    accepted: u64,
    rejected: u64,
}

impl FencedStore {
    /// An empty store, which accepts any first write.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attempts a write with fencing token `token`. Returns `true` (and
    /// stores `value` and `token`) if `token` is at least the largest token
    /// accepted so far, `false` (changing nothing) otherwise.
    pub fn write(&mut self, token: u64, value: &str) -> bool {
        if self.max_token.is_some_and(|max| token < max) {
            self.rejected += 1;
            return false;
        }
        self.max_token = Some(token);
        self.value = Some(value.to_owned());
        self.accepted += 1;
        true
    }

    /// Largest token accepted so far, `None` before the first write.
    pub fn max_token(&self) -> Option<u64> {
        self.max_token
    }

    /// Last accepted value, `None` before the first write.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// Number of writes accepted.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Number of writes refused as stale.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_accepts_equal_and_newer_tokens_and_rejects_older() {
        let mut store = FencedStore::new();
        assert_eq!(store.max_token(), None);
        assert_eq!(store.value(), None);
        assert!(store.write(5, "a"));
        assert!(store.write(5, "b"), "an equal token is accepted");
        assert!(store.write(7, "c"));
        assert!(!store.write(6, "stale"), "an older token is refused");
        assert!(!store.write(0, "stale"));
        assert_eq!(store.max_token(), Some(7));
        assert_eq!(store.value(), Some("c"));
        assert_eq!(store.accepted(), 3);
        assert_eq!(store.rejected(), 2);
        assert!(store.write(u64::MAX, "max"));
        assert!(!store.write(u64::MAX - 1, "stale"));
        assert_eq!(store.value(), Some("max"));
    }

    #[test]
    fn first_write_with_token_zero_is_accepted() {
        let mut store = FencedStore::new();
        assert!(store.write(0, "zero"));
        assert_eq!(store.max_token(), Some(0));
    }

    #[test]
    fn lua_script_file_loads_and_matches_the_constant() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fenced_write.lua");
        let text = std::fs::read_to_string(path).expect("script file is readable UTF-8");
        assert_eq!(text, FENCED_WRITE_LUA);
        for needle in [
            "KEYS[1]", "ARGV[1]", "ARGV[2]", "return 1", "return 0", "HSET",
        ] {
            assert!(text.contains(needle), "script mentions {needle}");
        }
    }
}
