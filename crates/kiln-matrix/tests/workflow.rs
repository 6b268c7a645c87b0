//! The generated workflow, read back as YAML: its triggers, its guards and
//! what each GPU job runs.

mod common;

use common::{good, matrix};
use kiln_matrix::workflow::{self, compute_cap, gfx_target_version, Drift, Generated};
use saphyr::{LoadableYamlNode, Scalar, Yaml};

fn generated(text: &str) -> (String, Yaml<'static>) {
    let files = workflow::generate(&matrix(text));
    let wf = files.iter().find(|g| g.path.to_str() == Some(workflow::WORKFLOW)).expect("the workflow is generated");
    let text: &'static str = Box::leak(wf.text.clone().into_boxed_str());
    let mut docs = Yaml::load_from_str(text).unwrap_or_else(|e| panic!("the generated workflow is not YAML: {e}\n{text}"));
    assert_eq!(docs.len(), 1);
    (wf.text.clone(), docs.remove(0))
}

fn get<'y>(node: &'y Yaml<'static>, path: &[&str]) -> &'y Yaml<'static> {
    let mut n = node;
    for key in path {
        n = n.as_mapping_get(key).unwrap_or_else(|| panic!("no `{key}` on the way to {path:?}"));
    }
    n
}

fn str_of<'y>(node: &'y Yaml<'static>, path: &[&str]) -> &'y str {
    get(node, path).as_str().unwrap_or_else(|| panic!("{path:?} is not a string: {:?}", get(node, path)))
}

fn steps<'y>(wf: &'y Yaml<'static>, job: &str) -> &'y [Yaml<'static>] {
    get(wf, &["jobs", job, "steps"]).as_sequence().expect("steps is a list")
}

fn step<'y>(wf: &'y Yaml<'static>, job: &str, name: &str) -> &'y Yaml<'static> {
    steps(wf, job)
        .iter()
        .find(|s| s.as_mapping_get("name").and_then(|n| n.as_str()) == Some(name))
        .unwrap_or_else(|| panic!("job {job} has no step `{name}`"))
}

fn labels(wf: &Yaml<'static>, job: &str) -> Vec<String> {
    get(wf, &["jobs", job, "runs-on"]).as_sequence().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect()
}

#[test]
fn triggers_permissions_and_concurrency() {
    let (text, wf) = generated(&good());
    assert!(text.starts_with(workflow::HEADER));
    let on = get(&wf, &["on"]);
    assert_eq!(get(on, &["push", "branches"]).as_sequence().unwrap()[0].as_str(), Some("main"));
    assert!(on.as_mapping_get("pull_request").is_some() && on.as_mapping_get("workflow_dispatch").is_some());
    // Never the trigger that runs with a write token on a fork's code.
    assert!(!text.contains("pull_request_target"));
    let perms = get(&wf, &["permissions"]).as_mapping().unwrap();
    assert_eq!(perms.len(), 1);
    assert_eq!(str_of(&wf, &["permissions", "contents"]), "read");
    // Only the publish job widens the token, for its attestation (its own test).
    let writes: Vec<&str> = text.lines().filter(|l| l.ends_with(": write")).map(str::trim).collect();
    assert_eq!(writes, ["id-token: write", "attestations: write"], "no other job widens the token");
    let tags = get(on, &["push", "tags"]).as_sequence().unwrap();
    assert_eq!(tags[0].as_str(), Some("v*"), "a release tag runs the workflow");
    assert!(str_of(&wf, &["concurrency", "group"]).contains("github.event.pull_request.number || github.sha"));
    assert_eq!(str_of(&wf, &["concurrency", "cancel-in-progress"]), "${{ github.event_name == 'pull_request' }}");
}

