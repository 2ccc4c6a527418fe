//! Which keys a running daemon can take from a new file (SIGHUP) and which need a restart.
//!
//! A key is live when the daemon reads it again after start: the IP-HTTPS certificate, key and
//! client CA and CRLs (new connections get them; connections up keep theirs), the IKE
//! certificate, key and CA and the RFC 4739 policy (new IKE SAs get them; IKE SAs up keep
//! theirs), the ESP suites (`ipsec.esp_proposals` and `ipsec.iphttps_integrity_only`: new
//! child SAs, rekeys included, choose from them; child SAs up keep theirs), the tunnel rules (`ipsec.tunnel_rule`: new IKE SAs
//! get them; IKE SAs up keep their tunnel), the IKE CRLs (new IKE SAs are checked against them), the log
//! filter, the security step's switch (`ipsec.require`), the binding and session logs' paths, the
//! IP-HTTPS connection caps (at once and per source), its ClientHello and write deadlines and
//! its queue budget. Every
//! other key shaped something built once at start (the TUN device, its routes, sockets and
//! listeners, worker threads, tables sized or sharded from limits, the Teredo addresses a
//! client's address is made of) and needs a restart; a reload that changes one is refused as
//! a whole and names it. A key this list does not know (one added later) counts as needing a
//! restart, so nothing is ever silently left unapplied.

use crate::Config;

/// The keys a reload applies without a restart (`docs/config.md`, "Reloading").
pub const LIVE_KEYS: &[&str] = &[
    "log.level",
    "iphttps.certificate",
    "iphttps.private_key",
    "iphttps.client_ca",
    "iphttps.client_crls",
    "ipsec.require",
    "ipsec.certificate",
    "ipsec.private_key",
    "ipsec.ca",
    "ipsec.user_ca",
    "ipsec.crls",
    "ipsec.crl_expired",
    "ipsec.crl_refresh_secs",
    "ipsec.intranet_second_auth",
    "ipsec.client_eku",
    "ipsec.identity",
    "ipsec.rsa_pss",
    "ipsec.unique_ids",
    "ipsec.reauth_secs",
    "ipsec.esp_proposals",
    "ipsec.iphttps_integrity_only",
    "ipsec.tunnel_rule",
    "ipsec.ocsp",
    "ipsec.ocsp_url",
    "ipsec.ocsp_max_age_secs",
    "nat64.binding_log",
    "accounting.log",
    "limits.max_iphttps_connections",
    "iphttps.max_handshakes_per_source",
    "iphttps.max_handshakes_per_network",
    "iphttps.max_connections_per_source",
    "iphttps.client_hello_timeout_secs",
    "iphttps.write_timeout_secs",
    "iphttps.queue_budget_bytes",
];

/// Appends `section.field` for every listed field that differs; when the sections differ in
/// a field not listed, appends `[section]` instead, read as "a key of this section".
macro_rules! diff {
    ($out:ident, $old:expr, $new:expr, $section:literal, [$($field:ident),* $(,)?]) => {{
        let before = $out.len();
        $(
            if $old.$field != $new.$field {
                $out.push(concat!($section, ".", stringify!($field)).to_owned());
            }
        )*
        if $out.len() == before && $old != $new {
            $out.push(concat!("[", $section, "]").to_owned());
        }
    }};
}

