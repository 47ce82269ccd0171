#!/usr/bin/env bash
# Prints the path of a Python new enough for the pinned ansible-core (>= 3.12),
# preferring 3.12. pyenv shims are skipped when they do not run: a shim for a
# version that is not selected fails instead of running Python.
set -u
candidates=()
for v in 3.12 3.13; do
  candidates+=("$(command -v "python$v" 2>/dev/null)")
  for root in "${PYENV_ROOT:-$HOME/.pyenv}" /usr/local /usr; do
    for p in "$root"/versions/"$v"*/bin/python"$v" "$root"/bin/python"$v"; do candidates+=("$p"); done
  done
done
candidates+=("$(command -v python3 2>/dev/null)")
for p in "${candidates[@]}"; do
  [ -n "$p" ] && [ -x "$p" ] || continue
  if "$p" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
    echo "$p"; exit 0
  fi
done
echo "no Python >= 3.12 found (ansible-core 2.20 needs it); install python3.12" >&2
exit 1
