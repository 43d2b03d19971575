//! Fuzz the wire decoder: any bytes, as a stream of frames, must decode to
//! messages or errors, never panic, and never allocate past MAX_FRAME.
//! Run: `cd crates/xfer/fuzz && cargo +nightly fuzz run decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xfer::wire::{read_message, Message};

fuzz_target!(|data: &[u8]| {
    // The body decoder on its own.
    if let Ok(msg) = Message::decode(data) {
        // What decodes re-encodes to the same body.
        let mut out = Vec::new();
        msg.encode(&mut out);
        assert_eq!(&out[4..], data);
    }
    // The framed reader over the same bytes.
    let mut r = data;
    let mut buf = Vec::new();
    while let Ok(Some(_)) = read_message(&mut r, &mut buf) {}
});
