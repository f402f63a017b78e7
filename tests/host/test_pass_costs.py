"""What a pass does not pay for: click on a plain ``datum apply``, the configuration's validation
when only the manifest changed; and the caches never answer for inputs they were not keyed on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from datum.cli.passes import parse_apply

from .conftest import Host

WEB = 'resources:\n  - File[/srv/index.html]:\n      content: "hi\\n"\n      mode: "0644"\n'


def _imports(host: Host, *args: str, env: dict[str, str] | None = None) -> tuple[int, set[str], str]:
    """Run ``datum ARGS`` under ``-X importtime``: its exit code, the modules it imported, stdout."""
    environ = {**os.environ, "DATUM_HOME": str(host.base / "home"), "DATUM_BOOT_ID_FILE": str(host.boot_id)}
    environ.pop("DATUM_CONFIG", None)
    environ.update(env or {})
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from datum.cli.main import main; main()", *args],
        env=environ, capture_output=True, text=True, check=False,
    )
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    return done.returncode, imported, done.stdout


def forget_idle(host: Host) -> None:
    """Remove the idle entries (``datum.host.idle``), so the next unchanged pass runs the engine."""
    for entry in (host.base / "home").rglob("idle-*.bin"):
        entry.unlink()


def test_a_plain_apply_never_imports_click_and_help_still_works(host):
    manifest = host.manifest(WEB)
    code, imported, out = _imports(host, "apply", str(manifest), "--root", str(host.root), "--state", str(host.state))
    assert code == 2 and "File[/srv/index.html]" in out and "host state: converged" in out
    assert "click" not in imported and "datum.host.agent" in imported
    code, imported, out = _imports(host, "apply", "--help")
    assert code == 0 and "--root" in out and "click" in imported


def test_a_pass_after_a_manifest_change_reuses_the_validated_configuration(host):
    host.configure('[host]\nname = "web-1"\n')
    env = {"DATUM_CONFIG": str(host.config)}
    args = ("apply", "--root", str(host.root), "--state", str(host.state), "--json")
    code, imported, _out = _imports(host, *args[:1], str(host.manifest(WEB)), *args[1:], env=env)
    assert code == 2 and "datum.config" in imported
    changed = host.manifest("# changed\n" + WEB)
    code, imported, out = _imports(host, *args[:1], str(changed), *args[1:], env=env)
    assert code == 0 and '"host": "web-1"' in out
    assert "datum.config" not in imported  # the configuration came from its cache entry
    host.configure('[host]\nname = "web-2"\nbogus = 1\n')  # a changed file is validated again
    result = host.apply(changed)
    assert result.code == 65 and "bogus" in result.err


@pytest.mark.parametrize("variable", ["DATUM_HOME", "XDG_STATE_HOME", "HOME"])
def test_the_cache_keys_change_with_what_the_default_store_comes_from(tmp_path, monkeypatch, variable):
    """Without a configuration the store defaults under DATUM_HOME, else XDG_STATE_HOME or HOME
    (for a user other than root): a cached configuration must never keep the old one."""
    from datum.host import compiled

    manifest = tmp_path / "m.yaml"
    manifest.write_text(WEB)
    monkeypatch.delenv("DATUM_CONFIG", raising=False)
    monkeypatch.setenv(variable, str(tmp_path / "one"))
    before = compiled.cache_key(str(manifest), None), compiled.config_key(None)
    monkeypatch.setenv(variable, str(tmp_path / "two"))
    after = compiled.cache_key(str(manifest), None), compiled.config_key(None)
    assert None not in before and before[0] != after[0] and before[1] != after[1]


NO_TRUST = {"ca_file": None, "pin": None}  # --ca-file and --pin (DATUM_CA_FILE, DATUM_PIN) unset: as --token


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["m.yaml"], {"manifest": "m.yaml", "token": None, **NO_TRUST}),
        (["m.yaml", "--root", "/r", "--json", "--mode=observe"],
         {"manifest": "m.yaml", "root": "/r", "as_json": True, "mode": "observe", "token": None, **NO_TRUST}),
        (["--state", "s.db", "m.yaml", "--token", "t", "--allow-source-outside"],
         {"manifest": "m.yaml", "state": "s.db", "token": "t", "allow_outside": True, **NO_TRUST}),
        # everything else is click's to answer (help, usage errors, its own messages)
        (["m.yaml", "--help"], None),
        (["m.yaml", "-h"], None),
        ([], None),
        (["a.yaml", "b.yaml"], None),
        (["m.yaml", "--mode", "sideways"], None),
        (["m.yaml", "--root"], None),
        (["m.yaml", "--root", "--json"], None),
        (["m.yaml", "--json=yes"], None),
        (["m.yaml", "--json", "--json"], None),
        (["m.yaml", "--unknown"], None),
        (["m.yaml", "--"], None),
    ],
)
def test_parse_apply(args, expected):
    assert parse_apply(args) == expected


def test_parse_apply_leaves_what_click_refuses_to_click(tmp_path, monkeypatch):
    monkeypatch.setenv("DATUM_TOKEN", "from-env")
    (tmp_path / "file").write_text("")
    assert parse_apply([str(tmp_path)]) is None  # the manifest is a directory
    assert parse_apply(["m.yaml", "--root", str(tmp_path / "file")]) is None  # --root is a file
    assert parse_apply(["m.yaml", "--config", str(tmp_path)]) is None
    assert parse_apply(["m.yaml"]) == {"manifest": "m.yaml", "token": "from-env", **NO_TRUST}


def test_a_pass_reads_of_the_last_report_only_what_it_needs(tmp_path):
    from datum.host.statefile import StateStore, Unreadable, state_path

    store = StateStore(state_path(str(tmp_path / "state.db")))
    try:
        assert store.summary("h1") is None
        reboot = {"required": True, "reason": "kernel", "bootId": "b1", "markers": ["/run/reboot-required"]}
        report = {"host": "h1", "state": "awaiting-reboot", "finishedAt": "2026-11-30T10:00:00+00:00",
                  "reboot": reboot, "resources": [{"id": f"File[{i}]"} for i in range(3)]}
        store.record("h1", report)
        assert store.summary("h1") == {"state": "awaiting-reboot", "finishedAt": report["finishedAt"],
                                       "reboot": reboot}
        store.record("h1", {"host": "h1", "state": "converged"})
        assert store.summary("h1") == {"state": "converged"}
        for broken in ("not json {", '["a list"]', '{"state": 3}', '{"reboot": {'):
            store._db.execute("UPDATE agent_reports SET report = ?", (broken,))
            with pytest.raises(Unreadable):
                store.get("h1")
            if '"reboot"' in broken:  # the reboot is what a pass needs of the report: it must parse
                with pytest.raises(Unreadable):
                    store.summary("h1")
            else:  # the state and its end are the columns stored with it: a pass reads no more
                assert store.summary("h1") == {"state": "converged"}
    finally:
        store.close()


def test_a_changed_manifest_validates_only_the_resources_that_changed(tmp_path):
    from datum.host.manifest import SpecMemory, parse_manifest

    text = 'resources:\n  - File[/a]:\n      content: "a\\n"\n  - File[/b]:\n      content: "b\\n"\n'
    first = SpecMemory()
    parse_manifest(text, tmp_path, memory=first)
    assert len(first.used) == 2
    # What was remembered is used as it is: a marker put in it shows the model did not run again.
    marked = {k: {**v, "content": "remembered\n"} if "File[/a]" in k else v for k, v in first.used.items()}
    second = SpecMemory(known=marked)
    changed = parse_manifest(text.replace('"b\\n"', '"B\\n"'), tmp_path, memory=second)
    assert [r.spec.content for r in changed.resources] == ["remembered\n", "B\n"]
    assert second.used.keys() != first.used.keys() and len(second.used) == 2


@pytest.mark.parametrize("value", ['"0644"', "0644", "644", "true", "420", "0o644", "[1]"])
def test_the_remembered_spec_key_tells_every_yaml_value_apart(tmp_path, value):
    """``mode: 644`` (an int) must never be served what ``mode: "644"`` validated to."""
    from datum.host.manifest import SpecMemory, parse_manifest, spec_key

    keys = {spec_key("File", "/a", {"mode": v}) for v in ("0644", 644, 420, True, 1.0, 1, "1", [1])}
    assert len(keys) == 8
    valid = SpecMemory()
    parse_manifest('resources:\n  - File[/a]:\n      mode: "0644"\n', tmp_path, memory=valid)
    memory = SpecMemory(known=dict(valid.used))
    text = f"resources:\n  - File[/a]:\n      mode: {value}\n"
    if value == '"0644"':
        assert parse_manifest(text, tmp_path, memory=memory).resources[0].spec.mode == 0o644
    else:
        with pytest.raises(Exception, match="not valid"):
            parse_manifest(text, tmp_path, memory=memory)


def test_a_comment_changed_in_a_manifest_imports_no_pydantic(host):
    manifest = host.manifest(WEB)
    args = ("apply", str(manifest), "--root", str(host.root), "--state", str(host.state))
    assert _imports(host, *args)[0] == 2
    manifest.write_text("# a comment\n" + WEB)
    code, imported, out = _imports(host, *args)
    assert code == 0 and "host state: converged" in out
    assert "yaml" in imported and {"pydantic", "datum.config", "click"}.isdisjoint(imported)


def test_a_changed_resource_is_validated_without_scanning_the_installed_distributions(host):
    """The entry points are remembered (datum.discovery), and pydantic is told it has no plugins:
    a pass that validates a changed resource runs with importlib.metadata's scans made to fail."""
    manifest = host.manifest(WEB)
    args = ["apply", str(manifest), "--root", str(host.root), "--state", str(host.state)]
    assert _imports(host, *args)[0] == 2  # the first process scans, and remembers
    manifest.write_text(WEB.replace('"hi\\n"', '"hello\\n"'))
    no_scan = (
        "import importlib.metadata as m\n"
        "def scan(*a, **k): raise AssertionError('scanned the installed distributions')\n"
        "m.entry_points = m.distributions = scan\n"
        "from datum.cli.main import main; main()\n"
    )
    env = {**os.environ, "DATUM_HOME": str(host.base / "home"), "DATUM_BOOT_ID_FILE": str(host.boot_id),
           "DATUM_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-c", no_scan, *args], env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert (host.root / "srv/index.html").read_text() == "hello\n"


