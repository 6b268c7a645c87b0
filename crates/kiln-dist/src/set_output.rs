//! [`SetOutput`]: where one kernel set's build goes, computed once per set
//! and passed along: its name, whether it is the main set, its dist folder
//! and its lock file. The main set (the pin file's or the builder's first)
//! keeps the names every earlier dist used: the dist folder itself and
//! `artifacts.lock`, and no set name in its manifest or plan; another set's
//! are `<dist>-<set>` beside it and `artifacts.<set>.lock`.

use std::path::{Path, PathBuf};

use crate::part::Spec;

/// The main set's lock's file name at the repository root.
pub const MAIN_LOCK: &str = "artifacts.lock";

/// The lock file of set `set` (`main`: the pin file's first set).
pub fn lock_file_name(set: &str, main: bool) -> String {
    if main {
        MAIN_LOCK.to_string()
    } else {
        format!("artifacts.{set}.lock")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetOutput {
    pub name: String,
    pub is_main: bool,
    /// Its dist folder.
    pub folder: PathBuf,
    /// Its lock file (read or written only as the build's lock mode says).
    pub lock: PathBuf,
}

impl SetOutput {
    /// Set `name`'s output when the main set's dist folder is `main_out` and
    /// the locks are in `lock_dir`.
    pub fn new(name: &str, is_main: bool, main_out: &Path, lock_dir: &Path) -> SetOutput {
        SetOutput { name: name.to_string(), is_main, folder: folder(main_out, name, is_main), lock: lock_dir.join(lock_file_name(name, is_main)) }
    }

    /// The name written into the set's manifest and plan identity: none for the main set.
    pub fn named(&self) -> Option<String> {
        (!self.is_main).then(|| self.name.clone())
    }

    /// The lock's file name (`artifacts.lock`, `artifacts.<set>.lock`).
    pub fn lock_name(&self) -> String {
        lock_file_name(&self.name, self.is_main)
    }

    /// The folder `dist --shard K/N` writes its part into by default: `<folder>-part-K-of-N`.
    pub fn part_folder(&self, spec: Spec) -> PathBuf {
        let mut name = self.folder.file_name().unwrap_or_default().to_os_string();
        name.push(format!("-part-{}-of-{}", spec.k, spec.n));
        self.folder.with_file_name(name)
    }
}

/// The dist folder of set `name` when the main set's is `main_out`: that
/// folder for the main set, `<main_out>-<name>` beside it for another.
fn folder(main_out: &Path, name: &str, main: bool) -> PathBuf {
    if main {
        return main_out.to_path_buf();
    }
    let file = main_out.file_name().map_or_else(|| "dist".into(), |n| n.to_string_lossy().into_owned());
    main_out.with_file_name(format!("{file}-{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_set_keeps_the_plain_names_and_another_names_itself() {
        let main = SetOutput::new("candle", true, Path::new("/r/target/dist"), Path::new("/r"));
        assert_eq!((main.folder.as_path(), main.lock.as_path(), main.named()), (Path::new("/r/target/dist"), Path::new("/r/artifacts.lock"), None));
        let fa = SetOutput::new("flash-attn", false, Path::new("/r/target/dist"), Path::new("/r"));
        assert_eq!(fa.folder, Path::new("/r/target/dist-flash-attn"));
        assert_eq!(fa.lock, Path::new("/r/artifacts.flash-attn.lock"));
        assert_eq!(fa.named().as_deref(), Some("flash-attn"));
        let spec = Spec { k: 2, n: 3 };
        assert_eq!(main.part_folder(spec), Path::new("/r/target/dist-part-2-of-3"));
        assert_eq!(fa.part_folder(spec), Path::new("/r/target/dist-flash-attn-part-2-of-3"));
    }
}
