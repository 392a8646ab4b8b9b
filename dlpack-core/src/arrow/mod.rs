//! Arrow columns as tensors (feature `arrow`), on arrow-rs's own crates.
