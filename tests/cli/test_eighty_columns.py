"""The command line at 80 columns, on a populated store: headers, the page's groups and order, one time form.

What the issue found: ``datum drift`` took 189 lines for 13 items (the breaker's twelve one by one)
and cut the stranded row to ``delete_…`` / ``STRAND…``; ``datum hosts`` and ``datum token list``
printed ragged columns without a header, by name; three time formats.
"""

from __future__ import annotations

import re

from api.story import build_story
from datum.cli.render import IDS_SHOWN
from datum.config import load_settings
from datum.core.order import HOST_ORDER
from datum.plugins import load
from datum.reconcile.report import drift_report
from datum.reconcile.runner import utcnow
from datum.store import open_store
from datum.web import view as v

from .scene import SILENT, Scene

ABSOLUTE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def fits(out: str, width: int = 80) -> list[str]:
    lines = out.splitlines()
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, too_long
    return lines


def test_drift_groups_the_breakers_twelve_in_one_row_in_the_pages_order(scene: Scene, datum_cli):
    code, out, err = datum_cli("drift", "buckets", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    assert len(lines) < 60  # was 189 lines for 13 items (with the Needs a human section after it)
    assert lines[0].startswith("buckets  health degraded  drift 13  blocked 1  stranded 1  last ran ")
    assert "advice" in out and "items" in out and "reason" in out  # a header
    table = lines[: lines.index("Needs a human")]  # the decision's lines follow, named once more there
    assert sum("reaps held: breaker reap > 10" in line for line in table) == 1
    assert sum(bool(re.search(r"bucket/stray-\d\d", line)) for line in table) == 1
    flat = " ".join(out.split())
    assert "bucket/stray-00, bucket/stray-01, bucket/stray-02 and 9 more (--wide lists them)" in flat
    assert "bucket/delta: streak 8/2, failures 3, retry in 1 pass, parked at the backoff cap" in flat
    # the groups in the page's order, from the same report: what needs a human first
    settings = load_settings(str(scene.config))
    store = open_store(settings.store_url)
    try:
        registry = load().registry()
        report = drift_report(registry, settings, store, "buckets", utcnow())
        own = registry.settings(settings, "buckets")
    finally:
        store.dispose()
    page = v.reconciler_view(report, own, [], lambda streak: None)
    labels = [g.label for g in (*page.groups, *page.owner_groups)]
    assert labels == ["12 reaps held: breaker reap > 10 or > 10% of what exists", "1 align parked at the backoff cap",
                      "1 align waiting on their owners"]
    assert [flat.index(label[:25]) for label in labels] == sorted(flat.index(label[:25]) for label in labels)


def test_drift_keeps_the_stranded_row_whole(scene: Scene, datum_cli):
    _code, out, _err = datum_cli("drift", "buckets", "--config", str(scene.config))
    coverage = out[out.index("Work-query coverage of bucket rows"):]
    header, _rule, *rows = coverage.splitlines()[1:8]
    assert header.split() == ["status", "rows", "selected", "terminal", "owned", "by", "oldest"]
    by_status = {row.split()[0]: row.split() for row in rows}
    assert by_status["archiving"][:4] == ["archiving", "1", "no", "no"] and by_status["archiving"][-1] == "STRANDED"
    assert by_status["delete_blocked"][:2] == ["delete_blocked", "1"] and "STRANDED" not in by_status["delete_blocked"]
    assert "…" not in out
    assert "1 bucket row stranded in archiving" in " ".join(out.split())


def test_drift_wide_lists_every_item_with_absolute_times(scene: Scene, datum_cli):
    _code, out, _err = datum_cli("drift", "buckets", "--config", str(scene.config), "--wide")
    assert all(f"bucket/stray-{n:02d}: streak" in out for n in range(12))
    assert ABSOLUTE.search(out.splitlines()[0]) and "ago" not in out


def test_hosts_worst_first_as_the_page_lists_them(scene: Scene, datum_cli, tmp_path):
    import json

    code, out, err = datum_cli("hosts", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    head = next(n for n, line in enumerate(lines) if line.startswith("host "))
    assert " ".join(" ".join(lines[:head]).split()) == (
        "7 hosts failed 1 unknown 2 drifted 1 awaiting-reboot 1 degraded 1 converged 1"  # every state, worst first
    )
    assert lines[head].split() == ["host", "state", "advice", "last", "pass"]
    listed = [(h["host"], h["state"]) for h in json.loads(datum_cli("hosts", "--config", str(scene.config), "--json")[1])["hosts"]]
    order = [s.value for s in HOST_ORDER]
    assert [state for _h, state in listed] == sorted((state for _h, state in listed), key=order.index)
    assert [h for h, _s in listed][:2] == ["web1", SILENT]  # failed, then unknown (by name within a state)
    text = out[out.index(lines[head]):]
    assert [text.index(h[:30]) for h, _s in listed] == sorted(text.index(h[:30]) for h, _s in listed)
    # the page's own table, on the same store, lists them in the same order
    story = build_story(tmp_path / "page", store=load_settings(str(scene.config)).store_url)
    try:
        page = story.get("/ui/overview").text
    finally:
        story.client.close()
        story.store.dispose()
    assert re.findall(r'<tr id="host-([^"]+)"', page) == [h for h, _s in listed]
    # each reason under its row, on the whole width; the times relative to now, one form
    assert "  stale: the last report is 5h00m old, more than 3 x its 60s interval (it said" in out
    assert out.count(" ago\n") == 7 and not ISO.search(out) and not ABSOLUTE.search(out)
    wide = datum_cli("hosts", "--config", str(scene.config), "--wide")[1]
    assert len(ABSOLUTE.findall(wide)) == 7 and " ago" not in wide


def test_hosts_json_is_the_same_rows_and_pages_by_name_on_request(scene: Scene, datum_cli):
    import json

    _code, out, _err = datum_cli("hosts", "--config", str(scene.config), "--json", "--limit", "3")
    doc = json.loads(out)
    assert [h["host"] for h in doc["hosts"]] == ["web1", SILENT, "web6"] and "next" not in doc
    _code, out, _err = datum_cli("hosts", "--config", str(scene.config), "--json", "--limit", "3", "--by-name")
    doc = json.loads(out)
    assert [h["host"] for h in doc["hosts"]] == sorted(scene.reports)[:3] and doc["next"]


def test_token_list_has_a_header_and_one_time_form(scene: Scene, datum_cli):
    code, out, err = datum_cli("token", "list", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    assert lines[0].split() == ["id", "principal", "host", "groups", "created"]
    rows = [line.split() for line in lines[2:] if re.match(r"^[0-9a-f]{12} ", line)]  # a long host name folds
    others = [["agent", f"web{n}", "all"] for n in range(2, 7)]  # each host's agent reported with its own token
    silent = ["agent", rows[2][2], "all"]
    assert SILENT.startswith(rows[2][2]) and "rnal" in out  # folded onto the next line
    assert [r[1:4] for r in rows] == [["operator", "any", "all"], ["agent", "web1", "all"], silent, *others]
    assert all(r[-1] == "ago" or r[-2:] == ["just", "now"] for r in rows)
    assert not ISO.search(out)
    _code, wide, _err = datum_cli("token", "list", "--config", str(scene.config), "--wide")
    assert len(ABSOLUTE.findall(wide)) == 8


def test_reconcilers_fit(scene: Scene, datum_cli):
    code, out, err = datum_cli("reconcilers", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    assert lines[0].split() == ["reconciler", "health", "drift", "blocked", "stranded", "last", "ran"]
    assert lines[2].split()[:5] == ["buckets", "degraded", "13", "1", "1"]


def test_status_fits_with_its_resources_then_the_pass_lines_state(scene: Scene, datum_cli):
    code, out, err = datum_cli("status", "--state", str(scene.state_file))
    lines = fits(out)
    assert code == 4, err  # failed: the contract's bit
    assert lines[0] == "host web1: failed  go and look"
    assert re.fullmatch(r"last pass \d+m \d+s ago \(enforce, exit 4, 2\.00s\)", lines[1])
    assert lines[2].split() == ["resource", "state"]
    assert lines[4].split() == ["File[/etc/app/conf1.d/settings.conf]", "failed"]
    assert lines[5] == "  permission denied: /etc/app/conf1.d/settings.conf"
    assert "1 more resource converged, unchanged (--wide lists every one)" in out
    assert "host state: failed" in lines and "reason: File[/etc/app/conf1.d/settings.conf] failed; blocked:" in out
    _code, wide, _err = datum_cli("status", "--state", str(scene.state_file), "--wide")
    assert "File[/etc/app/conf0.d/settings.conf]" in wide and ABSOLUTE.search(wide)


def test_the_ids_shown_without_wide_are_few():
    assert IDS_SHOWN == 3


def test_a_needs_a_human_section_draws_the_one_decision_at_80_columns(scene: Scene, tmp_path, capsys, datum_cli):
    """``datum drift`` heads its report with the lines ``datum.core.attention.decide`` makes, the page's."""
    from datum.cli import render
    from datum.core.attention import decide
    from datum.reconcile.attention import facts

    settings = load_settings(str(scene.config))
    registry = load().registry()
    from datum.store import open_store

    store = open_store(settings.store_url)
    try:
        needs = decide([facts(registry, settings, drift_report(registry, settings, store, "buckets", utcnow()))])
    finally:
        store.dispose()
    assert needs
    render.needs_human(needs, render.console())
    out = capsys.readouterr().out
    lines = fits(out)
    assert lines[0] == "Needs a human" and lines[1].split() == ["severity", "what"]
    flat = " ".join(out.split())
    for n in needs:
        assert " ".join(n.text.split()) in flat and " ".join(n.do.split()) in flat
    render.needs_human([], render.console())
    assert capsys.readouterr().out == ""
    code, drift, err = datum_cli("drift", "buckets", "--config", str(scene.config))
    assert code == 0, err
    fits(drift)
    assert "\nNeeds a human\n" in drift and all(" ".join(n.text.split()) in " ".join(drift.split()) for n in needs)


def test_a_plugins_table_takes_the_same_form(scene: Scene, datum_cli):
    """``datum bucket list`` (the buckets plugin, through ``datum.sdk.cli``): a header, the one time form."""
    code, out, err = datum_cli("bucket", "list", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    assert lines[0].split() == ["name", "status", "created", "updated"]
    assert [line.split()[:2] for line in lines[2:]] == [
        ["alpha", "archiving"], ["beta", "active"], ["delta", "creating"], ["gamma", "delete_blocked"]
    ]
    assert all(line.endswith(("ago", "just now")) for line in map(str.rstrip, lines[2:])) and not ABSOLUTE.search(out), out
    _code, wide, _err = datum_cli("bucket", "list", "--config", str(scene.config), "--wide")
    assert len(ABSOLUTE.findall(wide)) == 8


def test_a_reconciler_switched_off_reads_disabled_not_unknown(capsys):
    """Where the list surface says ``enabled`` (false), the table says disabled."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from datum.cli import render
    from datum.core.vocab import Health

    rows = [
        SimpleNamespace(name=n, health=Health.UNKNOWN, drift=0, blocked=0, stranded=0, coverage_reported=False,
                        last_ran_at=None, **extra)
        for n, extra in (("pg_roles", {"enabled": False}), ("buckets", {}))
    ]
    render.summaries(rows, render.console(), render.Times(datetime.now(UTC)))
    listed = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert listed == [["pg_roles", "disabled", "0", "0", "-", "never"], ["buckets", "unknown", "0", "0", "-", "never"]]


def test_the_drift_of_a_reconciler_switched_off_says_so(tmp_path, datum_cli):
    """Issue 40, item 5: ``datum drift pg_roles`` said only ``unknown`` and "no pass has executed yet" for a
    reconciler that is switched off (pg_roles is, unless configured): it says disabled and why no pass runs;
    its JSON keeps the health its last pass left, with ``enabled`` false."""
    import json

    cfg = tmp_path / "datum.toml"
    cfg.write_text(f'store = "sqlite:///{tmp_path / "d.db"}"\n')
    code, out, err = datum_cli("drift", "pg_roles", "--config", str(cfg))
    assert code == 0, err
    said = " ".join(out.split())
    assert said.startswith("pg_roles health disabled") and "switched off ([reconcilers.pg_roles] enabled = false)" in said
    assert "no pass has executed yet" not in said
    code, out, err = datum_cli("drift", "pg_roles", "--config", str(cfg), "--json")
    doc = json.loads(out)
    assert (doc["health"], doc["enabled"]) == ("unknown", False)
    code, out, err = datum_cli("drift", "buckets", "--config", str(cfg), "--json")
    assert json.loads(out)["enabled"] is True


def _in_a_pty(*args: str, columns: int = 80) -> str:
    """``datum ARGS`` run as a process on a terminal of ``columns`` x 24 (no COLUMNS: the width it reads from its
    terminal), its output without colours."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    datum = os.path.join(os.path.dirname(sys.executable), "datum")
    proc = subprocess.Popen([datum, *args], stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed its terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")


def _whole(out: str) -> None:
    """No state parted from its count, no advice label and no host name cut across lines."""
    lines = fits(out)
    head = next(n for n, line in enumerate(lines) if line.startswith("host "))
    states = {s.value for s in HOST_ORDER}
    for line in lines[:head]:  # the summary: "state N" phrases, whole on each line
        for phrase in line.strip().split("  "):
            assert re.fullmatch(r"\d+ hosts?", phrase) or (phrase.split()[0] in states and phrase.split()[1].isdigit()), line
    assert SILENT in lines  # too long for its column's share: whole, on a line of its own
    assert sum("check it is intended" in line for line in lines) == 2  # the host row, its line of Needs a human
    assert not any(line.rstrip().endswith(("check it is", "check it")) for line in lines)


def test_the_state_summary_and_labels_never_wrap_mid_phrase_at_80_columns(scene: Scene, datum_cli, monkeypatch):
    for width in (80, 72, 64):  # a summary that wraps: between its phrases, never inside one
        monkeypatch.setenv("COLUMNS", str(width))
        code, out, err = datum_cli("hosts", "--config", str(scene.config))
        assert code == 0, err
        lines = out.splitlines()
        head = next(n for n, line in enumerate(lines) if line.startswith("host "))
        said = " ".join(lines[:head]).split()
        assert said == "7 hosts failed 1 unknown 2 drifted 1 awaiting-reboot 1 degraded 1 converged 1".split()
        assert all(len(line) <= width for line in lines[:head])
        assert all(line.split()[-1].isdigit() for line in lines[:head]), lines[:head]
    monkeypatch.setenv("COLUMNS", "80")
    _whole(datum_cli("hosts", "--config", str(scene.config))[1])


def test_the_state_summary_and_labels_never_wrap_mid_phrase_in_an_80_column_terminal(scene: Scene):
    out = _in_a_pty("hosts", "--config", str(scene.config))
    _whole(out)
    assert "7 hosts  failed 1" in out


def test_history_in_an_80_column_terminal_keeps_each_pass_number_whole(scene: Scene, datum_cli):
    """Issue 40 item 3, in a real terminal: ``datum history`` fits 80 columns and each row ends with its pass's
    archive number, whole (what ``GET /v1/hosts/{host}/passes/{pass}`` takes)."""
    import json

    out = _in_a_pty("history", "web1", "--config", str(scene.config))
    lines = fits(out)
    assert lines[0].split() == ["finished", "state", "resources", "received", "pass"], out
    listed = json.loads(datum_cli("history", "web1", "--config", str(scene.config), "--json")[1])["passes"]
    assert listed
    for p in listed:
        assert any(line.rstrip().endswith(f" {p['id']}") for line in lines), (p["id"], out)
