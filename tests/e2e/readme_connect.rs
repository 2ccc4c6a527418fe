//! The README's `gate64 connect` lines, run as a new admin would run them, against a server
//! configured from docs/config.md's smallest valid file: both documents are read by the test,
//! so neither can drift from what works.
//!
//! - `netns_readme_connect_teredo_builds_two_stable_tunnels`: the README's `gate64 connect
//!   teredo` line;
//! - `netns_readme_connect_iphttps_builds_two_stable_tunnels`: its `gate64 connect iphttps`
//!   line.
//!
//! Each line is taken verbatim: its placeholders filled (the server's addresses, the URL, the
//! files `gate64 certs` wrote), its optional `[...]` parts left out (no traffic selectors, no
//! client certificate for IP-HTTPS), nothing added. The server's configuration is the
//! smallest valid file of docs/config.md with what the README's deployment section adds: IPsec
//! (`certificate`, `private_key`, `ca`, `pool6`, no tunnel prefixes), IP-HTTPS, NAT64 and
//! DNS64, the session log and the metrics listener. Asserted: both tunnels come up and stay up
//! for [`STABLE`] (two IKE SAs and two child SAs at every look, no negotiation after the
//! first two, no `replaced` session in the log, no refusal), and through them a corporate
//! host answers over IPv6 and an IPv4-only host by name, through DNS64 and NAT64.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{
    CLIENT_GW_V4, CORP_HOST, METRICS_ADDR, SERVER_V4, Topology, gate64_binary, wait_for,
};

use crate::common::{IPHTTPS_PREFIX, gate64_lines, netns_test, path_str, serve_iphttps};
use crate::nat64::{GATE_DNS, V4ONLY, nat64_dns64_toml, start_corp_dns};

/// How long both tunnels must stay up untouched.
const STABLE: Duration = Duration::from_secs(60);
/// How often they are looked at meanwhile.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// From the client's start to both tunnels up (Teredo qualification or the TLS link, then
/// two IKE negotiations).
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(40);
/// Inner addresses for the clients; the corporate router sends them back to gate64. Its first
/// address, `fd00:c1::1`, is gate64's IKE endpoint (the default), which the test reads from
/// `gate64 check-config` as the README says.
const POOL6: &str = "fd00:c1::/104";

