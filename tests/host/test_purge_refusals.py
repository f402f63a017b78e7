"""``datum apply`` and plan with a purge that must refuse a directory holding content."""

from __future__ import annotations

CONTENT = "set force: true to purge directories with content"

MANIFEST = """
resources:
  - File[/srv/www/index.html]:
      content: "hi\\n"
  - Directory[/srv/www]:
      purge: true
      requires: [File[/srv/www/index.html]]
"""


def test_plan_and_apply_name_the_directory_with_content_and_purge_the_rest(host):
    www = host.root / "srv" / "www"
    (www / "uploads").mkdir(parents=True)
    (www / "uploads" / "a.jpg").write_text("a tenant's")
    (www / "uploads" / "b.jpg").write_text("a tenant's")
    (www / "junk.txt").write_text("x")
    (www / "empty" / "tree").mkdir(parents=True)
    manifest = host.manifest(MANIFEST)
    refusal = f"could not purge uploads: holds 2 entries; {CONTENT}"
    plan = host.apply(manifest, "--mode", "observe")
    said = plan.field("reason")
    assert "Directory[/srv/www] drifted: unmanaged entries: empty, junk.txt" in said, plan.out
    assert refusal in said
    run = host.apply(manifest)
    assert run.line("Directory[/srv/www]") == f"failed: {refusal}", run.out
    assert sorted(p.name for p in www.iterdir()) == ["index.html", "uploads"]
    assert (www / "uploads" / "a.jpg").read_text() == "a tenant's"
    again = host.apply(
        manifest, "--mode", "observe"
    )  # only the refusal is left: plan fails as apply does
    assert again.line("Directory[/srv/www]") == f"failed: {refusal}", again.out
