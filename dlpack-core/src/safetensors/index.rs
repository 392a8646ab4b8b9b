//! The index of a sharded checkpoint, `model.safetensors.index.json`, read as foreign
//! input: Hugging Face's layout (not part of the safetensors format), `{"metadata":
//! {...}, "weight_map": {"name": "shard file", ...}}`.
//!
//! The `weight_map` is the allowlist of the checkpoint: only the tensors it lists
//! exist, each in the shard it names. A shard is named by a plain file name inside the
//! index's folder: a name with a separator, `.` or `..`, an absolute path or an empty
//! name is refused before any file is opened, so nothing outside the folder is ever
//! read. A name listed twice (JSON allows duplicate keys; a map would keep one of them
//! silently), a shard that is not a string, a `weight_map` that is missing or not an
//! object: each is an [`Error::InvalidFile`] naming the index and, where there is one,
//! the tensor.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::Result;

use super::header::{MAX_HEADER, invalid};

/// The index's file name in a checkpoint folder.
pub(super) const INDEX_NAME: &str = "model.safetensors.index.json";

/// The one file of a checkpoint that fits in a single shard.
pub(super) const SINGLE_NAME: &str = "model.safetensors";

/// The name of shard `k` of `n` (from 1), as `save_pretrained` names it.
pub(super) fn shard_name(k: usize, n: usize) -> String {
    format!("model-{k:05}-of-{n:05}.safetensors")
}

/// Whether `name` is a shard's name as [`shard_name`] makes it (of any count).
pub(super) fn is_shard_name(name: &str) -> bool {
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("model-")
        .and_then(|rest| rest.strip_suffix(".safetensors"))
        .and_then(|rest| rest.split_once("-of-"))
        .is_some_and(|(k, n)| digits(k) && digits(n))
}

/// Each tensor's place in the index, by its name (hashed with seeds of the process's
/// own, which a file written beforehand cannot know).
pub(super) type Places<'a> = HashMap<Cow<'a, str>, usize, foldhash::fast::RandomState>;

/// A parsed and checked index, borrowing its names from the index's text where it can.
#[derive(Debug)]
pub(super) struct Index<'a> {
    /// Every tensor the index lists, in the index's order, with its shard's position in
    /// `shards`.
    pub(super) weight_map: Vec<(Cow<'a, str>, usize)>,
    /// Each tensor's place in `weight_map`, by its name.
    pub(super) places: Places<'a>,
    /// The shards' file names, each once, in the order the index first names them.
    pub(super) shards: Vec<String>,
    /// The index's `metadata`: strings as they are, other values as JSON text.
    pub(super) metadata: BTreeMap<String, String>,
}

impl Index<'_> {
    /// The first tensor the index places in each shard, by the shard's position in
    /// `shards`: the name an error about a shard's file names.
    pub(super) fn first_of_each_shard(&self) -> Vec<&str> {
        let mut first = vec![""; self.shards.len()];
        for (name, shard) in self.weight_map.iter().rev() {
            first[*shard] = name;
        }
        first
    }
}

/// Parses and checks the index text `json` of the file `path`.
pub(super) fn parse<'a>(path: &Path, json: &'a [u8]) -> Result<Index<'a>> {
    if json.len() > MAX_HEADER {
        return Err(invalid(
            path,
            None,
            format!(
                "the index has {} bytes, above the limit of {MAX_HEADER}",
                json.len()
            ),
        ));
    }
    let text = core::str::from_utf8(json)
        .map_err(|e| invalid(path, None, format!("the index is not UTF-8: {e}")))?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let raw = deserializer
        .deserialize_map(IndexVisitor(json.len()))
        .and_then(|raw| deserializer.end().map(|()| raw))
        .map_err(|e| invalid(path, None, format!("the index is not valid JSON: {e}")))?;
    let Some((entries, places)) = raw.weight_map else {
        return Err(invalid(
            path,
            None,
            "it has no `weight_map`, so it is not the index of a checkpoint's shards \
             (`model.safetensors.index.json`, which `save_pretrained` writes beside them): \
             open that file, or the folder that holds the weights",
        ));
    };
    let mut shards: Vec<String> = Vec::new();
    let mut shard_of: HashMap<Cow<'a, str>, usize> = HashMap::new();
    let mut weight_map = Vec::with_capacity(entries.len());
    for (name, shard) in entries {
        let shard = match shard {
            ShardName::Name(shard) => shard,
            ShardName::Not(what) => {
                return Err(invalid(
                    path,
                    Some(&name),
                    format!("its shard is {what}, not a file name"),
                ));
            }
        };
        // An index names a shard many times in a row: the last one first.
        let last = weight_map.last().map(|&(_, at)| at);
        let at = match last.filter(|&at| shards[at] == shard) {
            Some(at) => at,
            None => match shard_of.get(&shard) {
                Some(&at) => at,
                None => {
                    check_shard_name(&shard).map_err(|reason| {
                        let reason = format!(
                            "its shard `{shard}` is not a file name inside the index's folder: \
                             {reason}"
                        );
                        invalid(path, Some(&name), reason)
                    })?;
                    shards.push(shard.clone().into_owned());
                    shard_of.insert(shard, shards.len() - 1);
                    shards.len() - 1
                }
            },
        };
        weight_map.push((name, at));
    }
    let metadata = raw
        .metadata
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(text) => (key, text),
            other => (key, other.to_string()),
        })
        .collect();
    Ok(Index {
        weight_map,
        places,
        shards,
        metadata,
    })
}

