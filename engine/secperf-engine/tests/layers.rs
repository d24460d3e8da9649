//! The engine's modules form layers without cycles (engine/ARCHITECTURE-engine.md):
//!
//!   error < wire < rt < spec < kinds::{base, timed} < one module per kind
//!         < kinds (the dispatch) < server and the crate root
//!
//! A module may use (`crate::…`, `super::…`, `self::…`, or a child module by
//! name) only modules of its own layer or lower ones; a kind may not use another
//! kind; and no two modules may use each other, directly or through others
//! (each module is one file; a module that re-exports an item is a module used).
//! secperf-nfq's modules must have no cycle either. `make lint` runs this test.
//!
//! The check reads the sources as text: comments, strings and `#[cfg(test)]`
//! modules are left out; everything else that names a module counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path, segments from the crate root (the root itself is empty).
type Module = Vec<String>;

/// The engine's layers, lowest first: (module path prefix, layer). The
/// longest matching prefix decides; `*` marks the layer of one module per kind.
const ENGINE_LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("wire", 1),
    ("rt", 2),
    ("spec", 3),
    ("kinds::base", 4),
    ("kinds::timed", 4),
    ("kinds::*", 5),
    ("kinds", 6),
    ("server", 7),
];

/// The crate root (lib.rs) is the top layer.
const ROOT_LAYER: u32 = 7;

const LAYER_NAMES: [&str; 8] = [
    "error",
    "wire",
    "rt",
    "spec",
    "kinds::base/timed",
    "a kind",
    "kinds (dispatch)",
    "server/root",
];

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// The layer of `m` (the longest matching prefix; an exact one before `*`),
/// and for a kind's module the kind; None: in no layer.
fn layer(m: &[String]) -> Option<(u32, Option<String>)> {
    if m.is_empty() {
        return Some((ROOT_LAYER, None));
    }
    ENGINE_LAYERS
        .iter()
        .filter_map(|(prefix, l)| {
            let segs: Vec<&str> = prefix.split("::").collect();
            let fits =
                segs.len() <= m.len() && segs.iter().zip(m).all(|(s, x)| *s == "*" || s == x);
            let star = segs.last() == Some(&"*");
            let kind = (fits && star).then(|| m[segs.len() - 1].clone());
            fits.then_some(((segs.len(), !star), *l, kind))
        })
        .max_by_key(|b| b.0)
        .map(|b| (b.1, b.2))
}

// ------------------------------------------------------------ reading sources

/// The module a source file is, from its path under `src/`.
fn module_of(rel: &str) -> Option<Module> {
    let rel = rel.strip_suffix(".rs")?;
    let mut segs: Vec<String> = rel.split('/').map(str::to_string).collect();
    match segs.last().map(String::as_str) {
        Some("lib") if segs.len() == 1 => Some(Vec::new()),
        Some("main") if segs.len() == 1 => None, // the binary is a crate of its own
        Some("mod") => {
            segs.pop();
            Some(segs)
        }
        _ => Some(segs),
    }
}

/// Every `.rs` file under `dir`, by path relative to it.
fn read_tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read the source directory") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(dir).expect("under src").to_string_lossy();
                let text = std::fs::read_to_string(&p).expect("a readable source");
                out.insert(rel.replace('\\', "/"), text);
            }
        }
    }
    out
}

