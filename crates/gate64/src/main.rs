//! The gate64 binary: one CLI over the daemon (`gate64-daemon`), its admin commands
//! (`gate64-admin`), the Linux client (`gate64-client`) and the lab (`gate64-lab`).
#![forbid(unsafe_code)]

mod generate;

use clap::{CommandFactory, Parser, Subcommand};
use gate64_admin::{disconnect, ha, profile, sessions};
use gate64_client::connect;
use gate64_daemon::certs;
use gate64_lab::{bench, demo};
use std::path::PathBuf;
use std::process::ExitCode;

/// gate64: a remote-access concentrator (Teredo and IP-HTTPS clients with IPsec, NAT64 and
/// DNS64, GRE site-to-site).
#[derive(Parser)]
#[command(name = "gate64", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon from a TOML configuration file.
    Serve {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a configuration file: exit 0 when valid, 1 with the offending key otherwise.
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
    },
    /// The no-root lab: a short `bench capacity` (the real daemon, TUN and routing, emulated
    /// Teredo and IP-HTTPS clients with IPsec, NAT64/DNS64) in an unprivileged user namespace;
    /// prints the capacity table beside the reference's rows.
    Demo(demo::DemoArgs),
    /// Benchmarks that need root: `gate64 bench capacity` (the reference workload in network
    /// namespaces: the real daemon, Teredo and IP-HTTPS clients with IPsec, NAT64/DNS64).
    Bench(bench::BenchArgs),
    /// Write a lab CA, an IP-HTTPS server certificate and a client certificate (PEM).
    ///
    /// Also the IPsec set, eighteen files in all into --out (keys mode 0600, each certificate
    /// the leaf alone, ECDSA P-256 keys unless `--ipsec-key-type` says otherwise; for labs
    /// only: the CA keys sit beside the certificates):
    ///
    /// ca.pem, ca.key: the lab CA ("gate64 lab CA"): IP-HTTPS clients trust it
    /// (`gate64 connect --ca`), it is `iphttps.client_ca`, and IKE clients trust it for gate64.
    ///
    /// server.pem, server.key: the IP-HTTPS server certificate (serverAuth; the given names
    /// and IPs) for `iphttps.certificate` and `iphttps.private_key`.
    ///
    /// client.pem, client.key: an IP-HTTPS client certificate (clientAuth).
    ///
    /// ipsec.pem, ipsec.key: gate64's IKE certificate (the given names and IPs, and with
    /// --config the configuration's IKE endpoint) for `ipsec.certificate` and
    /// `ipsec.private_key`; ECDSA P-256, or RSA-2048 with `--ipsec-key-type rsa`.
    ///
    /// clients-ca.pem, clients-ca.key: the IPsec clients' CA, for `ipsec.ca` (issue more
    /// clients with its key).
    ///
    /// ipsec-client.pem, ipsec-client.key: an IKE client certificate (client1.gate64.lab).
    ///
    /// ipsec-client-expired.pem, ipsec-client-expired.key: valid only in 2020 (refused as
    /// expired).
    ///
    /// ipsec-client-otherca.pem, ipsec-client-otherca.key: from a CA nobody trusts (refused
    /// as unknown CA).
    ///
    /// ipsec-client-serveronly.pem, ipsec-client-serveronly.key: serverAuth alone (refused
    /// under `ipsec.client_eku = "strict"`).
    Certs(certs::CertsArgs),
    /// Write a client profile for IKEv2 straight to gate64 (`[ipsec] listen`): windows (a
    /// PowerShell script creating an Always On VPN device tunnel), apple (a .mobileconfig),
    /// android (a .sswan for the strongSwan app, and the built-in client's settings) or
    /// networkmanager (a .nmconnection for NetworkManager-strongswan).
    ///
    /// Its proposals are the strongest set the configuration's `[ipsec]` accepts that the
    /// client can propose (a configuration that leaves it none is refused, naming the key);
    /// gate64's identity is `ipsec.identity`, else the first subjectAltName of
    /// `ipsec.certificate`, else --server; the client trusts --ca for gate64.
    Profile(profile::ProfileArgs),
    /// Connect this host to a gate64 server as a client (IP-HTTPS or Teredo), with a TUN device.
    Connect(connect::ConnectArgs),
    /// End a client's IKE SAs and child SAs now (root; over the control socket): each client
    /// is sent a Delete. Prints what was removed; exits 1 when nothing matched.
    Disconnect(disconnect::DisconnectArgs),
    /// List the IPsec clients of the running daemon and their SAs (root; over the control
    /// socket), as `swanctl --list-sas` does.
    Status {
        /// Print the daemon's JSON snapshot instead, for scripts.
        #[arg(long)]
        json: bool,
        /// The control socket; default `control.socket` of `--config`, else
        /// /run/gate64/control.sock.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// The daemon's configuration file, to find its control socket.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// The `[ha]` state sync of the running daemon (root; over the control socket):
    /// `promote` takes over the SAs the peer synced (as SIGUSR1 does) and prints what was
    /// installed; `status` shows what is stored and when the peer was last heard.
    Ha(ha::HaArgs),
    /// Who was connected when: the session log (`[accounting] log`) as a table, one row per
    /// client session (identity, transport, outer address, duration, bytes each way, how it
    /// ended), or as JSON.
    Sessions(sessions::SessionsArgs),
    /// Write the manual pages (roff, section 8) of gate64 and of each subcommand into DIR,
    /// from this CLI's own definition (`scripts/package` runs it).
    #[command(hide = true)]
    GenerateMan {
        /// The directory to write `gate64.8`, `gate64-serve.8`, ... into.
        dir: PathBuf,
    },
    /// Write the completion script for SHELL into DIR (`scripts/package` runs it).
    #[command(hide = true)]
    GenerateCompletions {
        /// The shell.
        shell: clap_complete::Shell,
        /// The directory to write the script into.
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => gate64_daemon::serve(&config),
        Command::CheckConfig { file } => gate64_daemon::check_config(&file),
        Command::Demo(args) => demo::run(&args),
        Command::Bench(args) => bench::run(args),
        Command::Certs(args) => certs::run(&args),
        Command::Profile(args) => profile::run(&args),
        Command::Connect(args) => connect::run(args),
        Command::Status {
            json,
            socket,
            config,
        } => gate64_admin::status::run(json, socket, config),
        Command::Disconnect(args) => disconnect::run(args),
        Command::Ha(args) => ha::run(args),
        Command::Sessions(args) => sessions::run(&args),
        Command::GenerateMan { dir } => generate::man_pages(Cli::command(), &dir).map(print_paths),
        Command::GenerateCompletions { shell, dir } => {
            generate::completions(Cli::command(), shell, &dir).map(|p| print_paths(vec![p]))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gate64: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// One line per file written, for the script that asked.
fn print_paths(paths: Vec<PathBuf>) {
    for p in paths {
        println!("{}", p.display());
    }
}
