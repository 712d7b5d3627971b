//! Finds where a dotted key (`umem.frame_size`, `listen[1].port`) is written
//! in the TOML text, so that rule violations found after parsing can point
//! at a line like syntax errors do.

use toml::de::{DeTable, DeValue};

/// One step of a dotted key: a table key or an array index.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn steps(key: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        out.push(Step::Key(name));
        while let Some(r) = rest.strip_prefix('[') {
            let (index, after) = r.split_once(']')?;
            out.push(Step::Index(index.parse().ok()?));
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// Byte offset of the value of `key` in `text`, if the key is written there
/// (a value left at its default has no place in the text).
pub(super) fn value_offset(text: &str, key: &str) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    let mut span = root.span();
    let mut value: Option<&DeValue<'_>> = None;
    let mut table = Some(root.get_ref());
    for step in steps(key)? {
        let next = match (step, value, table) {
            (Step::Key(k), _, Some(t)) => t
                .iter()
                .find(|(name, _)| name.get_ref().as_ref() == k)
                .map(|(_, v)| v)?,
            (Step::Index(i), Some(DeValue::Array(a)), _) => a.get(i)?,
            _ => return None,
        };
        span = next.span();
        value = Some(next.get_ref());
        table = match next.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => None,
        };
    }
    Some(span.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_in_tables_and_arrays() {
        let text = "[umem]\nmtu = 9000\n[[listen]]\nport = 7\n[[listen]]\nport = 9\n[interface]\nqueues = [0, 1]\n";
        let at = |k| value_offset(text, k).map(|o| &text[o..o + 1]);
        assert_eq!(at("umem.mtu"), Some("9"));
        assert_eq!(value_offset(text, "listen[1].port"), text.rfind("9\n"));
        assert_eq!(value_offset(text, "interface.queues[1]"), text.rfind("1]"));
        assert_eq!(value_offset(text, "umem.frame_size"), None);
        assert_eq!(value_offset(text, "listen[2].port"), None);
        assert_eq!(value_offset(text, "umem.mtu[0]"), None);
    }
}
