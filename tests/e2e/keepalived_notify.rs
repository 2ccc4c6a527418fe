//! `config/keepalived/gate64-notify.sh` without keepalived or root: the script runs with a
//! stand-in for gate64 (a shell script that records SIGUSR1 and SIGTERM, and exits at once
//! when its config says `bad`) for each mode and VRRP state, and what it did is checked
//! against its documented table: started, kept, signalled or stopped, exit status, log line.
//! (keepalived driving the script with the real gate64: `failover.rs`, `ha_sync.rs`.)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory with the stand-in binary and a config file; removed on drop.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("gate64-notify-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch directory");
        let fake = format!(
            "#!/bin/sh\n\
             echo \"$*\" >>{dir}/calls\n\
             case $1 in ha) echo \"error: unrecognized subcommand 'ha'\" >&2; exit 2 ;; esac\n\
             case $(cat \"$3\") in *bad*) echo 'config error' >&2; exit 1 ;; esac\n\
             trap 'echo usr1 >>{dir}/signals' USR1\n\
             trap 'echo term >>{dir}/signals; exit 0' TERM\n\
             while :; do sleep 0.05; done\n",
            dir = dir.display()
        );
        let bin = dir.join("gate64");
        fs::write(&bin, fake).expect("stand-in");
        Command::new("chmod")
            .arg("+x")
            .arg(&bin)
            .status()
            .expect("chmod");
        fs::write(dir.join("gate64.toml"), "good\n").expect("config");
        Scratch { dir }
    }

    /// Runs the script on the scratch directory's files, then `options` (a later `-c` wins),
    /// and keepalived's `INSTANCE gate64 STATE 150`; its
    /// exit status and stderr.
    fn notify(&self, options: &[&str], state: &str) -> (i32, String) {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/keepalived/gate64-notify.sh");
        let out = Command::new("sh")
            .arg(script)
            .arg("-b")
            .arg(self.dir.join("gate64"))
            .arg("-p")
            .arg(self.dir.join("gate64.pid"))
            .arg("-l")
            .arg(self.dir.join("gate64.log"))
            .arg("-c")
            .arg(self.dir.join("gate64.toml"))
            .args(options)
            .args(["INSTANCE", "gate64", state, "150"])
            .output()
            .expect("running the notify script");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The stand-in's pid while it runs.
    fn running(&self) -> Option<String> {
        let pid = fs::read_to_string(self.dir.join("gate64.pid")).ok()?;
        let pid = pid.trim().to_string();
        let alive = Command::new("kill")
            .args(["-0", &pid])
            .status()
            .is_ok_and(|s| s.success());
        alive.then_some(pid)
    }

    fn read(&self, file: &str) -> String {
        fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    /// Lets SIGUSR1's trap run (the stand-in takes it between two sleeps).
    fn signals_after_a_moment(&self) -> String {
        std::thread::sleep(std::time::Duration::from_millis(300));
        self.read("signals")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(pid) = self.running() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn keepalived_notify_hot_mode_starts_on_master_and_backup_and_signals_a_running_master() {
    let s = Scratch::new("hot");
    assert_eq!(s.notify(&["-m", "hot"], "BACKUP").0, 0);
    let pid = s.running().expect("BACKUP started gate64");
    assert!(s.read("gate64.log").contains("BACKUP: started gate64"));
    assert_eq!(
        s.read("calls").trim(),
        format!("serve --config {}", s.dir.join("gate64.toml").display())
    );
    // BACKUP again: kept, not started twice.
    assert_eq!(s.notify(&["-m", "hot"], "BACKUP").0, 0);
    assert_eq!(s.running().as_deref(), Some(pid.as_str()));
    assert_eq!(s.read("calls").lines().count(), 1);
    // MASTER over the running gate64: `gate64 ha promote` for that pid; this stand-in is a
    // gate64 without the command, so SIGUSR1 follows, same process.
    assert_eq!(s.notify(&["-m", "hot"], "MASTER").0, 0);
    assert_eq!(s.running().as_deref(), Some(pid.as_str()));
    assert_eq!(s.signals_after_a_moment().trim(), "usr1");
    assert!(
        s.read("calls").contains(&format!(
            "ha promote --config {} --pid {pid}",
            s.dir.join("gate64.toml").display()
        )),
        "{}",
        s.read("calls")
    );
    assert!(
        s.read("gate64.log")
            .contains("MASTER: gate64 ha promote failed")
    );
    // FAULT stops it.
    assert_eq!(s.notify(&["-m", "hot"], "FAULT").0, 0);
    assert_eq!(s.running(), None);
    assert!(s.read("signals").contains("term"));
    assert!(s.read("gate64.log").contains("FAULT: stopped gate64"));
    // MASTER with nothing running starts it (and does not signal it).
    assert_eq!(s.notify(&[], "MASTER").0, 0, "hot is the default");
    assert!(s.running().is_some());
    assert_eq!(s.signals_after_a_moment().matches("usr1").count(), 1);
    assert_eq!(s.notify(&[], "STOP").0, 0);
    assert_eq!(s.running(), None);
}

#[test]
fn keepalived_notify_cold_mode_runs_gate64_on_the_master_only() {
    let s = Scratch::new("cold");
    assert_eq!(s.notify(&["-m", "cold"], "BACKUP").0, 0);
    assert_eq!(s.running(), None, "a cold backup does not run gate64");
    assert_eq!(s.notify(&["-m", "cold"], "MASTER").0, 0);
    assert!(s.running().is_some());
    assert_eq!(s.signals_after_a_moment(), "", "started, not signalled");
    assert_eq!(s.notify(&["-m", "cold"], "BACKUP").0, 0);
    assert_eq!(s.running(), None, "demoted: stopped");
    assert_eq!(s.notify(&["-m", "cold"], "MASTER").0, 0);
    assert_eq!(s.notify(&["-m", "cold"], "STOP").0, 0);
    assert_eq!(s.running(), None);
}

/// A wrong mode or option: FAULT and STOP still stop gate64; MASTER and BACKUP change
/// nothing and say why (status 2, stderr and the log).
#[test]
fn keepalived_notify_with_a_bad_mode_still_stops_on_fault_and_refuses_the_rest() {
    let s = Scratch::new("badmode");
    assert_eq!(s.notify(&["-m", "hot"], "BACKUP").0, 0);
    let pid = s.running().expect("started");
    for state in ["MASTER", "BACKUP"] {
        let (status, stderr) = s.notify(&["-m", "warm"], state);
        assert_eq!(status, 2, "{state}");
        assert!(stderr.contains("unknown mode 'warm'"), "{state}: {stderr}");
        assert_eq!(s.running().as_deref(), Some(pid.as_str()), "{state}");
    }
    assert_eq!(s.signals_after_a_moment(), "", "MASTER did not signal");
    assert!(s.read("gate64.log").contains("BACKUP: unknown mode 'warm'"));
    let (status, _) = s.notify(&["-x"], "MASTER");
    assert_eq!(status, 2, "an unknown option");
    assert_eq!(s.notify(&["-m", "warm"], "FAULT").0, 0);
    assert_eq!(s.running(), None, "FAULT stops gate64 whatever the mode");
    let (status, _) = s.notify(&["-m", "warm"], "MASTER");
    assert_eq!((status, s.running()), (2, None), "nothing started");
}

/// A config gate64 cannot use: the start fails visibly (status 1, stderr, the log) and no
/// pid file of a dead process stays; an unknown state changes nothing.
#[test]
fn keepalived_notify_reports_a_gate64_that_does_not_start() {
    let s = Scratch::new("badconfig");
    fs::write(s.dir.join("gate64.toml"), "bad\n").expect("config");
    let config = s.dir.join("gate64.toml");
    let config = config.to_str().expect("utf-8 path");
    let (status, stderr) = s.notify(&["-c", config], "BACKUP");
    assert_eq!(status, 1);
    assert!(stderr.contains("exited during start-up"), "{stderr}");
    assert!(!s.dir.join("gate64.pid").exists());
    let log = s.read("gate64.log");
    assert!(log.contains("config error"), "gate64's own error: {log}");
    assert!(log.contains("BACKUP: gate64 (pid"), "{log}");
    let missing = s.dir.join("missing.toml");
    let (status, stderr) = s.notify(&["-c", missing.to_str().expect("utf-8")], "MASTER");
    assert_eq!(status, 1);
    assert!(stderr.contains("cannot read"), "{stderr}");
    assert_eq!(s.read("calls").lines().count(), 1, "not even tried");
    let (status, _) = s.notify(&[], "DELETED");
    assert_eq!((status, s.running()), (0, None));
    assert!(s.read("gate64.log").contains("nothing to do"));
}
