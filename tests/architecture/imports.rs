//! The house's import graph read from the source: every file's module path, its code without
//! comments and test-only items, the paths it names (use trees, relative, bare), each resolved
//! to the file that defines it, and followed through re-exports for circles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["store", "redis", "flush"]`) for every file under `src/`.
pub(crate) fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            match parts.last().map(String::as_str) {
                Some("lib") | Some("main") if parts.len() == 1 => parts.clear(),
                Some("mod") => {
                    parts.pop();
                }
                _ => {}
            }
            out.insert(parts, p);
        }
    }
    out
}

/// The file's text without comments and without the items marked `#[cfg(test)]` (a
/// `mod tests;` line, a test-only method, or a whole `mod tests { … }` block), wherever they
/// stand in the file.
pub(crate) fn code_of(text: &str) -> String {
    let mut out = String::new();
    // Inside a test-only item: the depth of its braces, and whether its body has begun.
    let mut skipping: Option<(i32, bool)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            // A `//` inside a string (a URL) is rare in this code; cut at the first one that
            // is preceded by whitespace or starts the rest.
            Some(i) if line[..i].ends_with(' ') || i == 0 => &line[..i],
            _ => line,
        };
        if t.starts_with("#[cfg(test)]") {
            skipping = Some((0, false));
            continue;
        }
        if let Some((depth, opened)) = skipping.as_mut() {
            if t.starts_with("#[") && *depth == 0 && !*opened {
                continue; // another attribute of the same item
            }
            let opens = line.matches('{').count() as i32;
            *depth += opens - line.matches('}').count() as i32;
            *opened |= opens > 0;
            if *depth <= 0 && (*opened || line.trim_end().ends_with(';')) {
                skipping = None;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into full paths, each with the name it brings
/// into scope (its last segment, or its `as` alias).
pub(crate) fn expand_named(tree: &str) -> Vec<(Vec<String>, String)> {
    fn parse(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        let mut path = prefix.to_vec();
        let mut word = String::new();
        let mut alias = None;
        while *i < s.len() {
            let c = s[*i];
            if c.is_alphanumeric() || c == '_' || c == '*' {
                word.push(c);
                *i += 1;
            } else if c == ':' {
                if !word.is_empty() {
                    path.push(std::mem::take(&mut word));
                }
                *i += 1;
            } else if c == '{' {
                if !word.is_empty() {
                    path.push(std::mem::take(&mut word));
                }
                *i += 1;
                loop {
                    parse(s, i, &path, out);
                    if *i < s.len() && s[*i] == ',' {
                        *i += 1;
                        continue;
                    }
                    if *i < s.len() && s[*i] == '}' {
                        *i += 1;
                    }
                    break;
                }
                return;
            } else if c == ',' || c == '}' {
                break;
            } else if c.is_whitespace() {
                *i += 1;
                // `as name`: the name it is known by.
                let rest: String = s[*i..].iter().take(3).collect();
                if rest.starts_with("as ") {
                    *i += 3;
                    let mut name = String::new();
                    while *i < s.len() && (s[*i].is_alphanumeric() || s[*i] == '_') {
                        name.push(s[*i]);
                        *i += 1;
                    }
                    alias = Some(name);
                }
            } else {
                *i += 1;
            }
        }
        if !word.is_empty() {
            path.push(word);
        }
        if path.len() > prefix.len() {
            let name = alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
            out.push((path, name));
        }
    }
    let chars: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    parse(&chars, &mut i, &[], &mut out);
    out
}

/// Every module path this file refers to, made absolute: the paths of its `use` items and
/// every path in its code, whether it starts with `crate::`, `super::` or `self::`, or bare
/// (`fire::Spent` inside `shard/mod.rs`, a child module; `webhook::meta::X` after
/// `use crate::sink::webhook`, a name a `use` brought in).
pub(crate) fn references(
    mods: &BTreeMap<Vec<String>, PathBuf>,
    module: &[String],
    code: &str,
) -> Vec<Vec<String>> {
    let mut raw = Vec::new();
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // `use` items (possibly spanning lines).
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let starts_item = before.is_empty()
            || before.ends_with('\n')
            || before.ends_with(' ') && before.trim_end().ends_with(['\n', '{', ';', ')'])
            || before.ends_with("pub ")
            || before.ends_with("pub(crate) ")
            || before.ends_with("pub(super) ");
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if starts_item {
            for (path, name) in expand_named(&after[..end]) {
                if name != "*" && name != "self" {
                    names.insert(name, path.clone());
                }
                raw.push(path);
            }
        }
        rest = &after[end.min(after.len())..];
    }
    // Paths in code: any run of `name::name…` that starts a token.
    let chars: Vec<char> = code.chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let starts = word(chars[i])
            && !chars[i].is_ascii_digit()
            && (i == 0 || !(word(chars[i - 1]) || chars[i - 1] == ':' || chars[i - 1] == '#'));
        if !starts {
            i += 1;
            continue;
        }
        let end = (i..chars.len())
            .find(|&j| !(word(chars[j]) || chars[j] == ':'))
            .unwrap_or(chars.len());
        let token: String = chars[i..end].iter().collect();
        if token.contains("::") {
            raw.push(
                token
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
        i = end;
    }
    raw.into_iter()
        .filter_map(|p| resolve(mods, module, &names, p, 0))
        .collect()
}

/// A path as written in `module`, made absolute; `None` for what lies outside the crate (std,
/// other crates) or is not a path to a module's item (a type's associated item).
///
/// Inside `a/b.rs` (module a::b), `super` is `a`; inside `a/mod.rs` (module a), `super` is the
/// crate root and `self` is `a`. A bare first name is a child module of `module` if there is
/// a file for it, else a name that one of the file's `use` items brought in.
pub(crate) fn resolve(
    mods: &BTreeMap<Vec<String>, PathBuf>,
    module: &[String],
    names: &BTreeMap<String, Vec<String>>,
    p: Vec<String>,
    depth: usize,
) -> Option<Vec<String>> {
    let first = p.first()?.clone();
    let rest = p.iter().skip(1).cloned();
    match first.as_str() {
        "crate" => Some(rest.collect()),
        "self" => Some(module.iter().cloned().chain(rest).collect()),
        "super" => {
            let mut m = module.to_vec();
            let mut it = p.iter().peekable();
            while it.peek().map(|s| s.as_str()) == Some("super") {
                m.pop()?;
                it.next();
            }
            m.extend(it.cloned());
            Some(m)
        }
        _ => {
            let mut child = module.to_vec();
            child.push(first.clone());
            if mods.contains_key(&child) {
                child.extend(rest);
                return Some(child);
            }
            let named = names.get(&first)?;
            if depth > 4 || named.first() == Some(&first) && named.len() == 1 {
                return None;
            }
            let mut full = named.clone();
            full.extend(rest);
            resolve(mods, module, names, full, depth + 1)
        }
    }
}

/// The file-module a path lands in: its longest prefix that is a file.
pub(crate) fn owner<'a>(
    mods: &'a BTreeMap<Vec<String>, PathBuf>,
    path: &[String],
) -> Option<&'a Vec<String>> {
    (0..=path.len())
        .rev()
        .find_map(|n| mods.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// The names a file publishes for items defined elsewhere (`pub use fire::Spent;`), each with
/// the path it stands for, made absolute.
pub(crate) fn reexports(
    mods: &BTreeMap<Vec<String>, PathBuf>,
    module: &[String],
    code: &str,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].trim_end_matches(' ');
        let public = ["pub", "pub(crate)", "pub(super)"].iter().any(|p| {
            before.ends_with(p) && before[..before.len() - p.len()].ends_with(['\n', ' '])
        });
        if !public {
            continue;
        }
        let after = &code[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        for (path, name) in expand_named(&after[..end]) {
            if name == "*" {
                continue;
            }
            if let Some(full) = resolve(mods, module, &BTreeMap::new(), path, 0) {
                out.insert(name, full);
            }
        }
    }
    out
}

/// The file a path's item is defined in: its longest prefix that is a file, followed through
/// the re-exports of that file (a child that names `super::Spent`, which `mod.rs` publishes
/// from `fire.rs`, depends on `fire.rs`).
pub(crate) fn home<'a>(
    mods: &'a BTreeMap<Vec<String>, PathBuf>,
    exports: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    path: &[String],
) -> Option<&'a Vec<String>> {
    let mut path = path.to_vec();
    for _ in 0..8 {
        let o = owner(mods, &path)?;
        let Some(next) = path.get(o.len()).and_then(|name| exports.get(o)?.get(name)) else {
            return Some(o);
        };
        let mut full = next.clone();
        full.extend(path[o.len() + 1..].iter().cloned());
        if full == path {
            return Some(o);
        }
        path = full;
    }
    owner(mods, &path)
}

/// Which file imports which. With `follow`, a path is charged to the file that defines its
/// item, through re-exports (what a circle is made of); without, to the file it names (what
/// the rules between parts are about: `api` may name `engine::Scheduled`, which `engine`
/// re-exports from `op`).
pub(crate) fn graph(follow: bool) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let mut codes = BTreeMap::new();
    for (module, file) in &mods {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "tests.rs" || name.ends_with("_tests.rs") || module.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        codes.insert(module.clone(), code_of(&text));
    }
    let exports: BTreeMap<_, _> = codes
        .iter()
        .map(|(module, code)| (module.clone(), reexports(&mods, module, code)))
        .collect();
    let mut edges = BTreeMap::new();
    for (module, code) in &codes {
        let mut deps = BTreeSet::new();
        for r in references(&mods, module, code) {
            let o = if follow {
                home(&mods, &exports, &r)
            } else {
                owner(&mods, &r)
            };
            if let Some(o) = o {
                if o != module && !o.is_empty() {
                    deps.insert(o.clone());
                }
            }
        }
        edges.insert(module.clone(), deps);
    }
    edges
}
