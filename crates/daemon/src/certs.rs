//! `gate64 certs`: a throw-away lab PKI for IP-HTTPS (teredo-iphttps.md §2.5) and IKEv2.
//!
//! Writes into one directory:
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca.key` | a self-signed CA ("gate64 lab CA"); clients pass `--ca ca.pem`, the server `client_ca` |
//! | `server.pem`, `server.key` | the server's leaf (EKU serverAuth), SANs = the given names and IPs |
//! | `client.pem`, `client.key` | a client leaf (EKU clientAuth), for `client_ca` deployments |
//! | `ipsec.pem`, `ipsec.key` | gate64's IKE certificate (`[ipsec] certificate`/`private_key`), issued by `ca.pem`: SANs = the given names and IPs, and with `--config` the configuration's IKE endpoint; EKU serverAuth + ipsecIKE |
//! | `clients-ca.pem`, `clients-ca.key` | a second self-signed CA ("gate64 lab IPsec clients CA"), the one `[ipsec] ca` trusts |
//! | `ipsec-client.pem`, `ipsec-client.key` | an IKE client leaf from `clients-ca.pem`: DN and SAN `client1.gate64.lab`, EKU clientAuth + ipsecIKE |
//! | `ipsec-client-expired.pem`, `.key` | like `ipsec-client.pem` (`client-expired.gate64.lab`) but valid only in 2020: must be refused as expired |
//! | `ipsec-client-otherca.pem`, `.key` | like `ipsec-client.pem` (`client-otherca.gate64.lab`) but issued by a CA nobody trusts (its key is thrown away): must be refused as unknown CA |
//! | `ipsec-client-serveronly.pem`, `.key` | like `ipsec-client.pem` (`client-serveronly.gate64.lab`) but with EKU serverAuth alone, as a server's certificate has it: must be refused under `[ipsec] client_eku = "strict"` (the default) |
//!
//! IKE clients trust `ca.pem` to authenticate gate64; gate64 trusts `clients-ca.pem` for them.
//! The clients CA is a separate CA on purpose: `[ipsec] ca` then admits only certificates made
//! for IPsec clients, not the IP-HTTPS `client.pem` nor gate64's own certificates, which is how
//! a deployment with a machine-certificate CA looks. More client certificates can be issued
//! with `clients-ca.key` (e.g. strongSwan's `pki --issue --cacert clients-ca.pem --cakey
//! clients-ca.key`).
//!
//! Certificates hold the leaf only: peers trust the CAs directly, so no chain is needed.
//! Keys are ECDSA P-256 in PKCS#8 PEM, written with mode 0600. Nothing here is meant for
//! production: the CA keys sit next to the certificates.

use anyhow::{Context, Result, ensure};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SigningKey,
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
    /// DNS name for the server certificates, IP-HTTPS and IKE (repeatable).
    #[arg(long = "server-name")]
    pub server_names: Vec<String>,
    /// IP address for the server certificates, IP-HTTPS and IKE (repeatable).
    #[arg(long = "server-ip")]
    pub server_ips: Vec<IpAddr>,
    /// gate64's configuration file: its IKE endpoint (`ipsec.endpoint`, by default the first
    /// address of `ipsec.pool6`) goes into the IKE certificate as well, since clients ask for
    /// that address as gate64's identity. The files the configuration names need not exist
    /// yet.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Runs `gate64 certs`.
pub fn run(args: &CertsArgs) -> Result<()> {
    let (mut names, ips) = (args.server_names.clone(), args.server_ips.clone());
    if names.is_empty() && ips.is_empty() {
        names.push("localhost".to_owned());
    }
    let mut ike_ips = ips.clone();
    if let Some(file) = &args.config {
        let endpoint = ike_endpoint(file)?;
        if !ike_ips.contains(&endpoint) {
            ike_ips.push(endpoint);
        }
        println!(
            "ipsec.pem holds the IKE endpoint {endpoint} ({})",
            file.display()
        );
    }
    generate_with_ike_ips(&args.out, &names, &ips, &ike_ips)?;
    println!(
        "wrote ca.pem ca.key server.pem server.key client.pem client.key \
         ipsec.pem ipsec.key clients-ca.pem clients-ca.key ipsec-client.pem ipsec-client.key \
         ipsec-client-expired.pem ipsec-client-expired.key \
         ipsec-client-otherca.pem ipsec-client-otherca.key \
         ipsec-client-serveronly.pem ipsec-client-serveronly.key in {}",
        args.out.display()
    );
    Ok(())
}

