//! `gate64 certs`: a throw-away lab PKI for IP-HTTPS (teredo-iphttps.md §2.5).
//!
//! Writes into one directory:
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca.key` | a self-signed CA ("gate64 lab CA"); clients pass `--ca ca.pem`, the server `client_ca` |
//! | `server.pem`, `server.key` | the server's leaf (EKU serverAuth), SANs = the given names and IPs |
//! | `client.pem`, `client.key` | a client leaf (EKU clientAuth), for `client_ca` deployments |
//!
//! `server.pem` holds the leaf only: clients trust `ca.pem` directly, so no chain is needed.
//! Keys are ECDSA P-256 in PKCS#8 PEM, written with mode 0600. Nothing here is meant for
//! production: the CA key sits next to the certificates.

use anyhow::{Context, Result, ensure};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Arguments of `gate64 certs`.
#[derive(clap::Args, Debug)]
pub struct CertsArgs {
    /// Directory to write into (created if missing; existing files are overwritten).
    #[arg(long)]
    pub out: PathBuf,
    /// DNS name for the server certificate (repeatable).
    #[arg(long = "server-name")]
    pub server_names: Vec<String>,
    /// IP address for the server certificate (repeatable).
    #[arg(long = "server-ip")]
    pub server_ips: Vec<IpAddr>,
}

/// Runs `gate64 certs`.
pub fn run(args: &CertsArgs) -> Result<()> {
    let (mut names, ips) = (args.server_names.clone(), args.server_ips.clone());
    if names.is_empty() && ips.is_empty() {
        names.push("localhost".to_owned());
    }
    generate(&args.out, &names, &ips)?;
    println!(
        "wrote ca.pem ca.key server.pem server.key client.pem client.key in {}",
        args.out.display()
    );
    Ok(())
}

/// Writes the lab CA, a server certificate for `names` and `ips`, and a client certificate
/// into `dir` (see the module docs for the file names).
pub fn generate(dir: &Path, names: &[String], ips: &[IpAddr]) -> Result<()> {
    ensure!(
        !names.is_empty() || !ips.is_empty(),
        "the server certificate needs at least one name or IP address"
    );
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;

    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "gate64 lab CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).context("signing the CA")?;
    let issuer = Issuer::new(ca, &ca_key);

    let mut server = CertificateParams::default();
    let cn = names
        .first()
        .cloned()
        .or_else(|| ips.first().map(ToString::to_string))
        .expect("checked above: a name or an IP");
    server.distinguished_name.push(DnType::CommonName, cn);
    for n in names {
        let dns = n
            .clone()
            .try_into()
            .with_context(|| format!("--server-name {n:?}: not a valid DNS name"))?;
        server.subject_alt_names.push(SanType::DnsName(dns));
    }
    server
        .subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.use_authority_key_identifier_extension = true;
    let server_key = KeyPair::generate().context("generating the server key")?;
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .context("signing the server certificate")?;

    let mut client = CertificateParams::default();
    client
        .distinguished_name
        .push(DnType::CommonName, "gate64 lab client");
    client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    client.use_authority_key_identifier_extension = true;
    let client_key = KeyPair::generate().context("generating the client key")?;
    let client_cert = client
        .signed_by(&client_key, &issuer)
        .context("signing the client certificate")?;

    write(dir, "ca.pem", &ca_cert.pem(), 0o644)?;
    write(dir, "ca.key", &ca_key.serialize_pem(), 0o600)?;
    write(dir, "server.pem", &server_cert.pem(), 0o644)?;
    write(dir, "server.key", &server_key.serialize_pem(), 0o600)?;
    write(dir, "client.pem", &client_cert.pem(), 0o644)?;
    write(dir, "client.key", &client_key.serialize_pem(), 0o600)?;
    Ok(())
}

/// Writes `contents` to `dir/name` with `mode` (also when the file already existed).
fn write(dir: &Path, name: &str, contents: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    // `mode` applies only to new files; an existing key file must not stay world-readable.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))?;
    f.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gate64-certs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn generated_files_load_as_server_and_client_configs() {
        let dir = temp_dir("load");
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        generate(&dir, &["gw.example.net".to_owned()], &[ip]).unwrap();
        let p = |f: &str| dir.join(f);
        gate64_io::tls::server_config(&p("server.pem"), &p("server.key"), None).unwrap();
        gate64_io::tls::server_config(&p("server.pem"), &p("server.key"), Some(&p("ca.pem")))
            .unwrap();
        gate64_io::tls::client_config(&p("ca.pem"), None).unwrap();
        gate64_io::tls::client_config(&p("ca.pem"), Some((&p("client.pem"), &p("client.key"))))
            .unwrap();
        for key in ["ca.key", "server.key", "client.key"] {
            let mode = std::fs::metadata(p(key)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A full handshake in memory: the client verifies the server for its name and IP, and the
    /// server (with `client_ca`) verifies the client certificate.
    #[test]
    fn handshake_with_client_certificate() {
        use rustls::pki_types::ServerName;
        let dir = temp_dir("hs");
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        generate(&dir, &["gw.example.net".to_owned()], &[ip]).unwrap();
        let p = |f: &str| dir.join(f);
        let scfg =
            gate64_io::tls::server_config(&p("server.pem"), &p("server.key"), Some(&p("ca.pem")))
                .unwrap();
        let ccfg =
            gate64_io::tls::client_config(&p("ca.pem"), Some((&p("client.pem"), &p("client.key"))))
                .unwrap();
        for name in [
            ServerName::try_from("gw.example.net").unwrap(),
            ServerName::IpAddress(ip.into()),
        ] {
            let mut c = rustls::ClientConnection::new(ccfg.clone(), name).unwrap();
            let mut s = rustls::ServerConnection::new(scfg.clone()).unwrap();
            for _ in 0..10 {
                let mut buf = Vec::new();
                while c.wants_write() {
                    c.write_tls(&mut buf).unwrap();
                }
                if !buf.is_empty() {
                    s.read_tls(&mut &buf[..]).unwrap();
                    s.process_new_packets().unwrap();
                }
                let mut buf = Vec::new();
                while s.wants_write() {
                    s.write_tls(&mut buf).unwrap();
                }
                if !buf.is_empty() {
                    c.read_tls(&mut &buf[..]).unwrap();
                    c.process_new_packets().unwrap();
                }
            }
            assert!(!c.is_handshaking() && !s.is_handshaking());
            assert!(s.peer_certificates().is_some_and(|c| !c.is_empty()));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