def test_an_unchanged_pass_imports_no_findings_and_no_validation(host):
    """What the engine's pass over a validated manifest loads: none of validation's modules (YAML,
    pydantic, the spec models), until something fails; a failure still reads as it did. (The idle
    check's cold start imports less: tests/host/test_idle.py.)"""
    manifest = host.manifest(WEB)
    args = ("apply", str(manifest), "--root", str(host.root), "--state", str(host.state))
    assert _imports(host, *args)[0] == 2
    forget_idle(host)  # the engine's unchanged pass (the idle pass answers first: tests/host/test_idle.py)
    code, imported, out = _imports(host, *args)
    assert code == 0 and "host state: converged" in out
    assert {"datum.host.model", "datum.host.executor", "datum.providers.accounts"} <= imported
    loaded = {"datum.host.manifest", "yaml", "pydantic", "datum.providers.file.spec"}
    assert loaded.isdisjoint(imported), loaded & imported
    code, imported, out = _imports(host, "apply", str(manifest), "--root", str(host.base / "nowhere"), "--json")
    assert code == 65 and "datum.core.findings" in imported
    assert json.loads(out)["issues"][0]["message"].endswith("is not a directory")


def test_an_unchanged_pass_over_directories_imports_no_safefs(host):
    """A Directory that is only present (with a mode) needs no counting: ``datum.safefs`` and
    ``Converge`` come in only to count, remove or purge."""
    manifest = host.manifest(
        'resources:\n  - Directory[/srv/www]:\n      mode: "0755"\n'
        '  - File[/srv/www/index.html]:\n      content: "hi\\n"\n'
    )
    args = ("apply", str(manifest), "--root", str(host.root), "--state", str(host.state))
    assert _imports(host, *args)[0] == 2
    code, imported, out = _imports(host, *args)
    assert code == 0 and "Directory[/srv/www]" in out and "host state: converged" in out
    heavy = {"datum.safefs", "datum.core.converge"}
    assert heavy.isdisjoint(imported), heavy & imported
    (host.root / "srv/www/stray").write_text("x")  # purge must count it: safefs comes in then
    manifest.write_text(manifest.read_text().replace('mode: "0755"', 'mode: "0755"\n      purge: true'))
    code, imported, out = _imports(host, *args)
    assert code == 2 and "datum.safefs" in imported and not (host.root / "srv/www/stray").exists(), out


