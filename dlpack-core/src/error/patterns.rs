//! The names of an [`Error::StateDict`](super::Error::StateDict), said briefly: names
//! that differ only in integer segments as one pattern with a count
//! (`layers.{0..31}.self_attn.q_proj.weight`), a missing and an unexpected pattern that
//! differ in one segment as one rename, and a prefix that one side has and the other
//! lacks as one line, each with its fix. Only the text is brief: the error keeps every
//! name.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;

/// How many patterns a list of missing or unexpected names shows before "and N more".
const LIST_LIMIT: usize = 8;

/// The value of an index segment: digits, without a leading zero (`"0"` itself is one).
fn index_of(segment: &str) -> Option<u64> {
    let canonical = !segment.is_empty()
        && segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    if canonical {
        segment.parse().ok()
    } else {
        None
    }
}

/// `"1 tensor"`, `"3 tensors"`.
pub(super) fn tensors(n: usize) -> String {
    if n == 1 {
        "1 tensor".to_owned()
    } else {
        format!("{n} tensors")
    }
}

/// A set of indices as runs: `0..31` for one run of three or more, `{0..3,5,7..9}`
/// for several, `4` for one index.
fn index_set(indices: &BTreeSet<u64>) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &i in indices {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    if let [(a, b)] = runs[..] {
        if a == b {
            return a.to_string();
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match b - a {
            0 => a.to_string(),
            1 => format!("{a},{b}"),
            _ => format!("{a}..{b}"),
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Names that differ only in their integer segments.
#[derive(Debug)]
struct Group<'a> {
    /// The segments, `None` where the names hold an index.
    key: Vec<Option<&'a str>>,
    /// The indices found at each index position, in order.
    indices: Vec<BTreeSet<u64>>,
    /// The names, in the order given.
    names: Vec<&'a str>,
}

impl Group<'_> {
    /// The first `len` segments as a pattern: `layers.{0..11}.self_attn`.
    fn render(&self, len: usize) -> String {
        let mut out = String::new();
        let mut index = 0;
        for (i, segment) in self.key.iter().take(len).enumerate() {
            if i > 0 {
                out.push('.');
            }
            match segment {
                Some(word) => out.push_str(word),
                None => {
                    out.push_str(&index_set(&self.indices[index]));
                    index += 1;
                }
            }
        }
        out
    }

    fn pattern(&self) -> String {
        self.render(self.key.len())
    }

    /// The one word position where `self` and `other` differ, if they are alike
    /// elsewhere (the same words, the same index sets).
    fn differs_in_one_word(&self, other: &Self) -> Option<usize> {
        if self.key.len() != other.key.len() || self.indices != other.indices {
            return None;
        }
        let mut differ = None;
        for (i, (a, b)) in self.key.iter().zip(&other.key).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) if a == b => {}
                (None, None) => {}
                (Some(_), Some(_)) if differ.is_none() => differ = Some(i),
                _ => return None,
            }
        }
        differ
    }
}

/// The names grouped by pattern, in the order of each pattern's first name.
fn groups<'a>(names: &[&'a str]) -> Vec<Group<'a>> {
    let mut out: Vec<Group<'a>> = Vec::new();
    let mut at: BTreeMap<Vec<Option<&'a str>>, usize> = BTreeMap::new();
    for &name in names {
        let mut key = Vec::new();
        let mut indices = Vec::new();
        for segment in name.split('.') {
            match index_of(segment) {
                Some(i) => {
                    key.push(None);
                    indices.push(i);
                }
                None => key.push(Some(segment)),
            }
        }
        let group = *at.entry(key.clone()).or_insert_with(|| {
            out.push(Group {
                key,
                indices: vec![BTreeSet::new(); indices.len()],
                names: Vec::new(),
            });
            out.len() - 1
        });
        let group = &mut out[group];
        for (set, i) in group.indices.iter_mut().zip(indices) {
            set.insert(i);
        }
        group.names.push(name);
    }
    out
}

/// `missing tensors `a`, `b`` or, where names group or are many, `65 missing tensors:
/// `layers.{0..31}.q.weight` (32), ... and 9 more`.
pub(super) fn list(what: &str, names: &[&str]) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let groups = groups(names);
    let quoted = |g: &Group<'_>| match g.names.len() {
        1 => format!("`{}`", g.names[0]),
        n => format!("`{}` ({n})", g.pattern()),
    };
    if groups.len() == names.len() && names.len() <= LIST_LIMIT {
        let shown: Vec<String> = groups.iter().map(quoted).collect();
        return Some(format!("{what} tensors {}", shown.join(", ")));
    }
    let shown: Vec<String> = groups.iter().take(LIST_LIMIT).map(quoted).collect();
    let rest: usize = groups.iter().skip(LIST_LIMIT).map(|g| g.names.len()).sum();
    let mut text = format!("{} {what} tensors: {}", names.len(), shown.join(", "));
    if rest > 0 {
        let _ = write!(text, " and {rest} more");
    }
    Some(text)
}

