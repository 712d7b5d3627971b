//! Names that cross the socket (drop reasons, the transport's name) as
//! `&'static str`, as the provider API returns them: each distinct name is
//! leaked once, at most [`MAX_NAMES`] of them (a daemon is not trusted to
//! keep to a small set); beyond that a name reads `"other"`.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Distinct names kept.
pub const MAX_NAMES: usize = 256;

/// `name` as a `&'static str`.
pub fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&n) = names.get(name) {
        return n;
    }
    if names.len() >= MAX_NAMES {
        return "other";
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_kept_once_and_the_set_is_bounded() {
        let a = intern("no_posted_memory");
        assert!(std::ptr::eq(a, intern("no_posted_memory")));
        for i in 0..MAX_NAMES + 10 {
            intern(&format!("n{i}"));
        }
        assert_eq!(intern("a name never seen"), "other");
        assert!(std::ptr::eq(a, intern("no_posted_memory")));
    }
}
