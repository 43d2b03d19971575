//! A real process writing and fsyncing through the engine on real
//! directories, killed with SIGKILL at random moments and restarted 50
//! times; every write whose fsync was acknowledged must read back, and
//! drain to the capacity tier (DESIGN §4.6, invariant 1). A kill keeps the
//! kernel's page cache, so this covers process crashes and recovery on real
//! files; power loss is `engine_recovery.rs`'s crash backend.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::Engine;
use sluice_env::posix::PosixBackend;
use sluice_env::{RelPath, SystemClock};

mod kill_support;
use kill_support::{config, pattern, slot_offset, FILE, SLOT};

#[test]
fn every_acknowledged_write_survives_50_kills() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, capacity) = (dir.path().join("fast"), dir.path().join("capacity"));
    std::fs::create_dir(&fast).unwrap();
    std::fs::create_dir(&capacity).unwrap();
    let mut acked: Option<u64> = None;
    let mut seed = 0x9e37_79b9u64;
    for round in 0..50 {
        let first = acked.map_or(0, |a| a + 1);
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice-kill-writer"))
            .arg(&fast)
            .arg(&capacity)
            .arg(first.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line
                    .strip_prefix("ack ")
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    let _ = tx.send(n);
                }
            }
        });
        // Wait for the first acknowledgement (recovery done), then kill at
        // a random moment 0-40 ms later.
        let first_ack = rx.recv_timeout(Duration::from_secs(20));
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis((seed >> 33) % 40));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        let Ok(first_ack) = first_ack else {
            panic!("round {round}: the writer acknowledged nothing ({status}): {stderr}");
        };
        acked = Some(rx.try_iter().fold(first_ack, u64::max));
    }
    let acked = acked.unwrap();
    assert!(acked >= 50, "only {acked} writes in 50 rounds");
    println!("{} acknowledged writes over 50 kills", acked + 1);

    let engine = Engine::open(
        Arc::new(PosixBackend::new(fast).unwrap()),
        Arc::new(PosixBackend::new(capacity.clone()).unwrap()),
        Arc::new(SystemClock::new()),
        config(),
    )
    .unwrap();
    let id = engine.open_file(&RelPath::new(FILE).unwrap()).unwrap();
    for i in 0..=acked {
        let got = engine.read(id, slot_offset(i), SLOT).unwrap();
        assert!(got == pattern(i), "acknowledged write {i} of {acked} lost");
    }
    engine.drain().unwrap();
    let on_capacity = std::fs::read(capacity.join(FILE)).unwrap();
    for i in 0..=acked {
        let at = slot_offset(i) as usize;
        assert!(
            on_capacity[at..at + SLOT as usize] == pattern(i)[..],
            "write {i} not on the capacity tier after drain"
        );
    }
}
