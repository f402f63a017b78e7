# Shared by scripts/*: create or refresh the project's virtualenv in .venv.
# Usage: . scripts/_env.sh [extra]   (extra: "test" installs the test extras)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRA="${1:-}"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "datum needs Python 3.11 or newer ($PY is $("$PY" --version 2>&1))" >&2
  exit 1
fi
STAMP="$VENV/.installed${EXTRA:+-$EXTRA}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# Reinstall when pyproject or the pinned constraints changed since the last install.
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ] || [ "$ROOT/constraints.txt" -nt "$STAMP" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    -c "$ROOT/constraints.txt" -e "$ROOT${EXTRA:+[$EXTRA]}" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
