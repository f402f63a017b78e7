"""``datum apply`` end to end on a temporary --root: every resource state and host-state rule."""

from __future__ import annotations

import json
import os
import stat

from datum.host.report import PassReport

WEB = """
resources:
  - Directory[/srv/www]:
      mode: "0755"
  - File[index.html]:
      path: /srv/www/index.html
      content: "hello\\n"
      mode: "0644"
      requires: [Directory[/srv/www]]
  - Symlink[/srv/current]:
      target: /srv/www
  - Line[hosts]:
      path: /etc/hosts
      line: "127.0.1.1 web"
      create: true
"""


def test_first_pass_creates_second_is_idle(host):
    manifest = host.manifest(WEB)
    first = host.apply(manifest)
    assert first.code == 2, first.out + first.err
    assert first.line("Directory[/srv/www]") == "created"
    assert first.line("File[index.html]") == "created"
    assert first.line("Symlink[/srv/current]") == "created"
    assert first.line("Line[hosts]") == "created"
    assert first.field("host state") == "converged"
    assert "reason:" not in first.out
    index = host.root / "srv/www/index.html"
    assert index.read_text() == "hello\n"
    assert stat.S_IMODE(index.stat().st_mode) == 0o644
    assert os.readlink(host.root / "srv/current") == "/srv/www"
    assert (host.root / "etc/hosts").read_text() == "127.0.1.1 web\n"

    second = host.apply(manifest)
    assert second.code == 0, second.out + second.err
    assert {second.line(i) for i in ("Directory[/srv/www]", "File[index.html]", "Line[hosts]")} == {"converged"}
    assert second.field("host state") == "converged"


def test_pass_lines_are_aligned_as_the_seed_shows(host):
    out = host.apply(host.manifest(WEB)).out.splitlines()
    assert out[0] == "Directory[/srv/www]     created"  # the longest id plus three spaces
    assert out[-1] == "host state: converged"
    assert out[-2] == ""


def test_out_of_band_edit_is_drifted_in_observe_and_corrected_in_enforce(host):
    manifest = host.manifest(WEB)
    assert host.apply(manifest).code == 2
    index = host.root / "srv/www/index.html"
    index.write_text("defaced\n")
    index.chmod(0o600)

    observed = host.apply(manifest, "--mode", "observe")
    assert observed.code == 8, observed.out
    assert observed.line("File[index.html]") == "drifted"
    assert observed.line("Directory[/srv/www]") == "converged"
    assert observed.field("host state") == "drifted"
    assert "File[index.html] drifted: content, mode 0600, want 0644" in observed.field("reason")
    assert index.read_text() == "defaced\n"  # observe changes nothing
    report = host.status("--json").json
    assert report["state"] == "drifted" and report["mode"] == "observe"
    (resource,) = [r for r in report["resources"] if r["id"] == "File[index.html]"]
    # The file is not world-readable (0600): its content diff is never stored nor shown.
    assert resource["diff"] == "(diff redacted: file is not world-readable)\n"
    assert "defaced" not in json.dumps(report)

    enforced = host.apply(manifest)
    assert enforced.code == 2
    assert enforced.line("File[index.html]") == "updated"
    assert index.read_text() == "hello\n"
    assert stat.S_IMODE(index.stat().st_mode) == 0o644
    assert host.apply(manifest).code == 0


def test_observe_mode_from_host_configuration(host):
    host.configure('[host]\nmode = "observe"\n')
    result = host.apply(host.manifest(WEB))
    assert result.code == 8
    assert not (host.root / "srv").exists()
    assert host.status("--json").json["mode"] == "observe"


def test_enforce_mode_on_the_command_line_overrides_observe_from_host_configuration(host):
    host.configure('[host]\nmode = "observe"\n')
    result = host.apply(host.manifest(WEB), "--mode", "enforce")
    assert result.code == 2, result.out + result.err  # changed: the configuration's observe did not hold
    assert result.line("File[index.html]") == "created"
    assert result.field("host state") == "converged"
    assert (host.root / "srv/www/index.html").read_text() == "hello\n"
    assert host.status("--json").json["mode"] == "enforce"


def test_observe_is_not_a_manifest_attribute(host):
    result = host.apply(host.manifest("mode: observe\n" + WEB))
    assert result.code == 65
    assert "mode: unknown field" in result.err


