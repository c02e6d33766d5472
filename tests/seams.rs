//! DESIGN §8 seams that clippy.toml cannot express: every `select!` in the library is `biased;`
//! (an unbiased one polls its branches in a random order, so a simulated run would not replay).

use std::path::Path;

fn rust_files(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The places where a `select!` does not open with `biased;`, as `file:line`.
fn unbiased_selects(source: &str, file: &Path) -> Vec<String> {
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
            found.push(format!("{}:{}", file.display(), index + 1));
        }
    }
    found
}

#[test]
fn every_select_in_the_library_is_biased() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut selects = 0;
    let mut unbiased = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).expect("read a source file");
        selects += source.matches("select! {").count();
        unbiased.extend(unbiased_selects(&source, file));
    }
    assert!(
        selects > 0,
        "no select! found: is the scan looking at src/?"
    );
    assert!(
        unbiased.is_empty(),
        "select! without `biased;` (its branch order would be random): {unbiased:?}"
    );
}

#[test]
fn the_scan_catches_an_unbiased_select() {
    let source = "async fn f() {\n    tokio::select! {\n        _ = a() => {}\n    }\n}\n";
    assert_eq!(
        unbiased_selects(source, Path::new("x.rs")),
        ["x.rs:2".to_owned()]
    );
    let biased = source.replace("select! {\n", "select! {\n        biased;\n");
    assert!(unbiased_selects(&biased, Path::new("x.rs")).is_empty());
}
