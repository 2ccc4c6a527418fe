//! `[control]`: the local control socket `gate64 status` talks to.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{invalid, quote};
use crate::{Config, ConfigError, defaults};

/// `[control]`: the Unix control socket (root only, mode 0600), created before the privilege
/// drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// Path of the socket; its directory is created (mode 0700) when missing.
    pub socket: PathBuf,
}

impl Default for Control {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(defaults::CONTROL_SOCKET),
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawControl {
    socket: Option<PathBuf>,
}

impl RawControl {
    pub(crate) fn build(self) -> Control {
        Control {
            socket: self
                .socket
                .unwrap_or_else(|| PathBuf::from(defaults::CONTROL_SOCKET)),
        }
    }
}

/// Longest path a Unix socket address holds (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

impl Config {
    pub(crate) fn validate_control(&self) -> Result<(), ConfigError> {
        let path = &self.control.socket;
        let value = quote(&path.to_string_lossy());
        if !path.is_absolute() {
            return Err(invalid(
                "control.socket",
                value,
                "must be an absolute path, e.g. \"/run/gate64/control.sock\"",
            ));
        }
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(invalid(
                "control.socket",
                value,
                format!("is {len} bytes; a Unix socket path holds at most {MAX_SOCKET_PATH}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    const BASE: &str = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
        [corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\naddress6 = \"2001:db8:100::1\"\n";

    #[test]
    fn default_path_and_checks() {
        let c = Config::from_toml_str(BASE).unwrap();
        assert_eq!(c.control.socket.to_str(), Some("/run/gate64/control.sock"));
        let c =
            Config::from_toml_str(&format!("{BASE}[control]\nsocket = \"/tmp/g.sock\"\n")).unwrap();
        assert_eq!(c.control.socket.to_str(), Some("/tmp/g.sock"));
        for (path, needle) in [
            ("g.sock", "absolute"),
            (&*format!("/{}", "a".repeat(120)), "at most"),
        ] {
            let text = format!("{BASE}[control]\nsocket = \"{path}\"\n");
            let e = Config::from_toml_str(&text).expect_err(&text);
            assert_eq!(e.key(), Some("control.socket"), "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
    }
}
