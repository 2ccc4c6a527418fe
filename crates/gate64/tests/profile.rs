//! `gate64 profile` as a person runs it: certificates from `gate64 certs`, a configuration,
//! and each profile read back by the parser its client uses in spirit: the `.mobileconfig`
//! by Python's plistlib (Apple's XML plist), the `.sswan` as JSON, the `.nmconnection` by
//! Python's configparser (the keyfile is an INI file), the Windows script's ProfileXML by
//! Python's XML parser.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gate64(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gate64"))
        .args(args)
        .output()
        .expect("running gate64")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gate64-profile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Checks one profile with Python and prints `key=value` lines of what it found; exits 1
/// naming what is missing.
const CHECK: &str = r#"
import base64, configparser, json, plistlib, re, sys, xml.etree.ElementTree as ET
kind, path, ca_pem = sys.argv[1:4]
pem = open(ca_pem).read()
ca_der = base64.b64decode("".join(pem.split("-----")[2].split()))
UUID = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-4[0-9A-Fa-f]{3}-[89ABab][0-9A-Fa-f]{3}-[0-9A-Fa-f]{12}$")
def need(d, keys, where):
    for k in keys:
        if k not in d:
            sys.exit(f"{where}: {k} missing")
if kind == "apple":
    top = plistlib.load(open(path, "rb"))
    need(top, ["PayloadType", "PayloadVersion", "PayloadIdentifier", "PayloadUUID", "PayloadDisplayName", "PayloadContent"], "top")
    assert top["PayloadType"] == "Configuration"
    uuids = [top["PayloadUUID"]] + [p["PayloadUUID"] for p in top["PayloadContent"]]
    assert all(UUID.match(u) for u in uuids) and len(set(uuids)) == len(uuids), uuids
    vpn = [p for p in top["PayloadContent"] if p["PayloadType"] == "com.apple.vpn.managed"][0]
    need(vpn, ["PayloadVersion", "PayloadIdentifier", "UserDefinedName", "VPNType", "IKEv2"], "vpn")
    assert vpn["VPNType"] == "IKEv2"
    ike = vpn["IKEv2"]
    need(ike, ["RemoteAddress", "RemoteIdentifier", "AuthenticationMethod", "ServerCertificateIssuerCommonName",
               "IKESecurityAssociationParameters", "ChildSecurityAssociationParameters"], "IKEv2")
    assert ike["AuthenticationMethod"] == "Certificate"
    for sa in ["IKESecurityAssociationParameters", "ChildSecurityAssociationParameters"]:
        need(ike[sa], ["EncryptionAlgorithm", "IntegrityAlgorithm", "DiffieHellmanGroup", "LifeTimeInMinutes"], sa)
    root = [p for p in top["PayloadContent"] if p["PayloadType"] == "com.apple.security.root"][0]
    assert root["PayloadContent"] == ca_der
    p = ike["IKESecurityAssociationParameters"]
    print(f"remote={ike['RemoteAddress']}\nid={ike['RemoteIdentifier']}\nissuer={ike['ServerCertificateIssuerCommonName']}")
    print(f"ike={p['EncryptionAlgorithm']}/{p['IntegrityAlgorithm']}/{p['DiffieHellmanGroup']}")
    print(f"esp={ike['ChildSecurityAssociationParameters']['EncryptionAlgorithm']}")
elif kind == "android":
    j = json.load(open(path))
    need(j, ["uuid", "name", "type", "remote", "ike-proposal", "esp-proposal"], "sswan")
    need(j["remote"], ["addr", "id", "cert"], "remote")
    assert UUID.match(j["uuid"]) and j["type"] == "ikev2-cert"
    assert base64.b64decode(j["remote"]["cert"]) == ca_der
    print(f"remote={j['remote']['addr']}\nid={j['remote']['id']}\nike={j['ike-proposal']}\nesp={j['esp-proposal']}")
elif kind == "networkmanager":
    c = configparser.ConfigParser(interpolation=None)
    c.read(path)
    need(c, ["connection", "vpn", "ipv4", "ipv6"], "keyfile")
    need(c["connection"], ["id", "uuid", "type"], "[connection]")
    assert c["connection"]["type"] == "vpn" and UUID.match(c["connection"]["uuid"])
    v = c["vpn"]
    need(v, ["service-type", "address", "certificate", "method", "usercert", "userkey", "virtual", "proposal", "ike", "esp", "remote-identity"], "[vpn]")
    assert v["service-type"] == "org.freedesktop.NetworkManager.strongswan"
    assert v["method"] == "cert" and v["proposal"] == "yes" and v["virtual"] == "yes"
    print(f"remote={v['address']}\nid={v['remote-identity']}\nike={v['ike']}\nesp={v['esp']}")
