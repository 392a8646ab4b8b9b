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
    &["bridge", "safetensors", "arrow"],
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

// No loop inside a layer: between the modules of one folder (the files of `python/`,
// of `safetensors/`, ...), and between the top-level modules of one layer, arrows run
// one way. An arrow is a path the code names: `crate::...`, `super::...` and
// `self::...`, in `use` trees and in expressions, followed through the `use` re-exports
// of a `mod.rs` (or `lib.rs`) to the module that defines the name. (A macro's
// `$crate::...` is an arrow of its callers, and not counted here.)

/// One token of Rust code: an identifier (keywords included), `::`, or one punctuation
/// character; comments, strings and character literals are left out.
#[derive(Debug, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let skip_to = |i: &mut usize, line: &mut usize, end: usize| {
        *line += chars[*i..end.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
        *i = end;
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == '/' {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            i = end;
        } else if c == '/' && next == '*' {
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            skip_to(&mut i, &mut line, j);
        } else if (c == 'b' || c == 'c')
            && next == 'r'
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
            && matches!(chars.get(i + 2), Some('#' | '"'))
        {
            // A raw byte or C string (br"...", cr#"..."#): the raw string after its prefix.
            i += 1;
        } else if c == 'r' && (next == '#' || next == '"') && {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            chars.get(i + 1 + hashes) == Some(&'"')
        } {
            // A raw string: r"..." or r#"..."#.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let rest: String = chars[body..].iter().collect();
            let end = rest.find(&close).map_or(chars.len(), |at| {
                body + rest[..at].chars().count() + close.chars().count()
            });
            skip_to(&mut i, &mut line, end);
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            skip_to(&mut i, &mut line, j + 1);
        } else if c == '\'' {
            // A character literal ('x', '\n', '{'), or a lifetime ('a).
            if next == '\\' {
                let end = (i + 3..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .unwrap_or(chars.len());
                i = end + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && next == ':' {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.into(),
                line,
            });
            i += 1;
        }
    }
    out
}