/// `tensors `a`, `layers.{0..31}.q.weight` (32)` (at most [`LIST_LIMIT`] patterns, then
/// `and N more`): the names grouped as [`list`] groups them, for a line that says what
/// they share.
pub(super) fn names_text(names: &[&str]) -> String {
    let groups = groups(names);
    let shown: Vec<String> = groups
        .iter()
        .take(LIST_LIMIT)
        .map(|g| match g.names.len() {
            1 => format!("`{}`", g.names[0]),
            n => format!("`{}` ({n})", g.pattern()),
        })
        .collect();
    let rest: usize = groups.iter().skip(LIST_LIMIT).map(|g| g.names.len()).sum();
    let mut text = format!("tensors {}", shown.join(", "));
    if rest > 0 {
        let _ = write!(text, " and {rest} more");
    }
    text
}

/// A pattern of the names under `parent` that look like a container's items, each
/// group by its first segment: `layers.{0..11}.…`.
pub(super) fn look_alike_text(parent: &str, like: &[String], vec: bool) -> String {
    let skip = if parent.is_empty() {
        0
    } else {
        parent.len() + 1
    };
    // The first segment under the parent, the indices after it, and whether the names
    // go deeper.
    let mut by_segment: Vec<(&str, BTreeSet<u64>, bool)> = Vec::new();
    for name in like {
        let Some(rest) = name.get(skip..) else {
            continue;
        };
        let mut segments = rest.split('.');
        let first = segments.next().unwrap_or(rest);
        let second = segments.next();
        let deeper = if vec {
            segments.next().is_some()
        } else {
            second.is_some()
        };
        let at = match by_segment.iter().position(|(s, _, _)| *s == first) {
            Some(at) => at,
            None => {
                by_segment.push((first, BTreeSet::new(), false));
                by_segment.len() - 1
            }
        };
        let entry = &mut by_segment[at];
        if let Some(i) = second.and_then(index_of) {
            entry.1.insert(i);
        }
        entry.2 |= deeper;
    }
    let texts: Vec<String> = by_segment
        .iter()
        .map(|(segment, indices, deeper)| {
            let mut text = if parent.is_empty() {
                (*segment).to_owned()
            } else {
                format!("{parent}.{segment}")
            };
            if vec && !indices.is_empty() {
                text.push('.');
                text.push_str(&index_set(indices));
            }
            if *deeper {
                text.push_str(".…");
            }
            format!("`{text}`")
        })
        .collect();
    texts.join(", ")
}

/// The distinct first segments under `parent` of the names `like`.
pub(super) fn look_alike_segments<'a>(parent: &str, like: &'a [String]) -> Vec<&'a str> {
    let skip = if parent.is_empty() {
        0
    } else {
        parent.len() + 1
    };
    let mut out: Vec<&str> = Vec::new();
    for name in like {
        let Some(rest) = name.get(skip..) else {
            continue;
        };
        let first = rest.split('.').next().unwrap_or(rest);
        if !out.contains(&first) {
            out.push(first);
        }
    }
    out
}

/// A prefix that every unexpected name has and that, stripped, gives missing names (or
/// the converse): the line that says so, and the names it accounts for (missing,
/// unexpected). The names on the side with the prefix are all accounted for (a
/// container's items are never missing, only unexpected, so few names match).
pub(super) fn prefix_line<'a>(
    missing: &[&'a str],
    unexpected: &[&'a str],
) -> Option<(String, HashSet<&'a str>, HashSet<&'a str>)> {
    if missing.is_empty() || unexpected.is_empty() {
        return None;
    }
    if let Some((prefix, found)) = common_prefix(unexpected, missing) {
        let mut text = format!(
            "the checkpoint's names start with `{prefix}.` where the struct's do not ({}): \
             load with `Checkpoint::load_at::<T>(\"{prefix}\")`",
            tensors(unexpected.len())
        );
        if !prefix.contains('.') {
            let _ = write!(text, ", or wrap the struct in a field `{prefix}`");
        }
        return Some((text, found, unexpected.iter().copied().collect()));
    }
    if common_prefix(missing, unexpected).is_some() {
        let prefix = common_prefix(missing, unexpected).map(|(p, _)| p)?;
        let mut text = format!(
            "the struct's names start with `{prefix}.` where the checkpoint's do not ({}): \
             read the value at `{prefix}` alone",
            tensors(unexpected.len())
        );
        if !prefix.contains('.') {
            let _ = write!(text, ", or `#[dlpack(flatten)]` on the field `{prefix}`");
        }
        return Some((
            text,
            missing.iter().copied().collect(),
            unexpected.iter().copied().collect(),
        ));
    }
    None
}

/// The shortest run of leading segments that every name of `longer` has and that,
/// stripped, makes names of `shorter`: at least half of them, or every name of
/// `longer` (one at least). The prefix and the names of `shorter` found.
fn common_prefix<'a>(longer: &[&str], shorter: &[&'a str]) -> Option<(String, HashSet<&'a str>)> {
    let first = longer[0];
    let segments: Vec<&str> = first.split('.').collect();
    let wanted: HashSet<&str> = shorter.iter().copied().collect();
    // (Leave one segment at least.)
    for k in 1..segments.len() {
        let prefix = segments[..k].join(".");
        let head = format!("{prefix}.");
        if !longer.iter().all(|name| name.starts_with(&head)) {
            return None;
        }
        let mut found = HashSet::new();
        let mut all = true;
        for &name in longer {
            match wanted.get(&name[head.len()..]) {
                Some(&hit) => {
                    found.insert(hit);
                }
                None => all = false,
            }
        }
        if !found.is_empty() && (all || found.len() * 2 >= shorter.len()) {
            return Some((prefix, found));
        }
    }
    None
}

