//! `[log]`: the log filter and format.

use serde::Deserialize;

use crate::error::{invalid, quote};
use crate::{Config, ConfigError, defaults};

/// `[log]`: logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// A `tracing` EnvFilter directive, e.g. `info` or `info,gate64_teredo=debug`.
    pub level: String,
    /// Output format.
    pub format: LogFormat,
}

/// `log.format`: how log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable text (`"text"`), the default.
    #[default]
    Text,
    /// One JSON object per line (`"json"`).
    Json,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            level: defaults::LOG_LEVEL.to_owned(),
            format: LogFormat::Text,
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLog {
    level: Option<String>,
    format: Option<LogFormat>,
}

impl RawLog {
    pub(crate) fn build(self) -> Log {
        Log {
            level: self.level.unwrap_or_else(|| defaults::LOG_LEVEL.to_owned()),
            format: self.format.unwrap_or_default(),
        }
    }
}

impl Config {
    pub(crate) fn validate_log(&self) -> Result<(), ConfigError> {
        let level = &self.log.level;
        if level.is_empty() {
            return Err(invalid(
                "log.level",
                "\"\"",
                "must not be empty; use e.g. \"info\"",
            ));
        }
        if let Some(c) = level
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "_=,:.-".contains(*c)))
        {
            return Err(invalid(
                "log.level",
                quote(level),
                format!(
                    "character {:?} is not allowed; a directive is made of letters, digits \
                     and _ = , : . - (e.g. \"info,gate64_teredo=debug\")",
                    c
                ),
            ));
        }
        Ok(())
    }
}
