//! The cache as tiers, after sccache's `src/cache/`: one [`Storage`] trait
//! that every level of the cache implements (this machine's folder,
//! [`Local`]; an HTTP server, `http_tier::Http`), a [`ReadOnly`] wrapper that
//! never writes, and one read-through over them, [`Tiered`], used alike by
//! job outputs (kiln-build's store) and pinned downloads (the toolchain's
//! packages, `fetch::fetch_deb`; pinned wheels, `wheel::fetch_wheel`).
//!
//! A tier holds two kinds of things: **blobs**, named by their own sha256 (a
//! pinned package), and **entries**, named by an action key (a job's output
//! with its recipe, whose sha256 is the key, and the sha256 of the output).
//! [`Tiered`] alone decides what a tier's answer is worth: what a lower tier
//! sent is used only once its sha256 is the one expected ([`check_sent`]); a
//! hit below is written back to the tiers above that are writable; a damaged
//! entry above is fetched again from below; a tier that could not be reached
//! is not asked again ([`Storage::usable`]); and a [`ReadOnly`] tier, or one
//! that turned read-only, is never written. The top tier checks its own
//! entries against the sha256 they recorded (a damaged one is moved aside by
//! it, as evidence) and answers [`Answer::Damaged`]. Whether an entry or a
//! blob is whole is decided once, by [`check_entry`] and [`check_blob`] (no
//! side effects): the top tier and `cargo xtask cache verify` both ask them.

use std::{
    fmt,
    fs::{self, File},
    io::Read,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::cache::{publish_dir, Cache, Scratch};

/// The file in each entry that records its output's sha256.
pub const SHA256_FILE: &str = "output.sha256";
/// The file in each entry that records how many seconds the job took where
/// it was built (what `dist --update-costs` reads).
pub const SECONDS_FILE: &str = "seconds";
/// The file in each entry that holds the recipe whose sha256 is its key.
pub const RECIPE_FILE: &str = "recipe.txt";
/// The file in each entry that holds the compiler's log.
pub const LOG_FILE: &str = "build.log";
/// The files of an entry beside its output: the output is the one file not listed here.
pub const BOOKKEEPING: &[&str] = &[SHA256_FILE, SECONDS_FILE, RECIPE_FILE, LOG_FILE];

/// What a tier holds for a name: the path of the bytes (in place, for a tier
/// on this machine; in the folder it was given, for one that downloads) and
/// the sha256 and size of the bytes there, as the tier read them.
#[derive(Debug)]
pub struct Found {
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
}

/// A tier's answer.
#[derive(Debug)]
pub enum Answer {
    Found(Found),
    Miss,
    /// What the tier held or sent is not the thing asked for; the message says what (and where it was moved).
    Damaged(String),
    /// The tier did not answer as a cache does (a 500, a dropped connection): a miss, with this warning.
    Failed(String),
}

/// What [`Tiered`] tells a tier about its answers, for its summary line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Hit,
    Miss,
    Stored,
    /// It sent other bytes than the name promises.
    Damaged,
}

/// What the cache, all tiers together, has for a name.
#[derive(Debug)]
pub enum Lookup {
    Hit(PathBuf),
    Miss,
    /// The entry was damaged and has been moved aside; the message says what and where.
    Damaged(String),
}

/// One level of the cache.
pub trait Storage: Send + Sync + fmt::Debug {
    /// The tier in messages: `remote cache <url>`.
    fn describe(&self) -> String;
    /// False once the tier could not be reached: it is asked nothing more.
    fn usable(&self) -> bool {
        true
    }
    /// Whether it may be written to now.
    fn writable(&self) -> bool {
        self.usable()
    }
    /// How the tier names the blob `sha256` (`cas/<sha256>`), for messages.
    fn blob_name(&self, sha256: &str) -> String;
    /// How the tier names the entry of `key` (`ac/<key>`), for messages.
    fn entry_name(&self, key: &str) -> String;
    /// The blob named by `sha256` (`size` bytes, when the caller knows it;
    /// `what` names it in messages). A tier that downloads writes it into the
    /// empty folder `into`.
    fn get_blob(&self, sha256: &str, size: Option<u64>, what: &str, into: &Path) -> Answer;
    /// Stores `file`, whose sha256 is `sha256`; returns where the tier keeps
    /// it (a tier on this machine moves the file in).
    fn put_blob(&self, sha256: &str, file: &Path) -> Result<PathBuf, String>;
    /// The entry of `key` whose output is named `output`: [`Found::path`] is
    /// the output in a folder laid out as an entry (the [`BOOKKEEPING`] files
    /// beside it). A tier that downloads makes that folder in `into` (empty).
    fn get_entry(&self, key: &str, output: &str, into: &Path) -> Answer;
    /// Stores the entry folder `entry` (output and [`BOOKKEEPING`]) under
    /// `key`; returns the output's path in the tier (a tier on this machine
    /// moves the folder in).
    fn put_entry(&self, key: &str, entry: &Path, output: &str) -> Result<PathBuf, String>;
    /// Told of each answer [`Tiered`] made of it.
    fn count(&self, _: Count) {}
    /// A warning about this tier, printed once (the same failure on a hundred jobs is one line).
    fn warn(&self, message: String) {
        eprintln!("warning: {}: {message}", self.describe());
    }
}