/// Why `name` is not a plain file name (no separator of any platform, not `.` or
/// `..`, not empty, not absolute, no NUL), if it is not.
fn check_shard_name(name: &str) -> core::result::Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name == "." || name == ".." {
        return Err("it names a folder");
    }
    if name.contains(['/', '\\']) {
        return Err("it has a path separator");
    }
    if name.contains('\0') {
        return Err("it has a NUL byte");
    }
    let path = Path::new(name);
    if path.is_absolute() || path.has_root() {
        return Err("it is absolute");
    }
    // A drive or prefix (`C:name` on Windows) is a component of its own.
    let mut components = path.components();
    match (components.next(), components.next()) {
        (Some(std::path::Component::Normal(_)), None) => Ok(()),
        _ => Err("it is not one plain name"),
    }
}

/// The `weight_map` as written (names and shards, in order), and each name's place in it.
type RawWeightMap<'a> = (Vec<(Cow<'a, str>, ShardName<'a>)>, Places<'a>);

/// What the index's JSON holds, before the checks.
struct RawIndex<'a> {
    weight_map: Option<RawWeightMap<'a>>,
    metadata: Option<Vec<(String, serde_json::Value)>>,
}

/// Reads the index's top-level object (of this many bytes), refusing a key given
/// twice.
struct IndexVisitor(usize);

impl<'de> Visitor<'de> for IndexVisitor {
    type Value = RawIndex<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with a `weight_map` object and an optional `metadata` object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> core::result::Result<RawIndex<'de>, A::Error> {
        let mut seen = HashSet::new();
        let mut raw = RawIndex {
            weight_map: None,
            metadata: None,
        };
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("the key `{key}` appears twice")));
            }
            match key.as_str() {
                "weight_map" => raw.weight_map = map.next_value_seed(WeightMap(self.0))?,
                "metadata" => raw.metadata = map.next_value_seed(Entries("metadata", "key"))?,
                // Other keys, which later writers may add, are read and left alone.
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(raw)
    }
}

/// `DeserializeSeed` for a seed that is its own visitor, through `deserialize_$how`.
macro_rules! seed_is_visitor {
    ($seed:ty, $how:ident) => {
        impl<'de> DeserializeSeed<'de> for $seed {
            type Value = <Self as Visitor<'de>>::Value;

            fn deserialize<D: Deserializer<'de>>(
                self,
                deserializer: D,
            ) -> core::result::Result<Self::Value, D::Error> {
                deserializer.$how(self)
            }
        }
    };
}

/// A text of the index, borrowed from it unless it has escapes.
struct Text;

seed_is_visitor!(Text, deserialize_str);

impl<'de> Visitor<'de> for Text {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(
        self,
        text: &'de str,
    ) -> core::result::Result<Self::Value, E> {
        Ok(Cow::Borrowed(text))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> core::result::Result<Self::Value, E> {
        Ok(Cow::Owned(text.to_owned()))
    }
}

/// A `weight_map` value: a shard's file name, or what stands there instead.
enum ShardName<'a> {
    Name(Cow<'a, str>),
    Not(String),
}

impl<'de> Deserialize<'de> for ShardName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> core::result::Result<Self, D::Error> {
        deserializer.deserialize_any(ShardNameVisitor)
    }
}

/// Reads a [`ShardName`]: a string, or any other value (described).
struct ShardNameVisitor;

