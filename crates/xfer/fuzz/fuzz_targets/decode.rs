//! Fuzz the wire decoder: any bytes, as a stream of frames, must decode to
//! messages or errors, never panic, and never allocate past MAX_FRAME; the
//! sink's reader (`read_frame_or_block`, block data into an aligned
//! buffer) must read the same messages as `read_message`.
//! Run: `cd crates/xfer/fuzz && cargo +nightly fuzz run decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xfer::direct::AlignedBuf;
use sluice_xfer::wire::{read_frame_or_block, read_message, Frame, Message};

fuzz_target!(|data: &[u8]| {
    // The body decoder on its own.
    if let Ok(msg) = Message::decode(data) {
        // What decodes re-encodes to the same body.
        let mut out = Vec::new();
        msg.encode(&mut out);
        assert_eq!(&out[4..], data);
    }
    // The framed readers over the same bytes, side by side.
    let (mut a, mut b) = (data, data);
    let (mut buf_a, mut buf_b) = (Vec::new(), Vec::new());
    let mut block = AlignedBuf::new();
    loop {
        let x = read_message(&mut a, &mut buf_a);
        let y = match read_frame_or_block(&mut b, &mut buf_b, &mut block) {
            Ok(Frame::End) => Ok(None),
            Ok(Frame::Block { file, offset, crc }) => Ok(Some(Message::NewBlock {
                file,
                offset,
                crc,
                data: block.as_slice().to_vec(),
            })),
            Ok(Frame::Body) => Message::decode(&buf_b).map(Some).map_err(|_| ()),
            Err(_) => Err(()),
        };
        match (x, y) {
            (Ok(Some(x)), Ok(Some(y))) => assert_eq!(x, y),
            (Ok(None), Ok(None)) | (Err(_), Err(_)) => break,
            (x, y) => panic!("read_message {x:?}, read_frame_or_block {y:?}"),
        }
    }
});