/// `S`, never written to: reads pass through, writes never reach it
/// (`--remote-cache-read-only`, pull requests).
#[derive(Debug)]
pub struct ReadOnly<S>(pub S);

impl<S: Storage> Storage for ReadOnly<S> {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn usable(&self) -> bool {
        self.0.usable()
    }
    fn writable(&self) -> bool {
        false
    }
    fn blob_name(&self, sha256: &str) -> String {
        self.0.blob_name(sha256)
    }
    fn entry_name(&self, key: &str) -> String {
        self.0.entry_name(key)
    }
    fn get_blob(&self, sha256: &str, size: Option<u64>, what: &str, into: &Path) -> Answer {
        self.0.get_blob(sha256, size, what, into)
    }
    fn put_blob(&self, _: &str, _: &Path) -> Result<PathBuf, String> {
        Err("read-only: not written to".into())
    }
    fn get_entry(&self, key: &str, output: &str, into: &Path) -> Answer {
        self.0.get_entry(key, output, into)
    }
    fn put_entry(&self, _: &str, _: &Path, _: &str) -> Result<PathBuf, String> {
        Err("read-only: not written to".into())
    }
    fn count(&self, c: Count) {
        self.0.count(c)
    }
    fn warn(&self, message: String) {
        self.0.warn(message)
    }
}

/// The key of the entry made by `recipe`: its sha256 (kiln-build's `Job::key`).
pub fn entry_key(recipe: &str) -> String {
    kiln_manifest::sha256_hex(recipe.as_bytes())
}

/// The one check of what a lower tier sent: its bytes (`found`) are used only
/// if their sha256 is `expected`, the hash `name` promises.
pub fn check_sent(name: &str, expected: &str, found: &Found) -> Result<(), String> {
    if found.sha256 != expected {
        return Err(format!("{name} is damaged ({} bytes with sha256 {}, not the hash it is named by)", found.size, found.sha256));
    }
    Ok(())
}

/// What a blob put is, and an entry put, in a warning: `cannot store what was built here`.
const DOWNLOADED: &str = "downloaded";
const BUILT: &str = "built";

/// The tiers of one cache, top (this machine's) first, read through in that order.
#[derive(Clone, Debug)]
pub struct Tiered {
    tiers: Vec<Arc<dyn Storage>>,
    /// Where a lower tier's answer is made before it is checked and kept.
    cache: Cache,
}

impl Tiered {
    /// `tiers`, top first; scratch folders for what lower tiers send are made in `cache`.
    pub fn new(cache: &Cache, tiers: Vec<Arc<dyn Storage>>) -> Tiered {
        assert!(!tiers.is_empty(), "a cache has at least one tier");
        Tiered { tiers, cache: cache.clone() }
    }

    /// The tiers, top first.
    pub fn tiers(&self) -> &[Arc<dyn Storage>] {
        &self.tiers
    }

    /// The blob `sha256` (`size` bytes if known), in the top tier: found
    /// there, or fetched from the first lower tier that has it (checked, then
    /// written back to the tiers above it). `instead` says what the caller
    /// does on a miss, for the warnings (`downloading from the mirrors`).
    pub fn get_blob(&self, sha256: &str, size: Option<u64>, what: &str, instead: &str) -> Result<Lookup> {
        for (i, tier) in self.tiers.iter().enumerate() {
            if !tier.usable() {
                continue;
            }
            let Some(room) = self.room(i) else { return Ok(Lookup::Miss) };
            match tier.get_blob(sha256, size, what, room.path()) {
                Answer::Found(found) if i == 0 => return Ok(Lookup::Hit(found.path)),
                Answer::Found(found) => match check_sent(&tier.blob_name(sha256), sha256, &found) {
                    Ok(()) => {
                        tier.count(Count::Hit);
                        return self.write_back(i, DOWNLOADED, |t| t.put_blob(sha256, &found.path)).map(Lookup::Hit).map_err(anyhow::Error::msg);
                    }
                    Err(why) => {
                        tier.count(Count::Damaged);
                        tier.warn(format!("{why}: ignored, {instead}"));
                        tier.count(Count::Miss);
                    }
                },
                // The top tier removed its damaged copy (and said so): fetched again from below.
                Answer::Damaged(_) if i == 0 => {}
                Answer::Failed(why) if i == 0 => anyhow::bail!(why),
                Answer::Damaged(why) | Answer::Failed(why) => {
                    tier.warn(format!("{why}: ignored, {instead}"));
                    tier.count(Count::Miss);
                }
                Answer::Miss if i == 0 => {}
                Answer::Miss => tier.count(Count::Miss),
            }
        }
        Ok(Lookup::Miss)
    }

    /// Stores `file`, the blob `sha256` made here (downloaded, built), in
    /// every writable tier, lower ones first, the top one last (it may move
    /// the file in); returns where the top tier keeps it. A lower tier that
    /// cannot store it is a warning.
    pub fn put_blob(&self, sha256: &str, file: &Path) -> Result<PathBuf> {
        self.write_back(self.tiers.len(), DOWNLOADED, |t| t.put_blob(sha256, file)).map_err(anyhow::Error::msg)
    }

