//! The import rules of `docs/ARCHITECTURE.md`, checked on the source: which part may import
//! which, and no import circles between files.
//!
//! A file's imports are the `crate::…`, `super::…` and `self::…` paths in its `use` items and
//! in its code (comments and `#[cfg(test)]` sections are skipped; test-only files such as
//! `tests.rs` are not parsed). Each path is resolved to the file that defines the longest
//! prefix of it that is a module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["store", "redis", "flush"]`) for every file under `src/`.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
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

/// The file's text without comments and without its `#[cfg(test)]` tail.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            // A `//` inside a string (a URL) is rare in this code; cut at the first one that
            // is preceded by whitespace or starts the rest.
            Some(i) if line[..i].ends_with(' ') || i == 0 => &line[..i],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into full paths.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn parse(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        let mut word = String::new();
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
                // `as name`: skip the alias.
                let rest: String = s[*i..].iter().take(3).collect();
                if rest.starts_with("as ") {
                    *i += 3;
                    while *i < s.len() && (s[*i].is_alphanumeric() || s[*i] == '_') {
                        *i += 1;
                    }
                }
            } else {
                *i += 1;
            }
        }
        if !word.is_empty() {
            path.push(word);
        }
        if path.len() > prefix.len() {
            out.push(path);
        }
    }
    let chars: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    parse(&chars, &mut i, &[], &mut out);
    out
}

/// Every module path this file refers to, made absolute.
fn references(module: &[String], is_mod_rs: bool, code: &str) -> Vec<Vec<String>> {
    let mut raw = Vec::new();
    // `use` items (possibly spanning lines).
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let starts_item = before.is_empty()
            || before.ends_with('\n')
            || before.ends_with(' ') && before.trim_end().ends_with(['\n', '{', ';', ')'])
            || before.ends_with("pub ")
            || before.ends_with("pub(crate) ");
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if starts_item {
            raw.extend(expand(&after[..end]));
        }
        rest = &after[end.min(after.len())..];
    }
    // Paths in code: crate::a::b, super::a, self::a.
    for anchor in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(anchor) {
            let start = from + at;
            from = start + anchor.len();
            let prev = code[..start].chars().last();
            if prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            raw.push(
                path.split("::")
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    // Resolve relative paths. Inside `a/b.rs` (module a::b), `super` is `a`; inside
    // `a/mod.rs` (module a), `super` is the crate root and `self` is `a`.
    raw.into_iter()
        .filter_map(|p: Vec<String>| {
            let first = p.first()?.clone();
            let mut base: Vec<String> = match first.as_str() {
                "crate" => Vec::new(),
                "self" => module.to_vec(),
                "super" => {
                    let mut m = module.to_vec();
                    let mut it = p.iter().peekable();
                    let mut ups = 0;
                    while it.peek().map(|s| s.as_str()) == Some("super") {
                        ups += 1;
                        it.next();
                    }
                    let _ = is_mod_rs;
                    for _ in 0..ups {
                        m.pop()?;
                    }
                    let mut full = m;
                    full.extend(it.cloned());
                    return Some(full);
                }
                _ => return None,
            };
            base.extend(p.into_iter().skip(1));
            Some(base)
        })
        .collect()
}

/// The file-module a path lands in: its longest prefix that is a file.
fn owner<'a>(mods: &'a BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<&'a Vec<String>> {
    (0..=path.len())
        .rev()
        .find_map(|n| mods.get_key_value(&path[..n]).map(|(k, _)| k))
}

fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let mut edges = BTreeMap::new();
    for (module, file) in &mods {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "tests.rs" || name.ends_with("_tests.rs") || module.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        let code = code_of(&text);
        let mut deps = BTreeSet::new();
        for r in references(module, name == "mod.rs", &code) {
            if let Some(o) = owner(&mods, &r) {
                if o != module && !o.is_empty() {
                    deps.insert(o.clone());
                }
            }
        }
        edges.insert(module.clone(), deps);
    }
    edges
}

fn show(m: &[String]) -> String {
    m.join("::")
}

fn part(m: &[String]) -> &str {
    m.first().map(String::as_str).unwrap_or("")
}

/// Whether module `m` is `path` or lies under it.
fn is(m: &[String], path: &[&str]) -> bool {
    m.len() >= path.len() && m.iter().zip(path).all(|(a, b)| a == b)
}

