//! A certificate authority kept by Debian's `openssl ca` for the namespace tests: client
//! certificates with the subjects and extensions a test asks for, revocation in its database,
//! and `openssl ocsp` answering from it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, ensure};
use gate64_testkit::{Netns, Process, wait_until};

use crate::common::path_str;

/// A CA kept by `openssl ca` in `dir` (an ECDSA P-256 key, an `index.txt` database), which
/// issues client certificates, revokes them, and answers OCSP with `openssl ocsp`.
pub(crate) struct OpensslCa<'a> {
    ns: &'a Netns,
    pub(crate) dir: PathBuf,
}

impl<'a> OpensslCa<'a> {
    /// A new CA named `cn`, its files in `dir`, `openssl` run in `ns`.
    pub(crate) fn new(ns: &'a Netns, dir: PathBuf, cn: &str) -> Result<Self> {
        std::fs::create_dir_all(dir.join("issued"))?;
        std::fs::write(dir.join("index.txt"), "")?;
        std::fs::write(dir.join("serial"), "1000\n")?;
        std::fs::write(
            dir.join("openssl.cnf"),
            format!(
                "[ca]\ndefault_ca = lab\n[lab]\ndir = {dir}\ndatabase = $dir/index.txt\n\
                 serial = $dir/serial\nnew_certs_dir = $dir/issued\ncertificate = $dir/ca.pem\n\
                 private_key = $dir/ca.key\ndefault_md = sha256\ndefault_days = 30\n\
                 policy = any\nunique_subject = no\ncopy_extensions = none\n\
                 preserve = yes\n[any]\ncommonName = optional\norganizationName = optional\n",
                dir = dir.display()
            ),
        )?;
        let ca = OpensslCa { ns, dir };
        ca.run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &ca.path("ca.key")?,
            "-out",
            &ca.path("ca.pem")?,
            "-days",
            "30",
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ])?;
        Ok(ca)
    }

    fn path(&self, name: &str) -> Result<String> {
        Ok(path_str(&self.dir.join(name))?.to_owned())
    }

    fn run(&self, args: &[&str]) -> Result<()> {
        let mut argv = vec!["openssl"];
        argv.extend_from_slice(args);
        self.ns.exec_ok(&argv).map(drop)
    }

    /// A client certificate (`stem`.pem, `stem`.key) for the `openssl -subj` subject `subj`,
    /// with the DNS name `san` and, given `ocsp`, an AIA naming that OCSP responder URL.
    pub(crate) fn issue(
        &self,
        stem: &str,
        subject: (&str, &str),
        ocsp: Option<&str>,
    ) -> Result<(PathBuf, PathBuf)> {
        let (subj, san) = subject;
        self.issue_for(stem, (subj, &format!("DNS:{san}")), ocsp, "clientAuth")
    }

    /// [`OpensslCa::issue`] for a server (extended key usage serverAuth), without OCSP; `san`
    /// is the subjectAltName as `openssl` spells it (`DNS:name`, `IP:address`).
    pub(crate) fn issue_server(
        &self,
        stem: &str,
        subj: &str,
        san: &str,
    ) -> Result<(PathBuf, PathBuf)> {
        self.issue_for(stem, (subj, san), None, "serverAuth")
    }

    fn issue_for(
        &self,
        stem: &str,
        (subj, san): (&str, &str),
        ocsp: Option<&str>,
        eku: &str,
    ) -> Result<(PathBuf, PathBuf)> {
        let name = stem;
        let (cert, key, csr, ext) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
            self.dir.join(format!("{name}.csr")),
            self.dir.join(format!("{name}.ext")),
        );
        std::fs::write(
            &ext,
            format!(
                "keyUsage=critical,digitalSignature\nextendedKeyUsage={eku}\n\
                 subjectAltName={san}\n{aia}",
                aia = ocsp
                    .map(|url| format!("authorityInfoAccess=OCSP;URI:{url}\n"))
                    .unwrap_or_default()
            ),
        )?;
        self.run(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            path_str(&key)?,
            "-out",
            path_str(&csr)?,
            "-subj",
            subj,
        ])?;
        self.run(&[
            "ca",
            "-batch",
            "-config",
            &self.path("openssl.cnf")?,
            "-in",
            path_str(&csr)?,
            "-extfile",
            path_str(&ext)?,
            "-out",
            path_str(&cert)?,
        ])?;
        Ok((cert, key))
    }

    /// Revokes `cert` in the CA's database (what `openssl ocsp` answers from).
    pub(crate) fn revoke(&self, cert: &Path) -> Result<()> {
        self.run(&[
            "ca",
            "-config",
            &self.path("openssl.cnf")?,
            "-revoke",
            path_str(cert)?,
        ])
    }

    /// `openssl ocsp` answering for this CA on `port` of every address of `ns`, signing with
    /// the CA.
    pub(crate) fn responder(&self, ns: &Netns, port: u16) -> Result<Process> {
        let port_text = port.to_string();
        let p = ns.spawn(
            "openssl-ocsp",
            &[
                "openssl",
                "ocsp",
                "-index",
                &self.path("index.txt")?,
                "-port",
                &port_text,
                "-rsigner",
                &self.path("ca.pem")?,
                "-rkey",
                &self.path("ca.key")?,
                "-CA",
                &self.path("ca.pem")?,
                "-nmin",
                "5",
            ],
        )?;
        let up = wait_until(Duration::from_secs(10), || {
            ns.exec_ok(&["ss", "-Hntl", &format!("sport = :{port}")])
                .is_ok_and(|s| !s.trim().is_empty())
        });
        ensure!(up, "openssl ocsp did not listen on {port}");
        Ok(p)
    }
}
