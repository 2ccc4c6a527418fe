//! `[accounting]`: the session log (who was connected, from where, for how long, with how
//! many bytes).

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::invalid;
use crate::{Config, ConfigError};

/// `[accounting]`: session accounting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Write one JSON line per client connect, tunnel up or down, disconnect (with its
    /// duration and bytes) and refused authentication here. `None`: off.
    pub log: Option<PathBuf>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccounting {
    log: Option<PathBuf>,
}

impl RawAccounting {
    pub(crate) fn build(self) -> Accounting {
        Accounting { log: self.log }
    }
}

impl Config {
    /// A relative path would land wherever the daemon happened to be started from; and a
    /// session is an IKE SA's, so without `[ipsec]` the log would stay empty.
    pub(crate) fn validate_accounting(&self) -> Result<(), ConfigError> {
        let Some(log) = &self.accounting.log else {
            return Ok(());
        };
        let value = crate::error::quote(&log.display().to_string());
        if !log.is_absolute() {
            return Err(invalid(
                "accounting.log",
                value,
                "must be an absolute path, e.g. \"/var/log/gate64/sessions.jsonl\"",
            ));
        }
        if !self.ipsec.configured() {
            return Err(invalid(
                "accounting.log",
                value,
                "sessions are accounted per IKE SA: configure [ipsec] (certificate, private_key, \
                 ca) or remove accounting.log",
            ));
        }
        Ok(())
    }
}

/// What an `[accounting]` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    match path {
        "accounting.log" => Some("a file path in quotes, e.g. \"/var/log/gate64/sessions.jsonl\""),
        _ => None,
    }
}
