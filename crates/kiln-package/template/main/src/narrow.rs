//! The GPUs the consumer narrowed this build to, with cargo's own means: a
//! `--cfg kiln_gpu="..."` per GPU in its rustflags (`.cargo/config.toml`'s
//! `[build] rustflags`, or RUSTFLAGS). Cargo then builds and downloads only
//! the part crates of the GPUs named (none named: every GPU); the build
//! script refuses a value this release does not carry. Here: what was named,
//! and the line that adds a GPU, for the messages of a program that meets
//! a GPU its build leaves out.

use crate::{TablePart, GPU_NAMED, TABLE_PARTS};

/// The `kiln_gpu` values named; empty when the build is not narrowed (every GPU).
pub(crate) fn named() -> Vec<&'static str> {
    GPU_NAMED.iter().filter(|(_, on)| *on).map(|(v, _)| *v).collect()
}

/// The optional part that carries the artifact at `path` (a dist path).
pub(crate) fn part_of(path: &str) -> Option<&'static TablePart> {
    TABLE_PARTS.iter().find(|t| !t.dir.is_empty() && path.starts_with(t.dir))
}

/// "narrowed to `kiln_gpu` sm90, gfx1100".
pub(crate) fn describe() -> String {
    format!("narrowed to `kiln_gpu` {}", named().join(", "))
}

/// The `.cargo/config.toml` line that adds `value` to what this build names.
pub(crate) fn config_line(value: &str) -> String {
    let mut values = named();
    if !values.contains(&value) {
        values.push(value);
    }
    let flags: Vec<String> = values.iter().map(|v| format!("\"--cfg\", 'kiln_gpu=\"{v}\"'")).collect();
    format!("rustflags = [{}]", flags.join(", "))
}

/// How to add `value`: the exact line, and where it goes.
pub(crate) fn advice(value: &str) -> String {
    format!(
        "add `{value}`: in the project's .cargo/config.toml, under [build], make the line\n    {}\n(keeping any other flags it has; \
         or in RUSTFLAGS, if that is where they are set), or remove every `kiln_gpu` to carry every GPU",
        config_line(value)
    )
}