/// The IKE endpoint of the configuration in `file`: `ipsec.endpoint`, or the first address of
/// `ipsec.pool6`. The configuration is parsed and validated, not its files: they may be the
/// ones about to be written.
fn ike_endpoint(file: &Path) -> Result<IpAddr> {
    let cfg = gate64_config::Config::load(file)?;
    ensure!(
        cfg.ipsec.endpoint.is_some() || cfg.ipsec.pool6.is_some(),
        "--config {}: neither ipsec.endpoint nor ipsec.pool6 is set, so there is no IKE \
         endpoint to put into ipsec.pem",
        file.display()
    );
    Ok(IpAddr::V6(cfg.ipsec_endpoint()))
}

/// Writes the lab CA, a server certificate for `names` and `ips`, a client certificate and the
/// IPsec set into `dir` (see the module docs for the file names).
pub fn generate(dir: &Path, names: &[String], ips: &[IpAddr]) -> Result<()> {
    generate_with_ike_ips(dir, names, ips, ips)
}

/// [`generate`], with `ike_ips` instead of `ips` in gate64's IKE certificate.
pub fn generate_with_ike_ips(
    dir: &Path,
    names: &[String],
    ips: &[IpAddr],
    ike_ips: &[IpAddr],
) -> Result<()> {
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
    generate_ipsec(dir, names, ike_ips, &issuer)
}

/// id-kp-ipsecIKE (RFC 4945 §5.1.3.12).
const EKU_IPSEC_IKE: [u64; 9] = [1, 3, 6, 1, 5, 5, 7, 3, 17];

/// The IPsec files of the module docs; `lab_ca` issues gate64's IKE certificate.
fn generate_ipsec(
    dir: &Path,
    names: &[String],
    ips: &[IpAddr],
    lab_ca: &Issuer<'_, impl SigningKey>,
) -> Result<()> {
    let mut server = ike_leaf(
        &names_and_ips_cn(names, ips),
        ExtendedKeyUsagePurpose::ServerAuth,
    );
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
    issue(dir, "ipsec", server, lab_ca)?;

    let (clients_ca, clients_ca_key) = self_signed_ca("gate64 lab IPsec clients CA")?;
    write(dir, "clients-ca.pem", &clients_ca.0, 0o644)?;
    write(
        dir,
        "clients-ca.key",
        &clients_ca_key.serialize_pem(),
        0o600,
    )?;
    let clients = Issuer::new(clients_ca.1, clients_ca_key);
    issue(
        dir,
        "ipsec-client",
        client_leaf("client1.gate64.lab")?,
        &clients,
    )?;

    let mut expired = client_leaf("client-expired.gate64.lab")?;
    expired.not_before = rcgen::date_time_ymd(2020, 1, 1);
    expired.not_after = rcgen::date_time_ymd(2021, 1, 1);
    issue(dir, "ipsec-client-expired", expired, &clients)?;

    let (other_ca, other_ca_key) = self_signed_ca("gate64 lab untrusted CA")?;
    let other = Issuer::new(other_ca.1, other_ca_key);
    let otherca = client_leaf("client-otherca.gate64.lab")?;
    issue(dir, "ipsec-client-otherca", otherca, &other)?;

    let mut server_only = client_leaf("client-serveronly.gate64.lab")?;
    server_only.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    issue(dir, "ipsec-client-serveronly", server_only, &clients)
}

/// The subject CN of the server certificates: the first name, else the first address.
fn names_and_ips_cn(names: &[String], ips: &[IpAddr]) -> String {
    names
        .first()
        .cloned()
        .or_else(|| ips.first().map(ToString::to_string))
        .unwrap_or_else(|| "gate64".to_owned())
}

