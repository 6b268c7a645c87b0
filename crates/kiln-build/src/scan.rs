//! Which files a compile reads, found by following `#include`s through the
//! trees kiln mounts (candle's sources, kiln's shims and kernels).
//!
//! The answer feeds the cache key, so it errs on the side of too many: an
//! include inside an `#if` counts, and an `#include MACRO` makes every header
//! of every tree count. System headers belong to the toolchain, whose
//! identity is part of the key already.

use std::{
    collections::BTreeMap,
    fs,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, Result};

/// A host folder and the fixed path the compiler sees it at.
#[derive(Clone, Debug)]
pub struct Tree {
    pub host: PathBuf,
    pub at: String,
}

/// A file a compile reads: its fixed path and where it is on this machine.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Input {
    pub at: String,
    pub host: PathBuf,
}

/// Every file of `trees` that compiling `main` (plus `forced` includes) may read.
/// `search` lists the `-I` trees, in order.
pub fn inputs(trees: &[Tree], main: &Input, forced: &[Input], search: &[Tree]) -> Result<Vec<Input>> {
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut work: Vec<Input> = std::iter::once(main.clone()).chain(forced.iter().cloned()).collect();
    while let Some(file) = work.pop() {
        if seen.contains_key(&file.at) {
            continue;
        }
        let text = fs::read(&file.host).with_context(|| format!("cannot read {}", file.host.display()))?;
        let text = String::from_utf8_lossy(&text);
        seen.insert(file.at.clone(), file.host.clone());
        for directive in directives(&text) {
            match directive {
                Include::Quoted(name) => {
                    let here = file.host.parent().unwrap_or(Path::new("/")).join(&name);
                    if let Some(found) = locate(trees, &here).or_else(|| search_in(trees, search, &name)) {
                        work.push(found);
                    }
                }
                Include::Angled(name) => {
                    if let Some(found) = search_in(trees, search, &name) {
                        work.push(found);
                    }
                }
                Include::Macro => {
                    for tree in trees {
                        for f in all_headers(&tree.host)? {
                            if let Some(found) = locate(trees, &f) {
                                work.push(found);
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(seen.into_iter().map(|(at, host)| Input { at, host }).collect())
}

enum Include {
    Quoted(String),
    Angled(String),
    Macro,
}

fn directives(text: &str) -> Vec<Include> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else { continue };
        let Some(rest) = rest.trim_start().strip_prefix("include") else { continue };
        let rest = rest.trim_start();
        let close = match rest.chars().next() {
            Some('"') => '"',
            Some('<') => '>',
            Some(c) if c.is_alphabetic() || c == '_' => {
                out.push(Include::Macro);
                continue;
            }
            _ => continue,
        };
        if let Some(end) = rest[1..].find(close) {
            let name = rest[1..1 + end].to_string();
            out.push(if close == '"' { Include::Quoted(name) } else { Include::Angled(name) });
        }
    }
    out
}

fn search_in(trees: &[Tree], search: &[Tree], name: &str) -> Option<Input> {
    search.iter().find_map(|dir| locate(trees, &dir.host.join(name)))
}

/// The tree file at `path`, if it exists and lies inside one of `trees`.
fn locate(trees: &[Tree], path: &Path) -> Option<Input> {
    if !path.is_file() {
        return None;
    }
    let path = normalize(path);
    trees.iter().find_map(|t| {
        let rel = path.strip_prefix(normalize(&t.host)).ok()?;
        Some(Input { at: format!("{}/{}", t.at, rel.display()), host: path.clone() })
    })
}

/// `a/b/../c` as `a/c`, without touching the file system (symlinks are not followed).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn all_headers(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_none_or(|e| e == "h" || e == "cuh" || e == "hpp") {
                out.push(p);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_quoted_and_angled_includes_within_trees_only() {
        let dir = std::env::temp_dir().join(format!("kiln-scan-{}", std::process::id()));
        let src = dir.join("src");
        let shim = dir.join("shim");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::create_dir_all(&shim).unwrap();
        fs::write(src.join("main.cu"), "#include \"sub/a.cuh\"\n#include <vector>\n").unwrap();
        fs::write(src.join("sub/a.cuh"), "  #  include \"../b.cuh\"\n#include <cuda_fp16.h>\n").unwrap();
        fs::write(src.join("b.cuh"), "// nothing\n").unwrap();
        fs::write(src.join("unused.cuh"), "").unwrap();
        fs::write(shim.join("cuda_fp16.h"), "#pragma once\n").unwrap();
        fs::write(shim.join("forced.h"), "#include \"cuda_fp16.h\"\n").unwrap();

        let trees = [Tree { host: src.clone(), at: "/kiln/src".into() }, Tree { host: shim.clone(), at: "/kiln/hip".into() }];
        let main = Input { at: "/kiln/src/main.cu".into(), host: src.join("main.cu") };
        let forced = [Input { at: "/kiln/hip/forced.h".into(), host: shim.join("forced.h") }];
        let found: Vec<String> = inputs(&trees, &main, &forced, &trees[1..]).unwrap().into_iter().map(|i| i.at).collect();
        assert_eq!(found, ["/kiln/hip/cuda_fp16.h", "/kiln/hip/forced.h", "/kiln/src/b.cuh", "/kiln/src/main.cu", "/kiln/src/sub/a.cuh"]);

        // Without the shim tree on the search path, <cuda_fp16.h> is a system header.
        let found = inputs(&trees, &main, &[], &[]).unwrap();
        assert_eq!(found.len(), 3);
        fs::remove_dir_all(dir).unwrap();
    }
}