#[test]
fn every_action_is_pinned_to_a_commit_and_checkouts_keep_no_token() {
    let (text, wf) = generated(&good());
    let uses: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("uses: ")).collect();
    // shards: checkout, cache x2, upload; merge: checkout, cache x2, download, upload;
    // publish: checkout, download, attest; build: checkout, cache, upload; each of
    // the 3 legs: checkout, download x2, upload.
    assert_eq!(uses.len(), 4 + 5 + 3 + 3 + 3 * 4, "{uses:?}");
    for u in uses {
        let (action, comment) = u.split_once(" # ").expect("a release comment after the SHA");
        let sha = action.split_once('@').unwrap().1;
        assert!(sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()), "{u}");
        assert!(comment.starts_with('v'), "{u}");
    }
    for job in ["dist-shard", "dist-merge", "publish", "build", "gpu-gfx1030", "gpu-sm_90"] {
        let checkout = step(&wf, job, "Check out");
        assert_eq!(get(checkout, &["with", "persist-credentials"]).as_bool(), Some(false), "{job}");
    }
}

#[test]
fn the_build_job_builds_the_test_archive_and_no_dist() {
    let (_, wf) = generated(&good());
    assert_eq!(str_of(&wf, &["jobs", "build", "runs-on"]), "ubuntu-24.04");
    assert_eq!(str_of(&wf, &["jobs", "build", "env", "KILN_RUST"]), "1.95.0");
    assert!(str_of(step(&wf, "build", "Install kiln's system packages"), &["run"]).starts_with("bash .ci/setup\n"));
    let names: Vec<&str> = steps(&wf, "build").iter().map(|s| s.as_mapping_get("name").unwrap().as_str().unwrap()).collect();
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap_or_else(|| panic!("no step {n}: {names:?}"));
    assert!(at("Install cargo-nextest") < at("Install kiln's system packages"), "so that .ci/setup keeps the pinned nextest");
    assert!(!names.contains(&"Build the dist folder") && !names.contains(&"Upload the dist folder"), "the dist is the merge job's: {names:?}");
    let archive = str_of(step(&wf, "build", "Build the test archive"), &["run"]);
    assert!(archive.contains("cargo nextest archive --workspace --locked --archive-file target/kiln-tests/kiln-tests.tar.zst"));
    assert!(archive.contains("> target/kiln-tests/workspace"), "{archive}");
    assert_eq!(str_of(step(&wf, "build", "Upload the test archive"), &["with", "name"]), workflow::TESTS_ARTIFACT);
}

#[test]
fn shard_jobs_build_parts_and_the_merge_job_uploads_the_dist_the_legs_test() {
    let text = good().replacen("actions:\n", "dist:\n  shards: 3\n  timeout-minutes: 45\nactions:\n", 1);
    let (raw, wf) = generated(&text);
    let shards: Vec<i64> =
        get(&wf, &["jobs", "dist-shard", "strategy", "matrix", "shard"]).as_sequence().unwrap().iter().map(|p| p.as_integer().unwrap()).collect();
    assert_eq!(shards, [1, 2, 3]);
    assert_eq!(get(&wf, &["jobs", "dist-shard", "timeout-minutes"]).as_integer(), Some(45));
    assert_eq!(str_of(&wf, &["jobs", "dist-shard", "runs-on"]), "ubuntu-24.04", "the build runner by default");
    assert_eq!(str_of(&wf, &["jobs", "dist-shard", "env", "KILN_SHARD"]), "${{ matrix.shard }}/3");
    let build = str_of(step(&wf, "dist-shard", "Build this shard's part of the dist"), &["run"]);
    assert_eq!(build, "cargo xtask dist --shard \"$KILN_SHARD\" --locked --out target/dist-part");
    let up = step(&wf, "dist-shard", "Upload the part");
    assert_eq!(str_of(up, &["with", "name"]), format!("{}${{{{ matrix.shard }}}}", workflow::PART_ARTIFACT_PREFIX));
    assert_eq!(str_of(up, &["with", "path"]), "target/dist-part");
    // Each shard caches its own objects, keyed by what cuts the plan too.
    let key = str_of(step(&wf, "dist-shard", "Restore the kiln cache"), &["with", "key"]);
    assert!(key.contains("shard-${{ matrix.shard }}-of-3") && key.contains("'job-costs.toml'"), "{key}");

    assert_eq!(str_of(&wf, &["jobs", "dist-merge", "needs"]), "dist-shard");
    let down = step(&wf, "dist-merge", "Download the parts");
    assert_eq!(str_of(down, &["with", "pattern"]), format!("{}*", workflow::PART_ARTIFACT_PREFIX));
    let merge = str_of(step(&wf, "dist-merge", "Merge the parts into the dist folder"), &["run"]);
    assert_eq!(merge, "cargo xtask dist merge --locked \"$RUNNER_TEMP\"/kiln/parts/kiln-dist-part-*");
    let dist = step(&wf, "dist-merge", "Upload the dist folder");
    assert_eq!(str_of(dist, &["with", "name"]), workflow::DIST_ARTIFACT);
    assert_eq!(str_of(dist, &["with", "path"]), "target/dist");
    // GitHub-hosted: no guard, and no remote cache unless the matrix names one.
    assert!(get(&wf, &["jobs", "dist-shard"]).as_mapping_get("if").is_none());
    assert!(!raw.contains("KILN_REMOTE_CACHE"), "no remote cache configured");
    // No expression is expanded into a script (zizmor's template injection).
    for job in ["dist-shard", "dist-merge"] {
        for st in steps(&wf, job) {
            if let Some(run) = st.as_mapping_get("run").and_then(|r| r.as_str()) {
                assert!(!run.contains("${{"), "{job}: {run}");
            }
        }
    }
}

