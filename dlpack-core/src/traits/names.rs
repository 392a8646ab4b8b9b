//! How tensors are named, the one home of the rules: a field's tensors are
//! `prefix.field` (`fc1.weight`), a `Vec`'s items `prefix.0`, `prefix.1`, ... (decimal,
//! no leading zero), a map's entries `prefix.key` for a key that is a segment (not
//! empty, no `.`); a name is its segments joined by `.`, as PyTorch's `state_dict` names
//! them.

/// `prefix.name`, or `name` when the prefix is empty.
pub fn join_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        let mut joined = String::with_capacity(prefix.len() + 1 + name.len());
        joined.push_str(prefix);
        joined.push('.');
        joined.push_str(name);
        joined
    }
}

/// Appends the segment `segment` to the name `name` (with a `.` unless the name is
/// empty), returning the length to truncate back to.
pub fn push_segment(name: &mut String, segment: &str) -> usize {
    let len = name.len();
    if !name.is_empty() {
        name.push('.');
    }
    name.push_str(segment);
    len
}

/// The first segment of `path` and the rest (`"fc1.weight"` is `("fc1", "weight")`,
/// `"fc1"` is `("fc1", "")`).
pub fn split_path(path: &str) -> (&str, &str) {
    // A byte search: names are short, and `.` is ASCII, so the split is on a boundary.
    match path.bytes().position(|b| b == b'.') {
        Some(dot) => (&path[..dot], &path[dot + 1..]),
        None => (path, ""),
    }
}

/// Whether `key` can be one segment of a tensor name: not empty, no `.` (a map key
/// that holds one is left out; an attribute names one field, item or key, so
/// `getattr(m, "fc1.weight")` is not `m.fc1.weight`).
pub(crate) fn is_segment(key: &str) -> bool {
    !key.is_empty() && !key.contains('.')
}

/// The item index that a path segment names: decimal digits without a leading zero, as
/// `Vec` exports name items.
pub(super) fn parse_index(segment: &str) -> Option<usize> {
    if segment.is_empty() || (segment.len() > 1 && segment.starts_with('0')) {
        return None;
    }
    if !segment.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    segment.parse().ok()
}

/// Formats indices into one reused buffer (no allocation per index).
#[derive(Default)]
pub(super) struct IndexFormatter(String);

impl IndexFormatter {
    pub(super) fn format(&mut self, i: usize) -> &str {
        use core::fmt::Write;
        self.0.clear();
        let _ = write!(self.0, "{i}");
        &self.0
    }
}
