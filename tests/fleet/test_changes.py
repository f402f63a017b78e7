"""``datum.fleet.changes``: a held wait leaves nothing behind when it ends, whichever way it ends.

Each waiter is a future of its own in one set (not a shared ``asyncio.Event``,
whose timed-out waiters leave by a scan of every other one): these tests hold
real waits on a real fleet directory and check the set after each ending.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from datum.fleet.changes import FleetChanges, Unchanged, held
from datum.fleet.effective import effective


def has(digest: str) -> Unchanged:
    """What an agent that has the manifest of ``digest`` says (the route: its ``If-None-Match``)."""
    return lambda found: found.digest == digest


def fleet(directory: Path) -> Path:
    directory.mkdir()
    (directory / "nodes.yaml").write_text("nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n")
    (directory / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: hello\n")
    return directory.resolve()


def test_waits_that_time_out_leave_no_waiter_behind(tmp_path: Path) -> None:
    directory = fleet(tmp_path / "fleet")
    digest = effective(directory, "web1", {}).digest

    async def run() -> tuple[list[str], int]:
        changes = FleetChanges(directory, period=0.05)
        changes.start()
        try:
            answers = await asyncio.gather(
                *(held(changes, directory, f"web{i}", {}, has(digest), 0.2) for i in range(1, 51))
            )
            return [a.digest for a in answers], changes.waiting + changes.timed + changes.timers
        finally:
            await changes.stop()

    digests, waiting = asyncio.run(run())
    assert digests == [digest] * 50  # each as it was: the route answers 304
    assert waiting == 0  # no waiter, and no wait timed or timer left


def test_waits_ended_by_a_change_leave_no_timer_behind(tmp_path: Path) -> None:
    """A wait's time runs on one timer shared by the waits due at the same time: the waits a change answers
    take themselves out of it, and the last one out cancels it."""
    directory = fleet(tmp_path / "fleet")
    digest = effective(directory, "web1", {}).digest

    async def run() -> tuple[int, int, int, int]:
        changes = FleetChanges(directory, period=0.05)
        changes.start()
        try:
            waits = [asyncio.create_task(held(changes, directory, f"web{i}", {}, has(digest), 60 + i % 3))
                     for i in range(1, 31)]
            while changes.timed < 30:  # every wait held, its time running
                await asyncio.sleep(0.01)
            timers = changes.timers
            (directory / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: changed\n")
            await asyncio.wait_for(asyncio.gather(*waits), 30)
            return timers, changes.waiting, changes.timed, changes.timers
        finally:
            await changes.stop()

    held_timers, waiting, timed, timers = asyncio.run(run())
    assert 1 <= held_timers < 30  # 30 waits on a few timers: three deadlines, each a few seconds' ticks at most
    assert waiting == 0 and timed == 0 and timers == 0


def test_a_change_answers_every_wait_with_the_new_manifest_and_a_close_every_other(tmp_path: Path) -> None:
    directory = fleet(tmp_path / "fleet")
    digest = effective(directory, "web1", {}).digest

    async def run() -> tuple[set[str], int, int, float]:
        loop = asyncio.get_running_loop()
        changes = FleetChanges(directory, period=0.05)
        changes.start()
        try:
            waits = [asyncio.create_task(held(changes, directory, f"web{i}", {}, has(digest), 60)) for i in range(1, 21)]
            while changes.waiting < 20:  # every wait held
                await asyncio.sleep(0.01)
            (directory / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: changed\n")
            answers = await asyncio.wait_for(asyncio.gather(*waits), 30)
            after_change = changes.waiting
            # waits held again on the new manifest, then the server closes: answered at once, none left
            new = has(answers[0].digest)
            again = [asyncio.create_task(held(changes, directory, f"web{i}", {}, new, 60)) for i in range(1, 11)]
            while changes.waiting < 10:
                await asyncio.sleep(0.01)
            began = loop.time()
            changes.close()
            await asyncio.wait_for(asyncio.gather(*again), 30)
            return {a.digest for a in answers}, after_change, changes.waiting, loop.time() - began
        finally:
            await changes.stop()

    digests, after_change, after_close, closing = asyncio.run(run())
    assert len(digests) == 1 and digests != {digest}
    assert after_change == 0 and after_close == 0
    assert closing < 5


def test_a_rollout_that_moves_wakes_the_waits_that_ask_which_revision(tmp_path: Path) -> None:
    """With staged rollouts the watch also probes the rollout in force: when it moves (a wave released, a halt,
    an abort) every waiter asks again, and one whose host is now served another manifest is answered."""
    from datum.fleet.changes import held_by

    directory = fleet(tmp_path / "fleet")
    other = fleet(tmp_path / "other")
    (other / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: released\n")
    released = {"now": False}
    moved = {"now": False}

    def probe() -> bool:
        was, moved["now"] = moved["now"], False
        return was

    async def find():  # type: ignore[no-untyped-def]
        return effective(other if released["now"] else directory, "web1", {})

    async def run() -> tuple[str, int, float]:
        changes = FleetChanges(directory, period=0.05, probe=probe)
        changes.start()
        try:
            unchanged = has((await find()).digest)
            loop = asyncio.get_running_loop()
            started = loop.time()
            wait = asyncio.create_task(held_by(changes, find, unchanged, 30))
            await asyncio.sleep(0.3)
            assert not wait.done()  # nothing moved: still held
            released["now"] = moved["now"] = True  # the wave is released (as refresh() says after a read)
            answer = await asyncio.wait_for(wait, 5)
            return answer.digest, changes.waiting, loop.time() - started
        finally:
            await changes.stop()

    digest, waiting, took = asyncio.run(run())
    assert digest == effective(other, "web1", {}).digest
    assert waiting == 0 and took < 5


def test_a_change_is_told_once_the_directory_holds_still(tmp_path: Path) -> None:
    """A file written in place (truncated, then written) is two signatures a moment apart: the watch waits
    until one holds for a period, so no waiter is woken on the half-written file; a directory that never
    holds still is told after ``SETTLE`` periods all the same."""
    from datum.fleet import changes as waits

    changes = FleetChanges(fleet(tmp_path / "fleet"), period=0.001)
    reads: list[str] = []

    def reading(sequence: list[str]):  # type: ignore[no-untyped-def]
        async def read() -> str | None:
            value = sequence[min(len(reads), len(sequence) - 1)]
            reads.append(value)
            return value
        return read

    changes._read = reading(["written", "written"])  # type: ignore[method-assign]
    assert asyncio.run(changes._settled("truncated")) == "written" and reads == ["written", "written"]
    reads.clear()
    changes._read = reading([f"moving-{i}" for i in range(100)])  # type: ignore[method-assign]
    assert asyncio.run(changes._settled("moving")) == f"moving-{waits.SETTLE - 1}" and len(reads) == waits.SETTLE


def test_a_link_switched_to_another_release_answers_the_waits(tmp_path: Path) -> None:
    """The fleet directory a link: renamed over to point at a new release, the held waits are answered with the
    new release's manifest, composed from it (the link is resolved at each look)."""
    old, new = fleet(tmp_path / "a"), fleet(tmp_path / "b")
    (new / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: released\n")
    link = tmp_path / "fleet"
    link.symlink_to(old)
    digest = effective(old, "web1", {}).digest

    async def run() -> list[str]:
        changes = FleetChanges(link, period=0.05)
        changes.start()
        try:
            waits = [asyncio.create_task(held(changes, link, f"web{i}", {}, has(digest), 60)) for i in range(1, 6)]
            while changes.waiting < 5:
                await asyncio.sleep(0.01)
            (tmp_path / "fleet.new").symlink_to(new)
            (tmp_path / "fleet.new").replace(link)
            return [a.digest for a in await asyncio.wait_for(asyncio.gather(*waits), 30)]
        finally:
            await changes.stop()

    assert asyncio.run(run()) == [effective(new, "web1", {}).digest] * 5


def test_a_directory_missing_at_start_then_made_removed_and_cloned_again_is_seen_each_time(tmp_path: Path) -> None:
    """Issue 36, item 5: a fleet directory that was not there when the watch first looked (made after
    ``datum serve`` started, or removed and cloned again) had a signature that never changed, so the
    first composition was served for ever and every agent was answered 304. Each state is a change now,
    and no composition is made from a directory that is not there."""
    import shutil

    from datum.core.findings import Problem

    configured = tmp_path / "fleet"

    async def run() -> list[int]:
        changes = FleetChanges(configured, period=0.05)
        changes.start()
        seen = []
        try:
            await asyncio.sleep(0.3)
            seen.append(changes.changes)
            fleet(configured)
            await asyncio.sleep(0.6)
            seen.append(changes.changes)
            shutil.rmtree(configured)
            await asyncio.sleep(0.4)
            seen.append(changes.changes)
            try:
                effective(configured, "web1", {})
            except Problem as exc:
                seen.append(exc.code == "UNAVAILABLE" and "is not there" in exc.plain())
            fleet(configured)
            (configured / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: cloned\n")
            await asyncio.sleep(0.6)
            seen.append(changes.changes)
        finally:
            await changes.stop()
        return seen

    seen = asyncio.run(run())
    assert seen[0] == 0 and seen[1] == 1 and seen[2] == 2 and seen[3] is True and seen[4] == 3, seen
    assert b"cloned" in effective(configured.resolve(), "web1", {}).body  # never the composition from before