/// The source with comments, string and char literals blanked out.
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident_char(prev(&c, i))
        {
            // A raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), kept.
            if next == Some('\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c[i]);
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn prev(c: &[char], i: usize) -> char {
    if i == 0 {
        ' '
    } else {
        c[i - 1]
    }
}

fn ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The source without its `#[cfg(test)] mod … { … }` blocks.
fn without_tests(src: &str) -> String {
    let mut s = src.to_string();
    while let Some(at) = s.find("#[cfg(test)]") {
        let rest = &s[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        let skip = rest.len() - trimmed.len();
        let Some(after_mod) = trimmed.strip_prefix("mod ") else {
            // A test-only item other than a module: drop the attribute only.
            s.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        };
        let Some(open) = after_mod.find(['{', ';']) else {
            break;
        };
        let start_body = at + "#[cfg(test)]".len() + skip + 4 + open;
        if s.as_bytes()[start_body] == b';' {
            s.replace_range(at..=start_body, "");
            continue;
        }
        let mut depth = 0;
        let mut end = start_body;
        for (k, ch) in s[start_body..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = start_body + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        s.replace_range(at..=end, "");
    }
    s
}

/// Tokens: identifiers, `::`, and single punctuation characters.
fn tokens(src: &str) -> Vec<String> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if ident_char(c[i]) {
            let start = i;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else if c[i].is_whitespace() {
            i += 1;
        } else {
            out.push(c[i].to_string());
            i += 1;
        }
    }
    out
}

/// Parses a use tree at `t[*i]` (after a leading `path::`), collecting every
/// path it names (segments after the prefix).
fn use_tree(t: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let Some(tok) = t.get(*i) else {
        out.push(prefix.to_vec());
        return;
    };
    if tok == "{" {
        *i += 1;
        loop {
            match t.get(*i).map(String::as_str) {
                None => return,
                Some("}") => {
                    *i += 1;
                    return;
                }
                Some(",") => *i += 1,
                Some(_) => use_tree(t, i, prefix, out),
            }
        }
    }
    if tok == "*" || tok == "self" {
        *i += 1;
        out.push(prefix.to_vec());
        return;
    }
    if !ident_char(tok.chars().next().unwrap_or(' ')) {
        out.push(prefix.to_vec());
        return;
    }
    let mut path = prefix.to_vec();
    path.push(tok.clone());
    *i += 1;
    if t.get(*i).map(String::as_str) == Some("::") {
        *i += 1;
        use_tree(t, i, &path, out);
    } else {
        if t.get(*i).map(String::as_str) == Some("as") {
            *i += 2;
        }
        out.push(path);
    }
}

/// The modules `m` (from `src`) names, resolved against `modules`: paths
/// from `crate::`, `super::` and `self::`, and paths that start with one of
/// `m`'s child modules (`use common::X`, `stream::Stream::new`).
fn uses(m: &Module, src: &str, modules: &BTreeSet<Module>) -> BTreeSet<Module> {
    let t = tokens(&without_tests(&strip(src)));
    // `super` is the parent module (of a mod.rs too: its module is its directory).
    let parent: Module = m[..m.len().saturating_sub(1)].to_vec();
    let children: BTreeSet<String> = modules
        .iter()
        .filter(|x| x.len() == m.len() + 1 && x.starts_with(m))
        .map(|x| x[m.len()].clone())
        .collect();
    let mut paths: Vec<Vec<String>> = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let in_path = i > 0 && t[i - 1] == "::";
        let base: Option<Module> = match t[i].as_str() {
            _ if in_path => None,
            "crate" => Some(Vec::new()),
            "self" => Some(m.clone()),
            "super" => {
                let mut b = parent.clone();
                // super::super::…
                while t.get(i + 1).map(String::as_str) == Some("::")
                    && t.get(i + 2).map(String::as_str) == Some("super")
                {
                    b.pop();
                    i += 2;
                }
                Some(b)
            }
            child if children.contains(child) => {
                let mut b = m.clone();
                b.push(child.to_string());
                Some(b)
            }
            _ => None,
        };
        match base {
            Some(b) if t.get(i + 1).map(String::as_str) == Some("::") => {
                let mut j = i + 2;
                use_tree(&t, &mut j, &b, &mut paths);
                i = j;
            }
            _ => i += 1,
        }
    }
    let mut out = BTreeSet::new();
    for p in paths {
        // The longest prefix of the path that is a module.
        let mut k = p.len();
        while k > 0 && !modules.contains(&p[..k].to_vec()) {
            k -= 1;
        }
        let target = p[..k].to_vec();
        if &target != m {
            out.insert(target);
        }
    }
    out
}

/// Module → the modules it uses.
fn graph(files: &BTreeMap<String, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods: BTreeMap<Module, &String> = files
        .iter()
        .filter_map(|(rel, src)| module_of(rel).map(|m| (m, src)))
        .collect();
    let set: BTreeSet<Module> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(m, src)| (m.clone(), uses(m, src, &set)))
        .collect()
}

/// Every cycle (strongly connected set of more than one module), each sorted.
fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    // Tarjan's algorithm, iterative enough for a few hundred modules.
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut T<'a>, v: &'a Module) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            let Some((w, _)) = g.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// What is wrong with the engine's module graph (nothing: empty).
fn engine_problems(files: &BTreeMap<String, String>) -> Vec<String> {
    let g = graph(files);
    let mut out = Vec::new();
    for (a, bs) in &g {
        let Some((la, ka)) = layer(a) else {
            out.push(format!(
                "module {} is in no layer: add it to ENGINE_LAYERS in tests/layers.rs and to engine/ARCHITECTURE-engine.md",
                name(a)
            ));
            continue;
        };
        for b in bs {
            let Some((lb, kb)) = layer(b) else { continue };
            if lb > la {
                out.push(format!(
                    "{} ({}) uses {} ({}), a higher layer: move what it needs down, or the code up",
                    name(a),
                    LAYER_NAMES[la as usize],
                    name(b),
                    LAYER_NAMES[lb as usize]
                ));
            }
            if let (Some(x), Some(y)) = (&ka, &kb) {
                if x != y {
                    out.push(format!(
                        "kind {} ({}) uses kind {} ({}): a kind uses rt, wire, spec and kinds::base/timed only; move what they share there",
                        x,
                        name(a),
                        y,
                        name(b)
                    ));
                }
            }
        }
    }
    out.extend(cycle_problems(&g));
    out
}