impl Config {
    /// The keys whose values differ between this (running) configuration and `new`, as
    /// `section.key`, or `[section]` for a difference in a key not known here.
    pub fn changed_keys(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let (a, b) = (self, new);
        diff!(
            out,
            a.server,
            b.server,
            "server",
            [workers, tls_threads, user, group]
        );
        diff!(
            out,
            a.teredo,
            b.teredo,
            "teredo",
            [enabled, server_addresses, port, relay, lab_allow_loopback]
        );
        diff!(
            out,
            a.iphttps,
            b.iphttps,
            "iphttps",
            [
                enabled,
                listen,
                path,
                certificate,
                private_key,
                client_ca,
                client_crls,
                prefix,
                idle_timeout_secs,
                ra_interval_secs,
                send_queue_bytes,
                queue_budget_bytes,
                write_timeout_secs,
                client_hello_timeout_secs,
                max_handshakes_per_source,
                max_handshakes_per_network,
                max_connections_per_source
            ]
        );
        diff!(
            out,
            a.corpnet,
            b.corpnet,
            "corpnet",
            [
                tun,
                ipv6_prefixes,
                ipv4_prefixes,
                address6,
                mtu,
                manage_routes,
                tun_napi
            ]
        );
        diff!(
            out,
            a.ipsec,
            b.ipsec,
            "ipsec",
            [
                require,
                certificate,
                private_key,
                ca,
                user_ca,
                crls,
                crl_expired,
                crl_refresh_secs,
                endpoint,
                pool6,
                pool4,
                infrastructure_prefixes4,
                intranet_prefixes4,
                infrastructure_prefixes,
                intranet_prefixes,
                half_open_cookie_threshold,
                max_half_open_per_source,
                max_half_open_bytes,
                max_ike_sas,
                max_ike_sas_per_identity,
                max_child_sas_per_ike_sa,
                auth_threads,
                ike_packets_per_source_per_sec,
                listen,
                child_lifetime_secs,
                dpd_secs,
                reauth_secs,
                ocsp,
                ocsp_url,
                ocsp_max_age_secs,
                intranet_second_auth,
                client_eku,
                identity,
                unique_ids,
                rsa_pss,
                dns,
                dns_domains,
                esp_proposals,
                iphttps_integrity_only,
                legacy_proposals,
                ike_proposals,
                tunnel_rule,
                eap_radius,
                authorize_certificates,
                qcd_secret_file
            ]
        );
        diff!(
            out,
            a.nat64,
            b.nat64,
            "nat64",
            [
                enabled,
                prefix,
                allow_private_ipv4,
                pool4,
                ports,
                udp_timeout_secs,
                tcp_established_timeout_secs,
                tcp_transitory_timeout_secs,
                icmp_timeout_secs,
                filtering,
                ipv4_mtu,
                max_sessions,
                route_prefix,
                binding_log
            ]
        );
        diff!(
            out,
            a.dns64,
            b.dns64,
            "dns64",
            [
                enabled,
                listen,
                serve_on_corp_address,
                upstream,
                exclude,
                timeout_ms,
                cache_entries
            ]
        );
        diff!(
            out,
            a.metrics,
            b.metrics,
            "metrics",
            [listen, allowed_hosts]
        );
        diff!(
            out,
            a.limits,
            b.limits,
            "limits",
            [
                rs_per_source_per_sec,
                rs_burst,
                max_teredo_peers,
                relay_queue_packets,
                peer_idle_timeout_secs,
                max_tls_handshakes,
                max_iphttps_connections,
                tls_handshake_timeout_secs
            ]
        );
        diff!(out, a.log, b.log, "log", [level, format]);
        // `[[gre.tunnel]]`, `[[gre.tenant]]`: each tunnel's socket and each tenant's TUN
        // device and routes are made at start.
        if a.gre.tunnels != b.gre.tunnels {
            out.push("gre.tunnel".to_owned());
        }
        if a.gre.tenants != b.gre.tenants {
            out.push("gre.tenant".to_owned());
        }
        diff!(out, a.control, b.control, "control", [socket]);
        diff!(
            out,
            a.accounting,
            b.accounting,
            "accounting",
            [log, radius, interim_secs, nas_identifier, dae]
        );
        // `[ha]`: the sync socket, the node ids and the channel keys are made at start.
        match (&a.ha, &b.ha) {
            (Some(x), Some(y)) => diff!(
                out,
                x,
                y,
                "ha",
                [
                    node_id,
                    peer_node_id,
                    listen,
                    peer,
                    secret_file,
                    peer_pool6,
                    peer_pool4,
                    peer_iphttps_prefix
                ]
            ),
            (x, y) if x != y => out.push("ha".to_owned()),
            _ => {}
        }
        // The policies are resolved once at start (what a Filter-Id names).
        if a.policy != b.policy {
            out.push("policy".to_owned());
        }
        // `ipsec.dns` is one key in the file, split by family when built.
        if a.ipsec.dns4 != b.ipsec.dns4 && !out.iter().any(|k| k == "ipsec.dns") {
            let only_dns4 = crate::Ipsec {
                dns4: b.ipsec.dns4.clone(),
                ..a.ipsec.clone()
            } == b.ipsec;
            if only_dns4 {
                out.retain(|k| k != "[ipsec]");
            }
            out.push("ipsec.dns".to_owned());
        }
        out
    }

