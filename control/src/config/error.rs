//! Errors of loading and validating a configuration. Every error names the
//! dotted key it is about (`umem.frame_size`, `listen[1].port`) and, for
//! errors found while reading the file, where in the file it is.

use std::fmt;
use std::path::PathBuf;

/// One rule a configuration breaks: the key and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the key (`umem.frame_size`, `listen[0].port`).
    pub key: String,
    /// What is wrong and what would be right.
    pub message: String,
    /// Line and column (1-based) of the value in the text it was loaded
    /// from, when the key is written there (not for defaults).
    pub line_column: Option<(usize, usize)>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line_column {
            Some((line, column)) => write!(
                f,
                "{} (line {line}, column {column}): {}",
                self.key, self.message
            ),
            None => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// [`Config::validate`](super::Config::validate) found values that cannot
/// work together or are out of range. Holds every problem found, so an
/// operator can fix them in one go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {}", list(problems))]
pub struct InvalidConfig {
    /// The problems, in the order of the file's sections.
    pub problems: Vec<Problem>,
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl InvalidConfig {
    /// Whether one of the problems is about `key`.
    pub fn has_key(&self, key: &str) -> bool {
        self.problems.iter().any(|p| p.key == key)
    }

    /// The keys with problems.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.problems.iter().map(|p| p.key.as_str())
    }
}

/// Where in a configuration text something is: the file (or `<string>`)
/// and, when known, the line and column (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file path, or `<string>` for text given directly.
    pub origin: String,
    /// Line and column, 1-based.
    pub line_column: Option<(usize, usize)>,
}

impl Location {
    /// The location of byte `offset` in `text`.
    pub(crate) fn at(origin: &str, text: &str, offset: Option<usize>) -> Location {
        let line_column = offset.map(|off| {
            let before = &text.as_bytes()[..off.min(text.len())];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            let column = String::from_utf8_lossy(&before[line_start..])
                .chars()
                .count()
                + 1;
            (line, column)
        });
        Location {
            origin: origin.to_string(),
            line_column,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some((line, column)) = self.line_column {
            write!(f, ":{line}:{column}")?;
        }
        Ok(())
    }
}

/// Loading a configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("reading configuration file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML.
    #[error("{at}: TOML syntax error: {message}")]
    Syntax {
        /// Where.
        at: Location,
        /// The parser's description.
        message: String,
    },
    /// A key is unknown, or its value has the wrong type or spelling.
    #[error("{at}: key `{key}`: {message}")]
    Key {
        /// Where.
        at: Location,
        /// Dotted path of the key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The values parsed but break a rule.
    #[error("{origin}: {source}")]
    Invalid {
        /// The file path, or `<string>`.
        origin: String,
        /// The rules broken.
        #[source]
        source: InvalidConfig,
    },
}

impl LoadError {
    /// The dotted keys this error is about (empty for read and syntax errors).
    pub fn keys(&self) -> Vec<&str> {
        match self {
            LoadError::Read { .. } | LoadError::Syntax { .. } => Vec::new(),
            LoadError::Key { key, .. } => vec![key.as_str()],
            LoadError::Invalid { source, .. } => source.keys().collect(),
        }
    }
}