fn cycle_problems(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    cycles(g)
        .into_iter()
        .map(|c| {
            format!(
                "modules in a cycle: {} (name the defining module, not a re-export, and break the loop)",
                c.iter().map(|m| name(m)).collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}

fn src(crate_dir: &str) -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(crate_dir);
    read_tree(&dir)
}

#[test]
fn engine_modules_form_layers_without_cycles() {
    let files = src("src");
    let g = graph(&files);
    assert!(g.len() > 20, "found only {} modules", g.len());
    // The graph is read: the dispatch uses every kind.
    let kinds = g.get(&vec!["kinds".to_string()]).expect("kinds");
    assert!(kinds.contains(&vec!["kinds".to_string(), "stream".to_string()]));
    let problems = engine_problems(&files);
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn nfq_modules_have_no_cycle() {
    let files = src("../secperf-nfq/src");
    let g = graph(&files);
    assert!(g.len() >= 5, "found only {} modules", g.len());
    let problems = cycle_problems(&g);
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

// ------------------------------------------------------------ the check itself

fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect()
}

#[test]
fn an_upward_use_is_found() {
    let f = files(&[
        ("lib.rs", "mod wire; mod rt;"),
        ("wire/mod.rs", "pub mod record;"),
        ("wire/record.rs", "use crate::rt::shared::Shared;"),
        ("rt/mod.rs", "pub mod shared;"),
        ("rt/shared.rs", "pub struct Shared;"),
    ]);
    let p = engine_problems(&f);
    assert_eq!(p.len(), 1, "{:?}", p);
    assert!(
        p[0].starts_with("wire::record (wire) uses rt::shared (rt)"),
        "{}",
        p[0]
    );
}

#[test]
fn a_cycle_is_found_also_through_a_re_export() {
    let f = files(&[
        ("lib.rs", "mod wire;"),
        ("wire/mod.rs", "pub mod a; pub mod b; pub use b::B;"),
        ("wire/a.rs", "use crate::wire::B; pub struct A;"),
        (
            "wire/b.rs",
            "pub struct B; fn f() -> super::a::A { todo!() }",
        ),
    ]);
    let p = engine_problems(&f);
    assert_eq!(p.len(), 1, "{:?}", p);
    assert!(p[0].contains("cycle: wire, wire::a, wire::b"), "{}", p[0]);
}

#[test]
fn a_kind_using_another_kind_is_found() {
    let f = files(&[
        ("lib.rs", "mod kinds;"),
        ("kinds/mod.rs", "mod base; mod rr; mod crr;"),
        ("kinds/base.rs", "pub trait Kind {}"),
        (
            "kinds/rr.rs",
            "use crate::kinds::base::Kind; pub struct Tally;",
        ),
        (
            "kinds/crr/mod.rs",
            "mod paced; use crate::kinds::base::Kind;",
        ),
        (
            "kinds/crr/paced.rs",
            "use crate::kinds::{base::Kind, rr::Tally};",
        ),
    ]);
    let p = engine_problems(&f);
    assert_eq!(p.len(), 1, "{:?}", p);
    assert!(
        p[0].starts_with("kind crr (kinds::crr::paced) uses kind rr"),
        "{}",
        p[0]
    );
}

#[test]
fn comments_strings_and_test_modules_are_not_uses() {
    let f = files(&[
        ("lib.rs", "mod wire; mod kinds;"),
        ("kinds/mod.rs", "pub fn f() {}"),
        (
            "wire/mod.rs",
            r##"
            // use crate::kinds::f;
            /* crate::kinds::f() */
            const S: &str = "crate::kinds::f";
            const R: &str = r#"crate::kinds::f"#;
            fn c() -> char { '"' }
            #[cfg(test)]
            mod tests {
                use super::*;
                use crate::kinds::f;
            }
            "##,
        ),
    ]);
    assert!(engine_problems(&f).is_empty(), "{:?}", engine_problems(&f));
    // …while a use in code counts.
    let mut f = f;
    f.insert("wire/mod.rs".into(), "fn g() { crate::kinds::f() }".into());
    assert_eq!(engine_problems(&f).len(), 1);
}

#[test]
fn a_module_outside_the_layers_is_named() {
    let f = files(&[("lib.rs", "mod util;"), ("util.rs", "")]);
    let p = engine_problems(&f);
    assert_eq!(p.len(), 1, "{:?}", p);
    assert!(p[0].starts_with("module util is in no layer"), "{}", p[0]);
}
