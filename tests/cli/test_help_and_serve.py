"""Every command's ``--help`` ends with its exit codes and fits 80 columns; shell completion works as the
docs say; ``datum serve`` says a port is busy before claiming to serve; text log lines carry a UTC time."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import click

from api.story import config_file, serving
from datum.cli.exits import CODES
from datum.cli.main import COMMANDS, _group

ROOT = Path(__file__).resolve().parents[2]
DATUM = [sys.executable, "-c", "from datum.cli.main import main; main()"]


def every_command() -> list[list[str]]:
    """Every command line the group answers, subcommands included (the plugins' commands too)."""
    group = _group()
    ctx = click.Context(group)
    paths = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in command.commands]
        else:
            paths.append([name])
    return paths


def test_every_commands_help_ends_with_its_exit_codes_at_80_columns(datum_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    paths = every_command()
    assert ["apply"] in paths and ["token", "revoke"] in paths and ["bucket", "create"] in paths
    for path in paths:
        code, out, err = datum_cli(*path, "--help")
        assert code == 0, (path, err)
        codes = out[out.index("Exit codes:"):]
        assert re.search(r"^\s+0\s+\S", codes, re.M) or re.search(r"^\s+0 ", codes, re.M), (path, codes)
        assert re.search(r"^\s+64\s+usage error", codes, re.M), (path, codes)
        assert all(len(line) <= 80 for line in out.splitlines()), (path, [x for x in out.splitlines() if len(x) > 80])
    assert set(COMMANDS) >= {p.split()[0] for p in CODES}  # every table row names a real command


def test_the_help_says_what_the_code_means(datum_cli):
    _code, out, _ = datum_cli("status", "--help")
    assert re.search(r"^\s+16\s+awaiting-reboot$", out, re.M) and re.search(r"^\s+32\s+degraded$", out, re.M)
    _code, out, _ = datum_cli("apply", "--help")
    assert re.search(r"^\s+8\s+drift found \(observe mode\)$", out, re.M)
    _code, out, _ = datum_cli("serve", "--help")
    assert re.search(r"^\s+69\s+cannot listen: the port is busy", out, re.M)
    _code, out, _ = datum_cli("agent", "--help")
    assert re.search(r"--mode \[enforce\|observe\]\s+enforce: change what differs", out)


def test_shell_completion_works_as_documented(tmp_path):
    env = {**os.environ, "DATUM_HOME": str(tmp_path), "_DATUM_COMPLETE": "bash_source"}
    exe = str(Path(sys.executable).with_name("datum"))
    script = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "complete -o nosort -F _datum_completion datum" in script.stdout
    env.update(_DATUM_COMPLETE="bash_complete", COMP_WORDS="datum dri", COMP_CWORD="1")
    words = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
    assert words.stdout.split() == ["plain,drift"]
    env.update(COMP_WORDS="datum hosts --state f", COMP_CWORD="3")
    words = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
    assert words.stdout.split() == ["plain,failed"]
    documented = (ROOT / "docs" / "host.md").read_text()
    assert 'eval "$(_DATUM_COMPLETE=bash_source datum)"' in documented
    assert "_DATUM_COMPLETE=zsh_source" in documented and "_DATUM_COMPLETE=fish_source" in documented


def test_serve_on_a_busy_port_says_so_first_and_exits_69(tmp_path):
    cfg = config_file(tmp_path, scheduler=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*DATUM, "serve", "--config", str(cfg), "--port", str(port)], capture_output=True, text=True,
            timeout=60, env={**os.environ, "DATUM_HOME": str(tmp_path / "home")},
        )
    assert done.returncode == 69, done.stdout + done.stderr
    assert "serving the page" not in done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"error: port {port} is busy: another process listens on 127.0.0.1:{port}; stop it, or serve on another --port"
    )


def test_plain_text_log_lines_carry_a_utc_time(tmp_path):
    import httpx

    log = tmp_path / "serve.log"
    with serving(config_file(tmp_path, scheduler=False), log) as base:
        assert httpx.get(base + "readyz", timeout=5).status_code == 200
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    stamped = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING|ERROR):? ")
    assert lines and all(stamped.match(line) for line in lines), lines
    assert any("datum: serving the page at http://127.0.0.1:" in line for line in lines)
    assert any('"GET /readyz HTTP/1.1" 200' in line for line in lines)  # the access log too
