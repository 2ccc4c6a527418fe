//! `gate64 ha`: the `[ha]` state sync of the running daemon, over its control socket.
//! `promote` takes over the SAs the peer synced (what SIGUSR1 does, with an answer);
//! `status` shows what is stored and when the peer was last heard.

use crate::terminal::printable;
use anyhow::{Result, bail};
use gate64_control::{HaState, Promoted, client};
use std::path::PathBuf;

/// `gate64 ha`'s arguments.
#[derive(clap::Args, Debug)]
pub struct HaArgs {
    #[command(subcommand)]
    command: HaCommand,
    /// The control socket; default `control.socket` of `--config`, else
    /// /run/gate64/control.sock.
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// The daemon's configuration file, to find its control socket.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum HaCommand {
    /// Take over now: install every IKE SA and child SA the peer synced (as SIGUSR1 does),
    /// and print what was installed. Exits 1 when the daemon has no `[ha]` or an SA could not
    /// be installed; nothing stored is not an error.
    Promote {
        /// Print the daemon's JSON answer instead.
        #[arg(long)]
        json: bool,
        /// Only the daemon of this process id takes over; another one answering on the
        /// socket refuses (nodes that share a file system, as network namespaces do, may
        /// reach each other's default socket).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// Show the sync channel: the peer's SAs stored here, when the peer last sent a message
    /// that authenticated, and what takeovers installed.
    Status {
        /// Print the daemon's JSON answer instead.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `gate64 ha`.
pub fn run(args: HaArgs) -> Result<()> {
    let socket = crate::socket::control_socket(args.socket, args.config)?;
    match args.command {
        HaCommand::Promote { json, pid } => {
            let answer = client::ha_promote(&socket, pid)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&answer)?);
            } else {
                print!("{}", render_promoted(&answer));
            }
            check_promoted(&answer)
        }
        HaCommand::Status { json } => {
            let state = client::ha_status(&socket)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&state)?);
            } else {
                print!("{}", render_state(&state));
            }
            match &state.error {
                Some(e) => bail!("{}", printable(e)),
                None => Ok(()),
            }
        }
    }
}

/// The takeover's outcome as the exit status: an error when the daemon refused or an SA
/// was not installed.
fn check_promoted(p: &Promoted) -> Result<()> {
    if let Some(e) = &p.error {
        bail!("the daemon refused: {}", printable(e));
    }
    if p.ike_failed + p.child_failed > 0 {
        bail!(
            "{} IKE SA(s) and {} child SA(s) not installed (the daemon's log says why)",
            p.ike_failed,
            p.child_failed
        );
    }
    Ok(())
}

fn render_promoted(p: &Promoted) -> String {
    if p.error.is_some() {
        return String::new();
    }
    let mut out = format!(
        "installed {} IKE SA(s) and {} child SA(s)",
        p.ike_installed, p.child_installed
    );
    if p.ike_failed + p.child_failed > 0 {
        out += &format!(
            "; {} IKE SA(s) and {} child SA(s) failed",
            p.ike_failed, p.child_failed
        );
    }
    if p.ike_installed + p.child_installed + p.ike_failed + p.child_failed == 0 {
        out += " (nothing was stored from the peer)";
    }
    out.push('\n');
    out
}

fn render_state(s: &HaState) -> String {
    if s.error.is_some() {
        return String::new();
    }
    let heard = match s.last_from_peer_secs {
        Some(secs) => format!("{secs:.1} s ago"),
        None => "never".to_owned(),
    };
    format!(
        "peer {}: last authentic message {}{}\n\
         stored: {} IKE SA(s), {} child SA(s)\n\
         taken over: {} SA(s) installed, {} failed, {} IKE SA(s) on demand\n",
        printable(s.peer.as_deref().unwrap_or("?")),
        heard,
        if s.peer_quiet { " (quiet)" } else { "" },
        s.stored_ike_sas,
        s.stored_child_sas,
        s.installed,
        s.install_failed,
        s.on_demand,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_or_a_failed_install_is_an_error_and_nothing_stored_is_not() {
        let nothing = Promoted::default();
        assert!(check_promoted(&nothing).is_ok());
        assert!(render_promoted(&nothing).contains("nothing was stored"));
        let some = Promoted {
            ike_installed: 1,
            child_installed: 2,
            ..Promoted::default()
        };
        assert!(check_promoted(&some).is_ok());
        assert_eq!(
            render_promoted(&some),
            "installed 1 IKE SA(s) and 2 child SA(s)\n"
        );
        let failed = Promoted {
            child_failed: 1,
            ..some
        };
        assert!(check_promoted(&failed).is_err());
        assert!(render_promoted(&failed).contains("1 child SA(s) failed"));
        let refused = Promoted::refused("no [ha] section");
        let e = check_promoted(&refused).unwrap_err().to_string();
        assert!(e.contains("no [ha] section"), "{e}");
    }

    #[test]
    fn the_state_shows_the_peer_escaped_and_when_it_was_heard() {
        let state = HaState {
            peer: Some("10.0.9.2:4501\x1b".to_owned()),
            stored_ike_sas: 3,
            stored_child_sas: 6,
            last_from_peer_secs: Some(4.25),
            peer_quiet: true,
            ..HaState::default()
        };
        let text = render_state(&state);
        assert!(
            text.starts_with("peer 10.0.9.2:4501\\1b: last authentic message 4.2 s ago (quiet)\n"),
            "{text}"
        );
        assert!(
            text.contains("stored: 3 IKE SA(s), 6 child SA(s)"),
            "{text}"
        );
    }
}
