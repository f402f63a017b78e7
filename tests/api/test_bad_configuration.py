"""A configuration the store cannot be opened with is a finding (exit 65), never exit 70.

Each case once ended in a traceback: a config file that is not UTF-8, a store
URL naming a DBAPI driver Datum does not ship, a SQLite path with a NUL byte.
"""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (b'store = "sqlite:///x.db"\nname = "\xff"\n', "not UTF-8"),
        (b'store = "postgresql+asyncpg://u@127.0.0.1/d"\n', "is not supported"),
        (b'store = "sqlite+pysqlcipher:///x.db"\n', "is not supported"),
        (b'store = "mysql://u@127.0.0.1/d"\n', "is not supported"),
        (b'store = "sqlite:////tmp/a\\u0000b.db"\n', "NUL"),
    ],
    ids=["latin-1 file", "asyncpg", "pysqlcipher", "mysql", "nul in path"],
)
@pytest.mark.parametrize(
    "command", [["drift", "buckets", "--json"], ["token", "create", "--principal", "operator"]]
)
def test_a_store_that_cannot_be_opened_is_a_finding_not_a_crash(datum_cli, tmp_path, config, says, command):
    cfg = tmp_path / "datum.toml"
    cfg.write_bytes(config)
    code, out, err = datum_cli(*command, "--config", str(cfg))
    assert code == 65, (code, out, err)
    if "--json" in command:
        body = json.loads(out)
        assert body["issues"][0]["code"] == "INVALID_INPUT"
        assert says in body["issues"][0]["message"]
    else:
        assert says in err
    assert "Traceback" not in out + err
