//! The compiler sandbox in both modes: the builder container's (`/` is the
//! sysroot) runs through the same bubblewrap sandbox as a cached sysroot, and
//! a sandbox that cannot start fails when the runner is made, saying what to
//! change. Needs bubblewrap, as every compile does.

use std::path::PathBuf;

use kiln_toolchain::{Mode, Mount, Runner, Sysroot};

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

#[test]
fn the_compiler_has_no_capability_and_cannot_remount_a_read_only_mount_even_as_root() {
    // CI and the builder image run kiln as uid 0: there, a sandbox without
    // `--cap-drop ALL` left CapEff full and this remount wrote to the host.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("input.cu");
    std::fs::write(&file, "original").unwrap();
    let runner = Runner::new(Sysroot { root: "/".into(), identity: "test".into(), mode: Mode::Host }).unwrap();
    let mounts = [Mount { host: dir.path().to_path_buf(), at: "/tmp/src".into(), writable: false }];
    let script =
        "grep CapEff /proc/self/status; mount -o remount,bind,rw /tmp/src 2>/dev/null; echo changed > /tmp/src/input.cu 2>/dev/null; echo done";
    let out = runner.command(&mounts, "/", &["sh".to_string(), "-c".into(), script.into()]).stdin(std::process::Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CapEff:\t0000000000000000"), "the compiler keeps no capability: {stdout}");
    assert!(stdout.ends_with("done\n"), "the script ran to its end: {stdout}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "original", "a read-only input stays read-only");
    // A session of its own (TIOCSTI cannot reach the caller's terminal): its
    // id names a process inside the sandbox's pid namespace; the caller's
    // session lies outside it and reads as 0.
    let stat = runner.output(&["sh".to_string(), "-c".into(), "cut -d' ' -f6 /proc/self/stat".into()]).unwrap();
    assert_ne!(stat.trim(), "0", "the compiler runs in the caller's session");
}
