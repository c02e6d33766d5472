//! The layout's rules, checked on `src/` as text (House, DESIGN §1):
//!
//! - **Layers run one way.** Every top-level folder of `src/` has a rank; a folder may name
//!   (`crate::folder::…`) only folders of a lower rank. Test code is exempt (a `tests.rs` file, or
//!   an inline `#[cfg(test)] mod tests { … }` at the end of a file): a test may build whatever it
//!   needs. With one rank per folder, no import cycle between folders can exist either.
//! - **Every file in a room**: at most three files at `src/` root.
//! - **Files a reader can hold**: no file over [`MAX_CODE_LINES`] lines of code (blank and
//!   comment lines not counted).
//! - **Determinism seams clippy.toml cannot express** (DESIGN §8): every `select!` in the
//!   library is `biased;` (an unbiased one polls its branches in a random order, so a simulated
//!   run would not replay).
//!
//! The checks are plain functions over `(path, text)` pairs, so the tests at the bottom show
//! each one catching a deliberately broken tree.

use std::path::{Path, PathBuf};

/// The layers, bottom first. A folder may import only folders before it in this list.
const LAYERS: &[&str] = &[
    // base: codec, ids and addresses, rng, hashing, backoff, clocks, latch, executor
    "base",
    // framing, handshake, TLS, connections: generic over the protocol's payload
    "transport",
    // the job model: graph, job files, states, pipelined regions, restart strategies
    "job",
    // the typed protocol: every message, reply and descriptor; the envelope's payload
    "messages",
    // remote actors: the node endpoint, proxies, the directory of local actors
    "rpc",
    // the node environment: seams, task threads, events, working directories
    "env",
    // operators and their registry
    "operators",
    // the data plane: result partitions, input gates, partition requests
    "exchange",
    // typed programs: the dataflow API, chaining, the program operators TaskManagers run
    "api",
    // the configuration: keys, sources, validation
    "config",
    // leader election and retrieval, the job graph store, the leadership lease
    "ha",
    // the actors: resource manager, job manager (+ scheduler, execution graph), task manager
    "actors",
    // worker drivers and their factory
    "drivers",
    // the REST API and dashboard
    "rest",
    // the embedded mini-cluster and the JobManager process's leader loop
    "cluster",
    // `flint jobmanager` / `taskmanager` / `run --embedded`
    "process",
    // the CLI's client commands
    "client",
    // the guided tour
    "demo",
    // the `flint` command line as a library: user binaries with programs are Flint binaries
    "cli",
    // the deterministic simulation (uses anything)
    "sim",
    // the binaries
    "bin",
];

/// The most lines of code (not blank, not a comment) one source file may have.
const MAX_CODE_LINES: usize = 1000;

/// Files allowed at `src/` root besides each other.
const MAX_ROOT_FILES: usize = 3;

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/`'s files as (path relative to `src/`, text).
fn source_tree() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let relative = path
                .strip_prefix(&src)
                .expect("under src/")
                .to_string_lossy()
                .replace('\\', "/");
            (relative, text)
        })
        .collect()
}

/// The code of `text` that is not test code: a `tests.rs` file is all test code; otherwise
/// everything from an inline `#[cfg(test)]` test module at the start of a line on is.
fn production_code<'a>(path: &str, text: &'a str) -> &'a str {
    if path.ends_with("/tests.rs") || path.contains("/tests/") {
        return "";
    }
    let mut offset = 0;
    let mut previous_was_cfg_test = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        let opens_module = (trimmed.starts_with("mod ")
            || trimmed.starts_with("pub(crate) mod ")
            || trimmed.starts_with("pub(super) mod "))
            && trimmed.ends_with('{');
        if previous_was_cfg_test && opens_module {
            let start = text[..offset].rfind("#[cfg(test)]").unwrap_or(offset);
            return &text[..start];
        }
        previous_was_cfg_test = trimmed == "#[cfg(test)]";
        offset += line.len();
    }
    text
}

/// The top-level folders a file names through `crate::`, skipping comments and string
/// literals.
fn named_folders(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let line = strip_strings(line.split("//").next().unwrap_or_default());
        let mut rest = line.as_str();
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                // `$crate::` in a macro names the crate from outside: still a folder. Any other
                // `xcrate::` is another identifier.
                if before != Some('$') {
                    continue;
                }
            }
            let folder: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !folder.is_empty() {
                found.push((number + 1, folder));
            }
        }
    }
    found
}

/// `line` with the contents of its string literals blanked (a `"crate::x"` in a message is not
/// an import).
fn strip_strings(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in line.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
                out.push(c);
            }
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    out
}

/// Every import that runs up the layers, as `file:line: folder -> folder`.
fn upward_imports(tree: &[(String, String)]) -> Vec<String> {
    let rank = |folder: &str| LAYERS.iter().position(|layer| *layer == folder);
    let mut violations = Vec::new();
    for (path, text) in tree {
        let Some((folder, _)) = path.split_once('/') else {
            continue; // lib.rs and the root files re-export and wire; they have no layer
        };
        let Some(own) = rank(folder) else {
            violations.push(format!("{path}: folder `{folder}` has no layer in LAYERS"));
            continue;
        };
        for (line, named) in named_folders(production_code(path, text)) {
            if let Some(theirs) = rank(&named)
                && theirs > own
            {
                violations.push(format!("{path}:{line}: {folder} -> {named}"));
            }
        }
    }
    violations
}

