//! The remote cache ([`Remote`]) as a tier of the cache ([`Storage`]): a blob
//! is `/cas/<sha256>`; an entry is two objects, as in Bazel's HTTP cache,
//! `/ac/<key>`, a small JSON [`Record`] (the recipe whose sha256 is the key,
//! the output's name, size and sha256, the seconds it took) and
//! `/cas/<sha256>` the output's bytes. What it sends is checked by
//! [`Tiered`] before it is used; a record that is not one is damaged here.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use crate::{
    cache::Cache,
    remote::{Got, Remote},
    tiers::{sha256_file, Answer, Count, Found, Local, ReadOnly, Storage, Tiered, LOG_FILE, RECIPE_FILE, SECONDS_FILE, SHA256_FILE},
};

const SCHEMA: u32 = 1;

/// What `/ac/<key>` holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub schema: u32,
    /// The job's recipe: its sha256 is the key.
    pub recipe: String,
    /// The output's file name in the entry.
    pub output: String,
    pub size: u64,
    pub sha256: String,
    /// How long the job took where it was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// `local` read through to the remote cache of `cache`, if it has one
/// (behind [`ReadOnly`] when its configuration says so).
pub fn tiers(cache: &Cache, local: Local) -> Tiered {
    let mut tiers: Vec<Arc<dyn Storage>> = vec![Arc::new(local)];
    if let Some(remote) = cache.shared_remote() {
        match remote.config().read_only {
            true => tiers.push(Arc::new(ReadOnly(Http { remote, cache: cache.clone() }))),
            false => tiers.push(Arc::new(Http { remote, cache: cache.clone() })),
        }
    }
    Tiered::new(cache, tiers)
}

/// The remote cache as a tier; `cache` holds the scratch folder a record is written in before it is sent.
#[derive(Debug)]
pub struct Http {
    pub remote: Arc<Remote>,
    pub cache: Cache,
}

fn answer(got: Got) -> Answer {
    match got {
        Got::Found => unreachable!("a body is answered as Sent"),
        Got::NotFound => Answer::Miss,
        Got::Damaged(why) => Answer::Damaged(why),
        Got::Failed(why) => Answer::Failed(why),
    }
}

impl Storage for Http {
    fn describe(&self) -> String {
        format!("remote cache {}", self.remote.url())
    }
    fn usable(&self) -> bool {
        self.remote.usable()
    }
    fn writable(&self) -> bool {
        self.remote.writable()
    }
    fn blob_name(&self, sha256: &str) -> String {
        format!("cas/{sha256}")
    }
    fn entry_name(&self, key: &str) -> String {
        format!("ac/{key}")
    }

    fn get_blob(&self, sha256: &str, size: Option<u64>, _: &str, into: &Path) -> Answer {
        let dest = into.join(sha256);
        match self.remote.get_pinned(sha256, size, &dest) {
            Ok(sent) => Answer::Found(Found { path: dest, sha256: sent.sha256, size: sent.len }),
            Err(got) => answer(got),
        }
    }

    fn put_blob(&self, sha256: &str, file: &Path) -> Result<PathBuf, String> {
        self.remote.put_cas(sha256, file).map(|()| file.to_path_buf())
    }

    fn get_entry(&self, key: &str, output: &str, dir: &Path) -> Answer {
        let remote = &self.remote;
        let ac = format!("ac/{key}");
        let record_file = dir.join("record.json");
        match remote.get(&ac, &record_file) {
            Got::Found => {}
            other => return answer(other),
        }
        let text = fs::read_to_string(&record_file).unwrap_or_default();
        let _ = fs::remove_file(&record_file);
        let damaged = |what: String| {
            remote.record_damaged();
            Answer::Damaged(format!("{ac} is damaged ({what})"))
        };
        let record: Record = match serde_json::from_str(&text) {
            Ok(r) => r,
            Err(e) => return damaged(format!("not a kiln record: {e}")),
        };
        if record.schema != SCHEMA {
            return Answer::Miss;
        }
        if record.output != output || record.output.contains('/') || record.output.starts_with('.') {
            return damaged(format!("it names the output `{}`, not `{output}`", record.output.escape_default()));
        }
        let out = dir.join(output);
        let sent = match remote.get_cas(&record.sha256, Some(record.size), &out) {
            Ok(sent) => sent,
            // A record without its bytes: the build here writes both again.
            Err(Got::NotFound) => {
                remote.record_damaged();
                return Answer::Damaged(format!("{ac} names cas/{} which the server does not have", record.sha256));
            }
            Err(got) => return answer(got),
        };
        if sent.len != record.size {
            remote.record_damaged();
            return Answer::Damaged(format!("{ac} says {} bytes, cas/{} has {}", record.size, record.sha256, sent.len));
        }
        let write = |name: &str, text: &str| fs::write(dir.join(name), text).map_err(|e| format!("cannot write {name}: {e}"));
        let written = (|| {
            write(SHA256_FILE, &record.sha256)?;
            write(RECIPE_FILE, &record.recipe)?;
            write(LOG_FILE, &format!("fetched from the remote cache {} (the compiler's log stayed where it was built)\n", remote.url()))?;
            if let Some(s) = record.seconds {
                write(SECONDS_FILE, &format!("{s:.3}\n"))?;
            }
            Ok::<(), String>(())
        })();
        match written {
            Ok(()) => Answer::Found(Found { path: out, sha256: sent.sha256, size: sent.len }),
            Err(why) => Answer::Damaged(why),
        }
    }

    /// Bytes first, then the record that names them.
    fn put_entry(&self, key: &str, entry: &Path, output: &str) -> Result<PathBuf, String> {
        let remote = &self.remote;
        let out = entry.join(output);
        let sha256 = sha256_file(&out).map_err(|e| format!("{e:#}"))?;
        let recipe = fs::read_to_string(entry.join(RECIPE_FILE)).map_err(|e| format!("the entry of {key} has no recipe: {e}"))?;
        let seconds = fs::read_to_string(entry.join(SECONDS_FILE)).ok().and_then(|s| s.trim().parse().ok());
        let size = fs::metadata(&out).map_err(|e| e.to_string())?.len();
        let record = Record { schema: SCHEMA, recipe, output: output.to_string(), size, sha256: sha256.clone(), seconds };
        remote.put_cas(&sha256, &out)?;
        let dir = self.cache.scratch("remote").map_err(|e| format!("{e:#}"))?;
        let file = dir.join("record.json");
        fs::write(&file, serde_json::to_string(&record).expect("a record serialises")).map_err(|e| e.to_string())?;
        remote.put(&format!("ac/{key}"), &file).map(|()| out)
    }

    fn count(&self, c: Count) {
        match c {
            Count::Hit => self.remote.record_hit(),
            Count::Miss => self.remote.record_miss(),
            Count::Stored => self.remote.record_stored(),
            Count::Damaged => self.remote.record_damaged(),
        }
    }

    fn warn(&self, message: String) {
        self.remote.warn(message)
    }
}
