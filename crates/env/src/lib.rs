//! Placeholder: the environment traits — `Clock`, `Device` (a tier: read /
//! write / sync / len with a latency model), the capacity backend and the
//! metadata store — arrive with the engine (issue 4). Definitions only: this
//! crate will never do I/O itself. See ARCHITECTURE.md.
//!
//! It holds no code yet on purpose: a trait with no implementation and no
//! caller would be guesswork.
