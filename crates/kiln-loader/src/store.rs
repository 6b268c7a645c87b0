//! Load once, reuse: each module is loaded at most once per device, even when
//! several threads ask for it at the same moment.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_manifest::{Artifact, DeviceArch, SelectOptions, Selection};

use crate::device::{Device, DeviceKey, LoadStats, Module};
use crate::error::Result;
use crate::source::ArtifactSource;
use crate::verify::{check_blob, verify_hash};

/// Opts in to running code objects of ISA-identical siblings (gfx1031 on
/// gfx1030 code); see `compat` in kiln-target's table and docs/loader.md.
pub const HIP_COMPAT_ENV: &str = "KILN_HIP_ARCH_COMPAT";

/// How the store chooses artifacts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOptions {
    pub select: SelectOptions,
}

impl StoreOptions {
    /// The defaults, with `KILN_HIP_ARCH_COMPAT=1` read from the environment.
    pub fn from_env() -> StoreOptions {
        let on = std::env::var(HIP_COMPAT_ENV).map(|v| v == "1" || v.eq_ignore_ascii_case("true")).unwrap_or(false);
        StoreOptions { select: SelectOptions { hip_compat: on, ..SelectOptions::default() } }
    }
}

/// Loads and caches kernel modules per device.
///
/// `get` picks the artifact for the device (`Manifest::select_with`), checks
/// its sha256 and header the first time its bytes are used, hands it to the
/// driver once per device, and returns the same `Arc<Module>` afterwards.
pub struct ModuleStore<S: ArtifactSource> {
    source: S,
    options: StoreOptions,
    /// Bytes that passed the hash check, by artifact path. Embedded bytes are
    /// borrowed, so keeping them is free; bytes read from disk are kept so that
    /// a file changed after its check is never loaded unchecked.
    verified: Mutex<HashMap<String, Arc<Cow<'static, [u8]>>>>,
    modules: OnceMap<(DeviceKey, String), Arc<Module>>,
}

impl<S: ArtifactSource> ModuleStore<S> {
    /// A store with the default rules and `KILN_HIP_ARCH_COMPAT` from the environment.
    pub fn new(source: S) -> ModuleStore<S> {
        ModuleStore::with_options(source, StoreOptions::from_env())
    }

    pub fn with_options(source: S, options: StoreOptions) -> ModuleStore<S> {
        ModuleStore { source, options, verified: Mutex::default(), modules: OnceMap::default() }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn options(&self) -> StoreOptions {
        self.options
    }

    /// The artifact `get` would load for `module` on a device of this arch.
    pub fn select(&self, module: &str, arch: &DeviceArch) -> Result<Selection<'_>> {
        Ok(self.source.manifest().select_with(module, arch, self.options.select)?)
    }

    /// `module` on `device`: loaded on first use, shared afterwards.
    pub fn get(&self, device: &Device, module: &str) -> Result<Arc<Module>> {
        self.modules.get_or_try_init((device.key(), module.to_string()), || self.load(device, module).map(Arc::new))
    }

    /// Whether `module` is loaded on `device` already.
    pub fn is_loaded(&self, device: &Device, module: &str) -> bool {
        self.modules.get(&(device.key(), module.to_string())).is_some()
    }

