//! GlusterFS layout provider against a real single-brick volume.
//!
//! `scripts/gluster.sh start DIR` starts glusterd on 127.0.0.1, a volume
//! whose only brick is DIR/brick, and a FUSE mount at DIR/mnt; a drop
//! guard runs `scripts/gluster.sh stop DIR` however the test ends. Files
//! written through the mount must come back as a one-target
//! [`FileLayout::Stripe`] whose target names that brick.
//!
//! Needs root, /dev/fuse and the GlusterFS packages (scripts/setup.sh
//! installs them). Without them the test fails under `CI` and is skipped
//! with a message otherwise. Only one such volume can run per host (bricks
//! always fetch their volfile from glusterd's port 24007), so this file
//! holds a single test.

use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_xfer::layout::gluster::GlusterLayout;
use sluice_xfer::layout::{FileLayout, LayoutProvider};

const GLUSTER_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/gluster.sh");

/// Skips the test (or fails it under `CI`) with `why`.
fn skip(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI: {why} (scripts/setup.sh installs glusterfs-server and glusterfs-client)"
    );
    eprintln!("skipped: {why}");
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A running volume; stopped on drop.
struct Volume {
    dir: PathBuf,
}

impl Drop for Volume {
    fn drop(&mut self) {
        let status = Command::new("bash")
            .arg(GLUSTER_SH)
            .arg("stop")
            .arg(&self.dir)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!(
                "scripts/gluster.sh stop {} failed: {status:?}",
                self.dir.display()
            );
        }
    }
}

#[test]
fn files_on_a_single_brick_volume_map_to_that_brick() {
    if !is_root() {
        return skip("GlusterFS needs root");
    }
    if !Path::new("/dev/fuse").exists() {
        return skip("no /dev/fuse");
    }
    // GlusterFS's volfiles cannot name a path with a blank, and glusterd's
    // socket must fit in a socket address (gluster.sh refuses either):
    // under a TMPDIR with a blank or longer than 64 bytes the volume goes
    // in /tmp.
    let base = std::env::temp_dir();
    let base =
        if base.to_string_lossy().contains(char::is_whitespace) || base.as_os_str().len() > 64 {
            eprintln!(
            "note: TMPDIR={} has a blank or is too long for GlusterFS; the volume goes under /tmp",
            base.display()
        );
            PathBuf::from("/tmp")
        } else {
            base
        };
    let temp = tempfile::tempdir_in(base).expect("tempdir");
    // The script resolves DIR with `pwd -P`; so must we, to compare paths.
    let dir = std::fs::canonicalize(temp.path()).expect("canonical tempdir");
    let out = Command::new("bash")
        .arg(GLUSTER_SH)
        .arg("start")
        .arg(&dir)
        .output()
        .expect("run scripts/gluster.sh");
    if out.status.code() == Some(2) {
        return skip("glusterd is not installed");
    }
    // Stop even if start failed half-way (the script cleans up, but be sure).
    let volume = Volume { dir: dir.clone() };
    assert!(
        out.status.success(),
        "scripts/gluster.sh start failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mnt = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert_eq!(mnt, dir.join("mnt"));

    let files: [(&str, usize); 4] = [
        ("empty", 0),
        ("small.txt", 5),
        ("three-mib.bin", 3 << 20),
        ("sub/dir/odd.bin", (1 << 20) + 7),
    ];
    for (name, len) in files {
        let path = mnt.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, vec![0x5a; len]).unwrap();
    }

    let provider = GlusterLayout::new();
    let brick = format!(":{}", dir.join("brick").display());
    let mut targets = Vec::new();
    for (name, len) in files {
        let path = mnt.join(name);
        let layout = provider
            .layout(&path, len as u64)
            .unwrap_or_else(|e| panic!("layout of {}: {e}", path.display()));
        let FileLayout::Stripe(stripe) = &layout else {
            panic!("{name}: expected a stripe layout, got {layout:?}");
        };
        assert_eq!(
            stripe.object_size,
            GlusterLayout::DEFAULT_OBJECT_SIZE,
            "{name}"
        );
        assert_eq!(stripe.targets.len(), 1, "{name}: {stripe:?}");
        let target = stripe.targets[0];
        let target_name = provider.target_name(target);
        assert!(
            target_name.ends_with(&brick),
            "{name}: target {target_name:?} does not name the brick HOST{brick}"
        );
        let objects = layout.objects(sluice_policy::FileId(1), len as u64);
        assert_eq!(objects.len(), len.div_ceil(1 << 20), "{name}");
        assert!(objects.iter().all(|o| o.target == target), "{name}");
        targets.push(target);
    }
    // One brick: every file on the same, first target.
    assert!(targets.iter().all(|t| t.0 == 0), "{targets:?}");

    drop(volume);
    assert!(
        !mnt.join("small.txt").exists(),
        "the volume is still mounted after stop"
    );
}
