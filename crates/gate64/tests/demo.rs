//! `gate64 demo` end to end, without root: 20 emulated clients (the default mix: 14 Teredo,
//! 6 IP-HTTPS) qualify or connect, ping the corporate host and exchange traffic through the
//! daemon on loopback.

use std::process::Command;

#[test]
fn demo_small_population_succeeds_and_prints_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_gate64"))
        .args(["demo", "--clients", "20", "--seconds", "2"])
        .output()
        .expect("running gate64 demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "gate64 demo failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for column in [
        "clients",
        "Teredo",
        "IP-HTTPS",
        "corpnet Mbit/s",
        "internet Mbit/s",
        "CPU",
        "memory",
    ] {
        assert!(
            stdout.contains(column),
            "no `{column}` column in:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("reference: WS2012 DirectAccess"),
        "{stdout}"
    );
    assert!(
        stdout.contains("20/20"),
        "not every client qualified:\n{stdout}"
    );
    assert!(
        stdout.contains("14/14 qualified") && stdout.contains("6/6 connected"),
        "not every client of each transport came up:\n{stdout}"
    );
    assert!(stdout.contains("demo ok"), "{stdout}");
}
