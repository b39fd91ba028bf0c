//! A check of the crate docs' claim that the runtime's files import each other without circles:
//! each file's `super::`/`crate::` imports (outside its tests) form a graph with no cycle.

use std::collections::{BTreeMap, BTreeSet};

/// Each file's module name and the sibling modules its non-test code names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the crate's directory") {
        let path = entry.expect("a directory entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
            continue;
        };
        if path.extension().is_none_or(|e| e != "rs") || name == "lib" || name.contains("tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let mut names = BTreeSet::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for prefix in ["super::", "crate::"] {
                for (i, _) in line.match_indices(prefix) {
                    let rest = line[i + prefix.len()..].trim_start_matches("super::");
                    let module: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if let Some(list) = rest.strip_prefix('{') {
                        let inside = list.split('}').next().unwrap_or_default();
                        names.extend(
                            inside
                                .split(',')
                                .map(|n| n.trim().split("::").next().unwrap_or_default().to_string()),
                        );
                    } else if !module.is_empty() {
                        names.insert(module);
                    }
                }
            }
        }
        names.remove(&name);
        graph.insert(name, names);
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for names in graph.values_mut() {
        names.retain(|n| modules.contains(n));
    }
    graph
}

/// A circle in the graph, if any, as the path that closes it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in &graph[node] {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

#[test]
fn the_files_import_each_other_without_circles() {
    let graph = imports();
    assert!(
        graph["job"].contains("coordinator"),
        "the parser misses imports: {graph:?}"
    );
    assert_eq!(cycle(&graph), None, "an import circle among the runtime's files");
}

#[test]
fn a_circle_is_found() {
    let mut graph = imports();
    graph.get_mut("split").expect("split.rs").insert("source".to_string());
    let found = cycle(&graph).expect("split -> source -> … -> split is a circle");
    assert_eq!(found.first(), found.last());
}