impl<'de> Visitor<'de> for ShardNameVisitor {
    type Value = ShardName<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a shard's file name")
    }

    fn visit_borrowed_str<E: de::Error>(
        self,
        text: &'de str,
    ) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Name(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Name(Cow::Owned(text.to_owned())))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Not(value.to_string()))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Not(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Not(value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Not(value.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> core::result::Result<Self::Value, E> {
        Ok(ShardName::Not("null".to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> core::result::Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(ShardName::Not("a list".to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> core::result::Result<Self::Value, A::Error> {
        while map
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        Ok(ShardName::Not("an object".to_owned()))
    }
}

/// Reads the `weight_map` object (of an index of this many bytes) in order, refusing a
/// tensor named twice; `null` is no object.
struct WeightMap(usize);

seed_is_visitor!(WeightMap, deserialize_any);

impl<'de> Visitor<'de> for WeightMap {
    type Value = Option<RawWeightMap<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`weight_map` to be an object")
    }

    fn visit_unit<E: de::Error>(self) -> core::result::Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> core::result::Result<Self::Value, A::Error> {
        // Room for as many names as an index of this length holds, at about 64 bytes
        // a line (a few thousand at most: past that, grown as they come).
        let guess = (self.0 / 64).min(1 << 12);
        let mut entries = Vec::with_capacity(guess);
        let mut places = Places::with_capacity_and_hasher(guess, Default::default());
        while let Some(name) = map.next_key_seed(Text)? {
            // (A borrowed name is a pointer to copy; one with escapes is copied.)
            if places.insert(name.clone(), entries.len()).is_some() {
                return Err(de::Error::custom(format!(
                    "the tensor `{name}` appears twice in `weight_map`"
                )));
            }
            entries.push((name, map.next_value()?));
        }
        Ok(Some((entries, places)))
    }
}

/// A key that `keys` holds twice, if any: sorted, it stands beside itself.
fn twice<'k>(keys: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let mut keys: Vec<&str> = keys.collect();
    keys.sort_unstable();
    keys.windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0])
}

/// Reads the object under the key it names (`metadata`) in order, refusing a key given
/// twice; `null` is no object.
struct Entries(&'static str, &'static str);

seed_is_visitor!(Entries, deserialize_any);

impl<'de> Visitor<'de> for Entries {
    type Value = Option<Vec<(String, serde_json::Value)>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` to be an object", self.0)
    }

    fn visit_unit<E: de::Error>(self) -> core::result::Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> core::result::Result<Self::Value, A::Error> {
        let mut entries: Vec<(String, serde_json::Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            entries.push((key, map.next_value()?));
        }
        if let Some(key) = twice(entries.iter().map(|(key, _)| key.as_str())) {
            return Err(de::Error::custom(format!(
                "the {} `{key}` appears twice in `{}`",
                self.1, self.0
            )));
        }
        Ok(Some(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_plain_file_names() {
        for good in [
            "model-00001-of-00002.safetensors",
            "weights.safetensors",
            "a b",
            "..x",
        ] {
            assert_eq!(check_shard_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "/etc/passwd",
            "a/b",
            "a\\b",
            "x\0y",
            "sub/",
        ] {
            assert!(check_shard_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shard_names_as_save_pretrained_makes_them() {
        assert_eq!(shard_name(2, 13), "model-00002-of-00013.safetensors");
        assert!(is_shard_name(&shard_name(2, 13)));
        assert!(!is_shard_name("model.safetensors"));
        assert!(!is_shard_name("model-0001-of-00002.safetensors"));
        assert!(!is_shard_name("model-00001-of-00002.safetensors.tmp"));
    }

    #[test]
    fn duplicates_and_wrong_types_are_errors() {
        fn parse(s: &str) -> Result<Index<'_>> {
            super::parse(Path::new("i.json"), s.as_bytes())
        }
        let ok = parse(r#"{"metadata": {"total_size": 8, "format": "pt"}, "weight_map": {"a": "x.safetensors", "b": "y.safetensors"}}"#).unwrap();
        assert_eq!(ok.weight_map.len(), 2);
        assert_eq!(ok.metadata["total_size"], "8");
        assert_eq!(ok.metadata["format"], "pt");
        for (text, what) in [
            (r#"{"weight_map": {"a": "x", "a": "y"}}"#, "appears twice"),
            (
                r#"{"weight_map": {}, "metadata": {"k": 1, "k": 2}}"#,
                "appears twice in `metadata`",
            ),
            (r#"{"weight_map": null}"#, "no `weight_map`"),
            (r#"{"weight_map": {}, "weight_map": {}}"#, "appears twice"),
            (r#"{"metadata": {}}"#, "no `weight_map`"),
            (r#"{"weight_map": {"a": 3}}"#, "not a file name"),
            (r#"{"weight_map": {"a": "../x.safetensors"}}"#, "separator"),
            (r#"{"weight_map": {"a": "/x.safetensors"}}"#, "separator"),
            (r#"{"weight_map": []}"#, "not valid JSON"),
            (
                r#"{"weight_map": {}, "metadata": 3}"#,
                "`metadata` to be an object",
            ),
            ("[1]", "not valid JSON"),
            ("{", "not valid JSON"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(what), "{text}: {err}");
        }
    }
}
