//! The layer rule, checked: every source file's imports, outside its tests, point down the layer
//! table of `docs/architecture.md` or stay in their own layer, and no files import each other in
//! a circle, in this crate or in tidegate-core.
//!
//! Hand-rolled on purpose: what the rule needs is which file a path like `super::Split` lands in,
//! through `crate::`, `super::`, `self::`, child modules, `#[path]` files and re-exports. A Rust
//! parser (syn) gives a syntax tree but resolves no path, and would be one more dependency of
//! every test build. This reader tokenizes each file (comments and strings skipped), drops
//! `#[cfg(test)]` items, and resolves each path by the modules it has seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `["kafka", "split_reader"]`; tidegate-core's modules
/// start with `core` (the name the application knows it by), the binary's root is `main`.
type ModPath = Vec<String>;

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    /// `::`
    Sep,
    Punct(char),
    /// `#[…]` or `#![…]`, its tokens written back without spaces: `cfg(test)`, `path="a.rs"`
    Attr(String),
}

/// Rust's tokens, roughly: identifiers, `::`, punctuation and string literals; comments,
/// numbers and character literals dropped; attributes gathered whole.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut raw = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_string_at(&chars, i).is_some()) {
            let (text, end) = string_at(&chars, i);
            raw.push(Token::Str(text));
            i = end;
        } else if c == '\'' {
            // a character literal ('a', '\n', '\'') or a lifetime ('a)
            if next == Some('\\') {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            raw.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                // `1..n` is a range, not a number
                if chars[i] == '.' && chars.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            raw.push(Token::Sep);
            i += 2;
        } else {
            if !c.is_whitespace() {
                raw.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    gather_attributes(raw)
}

/// Where a raw or byte string starting at `i` (`r"`, `r#"`, `b"`, `br#"`) opens: its `#` count.
fn raw_string_at(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if chars[j] == 'b' {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = chars[j..].iter().take_while(|c| **c == '#').count();
    if chars.get(j + hashes) != Some(&'"') || (!raw && hashes > 0) || (j == i) {
        return None;
    }
    // an identifier ending in r or b (`bar"` cannot happen, but `for"` neither): only at a word's start
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    Some(hashes)
}

/// The string literal at `i` and the index after it.
fn string_at(chars: &[char], i: usize) -> (String, usize) {
    let (hashes, mut j, raw) = if chars[i] == '"' {
        (0, i + 1, false)
    } else {
        let hashes = raw_string_at(chars, i).unwrap_or(0);
        let open = chars[i..].iter().position(|c| *c == '"').unwrap_or(0);
        (hashes, i + open + 1, chars[i..i + open].contains(&'r'))
    };
    let mut text = String::new();
    while j < chars.len() {
        if !raw && chars[j] == '\\' {
            text.extend(chars.get(j..j + 2).unwrap_or_default());
            j += 2;
            continue;
        }
        if chars[j] == '"' && chars[j + 1..].iter().take(hashes).filter(|c| **c == '#').count() == hashes {
            return (text, j + 1 + hashes);
        }
        text.push(chars[j]);
        j += 1;
    }
    (text, j)
}

/// `#` `[` … `]` into one [`Token::Attr`].
fn gather_attributes(raw: Vec<Token>) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let bang = raw.get(i + 1) == Some(&Token::Punct('!'));
        let open = i + 1 + usize::from(bang);
        if raw[i] == Token::Punct('#') && raw.get(open) == Some(&Token::Punct('[')) {
            let mut depth = 0;
            let mut text = String::new();
            let mut j = open;
            while j < raw.len() {
                match &raw[j] {
                    Token::Punct('[') => depth += 1,
                    Token::Punct(']') => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if j > open {
                    match &raw[j] {
                        Token::Ident(s) => text.push_str(s),
                        Token::Str(s) => text.push_str(&format!("{s:?}")),
                        Token::Sep => text.push_str("::"),
                        Token::Punct(c) => text.push(*c),
                        Token::Attr(_) => {}
                    }
                }
                j += 1;
            }
            tokens.push(Token::Attr(text));
            i = j + 1;
        } else {
            tokens.push(raw[i].clone());
            i += 1;
        }
    }
    tokens
}

/// An attribute that keeps the item under it out of a normal build.
fn test_only(attr: &str) -> bool {
    attr == "cfg(test)" || attr.starts_with("cfg(all(test,")
}

/// The tokens with every `#[cfg(test)]` item (a test module, a test helper) cut out.
fn without_tests(tokens: Vec<Token>) -> Vec<Token> {
    let mut kept = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if matches!(&tokens[i], Token::Attr(a) if test_only(a)) {
            i += 1;
            while matches!(tokens.get(i), Some(Token::Attr(_))) {
                i += 1;
            }
            let mut depth = 0;
            while i < tokens.len() {
                match &tokens[i] {
                    Token::Punct('(' | '[') => depth += 1,
                    Token::Punct('{') => depth += 1,
                    // the end of the block around the item (a cfg(test) field of a struct)
                    Token::Punct(')' | ']' | '}') if depth == 0 => break,
                    Token::Punct(')' | ']') => depth -= 1,
                    Token::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    Token::Punct(';' | ',') if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            kept.push(tokens[i].clone());
            i += 1;
        }
    }
    kept
}

/// What one module says: the children it declares, the names it defines and imports, the paths
/// its code names.
#[derive(Default, Debug)]
struct Module {
    file: usize,
    children: BTreeSet<String>,
    defined: BTreeSet<String>,
    /// a name a `use` binds, and the path it stands for, as written (resolved later)
    uses: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    /// every path the code names, as written, with `use` trees expanded
    paths: Vec<Vec<String>>,
}

/// A source file of the build.
#[derive(Debug)]
struct SourceFile {
    /// relative to the repository, for messages
    path: PathBuf,
    module: ModPath,
}

/// Every file of the build and every module in them.
#[derive(Default, Debug)]
struct Crates {
    files: Vec<SourceFile>,
    modules: BTreeMap<ModPath, Module>,
}

const ITEM_KEYWORDS: [&str; 9] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
];

impl Crates {
    /// The application (from `src/lib.rs` and `src/main.rs`) and tidegate-core (from
    /// `src/core/lib.rs`), following each `mod` declaration that is not test-only.
    fn read(repository: &Path) -> Crates {
        let mut crates = Crates::default();
        crates.add_file(repository, Path::new("src/lib.rs"), vec![]);
        crates.add_file(repository, Path::new("src/main.rs"), vec!["main".into()]);
        crates.add_file(repository, Path::new("src/core/lib.rs"), vec!["core".into()]);
        crates
    }

    fn add_file(&mut self, repository: &Path, path: &Path, module: ModPath) {
        let text = std::fs::read_to_string(repository.join(path))
            .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
        let file = self.files.len();
        self.files.push(SourceFile {
            path: path.to_path_buf(),
            module: module.clone(),
        });
        let tokens = without_tests(tokenize(&text));
        // where a child module's file sits: beside lib.rs/main.rs/mod.rs, else in a folder named
        // after the file
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let children_dir = if ["lib", "main", "mod"].contains(&name) {
            dir.clone()
        } else {
            dir.join(name)
        };
        let mut declared = Vec::new();
        self.read_module(&tokens, file, &module, &mut declared);
        for (child, attrs) in declared {
            let explicit = attrs
                .iter()
                .find_map(|a| a.strip_prefix("path=").map(|p| p.trim_matches('"').to_string()));
            let child_path = match explicit {
                Some(p) => dir.join(p),
                None => {
                    let flat = children_dir.join(format!("{}.rs", child.last().cloned().unwrap_or_default()));
                    if repository.join(&flat).exists() {
                        flat
                    } else {
                        children_dir
                            .join(child.last().cloned().unwrap_or_default())
                            .join("mod.rs")
                    }
                }
            };
            self.add_file(repository, &child_path, child);
        }
    }

    /// Reads the tokens of one module (a file, or an inline `mod x { … }` within it); pushes the
    /// child modules declared by `mod x;` onto `declared`, with their attributes.
    fn read_module(
        &mut self,
        tokens: &[Token],
        file: usize,
        module: &ModPath,
        declared: &mut Vec<(ModPath, Vec<String>)>,
    ) {
        let mut this = Module {
            file,
            ..Module::default()
        };
        let mut attrs: Vec<String> = Vec::new();
        let mut macro_export = false;
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                Token::Attr(a) => {
                    if a == "macro_export" {
                        macro_export = true;
                    }
                    attrs.push(a.clone());
                    i += 1;
                    continue;
                }
                Token::Ident(word) if word == "use" => {
                    let end = statement_end(tokens, i);
                    let mut leaves = Vec::new();
                    use_tree(&tokens[i + 1..end], &mut Vec::new(), &mut leaves);
                    for (path, bound) in leaves {
                        match bound {
                            Some(name) if name == "_" => {}
                            Some(name) => {
                                this.uses.insert(name, path.clone());
                            }
                            None => this.globs.push(path.clone()),
                        }
                        this.paths.push(path);
                    }
                    i = end + 1;
                    attrs.clear();
                }
                Token::Ident(word) if word == "mod" => {
                    if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                        let mut child = module.clone();
                        child.push(name.clone());
                        this.children.insert(name.clone());
                        if tokens.get(i + 2) == Some(&Token::Punct('{')) {
                            let close = matching(tokens, i + 2);
                            self.read_module(&tokens[i + 3..close], file, &child, declared);
                            i = close + 1;
                        } else {
                            declared.push((child, std::mem::take(&mut attrs)));
                            i += 3;
                        }
                        continue;
                    }
                    i += 1;
                }
                Token::Ident(word) if word == "macro_rules" => {
                    if let Some(Token::Ident(name)) = tokens.get(i + 2) {
                        this.defined.insert(name.clone());
                        if macro_export {
                            // `#[macro_export]` puts a macro at its crate's root
                            let root = module.first().filter(|m| *m == "core" || *m == "main").cloned();
                            self.modules
                                .entry(root.into_iter().collect())
                                .or_default()
                                .uses
                                .insert(name.clone(), [module.clone(), vec![name.clone()]].concat());
                        }
                    }
                    i += 1;
                }
                Token::Ident(word) if ITEM_KEYWORDS.contains(&word.as_str()) => {
                    if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                        this.defined.insert(name.clone());
                    }
                    i += 1;
                }
                Token::Ident(_) | Token::Punct('$') => {
                    let (path, end) = path_at(tokens, i);
                    if path.len() > 1 {
                        this.paths.push(path);
                    }
                    i = end.max(i + 1);
                }
                Token::Punct(';' | '{' | '}') => {
                    attrs.clear();
                    macro_export = false;
                    i += 1;
                }
                _ => i += 1,
            }
        }
        let entry = self.modules.entry(module.clone()).or_default();
        // a macro exported from a child may have been recorded on the root before the root itself
        let uses = std::mem::take(&mut entry.uses);
        *entry = this;
        entry.uses.extend(uses);
    }

    /// The module a written path starts from, as an absolute path, in the module `at`.
    fn absolute(&self, at: &ModPath, path: &[String]) -> Option<ModPath> {
        let root: ModPath = match at.first().map(String::as_str) {
            Some("core") => vec!["core".into()],
            Some("main") => vec!["main".into()],
            _ => vec![],
        };
        let first = path.first()?.as_str();
        let mut base = match first {
            "crate" | "$crate" => root,
            "tidegate" if at.first().map(String::as_str) == Some("main") => vec![],
            "tidegate_core" => vec!["core".into()],
            "self" => at.clone(),
            "super" => {
                let mut base = at.clone();
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                return Some([base, rest.to_vec()].concat());
            }
            _ => {
                let module = self.modules.get(at)?;
                if module.children.contains(first) {
                    return Some([at.clone(), path.to_vec()].concat());
                }
                let bound = module.uses.get(first)?;
                if bound.first().map(String::as_str) == Some(first) {
                    return None; // `use serde;`: an outside crate
                }
                let base = self.absolute(at, bound)?;
                return Some([base, path[1..].to_vec()].concat());
            }
        };
        base.extend(path[1..].iter().cloned());
        Some(base)
    }

    /// The file that defines what an absolute path names, through re-exports.
    fn locate(&self, path: &[String], hops: usize) -> Option<usize> {
        let (k, module) = (0..=path.len())
            .rev()
            .find_map(|k| Some((k, self.modules.get(&path[..k])?)))?;
        let Some(name) = path.get(k) else {
            return Some(module.file);
        };
        if module.defined.contains(name) || hops > 8 {
            return Some(module.file);
        }
        let here = path[..k].to_vec();
        if let Some(bound) = module.uses.get(name) {
            if let Some(target) = self.absolute(&here, bound) {
                return self
                    .locate(&[target, path[k + 1..].to_vec()].concat(), hops + 1)
                    .or(Some(module.file));
            }
        }
        for glob in &module.globs {
            if let Some(target) = self.absolute(&here, glob) {
                if let Some(found) = self.modules.get(&target) {
                    if found.defined.contains(name) || found.uses.contains_key(name) {
                        return self.locate(&[target, path[k..].to_vec()].concat(), hops + 1);
                    }
                }
            }
        }
        Some(module.file)
    }

    /// Each file and the files its code imports, with one path that names each.
    fn imports(&self) -> BTreeMap<usize, BTreeMap<usize, String>> {
        let mut graph: BTreeMap<usize, BTreeMap<usize, String>> =
            (0..self.files.len()).map(|f| (f, BTreeMap::new())).collect();
        for (at, module) in &self.modules {
            for path in &module.paths {
                let Some(target) = self.absolute(at, path) else {
                    continue;
                };
                let Some(to) = self.locate(&target, 0) else { continue };
                if to != module.file {
                    graph
                        .entry(module.file)
                        .or_default()
                        .entry(to)
                        .or_insert_with(|| path.join("::"));
                }
            }
        }
        graph
    }

    fn file_named(&self, path: &str) -> usize {
        self.files
            .iter()
            .position(|f| f.path == Path::new(path))
            .unwrap_or_else(|| panic!("{path} is not a file of the build"))
    }
}