    /// Of [`Config::changed_keys`], those a reload cannot apply: the daemon must be restarted
    /// for them. Empty when `new` can be applied live.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<String> {
        self.changed_keys(new)
            .into_iter()
            .filter(|key| !self.is_live_change(new, key))
            .collect()
    }

    fn is_live_change(&self, new: &Config, key: &str) -> bool {
        match key {
            // Turning the binding log on or off changes what the NAT64 tables record; only a
            // new path (logrotate's other way) is live.
            "nat64.binding_log" => {
                self.nat64.binding_log.is_some() && new.nat64.binding_log.is_some()
            }
            // Likewise the session log: a new path is live, turning it on or off is not.
            "accounting.log" => self.accounting.log.is_some() && new.accounting.log.is_some(),
            // New IKE credentials go to the running responder; configuring IPsec, or removing
            // it, starts or stops the responder and its sockets.
            "ipsec.certificate" | "ipsec.private_key" | "ipsec.ca" => {
                self.ipsec.configured() && new.ipsec.configured()
            }
            _ => LIVE_KEYS.contains(&key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
[corpnet]
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
[iphttps]
enabled = true
certificate = "/etc/gate64/a.pem"
private_key = "/etc/gate64/a.key"
prefix = "2001:db8:1::/48"
[ipsec]
certificate = "/etc/gate64/ipsec.pem"
private_key = "/etc/gate64/ipsec.key"
ca = "/etc/gate64/clients-ca.pem"
pool6 = "fd00:c1::/120"
[nat64]
pool4 = ["198.51.100.0/30"]
binding_log = "/var/log/gate64/bindings.jsonl"
"#;

    fn with(extra: &str) -> Config {
        // A later line for the same section key would be a TOML error; the extra text adds
        // new sections or keys to sections BASE does not end with.
        Config::from_toml_str(&format!("{BASE}{extra}")).expect("valid test configuration")
    }

    fn edited(from: &str, to: &str) -> Config {
        assert!(BASE.contains(from), "{from}");
        Config::from_toml_str(&BASE.replace(from, to)).expect("valid test configuration")
    }

    #[test]
    fn same_file_changes_nothing() {
        let a = with("");
        assert!(a.changed_keys(&with("")).is_empty());
        assert!(a.restart_only_changes(&with("")).is_empty());
    }

    #[test]
    fn certificates_log_level_security_switch_ike_credentials_and_connection_cap_are_live() {
        let a = with("");
        let text = BASE
            .replace(
                "clients-ca.pem\"",
                "clients-ca-2.pem\"\nrequire = false\nintranet_second_auth = \"required\"",
            )
            .replace("ipsec.pem", "ipsec-2.pem")
            .replace("ipsec.key", "ipsec-2.key")
            .replace("/a.pem", "/b.pem")
            .replace("/a.key", "/b.key\"\nclient_ca = \"/etc/gate64/ca.pem")
            .replace("bindings.jsonl", "bindings-2.jsonl")
            + "[log]\nlevel = \"debug\"\n[limits]\nmax_iphttps_connections = 7\n";
        let b = Config::from_toml_str(&text).expect("valid");
        let changed = a.changed_keys(&b);
        assert_eq!(
            changed,
            [
                "iphttps.certificate",
                "iphttps.private_key",
                "iphttps.client_ca",
                "ipsec.require",
                "ipsec.certificate",
                "ipsec.private_key",
                "ipsec.ca",
                "ipsec.intranet_second_auth",
                "nat64.binding_log",
                "limits.max_iphttps_connections",
                "log.level",
            ]
        );
        assert!(a.restart_only_changes(&b).is_empty(), "{changed:?}");
    }

    const GRE_TUNNEL: &str = "[[gre.tunnel]]\nname = \"site2\"\nlocal = \"203.0.113.1\"\n\
                              remote = \"203.0.113.2\"\nkey = 42\nroutes = [\"172.16.0.0/24\"]\n";

    #[test]
    fn gre_tunnels_and_tenants_need_a_restart() {
        let none = with("");
        let one = with(GRE_TUNNEL);
        // The first tunnel brings the `default` tenant with it.
        assert_eq!(none.changed_keys(&one), ["gre.tunnel", "gre.tenant"]);
        assert_eq!(
            none.restart_only_changes(&one),
            ["gre.tunnel", "gre.tenant"]
        );
        assert_eq!(one.changed_keys(&none), ["gre.tunnel", "gre.tenant"]);
        let rekeyed = with(&GRE_TUNNEL.replace("key = 42", "key = 43"));
        assert_eq!(one.changed_keys(&rekeyed), ["gre.tunnel"]);
        assert_eq!(one.restart_only_changes(&rekeyed), ["gre.tunnel"]);
        assert!(one.changed_keys(&with(GRE_TUNNEL)).is_empty());
    }

    #[test]
    fn tunnel_rules_are_live() {
        let a = with("");
        let b = edited(
            "pool6 = \"fd00:c1::/120\"",
            "pool6 = \"fd00:c1::/120\"\n[[ipsec.tunnel_rule]]\ntunnel = \"infrastructure\"\n\
             ca = \"/etc/gate64/device-ca.pem\"",
        );
        assert_eq!(a.changed_keys(&b), ["ipsec.tunnel_rule"]);
        assert!(a.restart_only_changes(&b).is_empty());
    }

    #[test]
    fn eap_radius_servers_need_a_restart() {
        let a = with("");
        let b = edited(
            "pool6 = \"fd00:c1::/120\"",
            "pool6 = \"fd00:c1::/120\"\n[[ipsec.eap_radius]]\nserver = \"10.0.0.5:1812\"\n\
             secret_file = \"/etc/gate64/eap.secret\"",
        );
        assert_eq!(a.changed_keys(&b), ["ipsec.eap_radius"]);
        assert_eq!(a.restart_only_changes(&b), ["ipsec.eap_radius"]);
    }

    #[test]
    fn the_iphttps_limits_deadlines_and_queue_budget_are_live() {
        let a = with("");
        let b = edited(
            "prefix = \"2001:db8:1::/48\"",
            "prefix = \"2001:db8:1::/48\"\nmax_handshakes_per_source = 3\n\
             max_connections_per_source = 5\nclient_hello_timeout_secs = 3\n\
             write_timeout_secs = 10\nqueue_budget_bytes = 8388608",
        );
        assert_eq!(
            a.changed_keys(&b),
            [
                "iphttps.queue_budget_bytes",
                "iphttps.write_timeout_secs",
                "iphttps.client_hello_timeout_secs",
                "iphttps.max_handshakes_per_source",
                "iphttps.max_connections_per_source",
            ]
        );
        assert!(a.restart_only_changes(&b).is_empty());
        // The per-connection queue bound is sized into each queue at link-up: restart.
        let c = edited(
            "prefix = \"2001:db8:1::/48\"",
            "prefix = \"2001:db8:1::/48\"\nsend_queue_bytes = 65536",
        );
        assert_eq!(a.restart_only_changes(&c), ["iphttps.send_queue_bytes"]);
    }

    #[test]
    fn keys_built_into_the_running_daemon_need_a_restart() {
        let a = with("");
        for (from, to, key) in [
            ("192.0.2.2\"]", "192.0.2.3\"]", "teredo.server_addresses"),
            ("2001:db8:1::/48", "2001:db8:2::/48", "iphttps.prefix"),
            ("198.51.100.0/30", "198.51.100.4/30", "nat64.pool4"),
            ("fd00:c1::/120", "fd00:c1::/121", "ipsec.pool6"),
            (
                "clients-ca.pem\"",
                "clients-ca.pem\"\nendpoint = \"2001:db8:100::2\"",
                "ipsec.endpoint",
            ),
            (
                "clients-ca.pem\"",
                "clients-ca.pem\"\nlisten = [\"192.0.2.10\"]",
                "ipsec.listen",
            ),
            (
                "2001:db8:100::/48\"]",
                "2001:db8:100::/48\", \"fd00::/64\"]",
                "corpnet.ipv6_prefixes",
            ),
        ] {
            assert_eq!(a.restart_only_changes(&edited(from, to)), [key], "{key}");
        }
        for (extra, key) in [
            ("[server]\nworkers = 3\n", "server.workers"),
            (
                "[limits]\nmax_teredo_peers = 5\n",
                "limits.max_teredo_peers",
            ),
            ("[log]\nformat = \"json\"\n", "log.format"),
            ("[metrics]\nlisten = \"127.0.0.1:9999\"\n", "metrics.listen"),
        ] {
            assert_eq!(a.restart_only_changes(&with(extra)), [key], "{key}");
        }
        // A live key beside a restart-only one: the reload as a whole is refused by the
        // caller, which names only the restart-only key.
        let both = with("[log]\nlevel = \"debug\"\n[server]\nworkers = 3\n");
        assert_eq!(a.changed_keys(&both), ["server.workers", "log.level"]);
        assert_eq!(a.restart_only_changes(&both), ["server.workers"]);
    }

    #[test]
    fn configuring_or_removing_ipsec_needs_a_restart() {
        let on = with("");
        let off = edited(
            "[ipsec]\ncertificate = \"/etc/gate64/ipsec.pem\"\nprivate_key = \"/etc/gate64/ipsec.key\"\nca = \"/etc/gate64/clients-ca.pem\"\npool6 = \"fd00:c1::/120\"\n",
            "",
        );
        let keys = [
            "ipsec.certificate",
            "ipsec.private_key",
            "ipsec.ca",
            "ipsec.pool6",
        ];
        assert_eq!(on.restart_only_changes(&off), keys);
        assert_eq!(off.restart_only_changes(&on), keys);
    }

    #[test]
    fn turning_the_binding_log_on_or_off_needs_a_restart() {
        let on = with("");
        let off = edited("binding_log = \"/var/log/gate64/bindings.jsonl\"\n", "");
        assert_eq!(on.restart_only_changes(&off), ["nat64.binding_log"]);
        assert_eq!(off.restart_only_changes(&on), ["nat64.binding_log"]);
    }

    #[test]
    fn the_session_log_path_is_live_turning_it_on_or_off_is_not() {
        let off = with("");
        let on = with("[accounting]\nlog = \"/var/log/gate64/sessions.jsonl\"\n");
        let moved = with("[accounting]\nlog = \"/var/log/gate64/s2.jsonl\"\n");
        assert_eq!(off.restart_only_changes(&on), ["accounting.log"]);
        assert_eq!(on.restart_only_changes(&off), ["accounting.log"]);
        assert_eq!(on.changed_keys(&moved), ["accounting.log"]);
        assert!(on.restart_only_changes(&moved).is_empty());
    }
}