#[test]
fn the_publish_job_attests_every_crate_of_the_merged_dist_on_a_tag_then_publishes() {
    let (_, wf) = generated(&good());
    let job = get(&wf, &["jobs", workflow::PUBLISH_JOB]);
    assert_eq!(str_of(job, &["needs"]), workflow::MERGE_JOB);
    let cond = str_of(job, &["if"]);
    assert!(cond.contains("github.event_name != 'pull_request'") && cond.contains("startsWith(github.ref, 'refs/tags/v')"), "{cond}");
    assert_eq!(str_of(job, &["runs-on"]), "ubuntu-24.04", "GitHub-hosted: its OIDC token is the attestation's identity");
    // Exactly what actions/attest-build-provenance needs, and nothing more.
    let perms = get(job, &["permissions"]).as_mapping().unwrap();
    assert_eq!(perms.len(), 3, "{perms:?}");
    for (k, v) in [("contents", "read"), ("id-token", "write"), ("attestations", "write")] {
        assert_eq!(str_of(job, &["permissions", k]), v);
    }
    let names: Vec<&str> = steps(&wf, "publish").iter().map(|s| s.as_mapping_get("name").unwrap().as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "Check out",
            "Install Rust",
            "Download the dist folder",
            "Check the dist folder against artifacts.lock",
            "Attest build provenance",
            "Publish the crates"
        ],
        "the dist is checked, then signed, then published"
    );
    let down = step(&wf, "publish", "Download the dist folder");
    assert_eq!(str_of(down, &["with", "name"]), workflow::DIST_ARTIFACT);
    assert_eq!(str_of(down, &["with", "path"]), "target/dist");
    assert_eq!(str_of(step(&wf, "publish", "Check the dist folder against artifacts.lock"), &["run"]), "cargo xtask verify");
    let attest = step(&wf, "publish", "Attest build provenance");
    assert!(str_of(attest, &["uses"]).starts_with("actions/attest-build-provenance@"));
    assert_eq!(str_of(attest, &["with", "subject-path"]), "target/dist/crates/*.crate");
    let publish = step(&wf, "publish", "Publish the crates");
    assert_eq!(str_of(publish, &["run"]), "cargo xtask publish --registry crates-io --execute");
    // The token reaches the one step that needs it, from a secret, never a script.
    assert_eq!(str_of(publish, &["env", "CARGO_REGISTRY_TOKEN"]), "${{ secrets.CARGO_REGISTRY_TOKEN }}");
    assert!(job.as_mapping_get("env").and_then(|e| e.as_mapping_get("CARGO_REGISTRY_TOKEN")).is_none());
}

