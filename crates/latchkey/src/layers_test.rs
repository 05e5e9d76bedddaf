//! The modules of this crate import each other in layers, without a circle (see
//! `docs/internals.md`): reads every `crate::<module>` path in `src/**/*.rs`, builds the graph of
//! the top-level modules (a directory module is one node) and looks for a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// This file: it names modules in its tests and is no part of the graph.
const SELF_FILE: &str = "layers_test.rs";

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level modules of `src` (file stems and directory names), but the crate root and
/// this file.
fn modules(src: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            names.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if stem != "lib" && name != SELF_FILE {
                names.insert(stem.to_owned());
            }
        }
    }
    names
}

/// The `.rs` files of a module: its file, or every file under its directory.
fn files_of(src: &Path, module: &str) -> Vec<std::path::PathBuf> {
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        return vec![file];
    }
    let mut files = Vec::new();
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a module directory is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment after each `crate::` in `code` (comment lines skipped: a doc link
/// is no import), with `crate::{a::X, b}` giving `a` and `b`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let code: String = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .flat_map(|line| [line, "\n"])
        .collect();
    {
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            let preceded_by_ident = rest[..at].chars().next_back().is_some_and(is_ident);
            rest = &rest[at + "crate::".len()..];
            if preceded_by_ident {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut start = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        c if start && is_ident(c) => {
                            let name = group[i..].chars().take_while(|&c| is_ident(c));
                            found.insert(name.collect());
                            start = false;
                        }
                        c if c.is_whitespace() => {}
                        _ => start = false,
                    }
                }
            } else {
                let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// Module → the other modules it names.
fn graph(src: &Path) -> Graph {
    let modules = modules(src);
    let mut graph = Graph::new();
    for module in &modules {
        let mut uses = BTreeSet::new();
        for file in files_of(src, module) {
            let code = std::fs::read_to_string(&file).expect("a source file is readable");
            uses.extend(
                crate_paths(&code)
                    .into_iter()
                    .filter(|name| name != module && modules.contains(name)),
            );
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A cycle of `graph` (its nodes in order, the first repeated at the end), if it has one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit<'a>(
        graph: &'a Graph,
        node: &'a str,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|&n| n == node) {
            let mut cycle: Vec<String> = path[at..].iter().map(|&n| n.to_owned()).collect();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

/// The modules by layer: each imports only from layers below it.
fn layers(graph: &Graph) -> Vec<Vec<String>> {
    let mut level: BTreeMap<&str, usize> = BTreeMap::new();
    while level.len() < graph.len() {
        let before = level.len();
        for (node, uses) in graph {
            if level.contains_key(node.as_str()) {
                continue;
            }
            if let Some(below) = uses
                .iter()
                .map(|u| level.get(u.as_str()).copied())
                .collect::<Option<Vec<usize>>>()
            {
                level.insert(node, below.into_iter().map(|l| l + 1).max().unwrap_or(0));
            }
        }
        assert!(level.len() > before, "the graph has a cycle");
    }
    let mut layers = vec![Vec::new(); level.values().max().map_or(0, |m| m + 1)];
    for (node, l) in level {
        layers[l].push(node.to_owned());
    }
    layers
}

#[test]
fn modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    // The graph was read: a wrong path or parser would make an empty (acyclic) one.
    assert!(graph.len() >= 10, "too few modules found: {graph:?}");
    assert!(
        graph.get("lock").is_some_and(|uses| uses.contains("error")),
        "lock does not import error: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle among the modules of src: {}\nthe graph:\n{}",
            cycle.join(" -> "),
            graph
                .iter()
                .map(|(m, uses)| format!(
                    "  {m} -> {}",
                    Vec::from_iter(uses.iter().cloned()).join(", ")
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    for (i, layer) in layers(&graph).iter().enumerate() {
        println!("layer {i}: {}", layer.join(", "));
    }
}

#[test]
fn crate_paths_are_read_from_code_not_comments() {
    let code = "use crate::conn::Conn;\n\
                /// See [`Lock`](crate::lock::Lock).\n\
                // crate::pubsub in a comment\n\
                let x = crate::task::detached(f);\n\
                use crate::{keys::LockKeys,\n    error};\n\
                use foocrate::watchdog;\n";
    let found = crate_paths(code);
    let expected = ["conn", "error", "keys", "task"].map(String::from);
    assert_eq!(found, BTreeSet::from(expected));
}

#[test]
fn a_cycle_is_found_and_named() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut graph = Graph::new();
        for (from, to) in pairs {
            graph
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
            graph.entry(to.to_string()).or_default();
        }
        graph
    };
    let acyclic = edges(&[("client", "conn"), ("lock", "client"), ("lock", "conn")]);
    assert_eq!(find_cycle(&acyclic), None);
    assert_eq!(
        layers(&acyclic),
        vec![vec!["conn"], vec!["client"], vec!["lock"]]
    );
    let cyclic = edges(&[("client", "lock"), ("lock", "pubsub"), ("pubsub", "client")]);
    let cycle = find_cycle(&cyclic).expect("a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}
