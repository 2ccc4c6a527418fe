//! [`ConfigError`]: why a configuration was refused, naming the key, the value and the reason;
//! and the helpers every section builds one with.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a configuration was refused. `Display` names the key (or the file for I/O errors and
/// the line for TOML syntax errors), the offending value when there is one, and the reason.
/// An I/O error's own text is part of that reason, once: it is not also the
/// [`source`](std::error::Error::source), which a chain printer (`anyhow`'s `{:#}`) would print
/// a second time; [`ConfigError::io_error`] hands it out.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub(crate) file: Option<PathBuf>,
    pub(crate) kind: ErrorKind,
    pub(crate) key: Option<String>,
    pub(crate) value: Option<String>,
    pub(crate) reason: String,
    pub(crate) source: Option<Arc<std::io::Error>>,
}

/// The class of a [`ConfigError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration file, or a file it names (see [`Config::check_files`](crate::Config::check_files)), could not be
    /// read.
    Io,
    /// The text is not valid TOML.
    Syntax,
    /// A section or key that gate64 does not know.
    UnknownKey,
    /// A required key is absent.
    MissingKey,
    /// A value has the wrong type or is out of its type's range (e.g. a string for a port).
    WrongType,
    /// A value of the right type that breaks a rule (range, address class, name syntax).
    InvalidValue,
}

impl ConfigError {
    /// The class of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The dotted key path, e.g. `teredo.server_addresses`; `None` for syntax errors and for
    /// I/O errors about the configuration file itself.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The offending value as written in TOML (strings quoted), when there is one.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// Why the value or file was refused.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The file the error is about, when it came from [`Config::load`](crate::Config::load).
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The I/O error behind an [`ErrorKind::Io`] error, when there was one (a file that is
    /// not a regular file has none). Its text is already in the reason.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.source.as_deref()
    }
}

impl ConfigError {
    pub(crate) fn new(
        kind: ErrorKind,
        key: &str,
        value: Option<String>,
        reason: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: None,
            kind,
            key: Some(key.to_owned()),
            value,
            reason: reason.into(),
            source: None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            if self.kind == ErrorKind::Io && self.key.is_none() {
                return write!(
                    f,
                    "cannot read the configuration file {}: {}",
                    file.display(),
                    self.reason
                );
            }
            write!(f, "{}: ", file.display())?;
        }
        let key = self.key.as_deref().unwrap_or("");
        match (self.kind, &self.value) {
            (ErrorKind::Io, _) if self.key.is_none() => {
                write!(f, "cannot read the configuration file: {}", self.reason)
            }
            // The reason names the file: `ipsec.certificate: cannot read /etc/x.pem: ...`.
            (ErrorKind::Io, _) => write!(f, "{key}: {}", self.reason),
            (ErrorKind::Syntax, _) => write!(f, "invalid TOML: {}", self.reason),
            (ErrorKind::UnknownKey, _) => write!(f, "unknown key `{key}`: {}", self.reason),
            (ErrorKind::MissingKey, _) => {
                write!(f, "missing required key `{key}`: {}", self.reason)
            }
            (_, Some(value)) => write!(f, "`{key}` = {value}: {}", self.reason),
            (_, None) => write!(f, "`{key}`: {}", self.reason),
        }
    }
}

/// No `source`: an I/O error's text is in the reason already ([`ConfigError::io_error`]).
impl std::error::Error for ConfigError {}

pub(crate) fn syntax_error(input: &str, e: &toml::de::Error) -> ConfigError {
    let mut message = e.message().trim_end().replace('\n', "; ");
    if let Some(word) = e.span().and_then(|span| input.get(span)) {
        let word = word.trim();
        let boolean_like = ["yes", "no", "on", "off", "True", "False", "TRUE", "FALSE"];
        if boolean_like.contains(&word) {
            message.push_str(&format!(
                "; `{word}` is not a TOML value: a boolean key expects true or false"
            ));
        }
    }
    let reason = match e.span() {
        Some(span) => {
            let (line, column) = line_column(input, span.start);
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    };
    ConfigError {
        file: None,
        kind: ErrorKind::Syntax,
        key: None,
        value: None,
        reason,
        source: None,
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
pub(crate) fn line_column(input: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(input.len());
    while !input.is_char_boundary(at) {
        at -= 1;
    }
    let before = &input[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Checks that `path` (the value of `key`) is a regular file this process can open for reading.
pub(crate) fn check_readable_file(key: &str, path: &Path) -> Result<(), ConfigError> {
    let io_error = |reason: String, source: Option<std::io::Error>| ConfigError {
        file: None,
        kind: ErrorKind::Io,
        key: Some(key.to_owned()),
        value: Some(quote(&path.to_string_lossy())),
        reason,
        source: source.map(Arc::new),
    };
    let cannot_read =
        |e: std::io::Error| io_error(format!("cannot read {}: {e}", path.display()), Some(e));
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    let meta = file.metadata().map_err(cannot_read)?;
    if !meta.is_file() {
        return Err(io_error(
            format!(
                "{} is not a regular file; give the path of a PEM file",
                path.display()
            ),
            None,
        ));
    }
    Ok(())
}

pub(crate) fn missing(key: &str, reason: &str) -> ConfigError {
    ConfigError::new(ErrorKind::MissingKey, key, None, reason)
}

pub(crate) fn invalid(
    key: &str,
    value: impl fmt::Display,
    reason: impl Into<String>,
) -> ConfigError {
    ConfigError::new(
        ErrorKind::InvalidValue,
        key,
        Some(value.to_string()),
        reason,
    )
}

/// A string as TOML writes it, quotes and escapes included.
pub(crate) fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod boolean_hint {
    #[test]
    fn a_bare_yes_names_the_boolean_type() {
        let input = "enabled = yes\n";
        let Err(e) = toml::from_str::<toml::Table>(input) else {
            panic!("a bare word parsed");
        };
        let reason = super::syntax_error(input, &e).to_string();
        assert!(reason.contains("expects true or false"), "{reason}");
        assert!(reason.contains("`yes`"), "{reason}");
    }
}