#[test]
fn self_hosted_dist_runners_get_no_fork_code_and_the_remote_cache_is_read_only_for_pull_requests() {
    let dist = "dist:\n  shards: 2\n  runs-on: [self-hosted, linux, x64, kiln-cpu]\n  \
                remote-cache:\n    url-variable: KILN_REMOTE_CACHE\n    token-secret: KILN_CACHE_TOKEN\nactions:\n";
    let (_, wf) = generated(&good().replacen("actions:\n", dist, 1));
    assert_eq!(labels(&wf, "dist-shard"), ["self-hosted", "linux", "x64", "kiln-cpu"]);
    let guard = str_of(&wf, &["jobs", "gpu-gfx1030", "if"]);
    for job in ["dist-shard", "dist-merge"] {
        assert_eq!(str_of(&wf, &["jobs", job, "if"]), guard, "{job}");
        let env = |k: &str| str_of(&wf, &["jobs", job, "env", k]).to_string();
        assert_eq!(env("KILN_REMOTE_CACHE"), "${{ vars.KILN_REMOTE_CACHE }}");
        assert_eq!(env("KILN_REMOTE_CACHE_TOKEN"), "${{ secrets.KILN_CACHE_TOKEN }}");
        assert_eq!(env("KILN_REMOTE_CACHE_READ_ONLY"), "${{ github.event_name == 'pull_request' }}");
    }
    assert!(get(&wf, &["jobs", "build", "env"]).as_mapping_get("KILN_REMOTE_CACHE_TOKEN").is_none(), "only the dist jobs get the token");
    let files = workflow::generate(&matrix(&good().replacen("actions:\n", dist, 1)));
    let cfg = &files.iter().find(|g| g.path.to_str() == Some(workflow::ACTIONLINT_CONFIG)).unwrap().text;
    assert!(cfg.contains("- kiln-cpu"), "{cfg}");
}

#[test]
fn gpu_jobs_never_run_fork_code_and_waiting_legs_only_run_by_hand() {
    let (_, wf) = generated(&good());
    let active = str_of(&wf, &["jobs", "gpu-gfx1030", "if"]);
    assert_eq!(
        active,
        "github.event_name == 'push' || github.event_name == 'workflow_dispatch' || \
         (github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name == github.repository)",
    );
    assert_eq!(str_of(&wf, &["jobs", "gpu-gfx90a", "if"]), "github.event_name == 'workflow_dispatch'");
    for job in ["gpu-gfx1030", "gpu-gfx90a", "gpu-sm_90"] {
        let needs: Vec<&str> = get(&wf, &["jobs", job, "needs"]).as_sequence().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        assert_eq!(needs, ["build", "dist-merge"], "the merged dist and the test archive");
        assert!(get(&wf, &["jobs", job]).as_mapping_get("container").is_none(), "the step runs the container");
    }
}

#[test]
fn gpu_jobs_run_on_their_arch_label_with_partitions_and_timeouts() {
    let (_, wf) = generated(&good());
    assert_eq!(labels(&wf, "gpu-gfx1030"), ["self-hosted", "linux", "x64", "kiln-gpu", "gfx1030"]);
    assert_eq!(labels(&wf, "gpu-sm_90"), ["self-hosted", "linux", "x64", "kiln-gpu", "sm_90", "h100"]);
    assert_eq!(get(&wf, &["jobs", "gpu-sm_90", "timeout-minutes"]).as_integer(), Some(30));
    assert_eq!(get(&wf, &["jobs", "gpu-gfx1030", "timeout-minutes"]).as_integer(), Some(60));

    let parts: Vec<i64> =
        get(&wf, &["jobs", "gpu-gfx90a", "strategy", "matrix", "partition"]).as_sequence().unwrap().iter().map(|p| p.as_integer().unwrap()).collect();
    assert_eq!(parts, [1, 2]);
    assert_eq!(get(&wf, &["jobs", "gpu-gfx90a", "strategy", "fail-fast"]).as_bool(), Some(false));
    let env = |job: &str, key: &str| str_of(&wf, &["jobs", job, "env", key]).to_string();
    assert_eq!(env("gpu-gfx90a", "KILN_PARTITION"), "count:${{ matrix.partition }}/2");
    assert_eq!(env("gpu-gfx90a", "KILN_TEST_ARCH"), "gfx90a");
    assert_eq!(env("gpu-sm_90", "KILN_TEST_ARCH"), "sm_90");
    assert_eq!(env("gpu-gfx90a", "HSA_XNACK"), "1", "quoted, so that it stays a string");
    assert!(env("gpu-sm_90", "KILN_IMAGE").starts_with("registry.example:5000/kiln/runner-cuda@sha256:"));
}