/// An IKE leaf: CN `cn`, digitalSignature, EKU `purpose` + ipsecIKE (RFC 4945 §5.1.3.12; the
/// first for peers that look for TLS purposes, as strongSwan's `pki` writes them).
fn ike_leaf(cn: &str, purpose: ExtendedKeyUsagePurpose) -> CertificateParams {
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name.push(DnType::CommonName, cn);
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![
        purpose,
        ExtendedKeyUsagePurpose::Other(EKU_IPSEC_IKE.to_vec()),
    ];
    leaf.use_authority_key_identifier_extension = true;
    leaf
}

/// A client leaf whose DN and only SAN are `name`.
fn client_leaf(name: &str) -> Result<CertificateParams> {
    let mut leaf = ike_leaf(name, ExtendedKeyUsagePurpose::ClientAuth);
    let dns = name.to_owned().try_into().context("client DNS name")?;
    leaf.subject_alt_names.push(SanType::DnsName(dns));
    Ok(leaf)
}

/// A self-signed CA: (its PEM and parameters) and its key.
fn self_signed_ca(cn: &str) -> Result<((String, CertificateParams), KeyPair)> {
    let key = KeyPair::generate().with_context(|| format!("generating the key of {cn}"))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, cn);
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = ca
        .self_signed(&key)
        .with_context(|| format!("signing {cn}"))?;
    Ok(((cert.pem(), ca), key))
}

