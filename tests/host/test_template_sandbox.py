"""Templates render in a Jinja2 sandbox, the same in apply, plan and observe: an escape attempt
fails that resource with a clear reason, never a traceback, and nothing outside the manifest's
directory is ever read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ESCAPES = {
    "mro.j2": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "refused by the sandbox"),
    "globals.j2": ("{{ cycler.__init__.__globals__.os.system('id') }}", "refused by the sandbox"),
    "self.j2": ("{{ self._TemplateReference__context }}", "refused by the sandbox"),
    "format.j2": ("{{ '{0.__class__}'.format(1) }}", "refused by the sandbox"),
    "absolute.j2": ("{% include '/etc/passwd' %}", "outside the manifest's directory"),
    "dotdot.j2": ("{% include '../secret.txt' %}", "outside the manifest's directory"),
    "link.j2": ("{% include 'link-out.txt' %}", "outside the manifest's directory"),
    "power.j2": ("{{ 2 ** 100000000 }}", "refused by the sandbox"),
    "repeat.j2": ("{{ 'x' * 100000000000 }}", "refused by the sandbox"),
    "undefined.j2": ("{{ nope }}", "'nope' is undefined"),
    "zero.j2": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "syntax.j2": ("{% for %}", "line 1"),
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    m = tmp_path / "m"
    m.mkdir()
    (tmp_path / "secret.txt").write_text("SECRET\n")
    (m / "link-out.txt").symlink_to(tmp_path / "secret.txt")
    for name, (text, _why) in ESCAPES.items():
        (m / name).write_text(text)
    (m / "fine.j2").write_text("{{ greeting }} from {{ facts.cpu_count > 0 }}\n")
    lines = ["resources:"]
    lines += [f"  - File[/{name}]: {{template: {name}}}" for name in ESCAPES]
    lines += ["  - File[/fine]: {template: fine.j2, vars: {greeting: hello}}"]
    (m / "manifest.yaml").write_text("\n".join(lines) + "\n")
    (tmp_path / "root").mkdir()
    return tmp_path


@pytest.mark.parametrize("how", ["apply", "observe", "plan"])
def test_escapes_fail_at_their_resource_with_the_reason(tree, datum_cli, how):
    manifest = str(tree / "m" / "manifest.yaml")
    root = str(tree / "root")
    if how == "plan":
        args = ["plan", manifest, "--root", root, "--json"]
    else:
        args = ["apply", manifest, "--root", root, "--state", str(tree / "s.db"), "--json"]
        args += ["--mode", "observe"] if how == "observe" else []
    for attempt in ("validated", "cached"):  # a cache hit renders in the same sandbox
        code, out, err = datum_cli(*args)
        assert code & 4, (attempt, out, err)
        assert "Traceback" not in out + err
        report = {r["id"]: r for r in json.loads(out)["resources"]}
        for name, (_text, why) in ESCAPES.items():
            r = report[f"File[/{name}]"]
            assert r["state"] == "failed", (attempt, name, r)
            assert r["error"].startswith(f"template {name}: "), r
            assert why in r["error"], r
        assert "SECRET" not in out
        fine = report["File[/fine]"]
        assert fine["state"] == ("converged" if how == "apply" else "drifted"), fine
    if how == "apply":
        assert (tree / "root" / "fine").read_text() == "hello from True\n"
    assert sorted(p.name for p in (tree / "root").iterdir()) == (["fine"] if how == "apply" else [])


def test_a_template_that_loops_too_long_fails_its_resource_and_the_pass_goes_on(
    tmp_path, datum_cli, monkeypatch
):
    """The sandbox bounds what a template touches, the time limit how long it loops."""
    from datum.providers import file as file_provider

    monkeypatch.setattr(file_provider, "RENDER_SECONDS", 0.5)
    m = tmp_path / "m"
    m.mkdir()
    (m / "spin.j2").write_text("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}")
    (m / "manifest.yaml").write_text(
        "resources:\n  - File[/spin]: {template: spin.j2}\n  - File[/after]: {content: ok}\n"
    )
    (tmp_path / "root").mkdir()
    code, out, err = datum_cli(
        "apply", str(m / "manifest.yaml"), "--root", str(tmp_path / "root"),
        "--state", str(tmp_path / "s.db"), "--json",
    )
    report = {r["id"]: r for r in json.loads(out)["resources"]}
    assert report["File[/spin]"]["state"] == "failed"
    assert "still rendering after 0.5 s" in report["File[/spin]"]["error"]
    assert report["File[/after]"]["state"] == "converged"
    assert (tmp_path / "root" / "after").read_text() == "ok"
