//! The HIP runtime's ABI as kiln reads it without HIP's headers: which call
//! fills a device's properties and where its `gcnArchName` is in what it
//! writes. kiln-loader's binding and the drop-in's `Module::hsaco()` check
//! (which asks the process's HIP runtime for its device before handing out a
//! bundle) read it from here; each runner image's library and headers are
//! checked against it (crates/kiln-container/tests/hip_runtime.rs).

/// A call that fills a `hipDeviceProp_t`, and where the binding reads the
/// device's `gcnArchName` in what it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropertiesCall {
    /// The exported function, `hipError_t f(<c_struct> *, int device)`.
    pub symbol: &'static str,
    /// The struct the runtime's own header declares that function with.
    pub c_struct: &'static str,
    /// `offsetof(c_struct, gcnArchName)`.
    pub gcn_arch_name_offset: usize,
    /// `sizeof(((c_struct *)0)->gcnArchName)`.
    pub gcn_arch_name_len: usize,
}

/// The arch-name calls in the binding's order of preference: the first one
/// the library exports is used. ROCm 6 changed the struct and kept the plain
/// symbol for the old layout (its headers call that `hipDeviceProp_tR0000` and
/// make `hipGetDeviceProperties` a macro for the R0600 call); ROCm 5's header
/// has only `hipDeviceProp_t`. Each runner image's library and headers are
/// checked against this table (crates/kiln-container/tests/hip_runtime.rs).
pub const PROPERTIES_CALLS: [PropertiesCall; 2] = [
    PropertiesCall { symbol: "hipGetDevicePropertiesR0600", c_struct: "hipDeviceProp_tR0600", gcn_arch_name_offset: 1160, gcn_arch_name_len: 256 },
    PropertiesCall { symbol: "hipGetDeviceProperties", c_struct: "hipDeviceProp_t", gcn_arch_name_offset: 396, gcn_arch_name_len: 256 },
];

/// The buffer a properties call writes into: far larger than either layout
/// (1472 and 792 bytes), so that a runtime writing a bigger struct than we
/// know cannot write past it.
pub const PROPS_BUFFER: usize = 16 * 1024;

/// The shared library names a HIP runtime is found by, newest major first after the unversioned link.
pub const LIBRARY_NAMES: [&str; 4] = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];

/// The device's `gcnArchName` (`gfx90a:sramecc+:xnack-`) from the bytes a
/// [`PropertiesCall`] wrote, up to its first NUL; `None` if `props` is too
/// short for the call's layout. Whether it names an AMD processor is the
/// caller's to check (kiln-manifest's `DeviceArch::parse`).
#[inline]
pub fn gcn_arch_name(props: &[u8], call: &PropertiesCall) -> Option<String> {
    let field = props.get(call.gcn_arch_name_offset..call.gcn_arch_name_offset + call.gcn_arch_name_len)?;
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    Some(String::from_utf8_lossy(&field[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arch_name_is_read_at_its_layouts_offset() {
        for call in &PROPERTIES_CALLS {
            assert!(call.gcn_arch_name_offset + call.gcn_arch_name_len <= PROPS_BUFFER);
            let mut props = vec![0u8; PROPS_BUFFER];
            props[call.gcn_arch_name_offset..][..22].copy_from_slice(b"gfx90a:sramecc+:xnack-");
            assert_eq!(gcn_arch_name(&props, call).as_deref(), Some("gfx90a:sramecc+:xnack-"));
            assert_eq!(gcn_arch_name(&props[..call.gcn_arch_name_offset + 8], call), None, "too short for the layout");
        }
    }
}
