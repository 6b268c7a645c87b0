// The C functions the example's static library defines (what kiln's
// validation checks the library against).
use core::ffi::c_void;

extern "C" {
    pub(crate) fn example_axpy(a: f32, x: *const f32, y: *mut f32, n: u32, stream: *mut c_void) -> i32;
}
