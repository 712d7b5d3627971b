//! The documentation's links: every relative link and image in the
//! README, `docs/` and the crates' READMEs names a file that exists, and
//! every `#anchor` names a heading of its target (GitHub's slugs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// The Markdown files a reader reaches from the README.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "."] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if dir == "docs" && path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            } else if dir == "." && path.join("README.md").is_file() {
                files.push(path.join("README.md"));
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

/// GitHub's anchor for a heading's text: lower case, punctuation other
/// than `-` and `_` dropped, spaces as `-`.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated heading gets
/// `-1`, `-2`, … as on GitHub).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    let base = slug(&h);
                    let mut name = base.clone();
                    let mut n = 0;
                    while !out.insert(name.clone()) {
                        n += 1;
                        name = format!("{base}-{n}");
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The relative link and image targets of a Markdown text.
fn links(markdown: &str) -> Vec<String> {
    Parser::new(markdown)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .filter(|url| !url.contains("://") && !url.starts_with("mailto:"))
        .collect()
}

/// What is wrong with `url` as written in `doc`, if anything.
fn broken(doc: &Path, url: &str) -> Option<String> {
    let (file, anchor) = match url.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (url, None),
    };
    let target = if file.is_empty() {
        doc.to_path_buf()
    } else {
        doc.parent()?.join(file)
    };
    if !target.exists() {
        return Some(format!("{url}: no such file {}", target.display()));
    }
    let anchor = anchor?;
    if target.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&target).ok()?;
    (!anchors(&text).contains(anchor)).then(|| format!("{url}: no heading #{anchor}"))
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut checked = 0;
    let mut bad = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read a document");
        for url in links(&text) {
            checked += 1;
            if let Some(why) = broken(&doc, &url) {
                bad.push(format!("{}: {why}", doc.display()));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser reading the docs?"
    );
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_checker_finds_a_missing_file_and_a_missing_heading() {
    let doc = root().join("README.md");
    assert!(broken(&doc, "docs/no-such-file.md").is_some());
    assert!(broken(&doc, "#no-such-heading").is_some());
    assert!(broken(&doc, "#the-two-commands").is_none());
    assert_eq!(
        slug("`zerosplit bench`, latest full run"),
        "zerosplit-bench-latest-full-run"
    );
    let repeated = anchors("# A\n\n## A\n");
    assert!(repeated.contains("a") && repeated.contains("a-1"));
}

#[test]
fn the_readme_fits_on_a_screen_or_two() {
    let size = std::fs::metadata(root().join("README.md"))
        .expect("README")
        .len();
    assert!(
        size <= 20 * 1024,
        "README.md is {size} bytes; the limit is 20 KiB: move detail into docs/"
    );
}