    /// The entry of `key` (output `output`): the top tier's, else the first
    /// lower tier's that has it, checked (its recipe hashes to `key`, its
    /// output to the sha256 it names) and written back to the tiers above.
    /// A damaged entry in the top tier (moved aside by it) is fetched again
    /// from below; if no tier has it, it is reported as damaged, to build.
    pub fn get_entry(&self, key: &str, output: &str) -> Lookup {
        let mut damaged_above: Option<String> = None;
        let mut damaged_below: Option<String> = None;
        for (i, tier) in self.tiers.iter().enumerate() {
            if !tier.usable() {
                continue;
            }
            let Some(room) = self.room(i) else { break };
            match tier.get_entry(key, output, room.path()) {
                Answer::Found(found) if i == 0 => return Lookup::Hit(found.path),
                Answer::Found(found) => {
                    let entry = found.path.parent().expect("an output is in its entry").to_path_buf();
                    let checked = match fs::read_to_string(entry.join(RECIPE_FILE)) {
                        Ok(recipe) if entry_key(&recipe) == key => {
                            let named = fs::read_to_string(entry.join(SHA256_FILE)).unwrap_or_default();
                            check_sent(&tier.blob_name(named.trim()), named.trim(), &found)
                        }
                        _ => Err(format!("{} is damaged (its recipe does not hash to the key)", tier.entry_name(key))),
                    };
                    if let Err(why) = checked {
                        tier.count(Count::Damaged);
                        tier.count(Count::Miss);
                        damaged_below = Some(format!("{}: {why}; ignored, building it here", tier.describe()));
                        continue;
                    }
                    match self.write_back(i, BUILT, |t| t.put_entry(key, &entry, output)) {
                        Ok(path) => {
                            tier.count(Count::Hit);
                            if let Some(m) = damaged_above {
                                eprintln!("warning: {m}; fetched it again from the {}", tier.describe());
                            }
                            return Lookup::Hit(path);
                        }
                        Err(e) => {
                            tier.warn(format!("cannot keep what it served for {key}: {e}"));
                            break;
                        }
                    }
                }
                Answer::Damaged(m) if i == 0 => damaged_above = Some(m),
                Answer::Miss if i == 0 => {}
                Answer::Damaged(why) => {
                    tier.count(Count::Miss);
                    damaged_below = Some(format!("{}: {why}; ignored, building it here", tier.describe()));
                }
                Answer::Failed(why) => {
                    if tier.usable() {
                        tier.warn(why);
                    }
                    tier.count(Count::Miss);
                }
                Answer::Miss => tier.count(Count::Miss),
            }
        }
        match (damaged_above, damaged_below) {
            (Some(m), _) => Lookup::Damaged(format!("{m} and building it again")),
            (None, Some(m)) => Lookup::Damaged(m),
            (None, None) => Lookup::Miss,
        }
    }

    /// Stores the finished entry folder `entry` (built here) under `key` in
    /// every writable tier, lower ones first, the top one last (it moves the
    /// folder in); returns the output's path in the top tier. A lower tier
    /// that cannot store it is a warning: the build has its result either way.
    pub fn put_entry(&self, key: &str, entry: &Path, output: &str) -> Result<PathBuf> {
        self.write_back(self.tiers.len(), BUILT, |t| t.put_entry(key, entry, output)).map_err(anyhow::Error::msg)
    }

    /// Where tier `i` makes its answer (the `into` of [`Storage::get_blob`]
    /// and [`Storage::get_entry`]): the top tier answers in place; a lower
    /// one into a fresh scratch folder of the cache, held until its answer is
    /// checked and kept. `None` when no scratch folder can be made: no tier
    /// below is asked then.
    fn room(&self, i: usize) -> Option<Room> {
        match i {
            0 => Some(Room(None)),
            _ => self.cache.scratch("remote").ok().map(|s| Room(Some(s))),
        }
    }

    /// Writes to each writable tier above `below`, the lowest first and the
    /// top one (which may move what it is given) last, and returns where the
    /// top one keeps it. Only the top tier's failure is an error.
    fn write_back(&self, below: usize, made: &str, put: impl Fn(&dyn Storage) -> Result<PathBuf, String>) -> Result<PathBuf, String> {
        for tier in self.tiers[1..below.max(1)].iter().rev() {
            if !tier.writable() {
                continue;
            }
            match put(tier.as_ref()) {
                Ok(_) => tier.count(Count::Stored),
                Err(why) => {
                    if tier.writable() {
                        tier.warn(format!("cannot store what was {made} here: {why}"));
                    }
                }
            }
        }
        let top = &self.tiers[0];
        if !top.writable() {
            return Err(format!("{} is read-only", top.describe()));
        }
        put(top.as_ref())
    }
}

/// Where a tier makes its answer ([`Tiered::room`]): nowhere (the top
/// tier's answer is in place), or a scratch folder, removed when dropped.
struct Room(Option<Scratch>);

impl Room {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }
}

/// This machine's tier: the cache folder's entries (`objects/<2 hex>/<key>/`)
/// and one folder of blobs (`debs/<sha256>.deb`), each checked against the
/// sha256 it must have before it is handed out.
#[derive(Clone, Debug)]
pub struct Local {
    cache: Cache,
    blobs: PathBuf,
    suffix: &'static str,
}

