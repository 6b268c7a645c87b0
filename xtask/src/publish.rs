//! `cargo xtask publish` and `cargo xtask registry serve`: flags to
//! kiln-publish, which does the work.

use std::time::Duration;

use anyhow::{bail, Result};
use kiln_publish::{
    registry::Lookup,
    serve::{self, Ferro, FERRO, FERRO_VERSION},
    Options,
};

use crate::flags::{Publish, RegistryAction};

pub fn run(f: Publish) -> Result<()> {
    let opts = Options { dist: f.dist, registry: f.registry, execute: f.execute, index_wait: Duration::from_secs(60) };
    kiln_publish::run(&opts, &Lookup::from_process()?, &mut std::io::stdout())?;
    Ok(())
}

pub fn registry(action: RegistryAction) -> Result<()> {
    match action {
        RegistryAction::Serve { dir, port, token } => {
            if token.is_some() {
                bail!(
                    "--token: {FERRO} checks no token (it has no authentication and accepts every upload), so kiln \
                     will not pretend it does; leave --token out. To try a registry that checks tokens, publish to the one your team runs"
                );
            }
            let exe = serve::find(std::env::var_os("PATH").as_deref(), serve::cargo_home().as_deref())?;
            // Port 0: a free one, chosen here (ferro must know the port it advertises).
            let port = if port == 0 { std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port() } else { port };
            // Said at once: on a busy machine ferro can take seconds to answer.
            println!("starting {FERRO} {FERRO_VERSION} ({}) on 127.0.0.1:{port}, its data in {} ...", exe.display(), dir.display());
            let ferro = Ferro::start_reporting(&exe, &dir, port, &mut |line| println!("{line}"))?;
            let index = ferro.index_url();
            println!(
                "{FERRO} {FERRO_VERSION} ({}, pid {}) serves {} on 127.0.0.1:{port}, answering after {:.2} s",
                exe.display(),
                ferro.pid(),
                dir.display(),
                ferro.started_in.as_secs_f64()
            );
            println!("tokens: it accepts any token (it has no authentication): loopback only, never expose it");
            println!("in .cargo/config.toml:\n  [registries.kiln]\n  index = \"{index}\"");
            println!("publish to it with:\n  CARGO_REGISTRIES_KILN_INDEX={index} CARGO_REGISTRIES_KILN_TOKEN=any cargo xtask publish --registry kiln --execute");
            if dir.join("index").is_dir() && dir.join("crates").is_dir() {
                println!(
                    "note: {} also holds index/ and crates/ from kiln's own server (before {FERRO}), which {FERRO} does not read: publish again",
                    dir.display()
                );
            }
            println!("stop it with Ctrl-C");
            let status = ferro.wait()?;
            // Ctrl-C reaches ferro too (the terminal signals the whole group): it shuts down cleanly, then kiln ends.
            if !status.success() {
                bail!("{FERRO} stopped: {status}");
            }
            Ok(())
        }
    }
}