def test_failure_blocks_dependents_and_independent_resources_converge(host):
    manifest = host.manifest(
        """
resources:
  - Exec[migrate]:
      command: "echo broken >&2; exit 3"
  - File[/etc/app.conf]:
      content: "x=1\\n"
      requires: [Exec[migrate]]
  - File[/etc/app.d/extra]:
      content: "y\\n"
      requires: [File[/etc/app.conf]]
  - File[/etc/motd]:
      content: "independent\\n"
"""
    )
    result = host.apply(manifest)
    assert result.code == 4 | 2, result.out
    assert result.line("Exec[migrate]") == "failed: exit status 3: broken"
    assert result.line("File[/etc/app.conf]") == "blocked: Exec[migrate] failed"
    assert result.line("File[/etc/app.d/extra]") == "blocked: File[/etc/app.conf] blocked"
    assert result.line("File[/etc/motd]") == "created"
    assert result.field("host state") == "failed"
    assert result.field("reason").startswith("Exec[migrate] failed: exit status 3")
    assert not (host.root / "etc/app.conf").exists()
    assert (host.root / "etc/motd").read_text() == "independent\n"
    report = host.status("--json").json
    by_id = {r["id"]: r for r in report["resources"]}
    assert by_id["File[/etc/app.conf]"]["blockedBy"] == ["Exec[migrate]"]
    assert by_id["Exec[migrate]"]["error"] == "exit status 3: broken"


def test_unsupported_service_is_skipped_and_the_host_degraded(host):
    manifest = host.manifest(
        """
resources:
  - File[/etc/nginx/nginx.conf]:
      content: "events {}\\n"
  - Service[nginx]:
      ensure: running
      enable: true
      subscribes: [File[/etc/nginx/nginx.conf]]
"""
    )
    first = host.apply(manifest)
    assert first.code == 32 | 2
    assert first.line("Service[nginx]").startswith("skipped: ")
    assert first.field("host state") == "degraded"
    assert first.field("reason").startswith("Service[nginx] skipped: ")
    second = host.apply(manifest)
    assert second.code == 32
    assert second.field("host state") == "degraded"


def test_invalid_manifest_reports_every_finding_and_changes_nothing(host):
    manifest = host.manifest(
        """
resources:
  - File[/etc/a]:
      content: "a"
  - File[nginx.conf]:
      path: /etc/nginx/nginx.conf
      mode: 644
      colour: blue
  - Frobnicator[x]: {}
  - File[/etc/a]:
      content: "again"
  - Exec[one]: {command: "true", requires: [Exec[two]]}
  - Exec[two]: {command: "true", requires: [Exec[one]]}
  - Service[web]: {requires: [File[/etc/missing]]}
"""
    )
    result = host.apply(manifest, "--json")
    assert result.code == 65
    (issue,) = result.json["issues"]
    assert issue["code"] == "INVALID_INPUT"
    fields = {f["field"]: f["message"] for f in issue["fields"]}
    assert "quote the mode" in fields["resources[1].File[nginx.conf].mode"]
    assert fields["resources[1].File[nginx.conf].colour"] == "unknown field"
    assert "unknown resource type 'Frobnicator'" in fields["resources[2].Frobnicator[x]"]
    assert fields["resources[3].File[/etc/a]"] == "duplicate of resources[0]"
    assert fields["resources[4].Exec[one].requires"] == "requires cycle: Exec[one] -> Exec[two] -> Exec[one]"
    assert fields["resources[6].Service[web].requires[0]"] == "no resource File[/etc/missing] in the manifest"
    assert list(host.root.iterdir()) == []
    assert not host.state.exists()

    text = host.apply(manifest)
    assert text.code == 65
    assert "resources[1].File[nginx.conf].mode:" in text.err


def test_validate_command(host):
    assert host.datum("validate", str(host.manifest(WEB))).code == 0
    bad = host.datum("validate", str(host.manifest("resources: [{File[x]: {mode: 7}}]\n", "bad.yaml")))
    assert bad.code == 65


def test_json_output_is_the_pass_report(host):
    result = host.apply(host.manifest(WEB), "--json")
    assert result.code == 2
    report = PassReport.model_validate(result.json)
    assert report.state.value == "converged"
    assert report.exit_code == 2
    assert report.counts == {"converged": 4}
    assert [r.action.value for r in report.resources] == ["create"] * 4
    assert all(r.changed for r in report.resources)
    assert host.status("--json").json == result.json


def test_status_reads_the_persisted_state_without_a_pass(host):
    before = host.status("--json")
    assert before.code == 4  # unknown: no pass has completed (the contract's bit 4, as the verdict's)
    assert before.json["state"] == "unknown"
    host.apply(host.manifest(WEB))
    after = host.status()
    assert after.code == 0
    assert "host state: converged" in after.out
    assert "File[index.html]" in after.out


def test_the_report_is_kept_in_the_local_state_file_not_the_servers_store(host):
    """The agent writes its own file (no SQLAlchemy); the server learns about hosts from reports only."""
    import sqlite3

    result = host.apply(host.manifest(WEB), "--json")
    db = sqlite3.connect(host.state)
    try:
        (stored,) = db.execute("SELECT report FROM agent_reports").fetchall()
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        db.close()
    assert json.loads(stored[0]) == result.json
    assert "hosts" not in names