/// A rename: the checkpoint's pattern up to the word, the struct's word, the
/// checkpoint's, whether the names go deeper.
type Rename<'a> = (String, &'a str, &'a str, bool);

/// Missing and unexpected patterns alike but for one word: one line per field and
/// name, with the rename that fixes it, and the names they account for (missing,
/// unexpected).
pub(super) fn rename_lines<'a>(
    missing: &[&'a str],
    unexpected: &[&'a str],
) -> (Vec<String>, HashSet<&'a str>, HashSet<&'a str>) {
    let missing_groups = groups(missing);
    let unexpected_groups = groups(unexpected);
    let mut paired = vec![false; unexpected_groups.len()];
    // (The checkpoint's pattern up to the word, the struct's word, the checkpoint's,
    // whether the names go deeper) -> the tensors.
    let mut lines: Vec<(Rename<'_>, usize)> = Vec::new();
    let mut used_missing = HashSet::new();
    let mut used_unexpected = HashSet::new();
    for group in &missing_groups {
        let hit = unexpected_groups
            .iter()
            .enumerate()
            .filter(|(i, _)| !paired[*i])
            .find_map(|(i, other)| group.differs_in_one_word(other).map(|at| (i, at)));
        let Some((i, at)) = hit else {
            continue;
        };
        paired[i] = true;
        let other = &unexpected_groups[i];
        let (Some(ours), Some(theirs)) = (group.key[at], other.key[at]) else {
            continue;
        };
        let key = (other.render(at), ours, theirs, at + 1 < group.key.len());
        match lines.iter_mut().find(|(k, _)| *k == key) {
            Some((_, count)) => *count += other.names.len(),
            None => lines.push((key, other.names.len())),
        }
        used_missing.extend(group.names.iter().copied());
        used_unexpected.extend(other.names.iter().copied());
    }
    let texts = lines
        .into_iter()
        .map(|((prefix, ours, theirs, deeper), count)| {
            let mut at = if prefix.is_empty() {
                theirs.to_owned()
            } else {
                format!("{prefix}.{theirs}")
            };
            if deeper {
                at.push_str(".…");
            }
            format!(
                "the struct has `{ours}` where the checkpoint has `{theirs}` (`{at}`, {}): \
                 `#[dlpack(rename = \"{theirs}\")]` on the field `{ours}`",
                tensors(count)
            )
        })
        .collect();
    (texts, used_missing, used_unexpected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_sets_are_runs() {
        let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(index_set(&set(&[4])), "4");
        assert_eq!(index_set(&set(&[0, 1, 2, 3])), "{0..3}");
        assert_eq!(index_set(&set(&[0, 1])), "{0,1}");
        assert_eq!(index_set(&set(&[0, 1, 2, 3, 5, 7, 8, 9])), "{0..3,5,7..9}");
    }

    #[test]
    fn only_canonical_digits_are_indices() {
        assert_eq!(index_of("0"), Some(0));
        assert_eq!(index_of("31"), Some(31));
        assert_eq!(index_of("07"), None);
        assert_eq!(index_of(""), None);
        assert_eq!(index_of("q1"), None);
        assert_eq!(index_of("99999999999999999999999"), None);
    }

    #[test]
    fn names_group_by_pattern_with_counts() {
        let names: Vec<String> = (0..12)
            .flat_map(|l| {
                [
                    format!("layers.{l}.attn.weight"),
                    format!("layers.{l}.attn.bias"),
                ]
            })
            .chain(["norm.weight".to_owned()])
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(
            list("missing", &names).unwrap(),
            "25 missing tensors: `layers.{0..11}.attn.weight` (12), \
             `layers.{0..11}.attn.bias` (12), `norm.weight`"
        );
        assert_eq!(
            list("missing", &["a", "b.c"]).unwrap(),
            "missing tensors `a`, `b.c`"
        );
        assert_eq!(list("missing", &[]), None);
    }
}
