//! Test names: `<backend>::<module>::<case>`, e.g. `cuda::affine::f32_strided_t`.
//!
//! The module is always the second segment, so that reports can group by it
//! without knowing the cases.

use kiln_loader::Backend;

pub fn test_name(backend: Backend, module: &str, case: &str) -> String {
    format!("{}::{module}::{case}", backend.as_str())
}

/// A test name split into backend, module and case; `None` for names that do
/// not follow the scheme (the harness's own host tests, other crates' tests).
pub fn parse(name: &str) -> Option<(Backend, &str, &str)> {
    let mut parts = name.splitn(3, "::");
    let backend = match parts.next()? {
        "cuda" => Backend::Cuda,
        "hip" => Backend::Hip,
        _ => return None,
    };
    let module = parts.next()?;
    let case = parts.next()?;
    crate::MODULES.contains(&module).then_some((backend, module, case))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let n = test_name(Backend::Hip, "reduce", "softmax_bf16_cols1027");
        assert_eq!(n, "hip::reduce::softmax_bf16_cols1027");
        assert_eq!(parse(&n), Some((Backend::Hip, "reduce", "softmax_bf16_cols1027")));
        assert_eq!(parse("cuda::affine::a::b"), Some((Backend::Cuda, "affine", "a::b")));
        assert_eq!(parse("cuda::nonsense::x"), None);
        assert_eq!(parse("host::comparator::nan"), None);
        assert_eq!(parse("cuda::affine"), None);
    }
}