impl Local {
    /// The entries of `cache`, and its blobs in `blobs` as `<sha256><suffix>`.
    pub fn new(cache: &Cache, blobs: PathBuf, suffix: &'static str) -> Local {
        Local { cache: cache.clone(), blobs, suffix }
    }

    /// Where the entry of `key` lives: `objects/<first two hex digits>/<key>/`.
    pub fn entry(&self, key: &str) -> PathBuf {
        self.cache.objects().join(kiln_manifest::short(key, 2)).join(key)
    }

    /// Where the blob `sha256` lives.
    pub fn blob(&self, sha256: &str) -> PathBuf {
        self.blobs.join(format!("{sha256}{}", self.suffix))
    }

    fn damaged(&self, key: &str, detail: String) -> Answer {
        let entry = self.entry(key);
        Answer::Damaged(match self.cache.move_aside(&entry, key) {
            Ok(aside) => format!("cache entry {} is damaged ({detail}); moved it to {}", entry.display(), aside.display()),
            Err(e) => format!("cache entry {} is damaged ({detail}) and could not be moved aside ({e:#})", entry.display()),
        })
    }
}

impl Storage for Local {
    fn describe(&self) -> String {
        format!("the local cache {}", self.cache.root().display())
    }
    fn blob_name(&self, sha256: &str) -> String {
        self.blob(sha256).display().to_string()
    }
    fn entry_name(&self, key: &str) -> String {
        self.entry(key).display().to_string()
    }

    /// The cached blob, checked before every use, not only when it came: a
    /// damaged but well-formed package would otherwise be unpacked into the
    /// toolchain. A damaged one is removed, with a warning naming it.
    fn get_blob(&self, sha256: &str, _: Option<u64>, what: &str, _: &Path) -> Answer {
        let dest = self.blob(sha256);
        let Ok(meta) = fs::metadata(&dest) else { return Answer::Miss };
        let why = match check_blob(&dest, sha256) {
            Ok(()) => return Answer::Found(Found { path: dest, sha256: sha256.to_string(), size: meta.len() }),
            Err(BlobFault::Differs { actual }) => format!("the cached {what} at {} has sha256 {actual}, not the pinned {sha256}", dest.display()),
            Err(BlobFault::Unreadable(e)) => format!("the cached {what} at {} cannot be read ({e:#})", dest.display()),
        };
        eprintln!("warning: {why}: removed, downloading it again");
        match fs::remove_file(&dest) {
            Ok(()) => Answer::Damaged(why),
            Err(e) => Answer::Failed(format!("cannot remove the damaged {}: {e}", dest.display())),
        }
    }

    fn put_blob(&self, sha256: &str, file: &Path) -> Result<PathBuf, String> {
        let dest = self.blob(sha256);
        if file != dest {
            fs::create_dir_all(&self.blobs).map_err(|e| format!("cannot create {}: {e}", self.blobs.display()))?;
            fs::rename(file, &dest).map_err(|e| format!("cannot move {} to {}: {e}", file.display(), dest.display()))?;
        }
        Ok(dest)
    }

    /// The cached output for `key`, checked against the sha256 its entry
    /// recorded when it was made. A damaged entry is moved aside to the
    /// cache's `damaged/` folder (kept, not deleted: it is evidence).
    fn get_entry(&self, key: &str, output: &str, _: &Path) -> Answer {
        let entry = self.entry(key);
        let path = entry.join(output);
        let found = |sha256: String| Answer::Found(Found { path: path.clone(), sha256, size: fs::metadata(&path).map_or(0, |m| m.len()) });
        let unreadable = |e: anyhow::Error| self.damaged(key, format!("cannot read {output}: {e:#}"));
        match check_entry(&entry, Some(output)) {
            Ok(sha256) => found(sha256),
            Err(EntryFault::NoOutput) => Answer::Miss,
            Err(EntryFault::Unreadable { error, .. }) => unreadable(error),
            Err(EntryFault::Differs { actual, recorded, .. }) => {
                self.damaged(key, format!("{output} has sha256 {actual}, but the entry recorded {recorded}"))
            }
            // An entry made before hashes were recorded: its hash is recorded
            // now (atomically, beside it) and checked from then on.
            Err(EntryFault::NotRecorded) => match output_sha256(&path) {
                Err(e) => unreadable(e),
                Ok(actual) => match write_atomic(&entry.join(SHA256_FILE), &actual) {
                    Ok(()) => found(actual),
                    Err(e) => self.damaged(key, format!("cannot record the sha256 of {output}: {e}")),
                },
            },
            Err(EntryFault::SeveralOutputs(_)) => unreachable!("an entry asked for by its output's name is never taken for several"),
        }
    }

