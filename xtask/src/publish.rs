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
            let needs_token = token.is_some();
            let s = server::Server::start(&dir, &format!("127.0.0.1:{port}"), server::Options { token, ..Default::default() })?;
            println!("serving {} as a sparse registry; in .cargo/config.toml:", dir.display());
            println!("  [registries.kiln]\n  index = \"{}\"", s.index_url());
            // A line that works when copied: the index too, and the token this server takes (never printed).
            let token = if needs_token { "<the --token you gave>" } else { "any" };
            println!("publish to it with: CARGO_REGISTRIES_KILN_INDEX={} CARGO_REGISTRIES_KILN_TOKEN={token} cargo xtask publish --registry kiln --execute", s.index_url());
            s.wait();
            Ok(())
        }
    }
}