ACCOUNTS_LINKS_LINES_EXECS = """resources:
  - Group[ops]:
      gid: 2000
  - User[web]:
      uid: 2001
      groups: [ops]
      requires: [Group[ops]]
  - Line[hosts]:
      path: /etc/hosts
      line: "127.0.1.1 web-1"
      create: true
  - Symlink[/srv/current]:
      target: /srv/releases/1
  - Exec[ready]:
      command: 'touch "$DATUM_ROOT/srv/ready"'
      creates: /srv/ready
  - Exec[checked]:
      command: "false"
      unless: "true"
"""


def test_an_unchanged_pass_over_accounts_links_lines_and_execs_imports_no_validation(host):
    """User, Group, Line, Symlink and Exec (guarded by creates / unless) that are as wanted: the
    engine's pass loads neither validation (pydantic, the spec models) nor ``datum.safefs`` or
    ``Converge``; only ``unless`` runs a command."""
    etc = host.root / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\n")
    (host.root / "srv").mkdir()
    manifest = host.manifest(ACCOUNTS_LINKS_LINES_EXECS)
    args = ("apply", str(manifest), "--root", str(host.root), "--state", str(host.state))
    code, _imported, out = _imports(host, *args)
    assert code == 2 and (host.root / "srv/ready").exists(), out
    code, imported, out = _imports(host, *args)
    assert code == 0 and "host state: converged" in out, out
    for resource in ("Group[ops]", "User[web]", "Line[hosts]", "Symlink[/srv/current]", "Exec[ready]",
                     "Exec[checked]"):
        assert resource in out
    assert "datum.providers.accounts" in imported
    heavy = {"datum.safefs", "datum.core.converge", "pydantic", "datum.providers.spec"}
    assert heavy.isdisjoint(imported), heavy & imported
    assert "web:x:2001:" in (etc / "passwd").read_text() and "ops:x:2000:web" in (etc / "group").read_text()
    assert os.readlink(host.root / "srv/current") == "/srv/releases/1"


