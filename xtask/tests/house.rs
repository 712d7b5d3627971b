//! The house rules a newcomer relies on, checked over the source tree:
//! no source file's non-test part is over 700 lines, and no two modules of
//! a crate import each other (directly or round a loop), so every folder
//! reads from its leaves up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// The crates' `src/` folders (nested packages included).
fn source_roots() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            out.push(dir.join("src"));
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.path().is_dir() && name != "target" && name != "src" && !name.starts_with('.')
            {
                stack.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A source file's text up to its unit-test module, if any.
fn non_test_part(text: &str) -> &str {
    let mut at = 0;
    while let Some(i) = text[at..].find("#[cfg(test)]\n") {
        let start = at + i;
        let next = text[start..].lines().nth(1).unwrap_or("");
        if next.contains("mod ") && next.trim_end().ends_with('{') {
            return &text[..start];
        }
        at = start + 1;
    }
    text
}

/// A file's code without its comment lines (doc links are not imports).
fn code_of(text: &str) -> String {
    non_test_part(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A file's module path inside its crate: `src/a/b.rs` and
/// `src/a/b/mod.rs` are `["a", "b"]`; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The module paths a file's code names: `crate::a::b…` and
/// `super::…` (relative to `module`), groups `{…}` opened one level.
fn references(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let word = |s: &str| -> (String, usize) {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        (s[..end].to_string(), end)
    };
    for (anchor, base) in [("crate::", 0usize), ("super::", 1)] {
        let mut at = 0;
        while let Some(i) = code[at..].find(anchor) {
            let before = code[..at + i].chars().next_back();
            at += i + anchor.len();
            let rest = &code[at..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut path: Vec<String> = if base == 0 {
                Vec::new()
            } else {
                // `super` of module a::b (`a/b.rs` or `a/b/mod.rs`) is `a`.
                module[..module.len().saturating_sub(1)].to_vec()
            };
            let mut s = rest;
            // Further `super::` hops.
            while let Some(t) = s.strip_prefix("super::") {
                path.pop();
                s = t;
            }
            if let Some(group) = s.strip_prefix('{') {
                let close = group.find('}').unwrap_or(group.len());
                for item in group[..close].split(',') {
                    let mut p = path.clone();
                    for seg in item.trim().split("::") {
                        let (w, _) = word(seg.trim());
                        if w.is_empty() || w == "self" {
                            break;
                        }
                        p.push(w);
                    }
                    out.push(p);
                }
                continue;
            }
            loop {
                let (w, end) = word(s);
                if w.is_empty() {
                    break;
                }
                path.push(w);
                match s[end..].strip_prefix("::") {
                    Some(t) if !t.starts_with('{') => s = t,
                    _ => break,
                }
            }
            out.push(path);
        }
    }
    out
}

/// The import cycles between sibling modules of one crate: for each
/// edge a → b, the pair of siblings under their common parent.
fn cycles(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<(String, String)>> = BTreeMap::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let from = module_of(src, file);
        for mut to in references(&from, &code_of(&text)) {
            // The longest prefix that is a module file.
            while !to.is_empty() && !modules.contains(&to) {
                to.pop();
            }
            let k = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if k < from.len() && k < to.len() {
                edges
                    .entry(from[..k].to_vec())
                    .or_default()
                    .insert((from[k].clone(), to[k].clone()));
            }
        }
    }
    let mut found = Vec::new();
    for (parent, pairs) in edges {
        let nodes: BTreeSet<&String> = pairs.iter().flat_map(|(a, b)| [a, b]).collect();
        for node in nodes {
            // A node on a cycle reaches itself.
            let mut seen = BTreeSet::new();
            let mut stack = vec![node];
            let mut on_cycle = false;
            while let Some(n) = stack.pop() {
                for (a, b) in &pairs {
                    if a == n {
                        if b == node {
                            on_cycle = true;
                        }
                        if seen.insert(b) {
                            stack.push(b);
                        }
                    }
                }
            }
            if on_cycle {
                let reach: Vec<&str> = pairs
                    .iter()
                    .filter(|(a, _)| a == node)
                    .map(|(_, b)| b.as_str())
                    .collect();
                found.push(format!(
                    "{}: {}::{node} -> {}",
                    src.display(),
                    parent.join("::"),
                    reach.join(", ")
                ));
            }
        }
    }
    found
}

#[test]
fn no_source_file_is_over_700_lines_without_its_tests() {
    let mut long = Vec::new();
    for src in source_roots() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("read a source file");
            let lines = non_test_part(&text).lines().count();
            if lines > MAX_LINES {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these by concept (the limit is {MAX_LINES} lines before the unit tests):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let roots = source_roots();
    assert!(roots.len() >= 8, "found only {roots:?}");
    let found: Vec<String> = roots.iter().flat_map(|src| cycles(src)).collect();
    assert!(
        found.is_empty(),
        "module cycles (each module listed with the siblings it imports):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_cycle_finder_sees_a_loop_and_reads_paths() {
    let dir = std::env::temp_dir().join(format!("zs-house-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).expect("tempdir");
    std::fs::write(src.join("lib.rs"), "mod a; mod b;").expect("write");
    std::fs::write(src.join("a/mod.rs"), "use crate::b::Thing;\nmod x;").expect("write");
    std::fs::write(src.join("a/x.rs"), "use super::super::b;").expect("write");
    std::fs::write(src.join("b.rs"), "use crate::{a::Other, c};").expect("write");
    let found = cycles(&src);
    std::fs::write(src.join("b.rs"), "pub struct Thing;").expect("write");
    let after = cycles(&src);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(
        references(&["a".into(), "x".into()], "use super::super::b::C;"),
        vec![vec!["b".to_string(), "C".to_string()]]
    );
}