#[test]
fn the_parts_import_only_what_the_architecture_allows() {
    let g = graph();
    let mut broken = Vec::new();
    for (from, deps) in &g {
        for to in deps {
            let (a, b) = (part(from), part(to));
            if is(to, &["wheel", "table"]) && a != "wheel" {
                broken.push(format!(
                    "{} imports wheel::table: the table is the wheel's own (its timers are timer::PackedTimer)",
                    show(from)
                ));
            }
            if is(to, &["sink", "webhook", "meta"]) && !is(from, &["sink", "webhook"]) {
                broken.push(format!(
                    "{} imports sink::webhook::meta: delivery state is the webhook sink's own; other parts use what sink::webhook exports",
                    show(from)
                ));
            }
            if a == b {
                continue;
            }
            if b == "schedule" {
                broken.push(format!(
                    "{} imports {}: schedule is a leaf that no part uses yet (the binary's `schedules` command does)",
                    show(from),
                    show(to)
                ));
            }
            if b == "page" && !matches!(a, "shard" | "engine") {
                broken.push(format!(
                    "{} imports {}: paging is the shard's, started by the engine",
                    show(from),
                    show(to)
                ));
            }
            let why = match a {
                "page"
                    if !matches!(b, "units" | "timer" | "cooperate")
                        && !is(to, &["store", "journal", "io"])
                        && !is(to, &["store", "journal", "faults"]) =>
                {
                    Some("page imports of the store only the journal's io (its I/O thread and Disk; faults in tests), and otherwise only units, timer and cooperate")
                }
                "wheel" if !matches!(b, "units" | "timer") => {
                    Some("wheel imports only units and timer")
                }
                "clock" if b != "units" => Some("clock imports only units"),
                "schedule" if b != "units" => Some("schedule, the recurring-schedule calculus, imports only units"),
                "store" | "sink" if matches!(b, "shard" | "engine" | "api") => {
                    Some("store and sink never import shard, engine or api")
                }
                "store" if b == "sink" => {
                    Some("store never imports sink: it sees a fire as a timer::FiredTimer")
                }
                "store" if b == "cluster" => Some(
                    "store never imports cluster: leases are held above the store, which fences a write with the holder it is handed",
                ),
                "cluster" if matches!(b, "shard" | "engine" | "api" | "sink") => Some(
                    "cluster (membership, assignment, leases) sits beside the store: it never imports shard, engine, api or sink",
                ),
                "api" if matches!(b, "shard" | "ring" | "op" | "store") => {
                    Some("api reaches a shard only through engine::Handle")
                }
                "metrics" | "units" | "op" | "partition" | "quota" | "error" | "cpus"
                | "cooperate" | "timer"
                    if matches!(b, "shard" | "engine" | "api" | "store" | "sink" | "cluster") =>
                {
                    Some("the shared leaves import no part above them")
                }
                "timer" if b != "units" => {
                    Some("timer, the one leaf every part speaks of a timer in, imports only units")
                }
                "config" if matches!(b, "shard" | "engine" | "api") => {
                    Some("config describes the service; it never imports what runs it")
                }
                _ => None,
            };
            if let Some(why) = why {
                broken.push(format!("{} imports {}: {why}", show(from), show(to)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "import rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let g = graph();
    // Tarjan-free: a DFS that reports the first cycle through each file.
    let mut cycles = BTreeSet::new();
    for start in g.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in g.get(&node).into_iter().flatten() {
                if next == start {
                    let mut c: Vec<String> = path.iter().map(|m| show(m)).collect();
                    let min = c
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, s)| s.as_str())
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    c.rotate_left(min);
                    cycles.insert(c.join(" → "));
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import circles between files:\n{}",
        cycles.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_checker_reads_use_trees_and_relative_paths() {
    let paths = expand("super::{a, b::{c, d as e}, f::*}");
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        ["super::a", "super::b::c", "super::b::d", "super::f::*"]
    );
    let m: Vec<String> = vec!["store".into(), "redis".into(), "flush".into()];
    let r = references(
        &m,
        false,
        "use super::conn::Conn;\nfn f() { crate::units::x(); }\n",
    );
    assert!(r.contains(&vec![
        "store".to_string(),
        "redis".into(),
        "conn".into(),
        "Conn".into()
    ]));
    assert!(r.contains(&vec!["units".to_string(), "x".into()]));
}