    /// Everything `get` does before the driver: select the artifact for `arch`,
    /// fetch it, check its sha256 and its header. For preflight checks and
    /// tools; `get` repeats none of it for bytes already checked.
    pub fn check(&self, module: &str, arch: &DeviceArch) -> Result<Selection<'_>> {
        let sel = self.select(module, arch)?;
        let (bytes, _) = self.verified_bytes(sel.artifact)?;
        check_blob(sel.artifact, &bytes, arch, sel.matched)?;
        Ok(sel)
    }

    /// Loads every module of the manifest on `device` (an application's warm-up).
    pub fn preload(&self, device: &Device) -> Result<Vec<Arc<Module>>> {
        let modules: Vec<String> = self.source.manifest().modules().into_iter().map(String::from).collect();
        modules.iter().map(|m| self.get(device, m)).collect()
    }

    fn load(&self, device: &Device, module: &str) -> Result<Module> {
        // The device's runtime decides whether a generic target's object may be chosen.
        let opts = SelectOptions { hip_runtime: device.info().hip_runtime.or(self.options.select.hip_runtime), ..self.options.select };
        let sel = self.source.manifest().select_with(module, device.arch(), opts)?;
        let artifact: Artifact = sel.artifact.clone();
        let (bytes, mut stats) = self.verified_bytes(&artifact)?;
        let t = Instant::now();
        check_blob(&artifact, &bytes, device.arch(), sel.matched)?;
        stats.verify += t.elapsed();
        let t = Instant::now();
        let handle = device.load_image(&artifact, &bytes)?;
        stats.driver = t.elapsed();
        Ok(Module::new(device.clone(), handle, artifact, sel.matched, stats))
    }

    fn verified_bytes(&self, artifact: &Artifact) -> Result<(Arc<Cow<'static, [u8]>>, LoadStats)> {
        let mut stats = LoadStats::default();
        if let Some(b) = self.verified.lock().unwrap_or_else(|p| p.into_inner()).get(&artifact.path) {
            return Ok((b.clone(), stats));
        }
        let t = Instant::now();
        let bytes = self.source.bytes(&artifact.path)?;
        stats.fetch = t.elapsed();
        let t = Instant::now();
        verify_hash(artifact, &bytes)?;
        stats.verify = t.elapsed();
        let bytes = Arc::new(bytes);
        self.verified.lock().unwrap_or_else(|p| p.into_inner()).insert(artifact.path.clone(), bytes.clone());
        Ok((bytes, stats))
    }
}

/// A map whose values are computed at most once per key: concurrent callers
/// for one key wait for the first one's result; other keys proceed in
/// parallel. A failed computation is not remembered, so a later call retries.
pub(crate) struct OnceMap<K, V> {
    slots: Mutex<HashMap<K, Arc<Mutex<Option<V>>>>>,
}

impl<K, V> Default for OnceMap<K, V> {
    fn default() -> Self {
        OnceMap { slots: Mutex::default() }
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> OnceMap<K, V> {
    pub(crate) fn get_or_try_init<E>(&self, key: K, init: impl FnOnce() -> std::result::Result<V, E>) -> std::result::Result<V, E> {
        let slot = self.slots.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().clone();
        // The per-key lock is held across `init`: that is what makes the
        // others wait rather than compute a second value.
        let mut value = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = value.as_ref() {
            return Ok(v.clone());
        }
        let v = init()?;
        *value = Some(v.clone());
        Ok(v)
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let slot = self.slots.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned()?;
        let v = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_and_what_it_returns_can_be_shared_between_threads() {
        fn is<T: Send + Sync>() {}
        is::<ModuleStore<crate::source::DistDir>>();
        is::<Device>();
        is::<Module>();
        is::<crate::DeviceBuffer>();
        is::<crate::Function>();
    }

    #[test]
    fn once_map_computes_each_key_once_under_concurrent_first_use() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let map: OnceMap<u32, Arc<u32>> = OnceMap::default();
        let calls = AtomicUsize::new(0);
        let barrier = std::sync::Barrier::new(8);
        let results: Vec<Arc<u32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let (map, calls, barrier) = (&map, &calls, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        map.get_or_try_init(i % 2, || {
                            calls.fetch_add(1, Ordering::SeqCst);
                            // Long enough that every thread arrives while the first computes.
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            Ok::<_, ()>(Arc::new(i % 2 + 10))
                        })
                        .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one computation per key");
        for (i, r) in results.iter().enumerate() {
            assert_eq!(**r, i as u32 % 2 + 10);
        }
        // Everyone asking for one key got the very same value.
        let zeros: Vec<_> = results.iter().enumerate().filter(|(i, _)| i % 2 == 0).map(|(_, r)| Arc::as_ptr(r)).collect();
        assert!(zeros.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(map.get(&1).map(|v| *v), Some(11));
        assert!(map.get(&7).is_none());
    }

    #[test]
    fn once_map_does_not_remember_failures() {
        let map: OnceMap<&str, u8> = OnceMap::default();
        assert_eq!(map.get_or_try_init("k", || Err("driver busy")), Err("driver busy"));
        assert!(map.get(&"k").is_none());
        assert_eq!(map.get_or_try_init("k", || Ok::<_, &str>(3)), Ok(3));
        assert_eq!(map.get_or_try_init("k", || Err("not called")), Ok(3));
    }
}
