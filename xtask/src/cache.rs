//! `cargo xtask cache`: the work is in kiln_dist::cache_admin.

use anyhow::{bail, Result};
use kiln_dist::cache_admin;
use kiln_toolchain::Cache;

use crate::flags::CacheAction;

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

pub fn run(action: CacheAction) -> Result<()> {
    let mut cache = Cache::from_env()?;
    match action {
        CacheAction::Size => {
            let sizes = cache_admin::sizes(&cache);
            for (area, bytes) in &sizes {
                println!("{:>12}  {area}", mb(*bytes));
            }
            println!("{:>12}  total in {}", mb(sizes.iter().map(|(_, b)| b).sum()), cache.root().display());
        }
        CacheAction::Verify { repair } => {
            let v = cache_admin::verify(&cache, repair)?;
            for d in &v.damaged {
                println!("damaged: {} ({})", d.why, d.path.display());
            }
            for name in &v.foreign {
                println!("not checked, kept: {name} is no name kiln gives there (yours? move it out of {})", cache.root().display());
            }
            let (checked, damaged) = (v.checked, v.damaged);
            if damaged.is_empty() {
                println!("{}: {checked} entries and downloads checked, none damaged", cache.root().display());
            } else if repair {
                println!("{} of {checked} damaged, removed: the next dist rebuilds or downloads them", damaged.len());
            } else {
                bail!("{} of {checked} cache items are damaged; `cargo xtask cache verify --repair` removes them", damaged.len());
            }
        }
        CacheAction::Mark => {
            cache.mark()?;
            println!("{} is marked as kiln's cache: `cargo xtask cache gc` may clean it", cache.root().display());
        }
        CacheAction::Gc => {
            let freed = cache_admin::gc(&cache)?;
            for (what, bytes) in &freed.items {
                println!("removed {what} ({})", mb(*bytes));
            }
            for name in &freed.kept {
                println!("kept {name}: no name kiln gives there (yours? move it out of {})", cache.root().display());
            }
            println!("freed {} in {}", mb(freed.bytes()), cache.root().display());
        }
    }
    Ok(())
}