def test_plan_shows_diffs_and_changes_nothing(host):
    manifest = host.manifest(WEB)
    host.apply(manifest)
    (host.root / "srv/www/index.html").write_text("defaced\n")
    before = host.status("--json").json
    plan = host.datum("plan", str(manifest), "--root", str(host.root))
    assert plan.code == 8
    assert "File[index.html]" in plan.out and "drifted: would update content" in plan.out
    assert "    -defaced" in plan.out and "    +hello" in plan.out
    assert (host.root / "srv/www/index.html").read_text() == "defaced\n"
    assert host.status("--json").json == before  # a plan persists nothing


def test_a_path_escaping_the_root_is_refused(host, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (host.root / "etc").symlink_to("../outside")  # relative: climbs out of the root
    result = host.apply(host.manifest("resources:\n  - File[/etc/passwd-copy]:\n      content: x\n"))
    assert result.code == 4
    assert "escapes the root" in result.line("File[/etc/passwd-copy]")
    assert list(outside.iterdir()) == []


def test_an_absolute_symlink_out_of_the_root_is_refused(host, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (host.root / "etc").symlink_to(outside)  # absolute: names a real place outside the root
    result = host.apply(host.manifest("resources:\n  - File[/etc/pwned]:\n      content: x\n"))
    assert result.code == 4
    assert "links out of the root" in result.line("File[/etc/pwned]")
    assert list(outside.iterdir()) == []
    assert not (host.root / outside.relative_to("/")).exists()  # not followed chroot-style either


def test_an_absolute_symlink_resolves_inside_the_root(host):
    (host.root / "run").mkdir()
    (host.root / "var").mkdir()
    (host.root / "var/run").symlink_to("/run")  # as on Debian
    result = host.apply(host.manifest("resources:\n  - File[/var/run/app.pid]:\n      content: '1'\n"))
    assert result.code == 2
    assert (host.root / "run/app.pid").read_text() == "1"


def test_usage_error_exits_64(host):
    result = host.datum("apply", str(host.manifest(WEB)), "--mode", "sideways")
    assert result.code == 64


def test_json_flag_prints_errors_in_the_contract_shape(host):
    result = host.datum("apply", str(host.base / "missing.yaml"), "--json")
    assert result.code == 65
    assert json.loads(result.out)["issues"][0]["code"] == "INVALID_INPUT"


def test_an_unchanged_pass_skips_yaml_and_pydantic(host):
    """A manifest validated once is remembered; the idle pass imports neither PyYAML nor pydantic."""
    import subprocess
    import sys

    manifest = host.manifest(WEB)
    assert host.apply(manifest).code == 2
    env = {**os.environ, "DATUM_HOME": str(host.base / "home"), "DATUM_BOOT_ID_FILE": str(host.boot_id)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from datum.cli.main import main; main()",
         "apply", str(manifest), "--root", str(host.root), "--state", str(host.state)],
        env=env, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert {"pydantic", "yaml", "sqlalchemy", "rich", "jinja2", "fastapi"}.isdisjoint(imported)
    assert "datum.host.agent" in imported


def test_a_changed_manifest_is_validated_again(host):
    manifest = host.manifest(WEB)
    assert host.apply(manifest).code == 2
    manifest.write_text(WEB.replace('mode: "0644"', "mode: 644"))
    assert host.apply(manifest).code == 65
    assert host.apply(host.manifest(WEB)).code == 0


def test_a_missing_source_is_found_even_after_a_cached_pass(host):
    (host.base / "page.html").write_text("<p>hi</p>\n")
    manifest = host.manifest("resources:\n  - File[/srv/page.html]:\n      source: page.html\n")
    assert host.apply(manifest).code == 2
    (host.base / "page.html").unlink()
    result = host.apply(manifest, "--json")
    assert result.code == 65
    assert result.json["issues"][0]["fields"][0]["field"] == "resources[0].File[/srv/page.html].source"


def test_a_changed_resource_says_what_it_found_in_enforce_mode_too(host):
    """Observe mode's drift reason and enforce mode's are one text: a service found stopped
    reads ``inactive, want running`` in the report of the pass that started it."""
    manifest = host.manifest('resources:\n  - File[/etc/app.conf]:\n      content: "x\\n"\n      mode: "0640"\n')
    assert host.apply(manifest).code == 2
    os.chmod(host.root / "etc/app.conf", 0o666)
    observed = host.apply(manifest, "--mode", "observe", "--json").json["resources"][0]
    assert observed["reason"] == "mode 0666, want 0640"
    enforced = host.apply(manifest, "--json").json["resources"][0]
    assert (enforced["state"], enforced["changed"]) == ("converged", True)
    assert enforced["reason"] == observed["reason"]
