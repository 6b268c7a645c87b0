//! Whether a backend's device tests run here, are skipped, or must fail.
//!
//! nextest cannot skip a test at run time (a test process that exits 0 has
//! passed), so the harness decides when the tests are listed: a skipped test
//! is listed as ignored, which nextest reports as SKIP and counts. The
//! decision:
//!
//! | `KILN_TEST_ARCH` | this backend's devices        | device tests |
//! |---|---|---|
//! | unset            | none (no driver, no device)   | skipped, with the reason |
//! | unset            | some                          | run on `KILN_TEST_DEVICE` or device 0 |
//! | unset            | driver present but failing    | fail (a broken GPU is not an absent one) |
//! | the other backend's arch | —                     | skipped: tested on that backend's legs |
//! | this backend's arch | one of that arch           | run on it |
//! | this backend's arch | none of that arch, or none | **fail**: a CI leg without its GPU must not pass |
//! | an LLVM generic target (`gfx10-3-generic`) | one of its family (a gfx1031) | run on it: the device selects the family's generic object where kiln carries none of its own |
//! | not an arch      | —                             | fail |

use kiln_loader::{Backend, Device, DeviceArch, Error};

use crate::gpu::arch_name;

/// A device that can be tested on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub ordinal: usize,
    pub name: String,
    /// `sm_90`, `gfx90a`.
    pub arch: String,
}

/// Why a backend has no device to test on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeError {
    /// No driver library, or the driver has no device: the machine simply has no such GPU.
    Absent(String),
    /// A driver that is there but fails.
    Broken(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Run(Found),
    Skip(String),
    Fail(String),
}

/// The real probe: every device of `backend`, through kiln-loader.
pub fn probe(backend: Backend) -> Result<Vec<Found>, ProbeError> {
    let absent = |e: &Error| matches!(e, Error::DriverMissing { .. } | Error::NoDevice { .. } | Error::BackendDisabled { .. });
    let n = match Device::count(backend) {
        Ok(n) => n,
        Err(e) if absent(&e) => return Err(ProbeError::Absent(e.to_string())),
        Err(e) => return Err(ProbeError::Broken(e.to_string())),
    };
    (0..n)
        .map(|i| {
            Device::open(backend, i)
                .map(|d| Found { ordinal: i, name: d.info().name.clone(), arch: arch_name(d.arch()) })
                .map_err(|e| ProbeError::Broken(format!("device {i}: {e}")))
        })
        .collect()
}

fn backend_label(b: Backend) -> &'static str {
    match b {
        Backend::Cuda => "CUDA",
        Backend::Hip => "HIP",
    }
}

/// The decision for `backend`, given `KILN_TEST_ARCH`, `KILN_TEST_DEVICE` and a probe.
pub fn decide(
    backend: Backend,
    test_arch: Option<&str>,
    test_device: Option<&str>,
    probe: impl FnOnce(Backend) -> Result<Vec<Found>, ProbeError>,
) -> Gate {
    let label = backend_label(backend);
    let wanted_ordinal = match test_device.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match s.parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => return Gate::Fail(format!("{}={s:?} is not a device ordinal", crate::TEST_DEVICE_ENV)),
        },
    };
    let env = crate::TEST_ARCH_ENV;
    let leg = match test_arch.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match (DeviceArch::parse(s), generic_target(s)) {
            (Ok(a), _) => Some((s.to_string(), Leg::Device(a))),
            // A generic target's leg runs on a member of its family (issue 36).
            (Err(_), Some(g)) => Some((s.to_string(), Leg::Family(g))),
            (Err(e), None) => return Gate::Fail(format!("{env}={s:?} names no GPU arch: {e}")),
        },
    };
    if let Some((s, l)) = &leg {
        if l.backend() != backend {
            return Gate::Skip(format!(
                "{env}={s}: this is the {} leg; the {label} kernels are tested on the {label} legs",
                backend_label(l.backend())
            ));
        }
    }
    let devices = match probe(backend) {
        Ok(d) => d,
        Err(ProbeError::Absent(why)) => {
            return match &leg {
                Some((s, _)) => Gate::Fail(format!("{env}={s}, but this machine has no {label} device: {why}")),
                None => Gate::Skip(format!("no {label} device: {why}")),
            }
        }
        Err(ProbeError::Broken(why)) => return Gate::Fail(format!("the {label} driver is present but fails: {why}")),
    };
    let listing = || {
        if devices.is_empty() {
            "none".to_string()
        } else {
            devices.iter().map(|d| format!("{}: {} ({})", d.ordinal, d.name, d.arch)).collect::<Vec<_>>().join("; ")
        }
    };
    let candidates: Vec<&Found> = match &leg {
        Some((_, l)) => devices.iter().filter(|d| l.matches(&d.arch)).collect(),
        None => devices.iter().collect(),
    };
    let chosen = match wanted_ordinal {
        Some(n) => candidates.iter().find(|d| d.ordinal == n).copied(),
        None => candidates.first().copied(),
    };
    match (chosen, &leg) {
        (Some(d), _) => Gate::Run(d.clone()),
        (None, Some((s, _))) => Gate::Fail(format!(
            "{env}={s}, but no {label} device here is {}{}; devices: {}",
            leg.as_ref().unwrap().1.describe(),
            wanted_ordinal.map(|n| format!(" at {}={n}", crate::TEST_DEVICE_ENV)).unwrap_or_default(),
            listing()
        )),
        (None, None) if devices.is_empty() => Gate::Skip(format!("no {label} device (the driver reports none)")),
        (None, None) => {
            Gate::Fail(format!("{}={} is not a {label} device here; devices: {}", crate::TEST_DEVICE_ENV, wanted_ordinal.unwrap_or(0), listing()))
        }
    }
}

