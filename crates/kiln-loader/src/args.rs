//! What both drivers take with a launch, whatever holds the device memory:
//! its geometry ([`LaunchConfig`]) and plain numbers as bytes ([`Pod`]). A
//! kernel's parameters, which take device buffers, are `device.rs`'s
//! `KernelArgs`, beside `DeviceBuffer`.

mod sealed {
    pub trait Sealed {}
}

/// Plain numbers: every bit pattern is a value and there is no padding, so
/// their bytes can go to and from a device as they are.
pub trait Pod: Copy + Default + Send + Sync + 'static + sealed::Sealed {}

macro_rules! pod {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Pod for $t {})* };
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

/// The bytes of a slice of plain numbers.
pub fn as_bytes<T: Pod>(v: &[T]) -> &[u8] {
    // SAFETY: `Pod` types have no padding and no invalid bit patterns.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

pub fn as_bytes_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as above, and any bytes written make valid `T`s.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Grid and block dimensions and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element, `block` threads per block (the usual 1-D launch).
    pub fn for_elements(n: u32, block: u32) -> LaunchConfig {
        let block = block.max(1);
        LaunchConfig { grid: (n.div_ceil(block).max(1), 1, 1), block: (block, 1, 1), shared_mem_bytes: 0 }
    }

    pub(crate) fn check(&self) -> crate::Result<()> {
        let (g, b) = (self.grid, self.block);
        if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
            return Err(crate::Error::InvalidArgument(format!("launch with a zero dimension: grid {g:?}, block {b:?}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_config() {
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid, (4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, (1, 1, 1));
        assert!(LaunchConfig { grid: (1, 0, 1), block: (1, 1, 1), shared_mem_bytes: 0 }.check().is_err());
        assert!(LaunchConfig::for_elements(5, 0).check().is_ok());
    }

    #[test]
    fn byte_views() {
        let v = [1u16, 2];
        assert_eq!(as_bytes(&v), &[1, 0, 2, 0]);
        let mut w = [0u32; 1];
        as_bytes_mut(&mut w).copy_from_slice(&[1, 0, 0, 0]);
        assert_eq!(w[0], 1);
    }
}