#[test]
#[ignore = "netns: needs root"]
fn netns_readme_connect_teredo_builds_two_stable_tunnels() {
    netns_test(
        "netns_readme_connect_teredo_builds_two_stable_tunnels",
        Topology::builder().corp_ipv4(true),
        |topo| readme_connect(topo, "teredo"),
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_readme_connect_iphttps_builds_two_stable_tunnels() {
    netns_test(
        "netns_readme_connect_iphttps_builds_two_stable_tunnels",
        Topology::builder().corp_ipv4(true),
        |topo| readme_connect(topo, "iphttps"),
    );
}

fn repo_file(name: &str) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// The first ```toml block after "The smallest valid file:" in docs/config.md.
fn smallest_config(config_md: &str) -> Result<String> {
    let after = config_md
        .split_once("The smallest valid file:")
        .context("docs/config.md has no \"The smallest valid file:\"")?
        .1;
    let block = after
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .context("no ```toml block after \"The smallest valid file:\"")?
        .0;
    Ok(block.to_owned())
}

/// Words of `text` with every optional `[...]` group (which may span words) left out.
fn without_optional(text: &str) -> Vec<String> {
    let mut depth = 0usize;
    let mut words = Vec::new();
    for word in text.split_whitespace() {
        let opens = word.matches('[').count();
        let closes = word.matches(']').count();
        if depth == 0 && opens == 0 {
            words.push(word.to_owned());
        }
        depth = (depth + opens).saturating_sub(closes);
    }
    words
}

/// The README's `gate64 connect TRANSPORT` line as words (the program first), `IPSEC`
/// replaced by its definition (the README's `# IPSEC = ...` comment, up to its colon), the
/// optional parts left out.
fn readme_connect_words(readme: &str, transport: &str) -> Result<Vec<String>> {
    let start = format!("gate64 connect {transport} ");
    let line = readme
        .lines()
        .find(|l| l.starts_with(&start))
        .with_context(|| format!("README.md has no line starting {start:?}"))?;
    let command = line.split('#').next().unwrap_or(line);
    let lines: Vec<&str> = readme.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("# IPSEC ="))
        .context("README.md has no `# IPSEC = ...` line")?;
    let mut definition = String::new();
    for l in &lines[at..] {
        let text = l.trim_start().trim_start_matches('#');
        let text = text.split_once("IPSEC =").map_or(text, |(_, d)| d);
        match text.split_once(':') {
            Some((head, _)) => {
                definition.push_str(head);
                break;
            }
            None => {
                definition.push_str(text);
                definition.push(' ');
            }
        }
    }
    let mut words = Vec::new();
    for word in without_optional(command) {
        if word == "IPSEC" {
            words.extend(without_optional(&definition));
        } else {
            words.push(word);
        }
    }
    ensure!(
        words.iter().any(|w| w == "--ipsec-endpoint"),
        "the README's line did not expand to an IPsec client: {words:?}"
    );
    Ok(words)
}

/// Fills the README's placeholders: the server's addresses (`endpoint` for ADDR6) and the
/// files of `gate64 certs`.
fn fill(words: &[String], certs: &Path, bin: &Path, endpoint: &str) -> Result<Vec<String>> {
    let server_url = format!("https://{CLIENT_GW_V4}/IPHTTPS");
    words
        .iter()
        .map(|w| {
            Ok(match w.as_str() {
                "gate64" => path_str(bin)?.to_owned(),
                "IPV4" => SERVER_V4.to_string(),
                "ADDR6" => endpoint.to_owned(),
                "https://NAME/IPHTTPS" => server_url.clone(),
                file if file.ends_with(".pem") || file.ends_with(".key") => {
                    path_str(&certs.join(file))?.to_owned()
                }
                other if other.chars().any(|c| c.is_ascii_uppercase()) && !other.contains('-') => {
                    bail!("a placeholder this test does not know: {other}")
                }
                other => other.to_owned(),
            })
        })
        .collect()
}

/// `gate64 certs` for the IP-HTTPS address, with the server's configuration file `conf`
/// for the IKE endpoint (the files it names are the ones written here).
fn certs(topo: &Topology, bin: &Path, dir: &Path, conf: &Path) -> Result<()> {
    let ip = CLIENT_GW_V4.to_string();
    topo.srv.exec_ok(&[
        path_str(bin)?,
        "certs",
        "--out",
        path_str(dir)?,
        "--server-name",
        "gate64.lab.example",
        "--server-ip",
        &ip,
        "--config",
        path_str(conf)?,
    ])?;
    Ok(())
}

/// The IKE endpoint `gate64 check-config` prints for `conf`, which must pass without a
/// warning about the endpoint or the certificate.
fn checked_endpoint(topo: &Topology, bin: &Path, conf: &Path) -> Result<String> {
    let out = topo
        .srv
        .exec_ok(&[path_str(bin)?, "check-config", path_str(conf)?])?;
    ensure!(
        !out.lines().any(|l| l.starts_with("warning: ipsec.endpoint")
            || l.starts_with("warning: ipsec.certificate")),
        "check-config warns about the endpoint or the certificate:\n{out}"
    );
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("IKE endpoint: "))
        .with_context(|| format!("check-config printed no IKE endpoint:\n{out}"))?;
    Ok(line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

fn server_config(
    config_md: &str,
    certs: &Path,
    session_log: &Path,
    topo: &Topology,
) -> Result<String> {
    let file = |name: &str| -> Result<String> { Ok(format!("{:?}", path_str(&certs.join(name))?)) };
    let mut conf = smallest_config(config_md)?;
    conf.push_str(&format!(
        "\n[iphttps]\nenabled = true\ncertificate = {}\nprivate_key = {}\nprefix = \"{IPHTTPS_PREFIX}\"\n",
        file("server.pem")?,
        file("server.key")?,
    ));
    conf.push_str(&format!(
        "\n[ipsec]\ncertificate = {}\nprivate_key = {}\nca = {}\npool6 = \"{POOL6}\"\n",
        file("ipsec.pem")?,
        file("ipsec.key")?,
        file("clients-ca.pem")?,
    ));
    conf.push('\n');
    conf.push_str(&nat64_dns64_toml(&topo.srv.dir().join("bindings.jsonl")));
    conf.push_str(&format!(
        "\n[metrics]\nlisten = \"{METRICS_ADDR}\"\n\n[accounting]\nlog = {:?}\n",
        path_str(session_log)?
    ));
    Ok(conf)
}

fn readme_connect(topo: &Topology, transport: &str) -> Result<()> {
    let bin = gate64_binary()?;
    let (readme, config_md) = (repo_file("README.md")?, repo_file("docs/config.md")?);
    let words = readme_connect_words(&readme, transport)?;
    let certs = topo.srv.dir().join("readme-certs");
    let session_log = topo.srv.dir().join("sessions.jsonl");
    let conf = server_config(&config_md, &certs, &session_log, topo)?;
    let conf_file = topo.srv.write_file("readme-check.toml", &conf)?;
    self::certs(topo, &bin, &certs, &conf_file)?;
    let endpoint = checked_endpoint(topo, &bin, &conf_file)?;
    ensure!(
        endpoint == "fd00:c1::1",
        "check-config's endpoint {endpoint} is not the pool's first address"
    );
    let _dns = start_corp_dns(topo)?;
    let mut gate = serve_iphttps(topo, "readme.toml", &conf)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let argv = fill(&words, &certs, &bin, &endpoint)?;
    println!("the README's line, filled: {}", argv.join(" "));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut client = topo
        .cli
        .spawn(&format!("readme-connect-{transport}"), &argv)?;
    let t = Instant::now();
    let up = wait_for(ESTABLISH_TIMEOUT, || both_tunnels(topo).then_some(()));
    client.ensure_running()?;
    ensure!(
        up.is_some(),
        "gate64 did not count 2 IKE SAs and 2 child SAs within {ESTABLISH_TIMEOUT:?}\n{}\nclient \
         log:\n{}",
        gate64_lines(&topo.metrics()?),
        client.log()
    );
    println!("both tunnels up in {:.1} s", t.elapsed().as_secs_f64());
    let negotiated = topo
        .metrics()?
        .sum("gate64_ike_negotiations_total", &[("result", "ok")]);
    let watch = Instant::now();
    while watch.elapsed() < STABLE {
        std::thread::sleep(LOOK_EVERY);
        client.ensure_running()?;
        gate.ensure_running()?;
        ensure!(
            both_tunnels(topo),
            "after {:.0} s the tunnels were no longer two IKE SAs and two child SAs\n{}\nclient \
             log:\n{}",
            watch.elapsed().as_secs_f64(),
            gate64_lines(&topo.metrics()?),
            client.log()
        );
    }
    let m = topo.metrics()?;
    let ok = m.sum("gate64_ike_negotiations_total", &[("result", "ok")]);
    let refused = m.sum("gate64_ike_negotiations_total", &[]) - ok;
    ensure!(
        ok == negotiated && negotiated == 2.0 && refused == 0.0,
        "negotiations: {negotiated} when both tunnels were up, {ok} after {STABLE:?}, {refused} \
         not ok: the tunnels were built again\n{}",
        gate64_lines(&m)
    );
    let log = std::fs::read_to_string(&session_log)
        .with_context(|| format!("reading {}", session_log.display()))?;
    ensure!(
        !log.contains("\"replaced\"") && log.contains("\"connect\""),
        "the session log has a replaced session, or no connect:\n{log}"
    );
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping a corporate host through the tunnels")?;
    topo.cli.set_resolver(GATE_DNS.parse()?)?;
    topo.ping6_host_all(&topo.cli, V4ONLY, 3)
        .context("ping the IPv4-only host by name (DNS64, NAT64) through the tunnels")?;
    client.ensure_running()?;
    gate.ensure_running()?;
    Ok(())
}

/// gate64 holds two IKE SAs and two child SAs.
fn both_tunnels(topo: &Topology) -> bool {
    topo.metrics().is_ok_and(|m| {
        m.sum("gate64_ipsec_mmsa", &[]) == 2.0 && m.sum("gate64_ipsec_qmsa", &[]) == 2.0
    })
}

#[cfg(test)]
mod parsing {
    use super::*;

    #[test]
    fn optional_groups_are_left_out_even_across_words() {
        assert_eq!(
            without_optional("a --ca ca.pem [--client-cert C --client-key K] IPSEC [--x Y]"),
            ["a", "--ca", "ca.pem", "IPSEC"]
        );
    }

    #[test]
    fn the_readme_lines_expand_to_ipsec_clients() {
        let readme = repo_file("README.md").expect("README.md");
        for transport in ["teredo", "iphttps"] {
            let words = readme_connect_words(&readme, transport).expect("the README's line");
            assert_eq!(words[..3], ["gate64", "connect", transport]);
            assert!(
                !words.iter().any(|w| w.contains('[') || w == "IPSEC"),
                "{words:?}"
            );
        }
        smallest_config(&repo_file("docs/config.md").expect("config.md")).expect("block");
    }
}