/// Issues `params` with a new key under `issuer` and writes `{stem}.pem` and `{stem}.key`.
fn issue(
    dir: &Path,
    stem: &str,
    params: CertificateParams,
    issuer: &Issuer<'_, impl SigningKey>,
) -> Result<()> {
    let key = KeyPair::generate().with_context(|| format!("generating the key of {stem}"))?;
    let cert = params
        .signed_by(&key, issuer)
        .with_context(|| format!("signing {stem}.pem"))?;
    write(dir, &format!("{stem}.pem"), &cert.pem(), 0o644)?;
    write(dir, &format!("{stem}.key"), &key.serialize_pem(), 0o600)
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
    use gate64_ike::auth::ClientEku::Strict;
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
        gate64_io::tls::server_config(
            &p("server.pem"),
            &p("server.key"),
            None,
            (&[], false),
            Strict,
        )
        .unwrap();
        gate64_io::tls::server_config(
            &p("server.pem"),
            &p("server.key"),
            Some(&p("ca.pem")),
            (&[], false),
            Strict,
        )
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
        let scfg = gate64_io::tls::server_config(
            &p("server.pem"),
            &p("server.key"),
            Some(&p("ca.pem")),
            (&[], false),
            Strict,
        )
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

    /// The IPsec set loads as IKE credentials and passes or fails gate64-ike's checks as its
    /// module docs say: gate64's certificate under `ca.pem`, clients under `clients-ca.pem`
    /// only, the expired and other-CA clients refused with their reasons.
    #[test]
    fn with_a_configuration_the_ike_certificate_holds_its_endpoint() {
        use gate64_ike::auth::{Credentials, Identity};
        let dir = temp_dir("config");
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("gate64.toml");
        let base = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n[corpnet]\n\
                    ipv6_prefixes = [\"2001:db8:100::/48\"]\naddress6 = \"2001:db8:100::1\"\n";
        // The files it names are the ones about to be written: they need not exist.
        let ipsec = "[ipsec]\ncertificate = \"/nonexistent/ipsec.pem\"\n\
                     private_key = \"/nonexistent/ipsec.key\"\nca = \"/nonexistent/ca.pem\"\n\
                     pool6 = \"fd00:c1::100/120\"\n";
        std::fs::write(&conf, format!("{base}{ipsec}")).unwrap();
        let args = CertsArgs {
            out: dir.join("out"),
            server_names: vec!["gw.gate64.lab".to_owned()],
            server_ips: vec![],
            config: Some(conf.clone()),
        };
        run(&args).unwrap();
        let read = |f: &str| std::fs::read(args.out.join(f)).unwrap();
        let ike = Credentials::from_pem(&read("ipsec.pem"), &read("ipsec.key")).unwrap();
        let endpoint: IpAddr = "fd00:c1::101".parse().unwrap();
        assert!(ike.holds_id(&Identity::ip(endpoint)));
        assert!(ike.holds_id(&Identity::fqdn("gw.gate64.lab")));
        let tls = Credentials::from_pem(&read("server.pem"), &read("server.key")).unwrap();
        assert!(
            !tls.holds_id(&Identity::ip(endpoint)),
            "only the IKE certificate"
        );

        // No pool and no endpoint: no IKE endpoint to add, said so.
        std::fs::write(&conf, base).unwrap();
        let e = run(&args).unwrap_err().to_string();
        assert!(e.contains("neither ipsec.endpoint nor ipsec.pool6"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ipsec_files_load_and_verify_as_ike_credentials() {
        use gate64_ike::auth::{
            AuthError, AuthMethod, Credentials, Identity, SigHash, TrustAnchors,
        };
        use std::time::SystemTime;
        let dir = temp_dir("ipsec");
        let ip: IpAddr = "2001:db8:ffff::1".parse().unwrap();
        generate(&dir, &["gw.gate64.lab".to_owned()], &[ip]).unwrap();
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        let creds = |stem: &str| {
            Credentials::from_pem(&read(&format!("{stem}.pem")), &read(&format!("{stem}.key")))
                .unwrap()
        };
        let lab_ca = TrustAnchors::from_pem(&read("ca.pem")).unwrap();
        let clients_ca = TrustAnchors::from_pem(&read("clients-ca.pem")).unwrap();
        let now = SystemTime::now();
        let octets = b"IKE_SA_INIT message | nonce | prf(SK_p, ID')";

        let server = creds("ipsec");
        let peer = lab_ca.verify_peer(server.leaf_der(), &[], now).unwrap();
        assert!(peer.matches_id(&Identity::ip(ip)));
        assert!(peer.matches_id(&Identity::fqdn("gw.gate64.lab")));
        assert!(peer.matches_id(&server.id()));
        let (method, data) = server
            .sign(AuthMethod::DigitalSignature, octets, &SigHash::ALL)
            .unwrap();
        assert_eq!(method, AuthMethod::DigitalSignature);
        peer.verify_auth(method, &data, octets).unwrap();

        let client = creds("ipsec-client");
        let peer = clients_ca.verify_peer(client.leaf_der(), &[], now).unwrap();
        assert_eq!(peer.subject(), "CN=client1.gate64.lab");
        assert!(peer.matches_id(&Identity::fqdn("client1.gate64.lab")));
        let (method, data) = client
            .sign(AuthMethod::EcdsaP256Sha256, octets, &[])
            .unwrap();
        peer.verify_auth(method, &data, octets).unwrap();

        let refused = |anchors: &TrustAnchors, file: &str| {
            let der = creds(file).leaf_der().to_vec();
            anchors.verify_peer(&der, &[], now).unwrap_err()
        };
        assert_eq!(
            refused(&clients_ca, "ipsec-client-expired"),
            AuthError::Expired
        );
        assert_eq!(
            refused(&clients_ca, "ipsec-client-otherca"),
            AuthError::UnknownCa
        );
        assert_eq!(
            refused(&lab_ca, "ipsec-client-otherca"),
            AuthError::UnknownCa
        );
        let strict = TrustAnchors::from_pem(&read("clients-ca.pem"))
            .unwrap()
            .for_clients(gate64_ike::auth::ClientEku::Strict);
        assert!(matches!(
            refused(&strict, "ipsec-client-serveronly"),
            AuthError::BadKeyUsage(_)
        ));
        strict
            .verify_peer(creds("ipsec-client").leaf_der(), &[], now)
            .unwrap();
        // `[ipsec] ca` admits only the clients CA's certificates.
        assert_eq!(refused(&clients_ca, "ipsec"), AuthError::UnknownCa);
        assert_eq!(refused(&clients_ca, "client"), AuthError::UnknownCa);
        for key in [
            "ipsec.key",
            "clients-ca.key",
            "ipsec-client.key",
            "ipsec-client-expired.key",
            "ipsec-client-otherca.key",
            "ipsec-client-serveronly.key",
        ] {
            let mode = std::fs::metadata(dir.join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
