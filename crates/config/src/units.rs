//! Sizes and durations as people write them in a config file: `"256MiB"`,
//! `"4 GiB"`, `1048576`, `"200ms"`, `"1s"`. Printed back normalized: the
//! largest unit that divides the value exactly (the rounded byte count
//! for people is `sluice_policy::units::human_bytes`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

const SIZE_UNITS: [(&str, u64); 9] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
    ("B", 1),
];

const TIME_UNITS: [(&str, u64); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("min", 60_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
    ("s", 1_000_000_000),
];

/// A number of bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// A duration with a unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

/// Split `"256 MiB"` into 256 and the multiplier of its unit.
fn parse_with_units(text: &str, units: &[(&str, u64)], what: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let unit = unit.trim();
    let number: u64 = number.replace('_', "").parse().map_err(|_| {
        format!("{what} {text:?}: expected a whole number and a unit, like \"256MiB\" or \"200ms\"")
    })?;
    let multiplier = if unit.is_empty() && units.iter().any(|(u, _)| *u == "B") {
        1
    } else {
        units
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                let known: Vec<&str> = units.iter().map(|(u, _)| *u).collect();
                format!("{what} {text:?}: unknown unit {unit:?}; use one of {known:?}")
            })?
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("{what} {text:?}: too large"))
}

/// The value in the largest unit (of the binary ones, or whole units of
/// time) that divides it exactly.
fn format_with_units(value: u64, units: &[(&str, u64)]) -> String {
    for (unit, multiplier) in units {
        if value != 0 && value.is_multiple_of(*multiplier) {
            return format!("{}{unit}", value / multiplier);
        }
    }
    format!("{value}{}", units[units.len() - 1].0)
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<ByteSize, String> {
        parse_with_units(s, &SIZE_UNITS, "size").map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The largest exact binary unit; a size exact only in a decimal
        // unit (a bandwidth such as 250MB) in that. Either reads back the
        // same.
        type Units = Vec<(&'static str, u64)>;
        let (binary, decimal): (Units, Units) = SIZE_UNITS
            .iter()
            .copied()
            .partition(|(u, _)| u.ends_with("iB") || *u == "B");
        let printed = format_with_units(self.0, &binary);
        let bytes_only = printed
            .trim_end_matches('B')
            .chars()
            .all(|c| c.is_ascii_digit());
        if bytes_only && self.0 >= 1000 {
            let mut decimal = decimal;
            decimal.push(("B", 1));
            let shorter = format_with_units(self.0, &decimal);
            if shorter.len() < printed.len() {
                return f.write_str(&shorter);
            }
        }
        f.write_str(&printed)
    }
}

impl FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Span, String> {
        if s.trim() == "0" {
            return Ok(Span(Duration::ZERO));
        }
        parse_with_units(s, &TIME_UNITS, "duration").map(|n| Span(Duration::from_nanos(n)))
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX);
        let order = [
            ("d", 86_400_000_000_000),
            ("h", 3_600_000_000_000),
            ("min", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        f.write_str(&format_with_units(nanos, &order))
    }
}

/// Reads a size: a whole number of bytes or a string with a unit. A
/// negative or fractional number is refused in words (an untagged enum
/// said "data did not match any variant", issue 19).
struct SizeVisitor;

impl de::Visitor<'_> for SizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size: a whole number of bytes or a string with a unit, like \"256MiB\"")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteSize, E> {
        u64::try_from(n).map(ByteSize).map_err(|_| {
            E::custom(format!(
                "{n} is negative: a size is 0 or more bytes, or a string like \"256MiB\""
            ))
        })
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<ByteSize, E> {
        Err(E::custom(format!(
            "{n} is not a whole number of bytes: give one, or a string like \"1536KiB\""
        )))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<ByteSize, E> {
        text.parse().map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        d.deserialize_any(SizeVisitor)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// Reads a duration: a string with a unit, or a bare 0.
struct SpanVisitor;

impl de::Visitor<'_> for SpanVisitor {
    type Value = Span;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration: a string with a unit, like \"200ms\" or \"1s\", or 0")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Span, E> {
        if n == 0 {
            return Ok(Span(Duration::ZERO));
        }
        Err(E::custom(format!(
            "duration {n}: give a unit, like \"{n}ms\" or \"{n}s\""
        )))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Span, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!(
                "{n} is negative: a duration is 0 or more, like \"200ms\""
            ))),
        }
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Span, E> {
        Err(E::custom(format!(
            "duration {n}: give a whole number and a unit, like \"1500ms\" for 1.5s"
        )))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Span, E> {
        text.parse().map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        d.deserialize_any(SpanVisitor)
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print_back() {
        for (text, bytes, printed) in [
            ("256MiB", 256 << 20, "256MiB"),
            ("4 GiB", 4 << 30, "4GiB"),
            ("1536KiB", 1536 << 10, "1536KiB"),
            ("1MB", 1_000_000, "1MB"),
            ("250MB", 250_000_000, "250MB"),
            ("1001", 1001, "1001B"),
            ("1_048_576", 1 << 20, "1MiB"),
            ("0", 0, "0B"),
        ] {
            let size: ByteSize = text.parse().unwrap();
            assert_eq!(size.0, bytes, "{text}");
            assert_eq!(size.to_string(), printed, "{text}");
            assert_eq!(printed.parse::<ByteSize>().unwrap(), size);
        }
        for bad in ["", "MiB", "12 parsecs", "-1MiB", "99999999999TiB"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_parse_and_print_back() {
        for (text, nanos, printed) in [
            ("200ms", 200_000_000, "200ms"),
            ("1s", 1_000_000_000, "1s"),
            ("1500ms", 1_500_000_000, "1500ms"),
            ("2min", 120_000_000_000, "2min"),
            ("0", 0, "0ns"),
        ] {
            let span: Span = text.parse().unwrap();
            assert_eq!(span.0, Duration::from_nanos(nanos), "{text}");
            assert_eq!(span.to_string(), printed, "{text}");
            assert_eq!(printed.parse::<Span>().unwrap(), span);
        }
        for bad in ["5", "ms", "3 fortnights"] {
            assert!(bad.parse::<Span>().is_err(), "{bad:?}");
        }
    }
}
