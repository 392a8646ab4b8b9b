//! The crate's layers, read from its sources: data flows down, never back up. A module
//! names only modules of its own layer or below (`crate::...` in code; doc comments and
//! doc-only imports are not dependencies), so that, for one, the handle (`tensor`)
//! knows no interpreter: what releases a Python-owned tensor is the `interpreter`
//! leaf below it, never `python`.

use std::path::{Path, PathBuf};

/// The layers, lowest first (ARCHITECTURE.md draws them).
const LAYERS: &[&[&str]] = &[
    &["ffi"],
    &["dtype", "device"],
    &["error"],
    &["interpreter"],
    &["layout"],
    &["tensor"],
    &["batch", "traits"],
    &["bridge", "safetensors"],
    &["python"],
    &["guide", "__private"],
];

/// The modules of the crate root's public names, for `crate::Name` paths.
const REEXPORTS: &[(&str, &str)] = &[
    ("ManagedTensor", "tensor"),
    ("ByteSpan", "tensor"),
    ("ReadOnlyLegacyError", "tensor"),
    ("Error", "error"),
    ("Result", "error"),
    ("DataType", "dtype"),
    ("Element", "dtype"),
    ("for_each_element", "dtype"),
    ("__if_half", "dtype"),
    ("__if_complex", "dtype"),
    ("Device", "device"),
    ("TensorBatch", "batch"),
    ("FromDLPack", "traits"),
    ("ToDLPack", "traits"),
    ("LoadReport", "traits"),
    ("Selection", "traits"),
    ("Expected", "traits"),
    ("DLPackArray", "bridge"),
    ("ndarray", "bridge"),
];

fn layer_of(module: &str) -> Option<usize> {
    let module = REEXPORTS
        .iter()
        .find(|(name, _)| *name == module)
        .map_or(module, |(_, home)| home);
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules `line` names as `crate::module` or `$crate::module`, outside comments
/// and doc-only imports.
fn named_modules(line: &str) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") || code.starts_with("#[cfg(doc)]") {
        return Vec::new();
    }
    let code = code.split("//").next().unwrap_or(code);
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // `__private` re-exports the external crates that exported macros name
        // (`half`, `num_complex`): those are not this crate's modules.
        let external = ["__private::half", "__private::Complex"]
            .iter()
            .any(|path| after.starts_with(path));
        if !name.is_empty() && !external {
            found.push(name);
        }
        rest = after;
    }
    found
}

#[test]
#[cfg_attr(miri, ignore = "reads the crate's source files")]
fn data_flows_down_and_never_back_up() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let own = relative
            .iter()
            .next()
            .and_then(|c| c.to_str())
            .map(|c| c.trim_end_matches(".rs"))
            .unwrap();
        if own == "lib" {
            continue;
        }
        let own_layer = layer_of(own)
            .unwrap_or_else(|| panic!("{}: module `{own}` is in no layer", relative.display()));
        let text = std::fs::read_to_string(file).unwrap();
        let mut doc_import = false;
        for (number, line) in text.lines().enumerate() {
            // A `use` right after `#[cfg(doc)]` is for links only.
            let is_doc_import = doc_import;
            doc_import = line.trim_start().starts_with("#[cfg(doc)]");
            if is_doc_import {
                continue;
            }
            for module in named_modules(line) {
                let Some(layer) = layer_of(&module) else {
                    problems.push(format!(
                        "{}:{}: `crate::{module}` is in no layer (add it to LAYERS or REEXPORTS)",
                        relative.display(),
                        number + 1
                    ));
                    continue;
                };
                if layer > own_layer {
                    problems.push(format!(
                        "{}:{}: `{own}` reaches up to `{module}`",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
#[cfg_attr(miri, ignore = "reads the crate's source files")]
fn the_handle_knows_no_interpreter() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tensor"),
        &mut files,
    );
    assert!(!files.is_empty());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            assert!(
                !named_modules(line).iter().any(|m| m == "python"),
                "{}:{}: the handle reaches up into `python`",
                file.display(),
                number + 1
            );
        }
    }
}

#[test]
fn the_checker_sees_what_it_must() {
    assert_eq!(
        named_modules("    crate::python::release(|| $crate::tensor::x())"),
        ["python", "tensor"]
    );
    assert!(named_modules("/// see [`crate::python`]").is_empty());
    assert!(named_modules("$crate::__private::half::f16").is_empty());
    assert_eq!(named_modules("$crate::__private::Result"), ["__private"]);
    assert!(named_modules("    // crate::python").is_empty());
    assert!(layer_of("tensor") < layer_of("python"));
    assert!(layer_of("interpreter") < layer_of("tensor"));
}
