//! Kernel arguments as both drivers take them: an array of pointers, one per
//! parameter, each pointing at the parameter's bytes.

use std::ffi::c_void;

use crate::device::DeviceBuffer;

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

/// A kernel's parameters, in declaration order.
///
/// Each value is kept in its own 16-byte aligned slot, so that the pointers
/// handed to the driver stay valid and aligned for any parameter type.
#[derive(Default, Debug)]
pub struct KernelArgs {
    slots: Vec<Box<[u128]>>,
}

impl KernelArgs {
    pub fn new() -> KernelArgs {
        KernelArgs::default()
    }

    /// A scalar parameter (`int n`, `float alpha`, `size_t numel`).
    pub fn push<T: Pod>(&mut self, value: T) -> &mut Self {
        self.push_bytes(as_bytes(std::slice::from_ref(&value)))
    }

    /// A device pointer parameter (`const float* x`) pointing at `buffer`.
    /// The buffer must outlive the kernel's execution.
    pub fn push_buffer(&mut self, buffer: &DeviceBuffer) -> &mut Self {
        self.push(buffer.device_ptr())
    }

    /// A parameter given as its raw bytes (a struct passed by value).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let mut slot = vec![0u128; bytes.len().div_ceil(16).max(1)].into_boxed_slice();
        // SAFETY: the slot holds at least `bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), slot.as_mut_ptr().cast::<u8>(), bytes.len()) };
        self.slots.push(slot);
        self
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The `void**` array both `cuLaunchKernel` and `hipModuleLaunchKernel` take.
    /// Valid while `self` is neither dropped nor pushed to.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots.iter_mut().map(|s| s.as_mut_ptr().cast::<c_void>()).collect()
    }
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
    fn each_argument_gets_an_aligned_slot_holding_its_bytes() {
        let mut a = KernelArgs::new();
        a.push(7u32).push(-1.5f32).push(0x1122_3344_5566_7788u64).push_bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
        let ptrs = a.pointers();
        assert_eq!(ptrs.len(), 4);
        for p in &ptrs {
            assert_eq!(*p as usize % 16, 0);
        }
        unsafe {
            assert_eq!(*(ptrs[0] as *const u32), 7);
            assert_eq!(*(ptrs[1] as *const f32), -1.5);
            assert_eq!(*(ptrs[2] as *const u64), 0x1122_3344_5566_7788);
            assert_eq!(std::slice::from_raw_parts(ptrs[3] as *const u8, 17)[16], 17);
        }
    }

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
