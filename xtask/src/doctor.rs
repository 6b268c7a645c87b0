use std::path::Path;

use anyhow::Result;

pub fn run(_pins: &Path) -> Result<()> {
    todo!()
}
