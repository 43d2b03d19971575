//! Quantities for people: the one rounded byte count of the workspace
//! (reports, progress lines, live views). Exact sizes that read back, as
//! a config file writes them, are `sluice_config::ByteSize`.

use alloc::format;
use alloc::string::String;

const UNITS: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// A byte count for people: binary units with one decimal (`"1.5 GiB"`),
/// plain bytes below 1 KiB (`"512 B"`). Rounded, so it does not read back
/// exactly.
pub fn human_bytes(bytes: u64) -> String {
    match UNITS.iter().find(|(_, size)| bytes >= *size) {
        Some((name, size)) => format!("{:.1} {name}", bytes as f64 / *size as f64),
        None => format!("{bytes} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_uses_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(256 * 1024), "256.0 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
    }
}