def test_a_report_that_cannot_be_stored_is_a_not_persisted_problem_carrying_it(tmp_path):
    from datum.core.findings import Problem
    from datum.host import statefile

    store = statefile.StateStore(statefile.state_path(str(tmp_path / "state.db")))
    try:
        store._db.execute("CREATE TRIGGER refuse BEFORE INSERT ON agent_reports BEGIN SELECT RAISE(ABORT, 'no'); END")
        report = {"host": "h1", "state": "converged"}
        with pytest.raises(Problem) as caught:
            store.record("h1", report)
    finally:
        store.close()
    assert isinstance(caught.value, statefile.NotPersisted) and caught.value.report is report
    assert caught.value.code == "UNAVAILABLE" and "was not stored" in str(caught.value)
    with pytest.raises(Problem, match="is a URL"):  # the other problem this module raises, as before
        statefile.state_path("postgresql://db/datum")
    assert statefile.NotPersisted.__module__ == statefile.__name__


@pytest.mark.parametrize(
    "env",
    [{"DATUM_HOME": "/srv/datum-home"}, {"XDG_STATE_HOME": "/srv/xdg"}, {}],
    ids=["DATUM_HOME", "XDG_STATE_HOME", "neither"],
)
def test_with_no_configuration_file_the_host_defaults_are_datum_configs(monkeypatch, env):
    """A pass with no configuration file skips the settings model; what it uses must be what the
    model would have given (a default changed in one place and not the other fails here)."""
    from datum.config import load_settings
    from datum.host.compiled import HostConfig, load_config

    for name in ("DATUM_HOME", "XDG_STATE_HOME", "DATUM_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert HostConfig.without_file() == HostConfig.from_settings(load_settings(None))
    assert load_config(None) == HostConfig.without_file()


def test_every_host_setting_has_its_field_in_the_agents_view_and_back():
    """``HostConfig`` goes by its fields (``from_settings``, ``to_json``, ``from_json``): one per
    ``[host]`` setting but ``state`` (resolved as ``state_path``) and ``lock_ttl`` (unused). A setting
    added to ``HostSettings`` without its ``HostConfig`` line fails here, and so does a field that
    does not survive the cache's JSON."""
    from dataclasses import fields
    from datetime import timedelta

    from datum.config import AgentSettings, HostSettings
    from datum.core.vocab import Mode, RebootPolicy
    from datum.host.compiled import AGENT, HostConfig

    assert set(HostSettings.model_fields) - {"state", "lock_ttl"} == {f.name for f in fields(HostConfig)} - {
        "state_path", *AGENT}
    assert set(AgentSettings.model_fields) == set(AGENT)  # and every [agent] setting, of the same defaults
    assert all(getattr(AgentSettings(), f) == getattr(HostConfig("/s.db"), f) for f in AGENT)
    config = HostConfig(state_path="/s.db", mode=Mode.OBSERVE, reboot_policy=RebootPolicy.AUTOMATIC,
                        lock_wait=timedelta(seconds=2), hook_timeout=timedelta(seconds=7), hooks_shell=True, token="t",
                        answer_deadline=timedelta(seconds=5), max_answer_bytes=2**21)
    assert HostConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


def test_a_first_pass_with_no_configuration_file_does_not_build_the_settings_model(tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text('resources:\n  - File[/a]:\n      content: "a\\n"\n')
    (tmp_path / "root").mkdir()
    code = (
        "import sys\nfrom datum.cli.main import main\n"
        f"sys.argv = ['datum', 'apply', {str(manifest)!r}, '--root', {str(tmp_path / 'root')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, 2), e.code\n"
        "assert 'datum.config' not in sys.modules, 'the settings model was imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATUM_")}
    env.update(DATUM_HOME=str(tmp_path / "home"), DATUM_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "root" / "a").read_text() == "a\n"
    # A fresh host: DATUM_HOME did not exist; the pass made it, for its owner only.
    assert os.stat(tmp_path / "home").st_mode & 0o777 == 0o700
    assert (tmp_path / "home" / "agent.db").is_file()


def test_the_code_stamp_watches_modules_not_directories():
    """A directory's times change when Python writes its ``__pycache__`` there (a fresh checkout's
    first import of a module): the caches must not take that for a change of the code."""
    import datum
    from datum.host.compiled import code_files

    top = os.path.dirname(datum.__file__)
    ours = [p for p in code_files() if p.startswith(top + os.sep)]
    assert ours and all(p.endswith(".py") and os.path.isfile(p) for p in ours)


@pytest.mark.parametrize(
    "args",
    [
        ["m.yaml"],
        ["m.yaml", "--root", "/r", "--json", "--mode=observe", "--state", "s.db"],
        ["--config", "c.toml", "m.yaml", "--report-to", "http://x", "--token=t", "--allow-source-outside"],
    ],
)
def test_the_plain_parser_and_the_click_command_read_apply_alike(args, monkeypatch):
    """One declaration of ``apply``'s options (``datum.cli.passes.APPLY_OPTIONS``): what the plain
    parser reads is what click reads, defaults included."""
    import inspect

    from datum.cli.host import apply
    from datum.cli.passes import apply as run_apply

    monkeypatch.setenv("DATUM_TOKEN", "from-env")
    plain = parse_apply(args)
    defaults = {k: p.default for k, p in inspect.signature(run_apply).parameters.items() if k != "manifest"}
    assert plain is not None
    assert {**defaults, **plain} == apply.make_context("apply", list(args)).params


@pytest.mark.parametrize("command", ["apply", "status", "reboot", "agent"])
def test_the_state_option_says_what_it_takes(command, capsys):
    """``--state`` is the host's local state file; a store URL is refused (issue 21's help texts)."""
    from datum.cli.main import main

    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0
    assert "never a store URL" in out and "[host] state" in out and "configured store" not in out


def test_a_cached_manifest_is_the_one_validation_made(host, monkeypatch):
    """From validation or from the cache, a pass gets one manifest: the same resources, order,
    paths and included files, and the files beside it that validation found (``Manifest.besides``,
    what a cached manifest checks are still there), an outside ``source`` by its resolved path."""
    from datum.host import manifest as validation
    from datum.host.compiled import prepare

    (host.base / "page.html").write_text("<p>hi</p>\n")
    (host.base / "motd.j2").write_text("{{ kernel }}\n")
    (host.base / "sub").mkdir()
    path = host.manifest(
        "resources:\n  - File[/srv/page.html]:\n      source: page.html\n"
        "  - File[/etc/motd]:\n      template: motd.j2\n"
    )
    outside = host.manifest("resources:\n  - File[/srv/page.html]:\n      source: ../page.html\n", "sub/manifest.yaml")
    monkeypatch.setenv("DATUM_HOME", str(host.base / "home"))
    monkeypatch.delenv("DATUM_CONFIG", raising=False)
    _config, validated, _data = prepare(str(path), None)
    _config, beyond, _data = prepare(str(outside), None, allow_outside=True)
    base = host.base.resolve()
    assert validated.besides == (str(base / "page.html"), str(base / "motd.j2"))
    assert beyond.besides == (str(base / "page.html"),)

    def validates(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("validated again: the cache missed")

    monkeypatch.setattr(validation, "load_manifest", validates)
    assert prepare(str(path), None)[1] == validated
    assert prepare(str(outside), None, allow_outside=True)[1] == beyond
