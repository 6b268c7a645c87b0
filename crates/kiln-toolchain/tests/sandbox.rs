//! The compiler sandbox in both modes: the builder container's (`/` is the
//! sysroot) runs through the same bubblewrap sandbox as a cached sysroot, and
//! a sandbox that cannot start fails when the runner is made, saying what to
//! change. Needs bubblewrap, as every compile does.

use std::path::PathBuf;

use kiln_toolchain::{Mode, Runner, Sysroot};

#[test]
fn host_mode_runs_in_the_same_sandbox_with_a_fresh_pid_namespace() {
    // This machine's `/` stands in for the builder container's.
    let runner = Runner::new(Sysroot { root: "/".into(), identity: "test".into(), mode: Mode::Host }).unwrap();
    let argv = ["sh".to_string(), "-c".into(), "echo $$ $HOME $PWD; env | sort | tr '\\n' ' '".into()];
    let c = runner.command(&[], "/", &argv);
    assert!(c.get_program().to_string_lossy().ends_with("bwrap"), "{c:?}");
    let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    assert_eq!(args[..3], ["--ro-bind", "/", "/"], "{args:?}");
    assert!(args.contains(&"--unshare-all".to_string()) && args.contains(&"--clearenv".to_string()), "{args:?}");
    assert!(!args.iter().any(|a| a.contains("file-prefix-map")), "nothing is rewritten: the paths are the sandbox's");
    // The same pid (nvcc writes its pid into host objects) and environment every run.
    let one = runner.output(&argv).unwrap();
    let two = runner.output(&argv).unwrap();
    assert_eq!(one, two);
    // pid 2 (bubblewrap is 1), and only kiln's fixed variables: nothing of the caller's.
    assert_eq!(one, "2 /tmp /\nHOME=/tmp LC_ALL=C PATH=/usr/bin:/bin PWD=/ SOURCE_DATE_EPOCH=0 TMPDIR=/tmp ");
}

#[test]
fn a_sandbox_that_cannot_start_says_what_to_change() {
    let root = std::env::temp_dir().join(format!("kiln-empty-root-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    // An empty, read-only root: bubblewrap cannot even make /dev in it.
    let e = Runner::new(Sysroot { root: PathBuf::from(&root), identity: "test".into(), mode: Mode::Host }).unwrap_err();
    let e = format!("{e:#}");
    std::fs::remove_dir(&root).ok();
    assert!(e.contains("bubblewrap cannot set up the compiler sandbox"), "{e}");
    assert!(e.contains("bwrap: "), "bubblewrap's own reason is kept: {e}");
    assert!(e.contains("--security-opt seccomp=unconfined") && e.contains("docs/containers.md"), "{e}");
}