#[test]
fn the_test_step_gives_each_backend_its_device_and_nothing_more() {
    let (_, wf) = generated(&good());
    let hip = str_of(step(&wf, "gpu-gfx1030", "Run the tests in the runner image"), &["run"]);
    assert!(hip.contains("--device /dev/kfd --device \"$KILN_RENDER_NODE\""), "{hip}");
    assert!(hip.contains("--group-add \"$(stat -c %g /dev/kfd)\""), "{hip}");
    assert!(!hip.contains("--gpus"), "{hip}");
    let cuda = str_of(step(&wf, "gpu-sm_90", "Run the tests in the runner image"), &["run"]);
    assert!(cuda.contains("--gpus \"device=$KILN_CUDA_DEVICE\""), "{cuda}");
    assert!(!cuda.contains("/dev/kfd"), "{cuda}");
    for script in [hip, cuda] {
        for needed in [
            "--network none",
            "--security-opt no-new-privileges",
            "--user \"$(id -u):$(id -g)\"",
            "--volume \"$GITHUB_WORKSPACE:$src:ro\"",
            "--env KILN_DIST_DIR=/kiln/dist --env KILN_TEST_ARCH",
            "\"$KILN_IMAGE\"",
            "--archive-file /kiln/tests/kiln-tests.tar.zst",
            "--workspace-remap \"$src\"",
            "--profile ci",
            "--partition \"$KILN_PARTITION\"",
        ] {
            assert!(script.contains(needed), "missing `{needed}`:\n{script}");
        }
        for refused in ["--privileged", "--cap-add", "--network host", "docker.sock", "${{"] {
            assert!(!script.contains(refused), "`{refused}` in:\n{script}");
        }
    }
    let gfx90a = str_of(step(&wf, "gpu-gfx90a", "Run the tests in the runner image"), &["run"]);
    assert!(gfx90a.contains("--env HSA_XNACK \\\n") && gfx90a.contains("--env KILN_LOG \\\n"), "{gfx90a}");
    assert!(!gfx90a.contains("-E "), "no filter in the fixture: {gfx90a}");
}

#[test]
fn the_preflight_checks_the_runner_has_the_legs_gpu() {
    let (_, wf) = generated(&good());
    let hip = str_of(step(&wf, "gpu-gfx90a", "Check this runner's GPU"), &["run"]);
    assert!(hip.contains("case \"$version\" in 90010) ;;"), "{hip}");
    assert!(hip.contains("KILN_RENDER_NODE"), "{hip}");
    let cuda = str_of(step(&wf, "gpu-sm_90", "Check this runner's GPU"), &["run"]);
    assert!(cuda.contains("[ \"$cap\" = 9.0 ]") && cuda.contains("-i \"$KILN_CUDA_DEVICE\""), "{cuda}");
    for script in [hip, cuda] {
        assert!(script.contains(kiln_matrix::PLACEHOLDER_DIGEST), "placeholder images fail here, by name");
    }
}

#[test]
fn junit_is_uploaded_even_when_tests_fail_and_the_container_is_removed() {
    let (_, wf) = generated(&good());
    let junit = step(&wf, "gpu-sm_90", "Upload JUnit");
    assert_eq!(str_of(junit, &["if"]), "always()");
    assert_eq!(str_of(junit, &["with", "name"]), "junit-sm_90-${{ matrix.partition }}");
    assert_eq!(str_of(junit, &["with", "path"]), "${{ runner.temp }}/kiln/out/target/nextest/ci/junit.xml");
    let stop = step(&wf, "gpu-sm_90", "Stop the test container");
    assert_eq!(str_of(stop, &["if"]), "always()");
    assert!(str_of(stop, &["run"]).contains("docker rm --force \"$KILN_CONTAINER\""));
    let names: Vec<&str> = steps(&wf, "gpu-sm_90").iter().map(|s| s.as_mapping_get("name").unwrap().as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "Check out",
            "Download the dist folder",
            "Download the test archive",
            "Check this runner's GPU",
            "Run the tests in the runner image",
            "Stop the test container",
            "Upload JUnit"
        ]
    );
}

