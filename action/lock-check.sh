#!/usr/bin/env bash
# The GitHub action's logic (action.yml only passes its inputs here):
# 1. get deepep-forge (see `install` in action.yml),
# 2. run `lock check --format github` in $GITHUB_WORKSPACE: annotations with
#    file and line, relative to the workspace, go to the log,
# 3. write a Markdown summary to $GITHUB_STEP_SUMMARY and the exit code to
#    $GITHUB_OUTPUT, and exit with lock check's code.
set -uo pipefail
action_dir=$(cd "$(dirname "$0")/.." && pwd)
project=${DEEPEP_FORGE_PROJECT:-.}
pins=${DEEPEP_FORGE_PINS:-pins.toml}
install=${DEEPEP_FORGE_INSTALL:-auto}
wheel=${DEEPEP_FORGE_WHEEL:-}
read -r -a extra <<< "${DEEPEP_FORGE_ARGS:-}"
# The index's public key (the `trusted-key` input): lock check reads the signed
# manifest next to the index URL pyproject.toml names and verifies it with this key.
if [ -n "${DEEPEP_FORGE_TRUSTED_KEY:-}" ]; then
  export DEEPEP_FORGE_TRUSTED_KEYS="${DEEPEP_FORGE_TRUSTED_KEYS:-} $DEEPEP_FORGE_TRUSTED_KEY"
fi
# `--pins` from the pins input, unless the args say `--no-pins` (a project without pins.toml).
pins_args=(--pins "$pins")
for a in "${extra[@]}"; do [ "$a" = --no-pins ] && pins_args=(); done

die() { echo "::error title=deepep-forge action::$1"; exit 2; }

case "$install" in
  path) command -v deepep-forge >/dev/null || die "install: path, but deepep-forge is not on PATH" ;;
  wheel)
    [ -n "$wheel" ] || die "install: wheel needs the wheel input (a path or URL of a deepep-forge wheel)"
    python3 -m venv "${RUNNER_TEMP:-/tmp}/deepep-forge-venv" || die "could not make a venv for the wheel"
    "${RUNNER_TEMP:-/tmp}/deepep-forge-venv/bin/pip" install -q --disable-pip-version-check "$wheel" \
      || die "pip could not install $wheel"
    export PATH="${RUNNER_TEMP:-/tmp}/deepep-forge-venv/bin:$PATH" ;;
  cargo|auto)
    if [ "$install" = cargo ] || ! command -v deepep-forge >/dev/null; then
      echo "::group::cargo install deepep-forge (from the action's source)"
      cargo install --locked --path "$action_dir" --root "${RUNNER_TEMP:-/tmp}/deepep-forge" \
        || die "cargo install failed (is a Rust toolchain installed? actions/setup-rust or rustup)"
      echo "::endgroup::"
      export PATH="${RUNNER_TEMP:-/tmp}/deepep-forge/bin:$PATH"
    fi ;;
  *) die "install must be auto, cargo, path or wheel (got '$install')" ;;
esac

cd "${GITHUB_WORKSPACE:-.}" || die "cannot enter GITHUB_WORKSPACE=$GITHUB_WORKSPACE"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
# The annotations and the human report, for the log:
deepep-forge lock check --project "$project" "${pins_args[@]}" --format github "${extra[@]}"
code=$?
# The same check as data, for the summary:
deepep-forge lock check --project "$project" "${pins_args[@]}" --format json "${extra[@]}" > "$json" 2>/dev/null

if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "exit-code=$code" >> "$GITHUB_OUTPUT"; fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  python3 - "$json" "$code" "$project" "$pins" >> "$GITHUB_STEP_SUMMARY" <<'PY'
import json, re, sys
path, rc, project, pins = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

# The one escaping of values (from the project's files) into the Markdown
# summary: control characters (CR, ESC, newlines) become visible escapes or
# spaces, then either every Markdown/HTML character is backslash-escaped
# (text: no link, image, emphasis or tag survives) or the value becomes a
# code span fenced by more backticks than it holds (code). `|` is escaped in
# both: the summary's tables split cells on it before anything else.
def clean(s):
    s = str(s).replace("\r\n", " ").replace("\n", " ")
    return "".join(c if c == "\t" or c.isprintable() else repr(c)[1:-1] for c in s)
def cell(s):
    return re.sub(r"([\\`*_{}\[\]()<>#+\-.!|~&])", r"\\\1", clean(s))
def code(s):
    s = clean(s).replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"
try:
    report = json.load(open(path))
except ValueError:
    report = None
if report is None:
    print(f"## deepep-forge lock check: could not run (exit {rc})\n")
    print(f"{code(f'lock check --project {project} --pins {pins}')} printed no report: see the step's log.")
    sys.exit(0)
findings = report.get("findings", [])
count = lambda sev: sum(1 for f in findings if f.get("severity") == sev)
status = "passed" if rc == 0 else "FAILED"
print(f"## deepep-forge lock check: {status}\n")
print(f"{code(project)} against {code(pins)}: {count('error')} error(s), {count('warning')} warning(s), {count('note')} note(s)\n")
causes = report.get("causes", [])
if causes:
    print(f"{len(causes)} cause(s), each with its one fix:\n")
    for c in causes:
        fix = f": {code(c['fix'])}" if c.get("fix") else ""
        print(f"- **{cell(c.get('id', ''))}** ({cell(c.get('severity', ''))}, {len(c.get('findings', []))} finding(s)){fix}")
    print()
if findings:
    print("| | rule | where | what | cause |")
    print("|---|---|---|---|---|")
    icon = {"error": ":x:", "warning": ":warning:", "note": ":information_source:"}
    for f in findings:
        where = f.get("file", "") + (f":{f['line']}" if f.get("line") else "")
        arch = f" ({f['arch']})" if f.get("arch") else ""
        print(f"| {icon.get(f.get('severity'), '')} | {code(f.get('rule', ''))}{cell(arch)} | {code(where)} | {cell(f.get('message', ''))} | {cell(f.get('cause') or '')} |")
PY
fi
exit "$code"
