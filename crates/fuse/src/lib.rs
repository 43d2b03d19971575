//! Placeholder: the thin FUSE adapter (fuser) that forwards requests to the
//! engine and is the only place errors become errnos — arrives with the mount
//! issue (issue 5). See ARCHITECTURE.md.
