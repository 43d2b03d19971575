//! Arrives with the env helper.