fn is_ident(token: Option<&Token>) -> bool {
    token.is_some_and(|t| t.text.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

/// The paths of the tree that starts at `tokens[*at]` (`a::b::{c, d::e as f, *}`),
/// each with the name it binds (its last segment, or its alias; `*` for a glob).
fn use_tree(
    tokens: &[Token],
    at: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path = prefix.to_vec();
    loop {
        let Some(token) = tokens.get(*at) else { return };
        match token.text.as_str() {
            "{" => {
                *at += 1;
                while tokens.get(*at).is_some_and(|t| t.text != "}") {
                    use_tree(tokens, at, &path, out);
                    if tokens.get(*at).is_some_and(|t| t.text == ",") {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            "*" => {
                *at += 1;
                out.push((path, "*".into()));
                return;
            }
            _ if is_ident(Some(token)) => {
                if token.text == "self"
                    && !path.is_empty()
                    && tokens.get(*at + 1).is_none_or(|t| t.text != "::")
                {
                    // `a::{self}`: the module `a` itself.
                } else {
                    path.push(token.text.clone());
                }
                *at += 1;
                if tokens.get(*at).is_some_and(|t| t.text == "::") {
                    *at += 1;
                    continue;
                }
                let mut name = path.last().cloned().unwrap_or_default();
                if tokens.get(*at).is_some_and(|t| t.text == "as") {
                    name = tokens
                        .get(*at + 1)
                        .map(|t| t.text.clone())
                        .unwrap_or_default();
                    *at += 2;
                }
                out.push((path, name));
                return;
            }
            _ => return,
        }
    }
}

/// What one file says, for the loop check: the paths it names from `crate`, `super`
/// and `self` (with their line and the inline module they are named in), and its `use`
/// items (re-exports among them), with the names they bind.
#[derive(Default)]
struct Said {
    arrows: Vec<(Vec<String>, usize, Vec<String>)>,
    uses: Vec<(Vec<String>, String)>,
}

fn said(code: &str) -> Said {
    let tokens = tokens(code);
    let mut said = Said::default();
    // The inline modules open here (`mod tests { ... }`), with the brace depth each
    // closes at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut at = 0;
    let mut doc_only = false;
    while at < tokens.len() {
        let text = tokens[at].text.as_str();
        let is =
            |offset: usize, what: &str| tokens.get(at + offset).is_some_and(|t| t.text == what);
        if text == "#" && is(1, "[") && is(2, "cfg") && is(3, "(") && is(4, "doc") && is(5, ")") {
            // `#[cfg(doc)] use ...`: an import for links only (on anything else, a
            // field or a parameter, the attribute hides no path).
            doc_only = matches!(
                tokens.get(at + 7).map(|t| t.text.as_str()),
                Some("use" | "pub")
            );
            at += 7;
            continue;
        }
        match text {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline
                    .last()
                    .is_some_and(|(_, at_depth)| *at_depth == depth)
                {
                    inline.pop();
                }
            }
            "mod" if is_ident(tokens.get(at + 1)) && is(2, "{") => {
                inline.push((tokens[at + 1].text.clone(), depth));
            }
            _ => {}
        }
        let inside: Vec<String> = inline.iter().map(|(name, _)| name.clone()).collect();
        if text == "use" {
            let line = tokens[at].line;
            at += 1;
            if tokens.get(at).is_some_and(|t| t.text == "::") {
                at += 1;
            }
            let mut paths = Vec::new();
            use_tree(&tokens, &mut at, &[], &mut paths);
            if !std::mem::take(&mut doc_only) {
                if inside.is_empty() {
                    said.uses.extend(paths.iter().cloned());
                }
                for (path, _) in paths {
                    if matches!(
                        path.first().map(String::as_str),
                        Some("crate" | "super" | "self")
                    ) {
                        said.arrows.push((path, line, inside.clone()));
                    }
                }
            }
            continue;
        }
        if text == ";" || text == "}" {
            doc_only = false;
        }
        // A path in code: `crate::`, `$crate::`, `super::`, `self::` (never the
        // visibility `pub(in crate::x)`, nor the continuation of another path).
        let starts = matches!(text, "crate" | "super" | "self") && is(1, "::");
        let continues = at > 0 && tokens[at - 1].text == "::";
        let visibility = at > 0 && tokens[at - 1].text == "in";
        // (`$crate::` is a macro's: an arrow of the code that calls it.)
        let in_macro = at > 0 && tokens[at - 1].text == "$";
        if starts && !continues && !visibility && !in_macro && !doc_only {
            let line = tokens[at].line;
            let mut path = vec![text.to_owned()];
            let mut j = at + 1;
            while tokens.get(j).is_some_and(|t| t.text == "::") && is_ident(tokens.get(j + 1)) {
                path.push(tokens[j + 1].text.clone());
                j += 2;
            }
            said.arrows.push((path, line, inside));
            at = j;
            continue;
        }
        at += 1;
    }
    said
}

/// A module's path from the crate root, from its file's: `lib.rs` is the root,
/// `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
fn module_of(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// An arrow between two modules of one parent: (parent, from, to).
type Arrow = (Vec<String>, Vec<String>, Vec<String>);

/// The loops between the modules of one parent: for each, its modules in order and the
/// arrows that close it, `file:line`.
fn loops(files: &[(String, String)]) -> Vec<String> {
    let modules: Vec<Vec<String>> = files.iter().map(|(path, _)| module_of(path)).collect();
    let said: Vec<Said> = files.iter().map(|(_, code)| said(code)).collect();
    let known = |m: &[String]| modules.iter().any(|k| k == m);
    // Resolves an absolute path to the module that defines its item, through re-exports.
    let resolve = |mut path: Vec<String>| -> Vec<String> {
        for _ in 0..16 {
            let mut module = path.clone();
            while !known(&module) && !module.is_empty() {
                module.pop();
            }
            let Some(name) = path.get(module.len()) else {
                return module;
            };
            let Some(file) = modules.iter().position(|m| *m == module) else {
                return module;
            };
            let found = said[file].uses.iter().find(|(_, bound)| bound == name);
            let Some((target, _)) = found else {
                return module;
            };
            let mut absolute = absolute_of(&module, &[], target);
            if absolute.is_empty() || absolute == path[..=module.len()] {
                return module;
            }
            // A `use` of a child module's item, or of another crate's (`use
            // pyo3::...`): only a module of the crate is followed.
            if !known(&absolute[..1]) && !matches!(target[0].as_str(), "crate" | "super" | "self") {
                let child: Vec<String> = module.iter().chain(&target[..1]).cloned().collect();
                if !known(&child) {
                    return module;
                }
                absolute = module.iter().chain(target.iter()).cloned().collect();
            }
            absolute.extend(path[module.len() + 1..].iter().cloned());
            path = absolute;
        }
        path
    };
    // (parent, from, to) -> where the arrow is first seen.
    let mut arrows: std::collections::BTreeMap<Arrow, String> = Default::default();
    for (file, (module, said)) in modules.iter().zip(&said).enumerate() {
        for (path, line, inside) in &said.arrows {
            let target = resolve(absolute_of(module, inside, path));
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue; // into its own subtree, or an ancestor's own item
            }
            let parent = module[..common].to_vec();
            let key = (
                parent,
                module[..=common].to_vec(),
                target[..=common].to_vec(),
            );
            arrows
                .entry(key)
                .or_insert_with(|| format!("{}:{line}", files[file].0));
        }
    }
    // Two siblings that reach each other, directly or through others: a loop.
    let mut found = Vec::new();
    let edges: Vec<_> = arrows.keys().collect();
    for (parent, from, to) in &edges {
        let mut seen = vec![to.clone()];
        let mut trail = vec![vec![from.clone(), to.clone()]];
        while let Some(route) = trail.pop() {
            let last = route.last().unwrap();
            if last == from {
                let closing: Vec<&String> = route
                    .windows(2)
                    .map(|w| &arrows[&(parent.clone(), w[0].clone(), w[1].clone())])
                    .collect();
                let names: Vec<String> = route.iter().map(|m| m.join("::")).collect();
                let line = format!(
                    "{} ({})",
                    names.join(" -> "),
                    closing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                if !found.contains(&line) && from < to {
                    found.push(line);
                }
                break;
            }
            for (p, a, b) in &edges {
                if p == parent && a == last && !seen.contains(b) {
                    seen.push(b.clone());
                    let mut next = route.clone();
                    next.push(b.clone());
                    trail.push(next);
                }
            }
        }
    }
    found
}

/// `path` (from `crate`, `super`, `self`, or relative) made absolute, named in
/// `module` (inside its inline modules `inside`).
fn absolute_of(module: &[String], inside: &[String], path: &[String]) -> Vec<String> {
    let mut here: Vec<String> = module.iter().chain(inside).cloned().collect();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            here.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                here.pop();
                rest = &rest[1..];
            }
        }
        _ => {}
    }
    here.extend(rest.iter().cloned());
    here
}

#[test]
#[cfg_attr(miri, ignore = "reads the crate's source files")]
fn no_loop_inside_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    sources(&src, &mut paths);
    paths.sort();
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).unwrap();
            let relative = relative.to_str().unwrap().replace('\\', "/");
            (relative, std::fs::read_to_string(path).unwrap())
        })
        .collect();
    let found = loops(&files);
    assert!(
        found.is_empty(),
        "loops inside a layer:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_loop_check_sees_arrows_through_re_exports() {
    let file = |path: &str, code: &str| (path.to_owned(), code.to_owned());
    // `b` reaches `c` through `a`'s re-export, `c` reaches `b` by its path, in code.
    let crate_with_loop = [
        file("lib.rs", "mod a;\npub use a::Thing;"),
        file(
            "a/mod.rs",
            "mod b;\nmod c;\npub use c::{Other, Thing as Thing};",
        ),
        file("a/b.rs", "use super::Thing;\npub fn f() {}"),
        file("a/c.rs", "pub struct Thing;\nfn g() { super::b::f() }"),
    ];
    assert_eq!(
        loops(&crate_with_loop),
        ["a::b -> a::c -> a::b (a/b.rs:1, a/c.rs:2)"]
    );
    // The same through the crate root's re-export, and with a `use` group.
    let through_root = [
        file("lib.rs", "mod a;\nmod d;\npub use a::Thing;"),
        file("a/mod.rs", "mod c;\npub use c::Thing;"),
        file("a/c.rs", "use crate::{d::h};\npub struct Thing;"),
        file("d.rs", "fn h() -> crate::Thing { todo!() }"),
    ];
    assert_eq!(loops(&through_root), ["a -> d -> a (a/c.rs:1, d.rs:1)"]);
    // What could hide an arrow does not: an escaped quote, a raw byte string holding a
    // backslash, `#[cfg(doc)]` on a field.
    let hidden = [
        file("lib.rs", "mod a;"),
        file("a/mod.rs", "mod b;\nmod c;"),
        file(
            "a/b.rs",
            "const Q: char = '\\'';\nconst R: &[u8] = br\"\\\";\nfn f() { super::c::g() }",
        ),
        file(
            "a/c.rs",
            "struct S {\n    #[cfg(doc)]\n    f: u8,\n    g: super::b::T,\n}",
        ),
    ];
    assert_eq!(
        loops(&hidden),
        ["a::b -> a::c -> a::b (a/b.rs:3, a/c.rs:4)"]
    );
    // Not loops: a child using its parent's own items, a module using its own
    // children, a test module's `super`, comments, strings, doc-only imports.
    let no_loop = [
        file("lib.rs", "mod a;\nmod b;"),
        file(
            "a/mod.rs",
            "mod x;\nmod y;\npub fn own() {}\nfn f() { x::g(); }",
        ),
        file("a/x.rs", "use super::own;\npub fn g() { super::y::h(); }"),
        file(
            "a/y.rs",
            "pub fn h() {}\n// super::x::g()\nconst S: &str = \"super::x::g\";\n#[cfg(doc)]\nuse super::x;\n#[cfg(test)]\nmod tests { use super::*; fn t() { super::h(); } }",
        ),
        file("b.rs", "fn f() { crate::a::own() }"),
    ];
    assert!(loops(&no_loop).is_empty(), "{:?}", loops(&no_loop));
}