#[test]
fn a_filter_reaches_nextest_through_the_environment() {
    let text = good().replacen("legs:\n", "tests:\n  filter: \"package(kiln-kernel-tests) & not test(slow: x)\"\nlegs:\n", 1);
    let (_, wf) = generated(&text);
    assert_eq!(str_of(&wf, &["jobs", "gpu-sm_90", "env", "KILN_TEST_FILTER"]), "package(kiln-kernel-tests) & not test(slow: x)");
    let run = str_of(step(&wf, "gpu-sm_90", "Run the tests in the runner image"), &["run"]);
    assert!(run.trim_end().ends_with("-E \"$KILN_TEST_FILTER\""), "{run}");
}

#[test]
fn the_actionlint_config_lists_the_custom_labels() {
    let files = workflow::generate(&matrix(&good()));
    let cfg = files.iter().find(|g| g.path.to_str() == Some(workflow::ACTIONLINT_CONFIG)).unwrap();
    let doc = Yaml::load_from_str(&cfg.text).unwrap();
    let labels: Vec<&str> = doc[0]["self-hosted-runner"]["labels"].as_sequence().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(labels, ["kiln-gpu", "gfx1030", "gfx90a", "sm_90", "h100"]);
}

#[test]
fn kfd_and_nvidia_smi_spell_the_archs_as_expected() {
    // KFD's gfx_target_version: major*10000 + minor*100 + stepping (hex digits).
    assert_eq!(gfx_target_version("gfx1030"), 100300);
    assert_eq!(gfx_target_version("gfx1100"), 110000);
    assert_eq!(gfx_target_version("gfx90a"), 90010);
    assert_eq!(gfx_target_version("gfx942"), 90402);
    assert_eq!(compute_cap(90), "9.0");
    assert_eq!(compute_cap(89), "8.9");
}

#[test]
fn yaml_scalars_round_trip_through_the_writer() {
    // Values that YAML would read as something else unless quoted, in env.
    let tricky = ["1", "on", "yes", "null", "a: b", "#x", "it's", "1.5", "-x", " lead", "0x10", "@x"];
    let mut text = good();
    let env: String = tricky.iter().enumerate().map(|(i, v)| format!("      V{i}: '{}'\n", v.replace('\'', "''"))).collect();
    text = text.replacen("      KILN_LOG: debug\n", &format!("      KILN_LOG: debug\n{env}"), 1);
    let (_, wf) = generated(&text);
    for (i, v) in tricky.iter().enumerate() {
        let got = get(&wf, &["jobs", "gpu-gfx90a", "env", &format!("V{i}")]);
        assert!(matches!(got, Yaml::Value(Scalar::String(s)) if s == v), "V{i}: {v:?} came back as {got:?}");
    }
}

#[test]
fn drift_finds_missing_changed_and_stale_files_and_write_fixes_them() {
    let root = std::env::temp_dir().join(format!("kiln-matrix-drift-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let files = workflow::generate(&matrix(&good()));
    let wf = std::path::PathBuf::from(workflow::WORKFLOW);

    std::fs::create_dir_all(root.join(".github/workflows")).unwrap();
    std::fs::write(root.join(".github/workflows/other.yml"), "name: hand-written\n").unwrap();
    std::fs::write(root.join(".github/workflows/old.yml"), format!("{}\nname: old\n", workflow::HEADER)).unwrap();
    let d = workflow::drift(&root, &files).unwrap();
    assert!(d.contains(&Drift::Missing(wf.clone())), "{d:?}");
    assert!(d.contains(&Drift::Stale(".github/workflows/old.yml".into())), "{d:?}");
    assert!(!d.iter().any(|x| matches!(x, Drift::Stale(p) if p.ends_with("other.yml"))), "hand-written files are left alone");

    workflow::write(&root, &files).unwrap();
    assert_eq!(workflow::drift(&root, &files).unwrap(), []);
    assert!(!root.join(".github/workflows/old.yml").exists());
    assert!(root.join(".github/workflows/other.yml").exists());

    let edited: Vec<Generated> =
        files.iter().map(|g| Generated { path: g.path.clone(), text: g.text.replace("timeout-minutes: 60", "timeout-minutes: 61") }).collect();
    assert_eq!(workflow::drift(&root, &edited).unwrap(), [Drift::Differs(wf)]);
    std::fs::remove_dir_all(&root).unwrap();
}