/// What a leg tests on: a device of one arch, or a member of a generic target's family.
enum Leg {
    Device(DeviceArch),
    Family(&'static str),
}

impl Leg {
    fn backend(&self) -> Backend {
        match self {
            Leg::Device(a) => a.backend(),
            Leg::Family(_) => Backend::Hip,
        }
    }
    fn matches(&self, device_arch: &str) -> bool {
        match self {
            Leg::Device(a) => device_arch == arch_name(a),
            Leg::Family(g) => kiln_pins::HipArch::parse(device_arch).is_ok_and(|a| a.row().generic == Some(*g)),
        }
    }
    fn describe(&self) -> String {
        match self {
            Leg::Device(a) => arch_name(a),
            Leg::Family(g) => format!("a member of {g}'s family"),
        }
    }
}

/// Whether `KILN_TEST_ARCH` names an LLVM generic target: the leg tests that
/// family's generic code objects, which the tests then prefer over the
/// device's own (`SelectOptions::hip_prefer_generic`).
pub fn generic_leg() -> bool {
    std::env::var(crate::TEST_ARCH_ENV).ok().is_some_and(|s| generic_target(s.trim()).is_some())
}

/// The generic target `s` names (`gfx11-generic`), from kiln-target's table.
fn generic_target(s: &str) -> Option<&'static str> {
    kiln_pins::HipArch::parse(s).ok().map(|a| a.row()).filter(|g| g.is_generic()).map(|g| g.name)
}

/// [`decide`] with the environment and the real probe.
pub fn from_env(backend: Backend) -> Gate {
    let arch = std::env::var(crate::TEST_ARCH_ENV).ok();
    let dev = std::env::var(crate::TEST_DEVICE_ENV).ok();
    decide(backend, arch.as_deref(), dev.as_deref(), probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Vec<Found> {
        vec![Found { ordinal: 0, name: "NVIDIA H100".into(), arch: "sm_90".into() }]
    }

    fn absent(_: Backend) -> Result<Vec<Found>, ProbeError> {
        Err(ProbeError::Absent("libcuda.so not found".into()))
    }

    #[test]
    fn no_device_and_no_leg_skips_with_the_reason() {
        let g = decide(Backend::Cuda, None, None, absent);
        assert_eq!(g, Gate::Skip("no CUDA device: libcuda.so not found".into()));
        assert!(matches!(decide(Backend::Hip, Some(""), None, |_| Ok(vec![])), Gate::Skip(r) if r.contains("reports none")));
    }

    #[test]
    fn a_leg_without_its_gpu_fails_instead_of_skipping() {
        assert!(
            matches!(decide(Backend::Cuda, Some("sm_90"), None, absent), Gate::Fail(r) if r.contains("KILN_TEST_ARCH=sm_90") && r.contains("libcuda"))
        );
        let a100 = |_| Ok(vec![Found { ordinal: 0, name: "A100".into(), arch: "sm_80".into() }]);
        assert!(matches!(decide(Backend::Cuda, Some("sm_90"), None, a100), Gate::Fail(r) if r.contains("0: A100 (sm_80)")));
        assert!(matches!(decide(Backend::Hip, Some("gfx90a"), None, |_| Ok(vec![])), Gate::Fail(_)));
    }

    #[test]
    fn a_leg_runs_its_own_backend_and_skips_the_other() {
        assert_eq!(decide(Backend::Cuda, Some("sm_90"), None, |_| Ok(h100())), Gate::Run(h100()[0].clone()));
        let other = decide(Backend::Hip, Some("sm_90"), None, |_| panic!("the other backend is not probed"));
        assert!(matches!(other, Gate::Skip(r) if r.contains("CUDA leg") && r.contains("HIP legs")));
    }

    #[test]
    fn a_generic_targets_leg_runs_on_a_member_of_its_family() {
        let rx6700 = |_| Ok(vec![Found { ordinal: 0, name: "RX 6700 XT".into(), arch: "gfx1031".into() }]);
        assert!(matches!(decide(Backend::Hip, Some("gfx10-3-generic"), None, rx6700), Gate::Run(f) if f.arch == "gfx1031"));
        let e = decide(Backend::Hip, Some("gfx11-generic"), None, rx6700);
        assert!(
            matches!(&e, Gate::Fail(r) if r.contains("no HIP device here is a member of gfx11-generic's family") && r.contains("0: RX 6700 XT (gfx1031)")),
            "{e:?}"
        );
        assert!(matches!(decide(Backend::Cuda, Some("gfx12-generic"), None, |_| panic!("not probed")), Gate::Skip(_)));
    }

    #[test]
    fn device_choice_and_bad_settings() {
        let two = |_| {
            Ok(vec![Found { ordinal: 0, name: "A100".into(), arch: "sm_80".into() }, Found { ordinal: 1, name: "H100".into(), arch: "sm_90".into() }])
        };
        assert!(matches!(decide(Backend::Cuda, Some("sm_90"), None, two), Gate::Run(f) if f.ordinal == 1));
        assert!(matches!(decide(Backend::Cuda, None, Some("1"), two), Gate::Run(f) if f.ordinal == 1));
        assert!(matches!(decide(Backend::Cuda, None, Some("7"), two), Gate::Fail(_)));
        assert!(matches!(decide(Backend::Cuda, None, Some("x"), two), Gate::Fail(_)));
        assert!(matches!(decide(Backend::Cuda, Some("sm_9"), None, two), Gate::Fail(r) if r.contains("names no GPU arch")));
        let broken = |_| Err(ProbeError::Broken("cuInit: CUDA_ERROR_UNKNOWN".into()));
        assert!(matches!(decide(Backend::Cuda, None, None, broken), Gate::Fail(_)));
    }
}
