//! The object store's entries on a shared remote cache (kiln-toolchain's
//! [`Remote`]): read through on a local miss, written back after a local
//! build, keyed by the same job key.
//!
//! An entry on the server is two objects, as in Bazel's HTTP cache:
//! `/ac/<key>` is a small JSON [`Record`] (the recipe whose sha256 is the
//! key, the output's name, size and sha256) and `/cas/<sha256>` the output's
//! bytes. A record is used only if its recipe hashes to the key asked for and
//! names the output asked for; the bytes only if they hash to the record's
//! sha256. Anything else is a miss with a warning, never an artifact.

use std::{fs, path::Path};

use kiln_toolchain::{
    cache::publish_dir,
    fetch::sha256_file,
    remote::{Got, Remote},
    Cache,
};
use serde::{Deserialize, Serialize};

use crate::{
    job::Job,
    store::{Lookup, SECONDS_FILE, SHA256_FILE},
};

const SCHEMA: u32 = 1;

/// What `/ac/<key>` holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub schema: u32,
    /// The job's recipe ([`Job::recipe`]): its sha256 is the key.
    pub recipe: String,
    /// The output's file name in the entry.
    pub output: String,
    pub size: u64,
    pub sha256: String,
    /// How long the job took where it was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// Looks `key` up on the remote; on a hit the entry is made in the local
/// store (`entry`, atomically) and its output's path returned.
pub(crate) fn fetch(remote: &Remote, cache: &Cache, key: &str, output: &str, entry: &Path) -> Lookup {
    if !remote.usable() {
        return Lookup::Miss;
    }
    let scratch = match cache.scratch("remote") {
        Ok(d) => d,
        Err(_) => return Lookup::Miss,
    };
    let result = fetch_into(remote, key, output, &scratch);
    let lookup = match result {
        Ok(Some(())) => match publish_dir(&scratch, entry) {
            Ok(()) => {
                remote.record_hit();
                Lookup::Hit(entry.join(output))
            }
            Err(e) => {
                remote.warn(format!("cannot keep what it served for {key}: {e:#}"));
                Lookup::Miss
            }
        },
        Ok(None) => {
            remote.record_miss();
            Lookup::Miss
        }
        Err(why) => {
            remote.record_miss();
            Lookup::Damaged(format!("remote cache {}: {why}; ignored, building it here", remote.url()))
        }
    };
    let _ = fs::remove_dir_all(&scratch);
    lookup
}

/// `Ok(Some)`: the entry is whole in `dir`. `Ok(None)`: a plain miss.
/// `Err`: the server answered with something that is not this entry.
fn fetch_into(remote: &Remote, key: &str, output: &str, dir: &Path) -> Result<Option<()>, String> {
    let ac = format!("ac/{key}");
    let record_file = dir.join("record.json");
    match remote.get(&ac, &record_file) {
        Got::Found => {}
        Got::NotFound => return Ok(None),
        Got::Failed(why) => {
            if remote.usable() {
                remote.warn(why);
            }
            return Ok(None);
        }
        Got::Damaged(why) => return Err(why),
    }
    let text = fs::read_to_string(&record_file).unwrap_or_default();
    let _ = fs::remove_file(&record_file);
    let damaged = |what: String| {
        remote.record_damaged();
        Err(format!("{ac} is damaged ({what})"))
    };
    let record: Record = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return damaged(format!("not a kiln record: {e}")),
    };
    if record.schema != SCHEMA {
        return Ok(None);
    }
    if Job::key(&record.recipe) != key {
        return damaged("its recipe does not hash to the key".into());
    }
    if record.output != output || record.output.contains('/') || record.output.starts_with('.') {
        return damaged(format!("it names the output `{}`, not `{output}`", record.output.escape_default()));
    }
    let out = dir.join(output);
    match remote.get_cas(&record.sha256, Some(record.size), &out) {
        Got::Found => {}
        Got::NotFound => {
            // A record without its bytes: the build here writes both again.
            remote.record_damaged();
            return Err(format!("{ac} names cas/{} which the server does not have", record.sha256));
        }
        Got::Damaged(why) => return Err(why),
        Got::Failed(why) => {
            if remote.usable() {
                remote.warn(why);
            }
            return Ok(None);
        }
    }
    let size = fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    if size != record.size {
        remote.record_damaged();
        return Err(format!("{ac} says {} bytes, cas/{} has {size}", record.size, record.sha256));
    }
    let write = |name: &str, text: &str| fs::write(dir.join(name), text).map_err(|e| format!("cannot write {name}: {e}"));
    write(SHA256_FILE, &record.sha256)?;
    write("recipe.txt", &record.recipe)?;
    write("build.log", &format!("fetched from the remote cache {} (the compiler's log stayed where it was built)\n", remote.url()))?;
    if let Some(s) = record.seconds {
        write(SECONDS_FILE, &format!("{s:.3}\n"))?;
    }
    Ok(Some(()))
}

/// Writes the finished local entry of `key` back to the remote (bytes first,
/// then the record that names them). Failures are warnings: the build has
/// its result either way.
pub(crate) fn push(remote: &Remote, cache: &Cache, key: &str, entry: &Path, output: &str) {
    if !remote.writable() {
        return;
    }
    let result = (|| -> Result<(), String> {
        let out = entry.join(output);
        let sha256 = sha256_file(&out).map_err(|e| format!("{e:#}"))?;
        let recipe = fs::read_to_string(entry.join("recipe.txt")).map_err(|e| format!("the entry of {key} has no recipe: {e}"))?;
        let seconds = fs::read_to_string(entry.join(SECONDS_FILE)).ok().and_then(|s| s.trim().parse().ok());
        let size = fs::metadata(&out).map_err(|e| e.to_string())?.len();
        let record = Record { schema: SCHEMA, recipe, output: output.to_string(), size, sha256: sha256.clone(), seconds };
        remote.put_cas(&sha256, &out)?;
        let dir = cache.scratch("remote").map_err(|e| format!("{e:#}"))?;
        let file = dir.join("record.json");
        let r = fs::write(&file, serde_json::to_string(&record).expect("a record serialises"))
            .map_err(|e| e.to_string())
            .and_then(|()| remote.put(&format!("ac/{key}"), &file));
        let _ = fs::remove_dir_all(&dir);
        r
    })();
    match result {
        Ok(()) => remote.record_stored(),
        Err(why) => {
            if remote.writable() {
                remote.warn(format!("cannot store what was built here: {why}"));
            }
        }
    }
}