/// Files with more than [`MAX_CODE_LINES`] lines of code.
fn oversized(tree: &[(String, String)]) -> Vec<String> {
    tree.iter()
        .filter_map(|(path, text)| {
            let code = text
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with("//"))
                .count();
            (code > MAX_CODE_LINES).then(|| format!("{path}: {code} lines of code"))
        })
        .collect()
}

/// The files at `src/` root.
fn root_files(tree: &[(String, String)]) -> Vec<&str> {
    tree.iter()
        .map(|(path, _)| path.as_str())
        .filter(|path| !path.contains('/'))
        .collect()
}

#[test]
fn no_folder_imports_a_folder_above_it() {
    let tree = source_tree();
    assert!(tree.len() > 100, "found only {} source files", tree.len());
    let violations = upward_imports(&tree);
    assert!(
        violations.is_empty(),
        "imports that run up the layers (see LAYERS in tests/layers.rs):\n{}",
        violations.join("\n")
    );
}

#[test]
fn every_folder_has_a_layer_and_every_layer_a_folder() {
    let tree = source_tree();
    let mut folders: Vec<&str> = tree
        .iter()
        .filter_map(|(path, _)| path.split_once('/').map(|(folder, _)| folder))
        .collect();
    folders.dedup();
    let mut layers: Vec<&str> = LAYERS.to_vec();
    layers.sort_unstable();
    assert_eq!(folders, layers);
}

#[test]
fn every_file_is_in_a_room_and_small_enough_to_hold() {
    let tree = source_tree();
    let root = root_files(&tree);
    assert!(
        root.len() <= MAX_ROOT_FILES,
        "{} files at src/ root: {root:?}",
        root.len()
    );
    let big = oversized(&tree);
    assert!(big.is_empty(), "files a reader cannot hold: {big:?}");
}

/// The places where a `select!` does not open with `biased;`, as `file:line`.
fn unbiased_selects(path: &str, source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        if !code.contains("select! {") && !code.contains("select!{") {
            continue;
        }
        let first = lines[index + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("//"));
        if first != Some("biased;") {
            found.push(format!("{path}:{}", index + 1));
        }
    }
    found
}

#[test]
fn every_select_in_the_library_is_biased() {
    let tree = source_tree();
    let selects: usize = tree
        .iter()
        .map(|(_, text)| text.matches("select! {").count())
        .sum();
    assert!(
        selects > 0,
        "no select! found: is the scan looking at src/?"
    );
    let unbiased: Vec<String> = tree
        .iter()
        .flat_map(|(path, text)| unbiased_selects(path, text))
        .collect();
    assert!(
        unbiased.is_empty(),
        "select! without `biased;` (its branch order would be random): {unbiased:?}"
    );
}

// ---- the checks catch a broken tree ----

#[test]
fn the_scan_catches_an_unbiased_select() {
    let source = "async fn f() {\n    tokio::select! {\n        _ = a() => {}\n    }\n}\n";
    assert_eq!(unbiased_selects("x.rs", source), ["x.rs:2".to_owned()]);
    let biased = source.replace("select! {\n", "select! {\n        biased;\n");
    assert!(unbiased_selects("x.rs", &biased).is_empty());
}

fn file(path: &str, text: &str) -> (String, String) {
    (path.to_owned(), text.to_owned())
}

#[test]
fn an_import_from_a_higher_layer_is_caught_and_one_from_a_lower_layer_is_not() {
    let tree = vec![
        file(
            "transport/connection.rs",
            "use crate::base::codec;\nuse crate::actors::job_manager::NAME;\n",
        ),
        file("actors/node.rs", "use crate::transport::ASK_TIMEOUT;\n"),
        file("messages/mod.rs", "$crate::rpc::endpoint::X\n"),
    ];
    assert_eq!(
        upward_imports(&tree),
        [
            "transport/connection.rs:2: transport -> actors",
            "messages/mod.rs:1: messages -> rpc"
        ]
    );
}

#[test]
fn test_code_comments_and_strings_are_not_imports() {
    let tree = vec![
        file(
            "base/codec.rs",
            "// crate::actors in a comment\nlet s = \"crate::actors\";\nuse crate::base::ids;\n\
             #[cfg(test)]\nmod tests {\n    use crate::actors::node;\n}\n",
        ),
        file("base/codec/tests.rs", "use crate::sim::cluster;\n"),
        file("nowhere/x.rs", "use crate::base::ids;\n"),
    ];
    assert_eq!(
        upward_imports(&tree),
        ["nowhere/x.rs: folder `nowhere` has no layer in LAYERS"]
    );
}

#[test]
fn an_oversized_file_and_a_crowded_root_are_caught() {
    let long = "let x = 1;\n".repeat(MAX_CODE_LINES + 1);
    let commented = format!("{}// a comment\n\n", "let x = 1;\n".repeat(MAX_CODE_LINES));
    let tree = vec![
        file("a/long.rs", &long),
        file("a/commented.rs", &commented),
        file("lib.rs", ""),
        file("b.rs", ""),
        file("c.rs", ""),
        file("d.rs", ""),
    ];
    assert_eq!(
        oversized(&tree),
        [format!("a/long.rs: {} lines of code", MAX_CODE_LINES + 1)]
    );
    assert!(root_files(&tree).len() > MAX_ROOT_FILES);
}
