//! `cargo xtask publish` and `cargo xtask registry serve`: flags to
//! kiln-publish, which does the work.

use std::time::Duration;

use anyhow::Result;
use kiln_publish::{registry::Lookup, server, Options};

use crate::flags::{Publish, RegistryAction};

pub fn run(f: Publish) -> Result<()> {
    let opts = Options { dist: f.dist, registry: f.registry, execute: f.execute, index_wait: Duration::from_secs(60) };
    kiln_publish::run(&opts, &Lookup::from_process()?, &mut std::io::stdout())?;
    Ok(())
}

pub fn registry(action: RegistryAction) -> Result<()> {
    match action {
        RegistryAction::Serve { dir, port, token } => {
            let s = server::Server::start(&dir, &format!("127.0.0.1:{port}"), server::Options { token, ..Default::default() })?;
            println!("serving {} as a sparse registry; in .cargo/config.toml:", dir.display());
            println!("  [registries.kiln]\n  index = \"{}\"", s.index_url());
            println!("publish to it with: CARGO_REGISTRIES_KILN_TOKEN=any cargo xtask publish --registry kiln --execute");
            s.wait();
            Ok(())
        }
    }
}
