//! The manual pages and shell completions of the package (`scripts/package`), generated from
//! the CLI definition itself, so they document exactly the flags the binary accepts.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The manual section of every page: gate64 is an administrator's daemon and tool, as
/// strongSwan's ipsec(8) and Miredo's miredo(8) are.
pub const MAN_SECTION: &str = "8";

/// Writes `gate64.8` and one page per visible subcommand, nested ones included
/// (`gate64-serve.8`, `gate64-bench-capacity.8`, ...) into `dir`; returns their paths.
/// Hidden subcommands (these generators) get no page.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let version = cmd.get_version().unwrap_or_default().to_owned();
    let source = format!("gate64 {version}");
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives every subcommand its display name (`gate64-serve`), the page's name.
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, dir, &source, &mut written)?;
    Ok(written)
}

fn write_pages(
    cmd: &clap::Command,
    dir: &Path,
    source: &str,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    let page = clap_mangen::Man::new(cmd.clone())
        .section(MAN_SECTION)
        .source(source)
        .manual("gate64 Manual");
    let path = page
        .generate_to(dir)
        .with_context(|| format!("writing the page of `{}`", cmd.get_name()))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, source, written)?;
    }
    Ok(())
}

/// Writes the completion script for `shell` into `dir` under the name that shell's
/// completion directory expects (`gate64.bash` for bash, `_gate64` for zsh); returns its path.
/// Hidden subcommands are not offered.
pub fn completions(cmd: clap::Command, shell: clap_complete::Shell, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = without_hidden(&cmd);
    clap_complete::generate_to(shell, &mut cmd, "gate64", dir)
        .with_context(|| format!("writing the {shell} completions into {}", dir.display()))
}

/// `cmd` without its hidden subcommands: clap_complete offers every subcommand it is given.
/// (The top-level command has no arguments of its own besides the generated help and
/// version.)
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    let visible = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    let mut out = clap::Command::new("gate64").version(env!("CARGO_PKG_VERSION"));
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    out.subcommand_required(cmd.is_subcommand_required_set())
        .subcommands(visible)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gate64-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// One page per visible subcommand, named as `man gate64-<sub>` finds it, none for the
    /// hidden generators; each page is roff that names its command and its flags.
    #[test]
    fn a_page_per_visible_subcommand() {
        let dir = scratch("man");
        let pages = man_pages(crate::Cli::command(), &dir).expect("pages written");
        let mut names: Vec<String> = pages
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        names.sort();
        for expected in [
            "gate64.8",
            "gate64-serve.8",
            "gate64-check-config.8",
            "gate64-status.8",
            "gate64-disconnect.8",
            "gate64-ha.8",
            "gate64-ha-promote.8",
            "gate64-certs.8",
            "gate64-connect.8",
            "gate64-demo.8",
            "gate64-bench.8",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
        assert!(!names.iter().any(|n| n.contains("generate")), "{names:?}");
        let serve = std::fs::read_to_string(dir.join("gate64-serve.8")).expect("read");
        assert!(serve.starts_with(".ie"), "roff: {serve}");
        assert!(serve.contains(".TH gate64-serve 8"), "{serve}");
        assert!(serve.contains("\\-\\-config"), "{serve}");
        let top = std::fs::read_to_string(dir.join("gate64.8")).expect("read");
        assert!(top.contains("gate64\\-check\\-config(8)"), "{top}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn completions_name_the_subcommands() {
        let dir = scratch("completions");
        for (shell, file) in [
            (clap_complete::Shell::Bash, "gate64.bash"),
            (clap_complete::Shell::Zsh, "_gate64"),
        ] {
            let path = completions(crate::Cli::command(), shell, &dir).expect("written");
            assert_eq!(path, dir.join(file));
            let text = std::fs::read_to_string(&path).expect("read");
            assert!(text.contains("check-config"), "{shell}: {text}");
            assert!(text.contains("--config"), "{shell}: {text}");
            assert!(!text.contains("generate-"), "{shell}: {text}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