    /// Moves the entry folder in (a rename: readers see a whole entry or
    /// none), its output's sha256 recorded if it is not yet.
    fn put_entry(&self, key: &str, entry: &Path, output: &str) -> Result<PathBuf, String> {
        let record = entry.join(SHA256_FILE);
        if !record.exists() {
            let sha256 = output_sha256(&entry.join(output)).map_err(|e| format!("{e:#}"))?;
            fs::write(&record, sha256).map_err(|e| format!("cannot write {}: {e}", record.display()))?;
        }
        let dest = self.entry(key);
        // A damaged entry moved aside leaves nothing here; a rebuilt one replaces none.
        publish_dir(entry, &dest).map_err(|e| format!("{e:#}"))?;
        Ok(dest.join(output))
    }
}

/// How an entry folder fails [`check_entry`].
#[derive(Debug)]
pub enum EntryFault {
    /// No output beside the [`BOOKKEEPING`] files (or not the one named).
    NoOutput,
    /// More than one file beside the bookkeeping, which has a recorded hash (sorted names).
    SeveralOutputs(Vec<String>),
    /// No sha256 recorded yet (an entry made before hashes were): nothing to check against.
    NotRecorded,
    /// The output cannot be hashed (a link, a FIFO, a permission).
    Unreadable { output: String, error: anyhow::Error },
    /// The output hashes to `actual`, not the `recorded` sha256.
    Differs { output: String, actual: String, recorded: String },
}

/// The one check that an entry folder is whole, with no side effect: its
/// output (the file named `output`, or else the one file beside the
/// [`BOOKKEEPING`] files and `.part` leftovers) hashes to the sha256 the entry
/// recorded in [`SHA256_FILE`]. Returns that sha256. [`Local::get_entry`]
/// acts on the fault (moves the entry aside, records a missing hash) and
/// `cargo xtask cache verify` reports it.
pub fn check_entry(entry: &Path, output: Option<&str>) -> Result<String, EntryFault> {
    let output = match output {
        // A link (even a dangling one) is not a missing output: it is a damaged one.
        Some(name) if fs::symlink_metadata(entry.join(name)).is_err() => return Err(EntryFault::NoOutput),
        Some(name) => vec![name.to_string()],
        None => {
            let mut names: Vec<String> =
                fs::read_dir(entry).map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
            names.retain(|n| !BOOKKEEPING.contains(&n.as_str()) && !n.ends_with(".part"));
            names.sort();
            names
        }
    };
    let Some(recorded) = fs::read_to_string(entry.join(SHA256_FILE)).ok().map(|s| s.trim().to_string()) else {
        return Err(if output.is_empty() { EntryFault::NoOutput } else { EntryFault::NotRecorded });
    };
    let [output] =
        <[String; 1]>::try_from(output).map_err(|many| if many.is_empty() { EntryFault::NoOutput } else { EntryFault::SeveralOutputs(many) })?;
    match output_sha256(&entry.join(&output)) {
        Ok(actual) if actual == recorded => Ok(actual),
        Ok(actual) => Err(EntryFault::Differs { output, actual, recorded }),
        Err(error) => Err(EntryFault::Unreadable { output, error }),
    }
}

/// How a blob fails [`check_blob`].
#[derive(Debug)]
pub enum BlobFault {
    /// It cannot be hashed (not a regular file, a permission).
    Unreadable(anyhow::Error),
    /// It hashes to `actual`, not the sha256 it is named by.
    Differs { actual: String },
}

/// The one check that a blob is whole, with no side effect: the file at
/// `path` hashes to `sha256`, the hash it is named by. [`Local::get_blob`]
/// removes a damaged one (and fetches it again); `cargo xtask cache verify`
/// reports it.
pub fn check_blob(path: &Path, sha256: &str) -> Result<(), BlobFault> {
    match sha256_file(path) {
        Ok(actual) if actual == sha256 => Ok(()),
        Ok(actual) => Err(BlobFault::Differs { actual }),
        Err(e) => Err(BlobFault::Unreadable(e)),
    }
}

fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("{}.part", std::process::id()));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path)
}

/// The sha256 of a regular file (never a FIFO or device: a planted one would
/// block the read for ever).
pub fn sha256_file(path: &Path) -> Result<String> {
    let meta = fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{} is not a regular file (a folder, FIFO, socket or device); not read", path.display());
    }
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(kiln_manifest::hex(&hasher.finalize()))
}

/// The sha256 of a file, or of a folder: of its listing, one line per file
/// (`<relative path> <sha256>`, sorted by path; folders are not listed, links
/// are refused, the path itself included).
pub fn output_sha256(path: &Path) -> Result<String> {
    let t = fs::symlink_metadata(path).with_context(|| format!("cannot read {}", path.display()))?.file_type();
    if t.is_file() {
        return sha256_file(path);
    }
    if !t.is_dir() {
        anyhow::bail!("{} is not a regular file or folder (a link?): an output is never followed elsewhere", path.display());
    }
    let mut files = Vec::new();
    list(path, path, &mut files)?;
    files.sort();
    let mut text = String::new();
    for (rel, file) in files {
        text.push_str(&format!("{rel} {}\n", sha256_file(&file)?));
    }
    Ok(kiln_manifest::sha256_hex(text.as_bytes()))
}