/// The index of the `;` that ends the statement starting at `i` (a `use`).
fn statement_end(tokens: &[Token], i: usize) -> usize {
    (i..tokens.len())
        .find(|&j| tokens[j] == Token::Punct(';'))
        .unwrap_or(tokens.len())
}

/// The index of the bracket closing the one at `open`.
fn matching(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (j, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The path `a::b::c` starting at `i` (a `$crate` counts as one segment) and the index after it.
fn path_at(tokens: &[Token], mut i: usize) -> (Vec<String>, usize) {
    let mut path = Vec::new();
    loop {
        match (tokens.get(i), tokens.get(i + 1)) {
            (Some(Token::Punct('$')), Some(Token::Ident(word))) if word == "crate" => {
                path.push("$crate".to_string());
                i += 2;
            }
            (Some(Token::Ident(word)), _) => {
                path.push(word.clone());
                i += 1;
            }
            _ => break,
        }
        if tokens.get(i) != Some(&Token::Sep) {
            break;
        }
        i += 1;
    }
    (path, i)
}

/// The leaves of a `use` tree, each with the name it binds (`None` for a glob).
fn use_tree(tokens: &[Token], prefix: &mut Vec<String>, leaves: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut i = 0;
    let skip_visibility = |i: &mut usize| {
        if tokens.get(*i) == Some(&Token::Ident("pub".into())) {
            *i += 1;
            if tokens.get(*i) == Some(&Token::Punct('(')) {
                while tokens.get(*i).is_some_and(|t| *t != Token::Punct(')')) {
                    *i += 1;
                }
                *i += 1;
            }
        }
    };
    skip_visibility(&mut i);
    if tokens.get(i) == Some(&Token::Sep) {
        i += 1; // `use ::std::…`
    }
    let depth = prefix.len();
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(word) if word == "as" => {
                if let (Some(Token::Ident(alias)), false) = (tokens.get(i + 1), prefix.is_empty()) {
                    leaves.push((prefix.clone(), Some(alias.clone())));
                }
                prefix.truncate(depth);
                i += 2;
                continue;
            }
            Token::Ident(word) => {
                prefix.push(word.clone());
                i += 1;
                if tokens.get(i) == Some(&Token::Sep) {
                    i += 1;
                    continue;
                }
                if tokens.get(i) != Some(&Token::Ident("as".into())) {
                    let bound = if word == "self" {
                        prefix[prefix.len().saturating_sub(2)].clone()
                    } else {
                        word.clone()
                    };
                    let path = if word == "self" {
                        prefix[..prefix.len() - 1].to_vec()
                    } else {
                        prefix.clone()
                    };
                    leaves.push((path, Some(bound)));
                    prefix.truncate(depth);
                }
                continue;
            }
            Token::Punct('*') => {
                leaves.push((prefix.clone(), None));
                prefix.truncate(depth);
            }
            Token::Punct('{') => {
                let close = {
                    let mut d = 0;
                    let mut c = i;
                    for (j, t) in tokens.iter().enumerate().skip(i) {
                        match t {
                            Token::Punct('{') => d += 1,
                            Token::Punct('}') => {
                                d -= 1;
                                if d == 0 {
                                    c = j;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    c
                };
                let inner = &tokens[i + 1..close];
                let mut start = 0;
                let mut d = 0;
                for (j, t) in inner.iter().enumerate() {
                    match t {
                        Token::Punct('{') => d += 1,
                        Token::Punct('}') => d -= 1,
                        Token::Punct(',') if d == 0 => {
                            use_tree(&inner[start..j], &mut prefix.clone(), leaves);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                if start < inner.len() {
                    use_tree(&inner[start..], &mut prefix.clone(), leaves);
                }
                prefix.truncate(depth);
                i = close + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// The layers as `docs/architecture.md` writes them: each module prefix (`kafka`,
/// `connector::registry`; `lib` and `main` for the two crate roots) and its layer's number, 1 on
/// top.
fn layer_table(repository: &Path) -> Vec<(String, usize, String)> {
    let doc = std::fs::read_to_string(repository.join("docs/architecture.md")).expect("docs/architecture.md");
    let mut table = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(layer), Some(modules)) = (cells.get(1), cells.get(3)) else {
            continue;
        };
        let Some(number) = layer.split('.').next().and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        let name = layer.split_once(' ').map(|(_, n)| n.to_string()).unwrap_or_default();
        for module in modules.split('`').skip(1).step_by(2) {
            table.push((module.to_string(), number, name.clone()));
        }
    }
    table
}

/// A file's layer: the longest prefix of its module in the table.
fn layer_of(table: &[(String, usize, String)], module: &ModPath) -> Option<(usize, String)> {
    let written = match module.as_slice() {
        [] => "lib".to_string(),
        _ => module.join("::"),
    };
    table
        .iter()
        .filter(|(prefix, _, _)| written == *prefix || written.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _, _)| prefix.len())
        .map(|(_, number, name)| (*number, name.clone()))
}

/// What breaks the rule: files without a layer, and imports up a layer.
fn violations(
    crates: &Crates,
    graph: &BTreeMap<usize, BTreeMap<usize, String>>,
    table: &[(String, usize, String)],
) -> Vec<String> {
    let mut found = Vec::new();
    for (from, imports) in graph {
        let file = &crates.files[*from];
        let Some((layer, name)) = layer_of(table, &file.module) else {
            found.push(format!(
                "{} is in no layer of docs/architecture.md",
                file.path.display()
            ));
            continue;
        };
        for (to, path) in imports {
            let target = &crates.files[*to];
            if let Some((other, other_name)) = layer_of(table, &target.module) {
                if other < layer {
                    found.push(format!(
                        "{} ({layer}. {name}) imports up, from {} ({other}. {other_name}): `{path}`",
                        file.path.display(),
                        target.path.display()
                    ));
                }
            }
        }
    }
    found
}

/// A circle in the graph, if any, as the files that close it.
fn circle(graph: &BTreeMap<usize, BTreeMap<usize, String>>) -> Option<Vec<usize>> {
    fn visit(
        graph: &BTreeMap<usize, BTreeMap<usize, String>>,
        node: usize,
        path: &mut Vec<usize>,
        done: &mut BTreeSet<usize>,
    ) -> Option<Vec<usize>> {
        if let Some(at) = path.iter().position(|p| *p == node) {
            let mut found = path[at..].to_vec();
            found.push(node);
            return Some(found);
        }
        if done.contains(&node) {
            return None;
        }
        path.push(node);
        for next in graph.get(&node).into_iter().flat_map(|n| n.keys()) {
            if let Some(found) = visit(graph, *next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, *node, &mut Vec::new(), &mut done))
}

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn circle_text(crates: &Crates, graph: &BTreeMap<usize, BTreeMap<usize, String>>, circle: &[usize]) -> String {
    circle
        .windows(2)
        .map(|w| format!("{} --`{}`--> ", crates.files[w[0]].path.display(), graph[&w[0]][&w[1]]))
        .chain(circle.last().map(|l| crates.files[*l].path.display().to_string()))
        .collect()
}

#[test]
fn every_import_points_down_the_layers_of_docs_architecture() {
    let crates = Crates::read(repository());
    let graph = crates.imports();
    // the reader sees imports of each kind: `crate::`, `super::`, re-exported, in tidegate-core
    let edge = |from: &str, to: &str| graph[&crates.file_named(from)].contains_key(&crates.file_named(to));
    assert!(
        edge("src/commands/run.rs", "src/assembly/mod.rs"),
        "the reader misses `crate::` imports"
    );
    assert!(
        edge("src/kafka/split_reader.rs", "src/kafka/split.rs"),
        "the reader misses `super::` imports"
    );
    assert!(
        edge("src/core/job.rs", "src/core/coordinator.rs"),
        "the reader misses tidegate-core's imports"
    );
    let found = violations(&crates, &graph, &layer_table(repository()));
    assert!(found.is_empty(), "imports against the layers:\n{}", found.join("\n"));
}

#[test]
fn no_source_files_import_each_other_in_a_circle() {
    let crates = Crates::read(repository());
    let graph = crates.imports();
    assert!(
        crates.files.len() > 100,
        "the reader follows the `mod` declarations: {} files",
        crates.files.len()
    );
    if let Some(found) = circle(&graph) {
        panic!("an import circle: {}", circle_text(&crates, &graph, &found));
    }
}

#[test]
fn an_import_up_a_layer_and_a_circle_are_found() {
    let crates = Crates::read(repository());
    let mut graph = crates.imports();
    let table = layer_table(repository());
    let (split, source) = (
        crates.file_named("src/core/split.rs"),
        crates.file_named("src/kafka/mod.rs"),
    );
    graph
        .get_mut(&split)
        .expect("split.rs")
        .insert(source, "crate::kafka::KafkaSource".into());
    let found = violations(&crates, &graph, &table);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("src/core/split.rs (5. core) imports up"), "{found:?}");
    let found = circle(&graph).expect("core's split -> the Kafka source -> … -> split is a circle");
    assert_eq!(found.first(), found.last());
}

#[test]
fn the_reader_resolves_paths_as_rust_does() {
    let tokens = without_tests(tokenize(
        "use a::{b::{self, C}, d as e, f::*};\n/* x::y */ let s = \"crate::z\"; let c = '\"';\n#[cfg(test)]\nmod tests { use crate::q; }\nfn g() { super::h::i(); }",
    ));
    let mut leaves = Vec::new();
    use_tree(&tokens[1..statement_end(&tokens, 0)], &mut Vec::new(), &mut leaves);
    let s = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        leaves,
        vec![
            (s(&["a", "b"]), Some("b".into())),
            (s(&["a", "b", "C"]), Some("C".into())),
            (s(&["a", "d"]), Some("e".into())),
            (s(&["a", "f"]), None),
        ]
    );
    let idents: Vec<&Token> = tokens
        .iter()
        .filter(|t| matches!(t, Token::Ident(w) if w == "crate" || w == "q" || w == "x"))
        .collect();
    assert!(
        idents.is_empty(),
        "comments, strings and test modules are skipped: {idents:?}"
    );
    let at = tokens
        .iter()
        .position(|t| *t == Token::Ident("super".into()))
        .expect("super");
    assert_eq!(path_at(&tokens, at).0, s(&["super", "h", "i"]));
}
