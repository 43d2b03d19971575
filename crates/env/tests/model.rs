//! Random sequences of `write_at`, `set_len` and `read_at` on one file,
//! checked against a `Vec<u8>` model, for the backends that store bytes
//! (memory, crash-test, POSIX).

use proptest::prelude::*;

use sluice_env::crash::CrashBackend;
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, OpenOptions, RelPath};

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
    Read { offset: u64, len: usize },
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..6000, prop::collection::vec(any::<u8>(), 0..700))
            .prop_map(|(offset, data)| Op::Write { offset, data }),
        1 => (0u64..7000).prop_map(Op::SetLen),
        3 => (0u64..7500, 0usize..900).prop_map(|(offset, len)| Op::Read { offset, len }),
        1 => Just(Op::Sync),
    ]
}

/// Runs `ops` on a new file of `backend` and on the model; fails at the
/// first difference.
fn check(backend: &dyn Backend, ops: &[Op]) -> Result<(), TestCaseError> {
    let options = OpenOptions {
        create: true,
        create_new: true,
        truncate: false,
        private: false,
    };
    let file = backend.open(&RelPath::new("f").unwrap(), options).unwrap();
    let mut model: Vec<u8> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Write { offset, data } => {
                file.write_at(data, *offset).unwrap();
                if !data.is_empty() {
                    let start = *offset as usize;
                    let end = start + data.len();
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[start..end].copy_from_slice(data);
                }
            }
            Op::SetLen(len) => {
                file.set_len(*len).unwrap();
                model.resize(*len as usize, 0);
            }
            Op::Read { offset, len } => {
                let mut buf = vec![0xEEu8; *len];
                let count = file.read_at(&mut buf, *offset).unwrap();
                let start = (*offset as usize).min(model.len());
                let expected = &model[start..(start + len).min(model.len())];
                prop_assert_eq!(&buf[..count], expected, "step {}: {:?}", step, op);
            }
            Op::Sync => file.sync_data().unwrap(),
        }
        prop_assert_eq!(file.len().unwrap(), model.len() as u64, "step {}", step);
    }
    let mut all = vec![0u8; model.len()];
    prop_assert_eq!(file.read_at(&mut all, 0).unwrap(), model.len());
    prop_assert_eq!(all, model);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn memory_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        check(&MemBackend::new(), &ops)?;
    }

    #[test]
    fn crash_backend_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        check(&CrashBackend::new(), &ops)?;
    }

    #[test]
    fn posix_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        check(&PosixBackend::new(dir.path().to_path_buf()).unwrap(), &ops)?;
    }
}
