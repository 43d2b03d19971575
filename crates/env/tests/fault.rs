//! The fault-injecting backend: rules fire on the right calls, the right
//! number of times, with the exact OS error, then pass through.

use std::io::ErrorKind;
use std::sync::Arc;

use sluice_env::fault::{FaultBackend, FaultOp, FaultRule};
use sluice_env::memory::MemBackend;
use sluice_env::{raw_os_error, Backend, OpenOptions, RelPath};

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

fn p(path: &str) -> RelPath {
    RelPath::new(path).unwrap()
}

fn backend() -> FaultBackend {
    let inner = MemBackend::new();
    inner.create_dir(&p("log")).unwrap();
    inner.create_dir(&p("data")).unwrap();
    FaultBackend::new(Arc::new(inner))
}

#[test]
fn a_counted_rule_fires_exactly_that_often_then_passes_through() {
    let backend = backend();
    // Opened before the rule: rules apply at call time.
    let log = backend
        .open(&p("log/region-0"), OpenOptions::CREATE)
        .unwrap();
    let data = backend.open(&p("data/file"), OpenOptions::CREATE).unwrap();
    backend.inject(FaultRule {
        op: FaultOp::Write,
        path_prefix: Some("log/".to_string()),
        raw_os_error: EIO,
        remaining: Some(2),
    });
    for attempt in 0..2 {
        let error = log.write_at(b"record", 0).unwrap_err();
        assert_eq!(
            raw_os_error(&error),
            Some(EIO),
            "attempt {attempt}: {error:?}"
        );
        assert!(error.to_string().contains("log/region-0"), "{error}");
        // Other paths and other operations are untouched.
        data.write_at(b"fine", 0).unwrap();
        log.sync_data().unwrap();
    }
    assert_eq!(log.len().unwrap(), 0, "a failed write changes nothing");
    log.write_at(b"record", 0).unwrap();
    log.write_at(b"record", 6).unwrap();
    assert_eq!(log.len().unwrap(), 12);
    assert_eq!(backend.injected(), 2);
    assert_eq!(backend.rules()[0].remaining, Some(0));
}

#[test]
fn forever_rules_and_op_classes() {
    let backend = backend();
    backend.inject(FaultRule::new(FaultOp::Sync, ENOSPC));
    let file = backend.open(&p("data/f"), OpenOptions::CREATE).unwrap();
    for _ in 0..3 {
        let error = file.sync_data().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::StorageFull);
        assert_eq!(raw_os_error(&error), Some(ENOSPC));
    }
    assert_eq!(
        raw_os_error(&backend.sync_dir(&p("data")).unwrap_err()),
        Some(ENOSPC)
    );
    file.write_at(b"x", 0).unwrap();
    backend.clear();
    file.sync_data().unwrap();
    assert_eq!(backend.injected(), 4);

    // Rename matches either path; Remove covers files and directories.
    backend.inject(FaultRule {
        op: FaultOp::Rename,
        path_prefix: Some("log/".to_string()),
        raw_os_error: EIO,
        remaining: None,
    });
    assert!(backend.rename(&p("data/f"), &p("log/f")).is_err());
    backend.rename(&p("data/f"), &p("data/g")).unwrap();
    backend.inject(FaultRule::new(FaultOp::Remove, EIO));
    assert!(backend.remove_file(&p("data/g")).is_err());
    assert!(backend.remove_dir(&p("log")).is_err());
    backend.clear();

    // Open, Read, SetLen, Metadata, CreateDir, ReadDir, and Any.
    for (op, call) in [
        (FaultOp::Open, 0),
        (FaultOp::Read, 1),
        (FaultOp::SetLen, 2),
        (FaultOp::Metadata, 3),
        (FaultOp::CreateDir, 4),
        (FaultOp::ReadDir, 5),
        (FaultOp::Any, 1),
    ] {
        let file = backend.open(&p("data/g"), OpenOptions::CREATE).unwrap();
        backend.inject(FaultRule {
            op,
            path_prefix: None,
            raw_os_error: EIO,
            remaining: Some(1),
        });
        let result = match call {
            0 => backend.open(&p("data/g"), OpenOptions::CREATE).map(|_| ()),
            1 => file.read_at(&mut [0u8; 1], 0).map(|_| ()),
            2 => file.set_len(0),
            3 => backend.metadata(&p("data/g")).map(|_| ()),
            4 => backend.create_dir(&p("data/dir")),
            _ => backend.read_dir(&p("data")).map(|_| ()),
        };
        let error = result.expect_err("the rule fires");
        assert_eq!(raw_os_error(&error), Some(EIO), "{op:?}");
        backend.clear();
    }
}

#[test]
fn inner_errors_pass_through_unchanged() {
    let backend = backend();
    let error = backend
        .open(
            &p("missing"),
            OpenOptions {
                create: false,
                create_new: false,
                truncate: false,
                private: false,
            },
        )
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert_eq!(backend.injected(), 0);
    assert!(backend.describe().contains("memory"));
}

/// The rules file of the mount's test hook (`SLUICE_FAULTS`): one rule a
/// line, errno by number or name, an optional path prefix; a bad line is
/// an error naming it.
#[test]
fn rules_parse_from_text_and_bad_lines_are_named() {
    use sluice_env::fault::parse_rules;
    let rules = parse_rules("# EIO on writes\nwrite EIO\n\nsync 28 dir/\n").unwrap();
    assert_eq!(
        rules,
        vec![
            FaultRule::new(FaultOp::Write, 5),
            FaultRule {
                path_prefix: Some("dir/".to_string()),
                ..FaultRule::new(FaultOp::Sync, 28)
            },
        ]
    );
    assert_eq!(parse_rules("").unwrap(), vec![]);
    for (text, why) in [
        ("write", "expected OP ERRNO"),
        ("scribble EIO", "unknown operation"),
        ("write EWHAT", "unknown errno"),
        ("write EIO a b", "too many words"),
    ] {
        let error = parse_rules(&format!("\n{text}")).unwrap_err();
        assert!(error.contains(why) && error.contains("line 2"), "{error}");
    }
}
