//! Placeholder: the LADS transfer source and sink, layout providers and wire
//! protocol — arrive with the transfer issue (issue 8). The scheduler itself
//! will live in `sluice-policy`. See ARCHITECTURE.md.