elif kind == "windows":
    script = open(path).read()
    xml = script.split("@'\n")[1].split("'@")[0]
    root = ET.fromstring(xml)
    cs = root.find("NativeProfile/CryptographySuite")
    vals = [cs.find(n).text for n in ["AuthenticationTransformConstants", "CipherTransformConstants",
            "EncryptionMethod", "IntegrityCheckMethod", "DHGroup", "PfsGroup"]]
    assert root.find("DeviceTunnel").text == "true"
    assert root.find("NativeProfile/Authentication/MachineMethod").text == "Certificate"
    assert base64.b64encode(ca_der).decode() in script
    print(f"remote={root.find('NativeProfile/Servers').text}\nsuite={'/'.join(vals)}")
"#;

/// One test's certificates, configuration and profiles, in a directory of its own that goes
/// when the test ends, passed or failed.
struct Lab {
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lab {
    fn new(name: &str) -> Lab {
        let dir = temp_dir(name);
        let certs = dir.join("certs");
        let out = gate64(&[
            "certs",
            "--out",
            certs.to_str().expect("UTF-8"),
            "--server-name",
            "vpn.example.com",
            "--server-ip",
            "192.0.2.10",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        Lab { dir }
    }

    /// Writes a configuration with `ipsec_keys` added to `[ipsec]`.
    fn config(&self, ipsec_keys: &str) -> PathBuf {
        let c = self.dir.join("certs");
        let body = format!(
            "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
             [corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\naddress6 = \"2001:db8:100::1\"\n\
             [nat64]\npool4 = [\"198.51.100.0/30\"]\nprefix = \"2001:db8:64::/96\"\n\
             [ipsec]\ncertificate = \"{}\"\nprivate_key = \"{}\"\nca = \"{}\"\n\
             pool6 = \"fd00:c1::100/120\"\nlisten = [\"192.0.2.10\"]\n{ipsec_keys}",
            c.join("ipsec.pem").display(),
            c.join("ipsec.key").display(),
            c.join("clients-ca.pem").display(),
        );
        let path = self.dir.join("gate64.toml");
        std::fs::write(&path, body).expect("config");
        path
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("certs/ca.pem")
    }

    /// `gate64 profile KIND` into a file, checked by [`CHECK`]: its `key=value` lines.
    fn profile(&self, kind: &str, config: &Path, server: &str) -> Vec<String> {
        let out_file = self.dir.join(format!("profile-{kind}"));
        let (cert, key) = (self.dir.join("client.pem"), self.dir.join("client.key"));
        let out = gate64(&[
            "profile",
            kind,
            "--config",
            config.to_str().expect("UTF-8"),
            "--server",
            server,
            "--ca",
            self.ca().to_str().expect("UTF-8"),
            "--out",
            out_file.to_str().expect("UTF-8"),
            "--client-cert",
            cert.to_str().expect("UTF-8"),
            "--client-key",
            key.to_str().expect("UTF-8"),
        ]);
        assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
        let check = Command::new("python3")
            .args(["-c", CHECK, kind])
            .arg(&out_file)
            .arg(self.ca())
            .output()
            .expect("python3 runs");
        assert!(
            check.status.success(),
            "{kind}: {}\n{}",
            text(&check.stderr),
            std::fs::read_to_string(&out_file).unwrap_or_default()
        );
        text(&check.stdout).lines().map(String::from).collect()
    }
}

#[test]
fn every_profile_parses_with_the_keys_its_client_needs() {
    let lab = Lab::new("parse");
    let config = lab.config("");
    // gate64's identity is the first subjectAltName of ipsec.pem; the CA is gate64 certs' CA.
    assert_eq!(
        lab.profile("apple", &config, "vpn.example.com"),
        [
            "remote=vpn.example.com",
            "id=vpn.example.com",
            "issuer=gate64 lab CA",
            "ike=AES-256-GCM/SHA2-256/19",
            "esp=AES-256-GCM"
        ]
    );
    assert_eq!(
        lab.profile("android", &config, "192.0.2.10"),
        [
            "remote=192.0.2.10",
            "id=vpn.example.com",
            "ike=aes256gcm16-prfsha256-ecp256",
            "esp=aes256gcm16"
        ]
    );
    assert_eq!(
        lab.profile("networkmanager", &config, "vpn.example.com"),
        [
            "remote=vpn.example.com",
            "id=vpn.example.com",
            "ike=aes256gcm16-prfsha256-ecp256",
            "esp=aes256gcm16"
        ]
    );
    assert_eq!(
        lab.profile("windows", &config, "vpn.example.com"),
        [
            "remote=vpn.example.com",
            "suite=GCMAES256/GCMAES256/AES_GCM_256/SHA256/ECP256/None"
        ]
    );
}

#[test]
fn the_configuration_decides_proposals_and_identity() {
    let lab = Lab::new("narrow");
    let config = lab.config(
        "identity = \"192.0.2.10\"\nike_proposals = [\"aes256-sha256-modp2048\"]\n\
         esp_proposals = [\"aes256-sha256\"]\n",
    );
    assert_eq!(
        lab.profile("apple", &config, "192.0.2.10")[1..],
        [
            "id=192.0.2.10",
            "issuer=gate64 lab CA",
            "ike=AES-256/SHA2-256/14",
            "esp=AES-256"
        ]
    );
    assert_eq!(
        lab.profile("android", &config, "192.0.2.10")[1..],
        [
            "id=192.0.2.10",
            "ike=aes256-sha256-prfsha256-modp2048",
            "esp=aes256-sha256"
        ]
    );
    assert_eq!(
        lab.profile("windows", &config, "192.0.2.10")[1],
        "suite=SHA256128/AES256/AES256/SHA256/Group14/None"
    );
}

#[test]
fn a_configuration_windows_cannot_meet_is_refused_naming_the_key() {
    let lab = Lab::new("refuse");
    let config = lab.config("ike_proposals = [\"aes256gcm16-prfsha256-curve25519\"]\n");
    let out = gate64(&[
        "profile",
        "windows",
        "--config",
        config.to_str().expect("UTF-8"),
        "--server",
        "vpn.example.com",
        "--ca",
        lab.ca().to_str().expect("UTF-8"),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("ipsec.ike_proposals") && err.contains("Windows"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    // Apple can propose Curve25519.
    assert_eq!(
        lab.profile("apple", &config, "vpn.example.com")[3],
        "ike=AES-256-GCM/SHA2-256/31"
    );
}

#[test]
fn a_pkcs12_identity_is_embedded_and_referenced() {
    let lab = Lab::new("pkcs12");
    let config = lab.config("");
    let p12 = lab.dir.join("client.p12");
    let bytes: Vec<u8> = (0u8..=255).collect();
    std::fs::write(&p12, &bytes).expect("p12");
    let run = |kind: &str| {
        let out = gate64(&[
            "profile",
            kind,
            "--config",
            config.to_str().expect("UTF-8"),
            "--server",
            "vpn.example.com",
            "--ca",
            lab.ca().to_str().expect("UTF-8"),
            "--pkcs12",
            p12.to_str().expect("UTF-8"),
            "--local-id",
            "client1.gate64.lab",
        ]);
        assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
        out.stdout
    };
    let plist = run("apple");
    let script = r#"
import plistlib, sys
top = plistlib.loads(sys.stdin.buffer.read())
vpn = [p for p in top["PayloadContent"] if p["PayloadType"] == "com.apple.vpn.managed"][0]
p12 = [p for p in top["PayloadContent"] if p["PayloadType"] == "com.apple.security.pkcs12"][0]
assert vpn["IKEv2"]["PayloadCertificateUUID"] == p12["PayloadUUID"]
assert vpn["IKEv2"]["LocalIdentifier"] == "client1.gate64.lab"
assert p12["PayloadContent"] == bytes(range(256))
print("ok")
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), &plist).expect("write");
    let out = child.wait_with_output().expect("python3");
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let sswan: serde_json::Value = serde_json::from_slice(&run("android")).expect("JSON");
    assert_eq!(sswan["local"]["id"], "client1.gate64.lab");
    let p12_b64 = sswan["local"]["p12"].as_str().expect("local.p12");
    assert!(p12_b64.starts_with("AAECAwQFBgcICQoL"), "{p12_b64}");
    assert!(p12_b64.ends_with("+/w=="), "{p12_b64}");
}