fn list(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            list(root, &e.path(), out)?;
        } else if t.is_file() {
            let rel = e.path().strip_prefix(root).expect("below the root").to_string_lossy().into_owned();
            out.push((rel, e.path()));
        } else {
            anyhow::bail!("{} is neither a file nor a folder", e.path().display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, sync::Mutex};

    use super::*;

    /// A lower tier held in memory: what it serves (any bytes, right or
    /// wrong), what was put to it, what it warned. `panic_on_put`: a tier
    /// that must never be written.
    #[derive(Debug, Default)]
    struct Mem {
        blobs: HashMap<String, Vec<u8>>,
        /// key → (recipe, output bytes, the sha256 its record names)
        entries: HashMap<String, (String, Vec<u8>, String)>,
        puts: Mutex<Vec<String>>,
        warned: Mutex<Vec<String>>,
        panic_on_put: bool,
        /// Unreachable: its first answer is a failure, after which it says it is down.
        unreachable: bool,
        asked: Mutex<usize>,
    }

    impl Storage for Mem {
        fn describe(&self) -> String {
            "remote cache mem".into()
        }
        fn usable(&self) -> bool {
            !(self.unreachable && *self.asked.lock().unwrap() > 0)
        }
        fn blob_name(&self, sha256: &str) -> String {
            format!("cas/{sha256}")
        }
        fn entry_name(&self, key: &str) -> String {
            format!("ac/{key}")
        }
        fn get_blob(&self, sha256: &str, _: Option<u64>, _: &str, into: &Path) -> Answer {
            *self.asked.lock().unwrap() += 1;
            if self.unreachable {
                return Answer::Failed("cannot reach it".into());
            }
            let Some(bytes) = self.blobs.get(sha256) else { return Answer::Miss };
            let path = into.join(sha256);
            fs::write(&path, bytes).unwrap();
            Answer::Found(Found { path, sha256: kiln_manifest::sha256_hex(bytes), size: bytes.len() as u64 })
        }
        fn put_blob(&self, sha256: &str, file: &Path) -> Result<PathBuf, String> {
            assert!(!self.panic_on_put, "a read-only tier was written");
            self.puts.lock().unwrap().push(format!("cas/{sha256}"));
            Ok(file.to_path_buf())
        }
        fn get_entry(&self, key: &str, output: &str, into: &Path) -> Answer {
            *self.asked.lock().unwrap() += 1;
            if self.unreachable {
                return Answer::Failed("cannot reach it".into());
            }
            let Some((recipe, bytes, named)) = self.entries.get(key) else { return Answer::Miss };
            fs::write(into.join(output), bytes).unwrap();
            fs::write(into.join(RECIPE_FILE), recipe).unwrap();
            fs::write(into.join(SHA256_FILE), named).unwrap();
            Answer::Found(Found { path: into.join(output), sha256: kiln_manifest::sha256_hex(bytes), size: bytes.len() as u64 })
        }
        fn put_entry(&self, key: &str, entry: &Path, output: &str) -> Result<PathBuf, String> {
            assert!(!self.panic_on_put, "a read-only tier was written");
            self.puts.lock().unwrap().push(format!("ac/{key}"));
            Ok(entry.join(output))
        }
        fn warn(&self, message: String) {
            self.warned.lock().unwrap().push(message);
        }
    }

    fn cache() -> (tempfile::TempDir, Cache) {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::at(root.path().join("cache")).unwrap();
        (root, cache)
    }

    fn local(cache: &Cache) -> Local {
        Local::new(cache, cache.debs(), crate::cache::DEB_SUFFIX)
    }

    /// An entry as the remote holds it, right: its recipe's key and its bytes' sha256.
    fn entry(bytes: &[u8]) -> (String, (String, Vec<u8>, String)) {
        let recipe = format!("recipe of {}", String::from_utf8_lossy(bytes));
        (entry_key(&recipe), (recipe, bytes.to_vec(), kiln_manifest::sha256_hex(bytes)))
    }

    fn stack(cache: &Cache, lower: Vec<Arc<dyn Storage>>) -> Tiered {
        let mut tiers: Vec<Arc<dyn Storage>> = vec![Arc::new(local(cache))];
        tiers.extend(lower);
        Tiered::new(cache, tiers)
    }

    /// The entry and blob checks say which way a folder or file fails, and
    /// change nothing: moving aside, removing and recording are their callers'.
    #[test]
    fn the_entry_and_blob_checks_name_each_fault_and_change_nothing() {
        let root = tempfile::tempdir().unwrap();
        let entry = |files: &[(&str, &[u8])]| {
            let dir = tempfile::tempdir_in(root.path()).unwrap();
            for (name, bytes) in files {
                fs::write(dir.path().join(name), bytes).unwrap();
            }
            dir
        };
        let sha = kiln_manifest::sha256_hex(b"object");
        let whole = entry(&[("out.o", b"object"), (SHA256_FILE, format!("{sha}\n").as_bytes()), (RECIPE_FILE, b"r"), ("output.1.part", b"x")]);
        assert_eq!(check_entry(whole.path(), None).unwrap(), sha);
        assert_eq!(check_entry(whole.path(), Some("out.o")).unwrap(), sha);
        assert!(matches!(check_entry(whole.path(), Some("other.o")), Err(EntryFault::NoOutput)));
        let bare = entry(&[(SHA256_FILE, sha.as_bytes()), (LOG_FILE, b"")]);
        assert!(matches!(check_entry(bare.path(), None), Err(EntryFault::NoOutput)));
        let two = entry(&[("b.o", b"object"), ("a.o", b"object"), (SHA256_FILE, sha.as_bytes())]);
        assert!(matches!(check_entry(two.path(), None), Err(EntryFault::SeveralOutputs(n)) if n == ["a.o", "b.o"]));
        let unrecorded = entry(&[("out.o", b"object"), ("more.o", b"")]);
        assert!(matches!(check_entry(unrecorded.path(), None), Err(EntryFault::NotRecorded)));
        assert!(matches!(check_entry(unrecorded.path(), Some("out.o")), Err(EntryFault::NotRecorded)));
        assert!(!unrecorded.path().join(SHA256_FILE).exists(), "the check recorded a hash");
        let changed = entry(&[("out.o", b"tampered"), (SHA256_FILE, sha.as_bytes())]);
        let actual = kiln_manifest::sha256_hex(b"tampered");
        assert!(
            matches!(check_entry(changed.path(), None), Err(EntryFault::Differs { output, actual: a, recorded }) if output == "out.o" && a == actual && recorded == sha)
        );
        assert!(changed.path().join("out.o").is_file(), "the check moved the entry");
        let linked = entry(&[(SHA256_FILE, sha.as_bytes())]);
        std::os::unix::fs::symlink("/nowhere", linked.path().join("out.o")).unwrap();
        assert!(matches!(check_entry(linked.path(), Some("out.o")), Err(EntryFault::Unreadable { output, .. }) if output == "out.o"));

        let blob = root.path().join(format!("{sha}.deb"));
        fs::write(&blob, b"object").unwrap();
        assert!(check_blob(&blob, &sha).is_ok());
        fs::write(&blob, b"tampered").unwrap();
        assert!(matches!(check_blob(&blob, &sha), Err(BlobFault::Differs { actual: a }) if a == actual));
        assert!(blob.is_file(), "the check removed the blob");
        assert!(matches!(check_blob(root.path(), &sha), Err(BlobFault::Unreadable(_))));
    }

    #[test]
    fn a_read_only_tier_is_never_written() {
        let (_root, cache) = cache();
        let (key, e) = entry(b"object");
        let blob = b"package".to_vec();
        let sha = kiln_manifest::sha256_hex(&blob);
        let lower = Mem { entries: [(key.clone(), e)].into(), blobs: [(sha.clone(), blob)].into(), panic_on_put: true, ..Mem::default() };
        let tiers = stack(&cache, vec![Arc::new(ReadOnly(lower))]);
        // Read through it: kept in the top tier, never written back to it.
        assert!(matches!(tiers.get_entry(&key, "out.o"), Lookup::Hit(p) if fs::read(&p).unwrap() == b"object"));
        assert!(matches!(tiers.get_blob(&sha, None, "a package", "downloading").unwrap(), Lookup::Hit(p) if p == local(&cache).blob(&sha)));
        // Built here: stored in the top tier only.
        let dir = cache.scratch("job").unwrap();
        fs::write(dir.join("out.o"), b"built here").unwrap();
        fs::write(dir.join(RECIPE_FILE), "built recipe").unwrap();
        let path = tiers.put_entry(&entry_key("built recipe"), &dir, "out.o").unwrap();
        assert_eq!(fs::read(path).unwrap(), b"built here");
        let downloaded = cache.root().join("downloaded");
        fs::write(&downloaded, b"mirror bytes").unwrap();
        tiers.put_blob(&kiln_manifest::sha256_hex(b"mirror bytes"), &downloaded).unwrap();
        // The control: the same tier, writable, is written (the check above can fail).
        let (key2, e2) = entry(b"other");
        let writable = Arc::new(Mem { entries: [(key2.clone(), e2)].into(), ..Mem::default() });
        let tiers = stack(&cache, vec![writable.clone()]);
        let dir = cache.scratch("job").unwrap();
        fs::write(dir.join("out.o"), b"built again").unwrap();
        fs::write(dir.join(RECIPE_FILE), "another recipe").unwrap();
        tiers.put_entry(&entry_key("another recipe"), &dir, "out.o").unwrap();
        assert_eq!(*writable.puts.lock().unwrap(), [format!("ac/{}", entry_key("another recipe"))]);
    }

    #[test]
    fn a_damaged_entry_in_the_top_tier_is_fetched_again_from_below() {
        let (_root, cache) = cache();
        let (key, e) = entry(b"the right bytes");
        let top = local(&cache);
        // The top tier's entry, damaged after it was made.
        let dir = cache.scratch("job").unwrap();
        fs::write(dir.join("out.o"), b"the right bytes").unwrap();
        fs::write(dir.join(RECIPE_FILE), &e.0).unwrap();
        top.put_entry(&key, &dir, "out.o").unwrap();
        fs::write(top.entry(&key).join("out.o"), b"the wrong bytes").unwrap();
        let lower = Arc::new(Mem { entries: [(key.clone(), e)].into(), ..Mem::default() });
        let tiers = stack(&cache, vec![lower.clone()]);
        match tiers.get_entry(&key, "out.o") {
            Lookup::Hit(p) => assert_eq!(fs::read(p).unwrap(), b"the right bytes"),
            other => panic!("not fetched again: {other:?}"),
        }
        assert_eq!(fs::read_dir(cache.root().join(crate::cache::DAMAGED)).unwrap().count(), 1, "the damaged entry is kept aside");
        // With nothing below, the same damage is reported, to build again.
        fs::write(top.entry(&key).join("out.o"), b"the wrong bytes").unwrap();
        match stack(&cache, vec![]).get_entry(&key, "out.o") {
            Lookup::Damaged(m) => assert!(m.contains("is damaged") && m.ends_with("and building it again"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A damaged blob likewise: removed, and fetched again from below.
        let sha = kiln_manifest::sha256_hex(b"package");
        fs::create_dir_all(cache.debs()).unwrap();
        fs::write(top.blob(&sha), b"not the package").unwrap();
        let lower = Arc::new(Mem { blobs: [(sha.clone(), b"package".to_vec())].into(), ..Mem::default() });
        let got = stack(&cache, vec![lower]).get_blob(&sha, None, "a package", "downloading").unwrap();
        assert!(matches!(got, Lookup::Hit(p) if fs::read(&p).unwrap() == b"package"));
    }

    #[test]
    fn wrong_bytes_from_a_lower_tier_are_refused_with_the_message_they_always_had() {
        let (_root, cache) = cache();
        let sha = kiln_manifest::sha256_hex(b"package");
        let lower = Arc::new(Mem { blobs: [(sha.clone(), b"not the package".to_vec())].into(), ..Mem::default() });
        let got = stack(&cache, vec![lower.clone()]).get_blob(&sha, None, "a package", "downloading from the mirrors").unwrap();
        assert!(matches!(got, Lookup::Miss), "{got:?}");
        let actual = kiln_manifest::sha256_hex(b"not the package");
        assert_eq!(
            *lower.warned.lock().unwrap(),
            [format!("cas/{sha} is damaged (15 bytes with sha256 {actual}, not the hash it is named by): ignored, downloading from the mirrors")]
        );
        assert!(!local(&cache).blob(&sha).exists(), "damaged bytes were kept");
        // An entry whose bytes are not the ones its record names, or whose recipe is not its key's.
        let (key, (recipe, _, named)) = entry(b"object");
        let lower = Arc::new(Mem { entries: [(key.clone(), (recipe.clone(), b"tampered".to_vec(), named.clone()))].into(), ..Mem::default() });
        let tampered = kiln_manifest::sha256_hex(b"tampered");
        match stack(&cache, vec![lower]).get_entry(&key, "out.o") {
            Lookup::Damaged(m) => assert_eq!(
                m,
                format!("remote cache mem: cas/{named} is damaged (8 bytes with sha256 {tampered}, not the hash it is named by); ignored, building it here")
            ),
            other => panic!("{other:?}"),
        }
        let lower = Arc::new(Mem { entries: [(key.clone(), ("another recipe".into(), b"object".to_vec(), named))].into(), ..Mem::default() });
        match stack(&cache, vec![lower]).get_entry(&key, "out.o") {
            Lookup::Damaged(m) => {
                assert_eq!(m, format!("remote cache mem: ac/{key} is damaged (its recipe does not hash to the key); ignored, building it here"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(local(&cache).get_entry(&key, "out.o", Path::new("")), Answer::Miss), "nothing refused was kept");
    }

    #[test]
    fn a_hit_below_is_written_back_once_to_each_tier_above() {
        let (_root, cache) = cache();
        let (key, e) = entry(b"object");
        let middle = Arc::new(Mem::default());
        let bottom = Arc::new(Mem { entries: [(key.clone(), e)].into(), ..Mem::default() });
        let tiers = stack(&cache, vec![middle.clone(), bottom.clone()]);
        for _ in 0..3 {
            assert!(matches!(tiers.get_entry(&key, "out.o"), Lookup::Hit(_)));
        }
        assert_eq!(*middle.puts.lock().unwrap(), [format!("ac/{key}")], "written back once, then found above");
        assert!(bottom.puts.lock().unwrap().is_empty(), "never written to the tier it came from");
        assert!(matches!(local(&cache).get_entry(&key, "out.o", Path::new("")), Answer::Found(_)));
    }

    #[test]
    fn a_tier_that_could_not_be_reached_is_asked_nothing_more() {
        let (_root, cache) = cache();
        let down = Arc::new(Mem { unreachable: true, ..Mem::default() });
        let tiers = stack(&cache, vec![down.clone()]);
        for i in 0..3 {
            assert!(matches!(tiers.get_entry(&entry_key(&format!("recipe {i}")), "out.o"), Lookup::Miss));
            assert!(matches!(tiers.get_blob(&kiln_manifest::sha256_hex(&[i]), None, "a package", "downloading").unwrap(), Lookup::Miss));
        }
        assert_eq!(*down.asked.lock().unwrap(), 1, "asked again after it was found down");
        let dir = cache.scratch("job").unwrap();
        fs::write(dir.join("out.o"), b"built here").unwrap();
        tiers.put_entry(&entry_key("recipe 0"), &dir, "out.o").unwrap();
        assert!(down.puts.lock().unwrap().is_empty(), "written after it was found down");
    }
}
