#!/usr/bin/env python3
"""Benchmark: Datum against ansible-core and pyinfra on one workload, measured in the same run.

The workload: N files of one fixed content, mode 0644, in an empty directory;
a first pass creates them, an idle pass finds them in place. Datum runs
``datum apply`` with ``--root DIR`` (paths ``/fI.conf``); ansible-core runs a
playbook against localhost with ``connection=local`` and ``copy`` over a loop;
pyinfra runs a deploy of ``files.put`` against ``@local``. Each run is a whole
process under ``/usr/bin/time -v``. After each pass the directory must hold
exactly the N files with the content and mode asked for; the idle pass of
every tool must change nothing (inode, mtime, mode and size of every entry).

The peers come from a separate virtualenv that ``./scripts/bench peers``
makes (``bench/peers-requirements.txt``, pinned; never the project's).
ansible-core spends about half a second per file here, so by default it runs
at N=200 only; ``--n`` runs every chosen tool at every N given.

Run: ``./scripts/bench peers [--n 200,1000] [--tools datum,pyinfra,ansible] [--peers-venv DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Timed, changed, datum_command, header, median, run_timed, snapshot  # noqa: E402

CONTENT = "# written by the peers benchmark\n" + "".join(f"setting_{k} = fixed value {k}\n" for k in range(6))
MODE = 0o644
TOOLS = ("datum", "pyinfra", "ansible")
DEFAULT_N = (200, 1000)
ANSIBLE_DEFAULT_N = (200,)
REPO = Path(__file__).resolve().parents[1]
DEFAULT_PEERS_VENV = REPO / ".cache" / "bench-peers-venv"


def name(i: int) -> str:
    return f"f{i}.conf"


# -- one workload, three ways --------------------------------------------------------


def datum_manifest(n: int) -> str:
    lines = ["resources:"]
    for i in range(n):
        lines += [f"  - File[{name(i)}]:", f"      path: /{name(i)}", f"      content: {json.dumps(CONTENT)}",
                  '      mode: "0644"']
    return "\n".join(lines) + "\n"


def ansible_playbook(n: int, target: Path) -> str:
    return (
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: N files of fixed content\n"
        "      ansible.builtin.copy:\n"
        f"        content: {json.dumps(CONTENT)}\n"
        f'        dest: "{target}/f{{{{ item }}}}.conf"\n'
        '        mode: "0644"\n'
        f'      loop: "{{{{ range({n}) | list }}}}"\n'
    )


def pyinfra_deploy(n: int, target: Path) -> str:
    return (
        "from io import StringIO\n\n"
        "from pyinfra.operations import files\n\n"
        f"CONTENT = {CONTENT!r}\n"
        f"for i in range({n}):\n"
        f"    files.put(name=f'f{{i}}.conf', src=StringIO(CONTENT), dest=f'{target}/f{{i}}.conf', mode='644')\n"
    )


@dataclass
class Workload:
    """How one tool is run on one directory: its command, environment and the files it needs."""

    tool: str
    argv: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)

    def write(self) -> None:
        for path, text in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def ratio(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def workload(tool: str, n: int, target: Path, work: Path, peers_bin: Path) -> Workload:
    """The command that converges ``target`` to the N files with ``tool``; inputs live in ``work``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATUM_", "ANSIBLE_", "PYINFRA_"))}
    if tool == "datum":
        manifest = work / "manifest.yaml"
        env["DATUM_HOME"] = str(work / "datum-home")
        return Workload(tool, [*datum_command(), "apply", str(manifest), "--root", str(target)], env,
                        {manifest: datum_manifest(n)})
    if tool != "datum":
        env.pop("PYTHONPATH", None)  # the peers see their own virtualenv only
    if tool == "ansible":
        playbook, inventory = work / "playbook.yml", work / "inventory.ini"
        env.update(ANSIBLE_HOME=str(work / "ansible-home"), ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
                   ANSIBLE_RETRY_FILES_ENABLED="false", ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(work / "ansible.cfg"))
        return Workload(
            tool, [str(peers_bin / "ansible-playbook"), "-i", str(inventory), str(playbook)], env,
            {playbook: ansible_playbook(n, target),
             inventory: f"localhost ansible_connection=local ansible_python_interpreter={peers_bin / 'python'}\n",
             work / "ansible.cfg": "[defaults]\n"},
        )
    if tool == "pyinfra":
        deploy = work / "deploy.py"
        return Workload(tool, [str(peers_bin / "pyinfra"), "@local", str(deploy), "--yes"], env,
                        {deploy: pyinfra_deploy(n, target)})
    raise ValueError(f"unknown tool {tool}")


def end_state(target: Path, n: int) -> list[str]:
    """What is wrong with ``target``: missing or extra entries, wrong content or mode (empty: right)."""
    want = {name(i) for i in range(n)}
    have = set(os.listdir(target))
    problems = [f"missing {x}" for x in sorted(want - have)[:3]] + [f"extra {x}" for x in sorted(have - want)[:3]]
    for entry in sorted(want & have):
        path = target / entry
        st = path.lstat()
        if not path.is_file() or path.is_symlink():
            problems.append(f"{entry} is not a regular file")
        elif st.st_mode & 0o7777 != MODE:
            problems.append(f"{entry} has mode {st.st_mode & 0o7777:04o}")
        elif path.read_text() != CONTENT:
            problems.append(f"{entry} has other content")
        if len(problems) > 5:
            break
    return problems


# -- running ---------------------------------------------------------------------------


@dataclass
class Measured:
    tool: str
    n: int
    first: list[Timed]
    idle: list[Timed]
    idle_nocache: list[Timed] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def first_s(self) -> float:
        return median([t.wall for t in self.first])

    @property
    def idle_s(self) -> float:
        return median([t.wall for t in self.idle])


OK_EXIT = {"datum": ({2}, {0}), "ansible": ({0}, {0}), "pyinfra": ({0}, {0})}


def measure(tool: str, n: int, base: Path, peers_bin: Path, repeat: int) -> Measured:
    """``repeat`` first passes (each on a fresh directory), then ``repeat`` idle passes on the last one."""
    firsts, idles, nocache, problems = [], [], [], []
    first_ok, idle_ok = OK_EXIT[tool]
    for r in range(repeat):
        work = base / f"{tool}-{n}-{r}"
        target = work / "target"
        target.mkdir(parents=True)
        w = workload(tool, n, target, work, peers_bin)
        w.write()
        t = run_timed(w.argv, w.env, cwd=work)
        firsts.append(t)
        if t.returncode not in first_ok:
            problems.append(f"first pass exited {t.returncode}: {t.stderr.strip()[-300:]}")
        problems += [f"after the first pass: {p}" for p in end_state(target, n)]
    for _ in range(repeat):
        before = snapshot(target)
        t = run_timed(w.argv, w.env, cwd=work)
        idles.append(t)
        if t.returncode not in idle_ok:
            problems.append(f"idle pass exited {t.returncode}: {t.stderr.strip()[-300:]}")
        if diff := changed(before, snapshot(target)):
            problems.append(f"the idle pass changed {len(diff)} entries, e.g. {diff[:3]}")
        problems += [f"after the idle pass: {p}" for p in end_state(target, n)]
    if tool == "datum":  # the idle pass again, as after a manifest change: no validated-manifest cache
        for k in range(repeat):
            env = {**w.env, "DATUM_CACHE_DIR": str(work / f"no-cache-{k}")}
            before = snapshot(target)
            nocache.append(run_timed(w.argv, env, cwd=work))
            if diff := changed(before, snapshot(target)):
                problems.append(f"the uncached idle pass changed {diff[:3]}")
    return Measured(tool, n, firsts, idles, nocache, problems)


def plan(ns: list[int] | None, tools: list[str]) -> list[tuple[str, int]]:
    """(tool, N) pairs: every tool at every N asked for; by default ansible at N=200 only."""
    chosen = ns or list(DEFAULT_N)
    out = []
    for n in chosen:
        for tool in tools:
            if tool == "ansible" and ns is None and n not in ANSIBLE_DEFAULT_N:
                continue
            out.append((tool, n))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", help="comma-separated file counts (default 200,1000; ansible at 200 only)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated, of datum,pyinfra,ansible")
    ap.add_argument("--peers-venv", type=Path, default=Path(os.environ.get("DATUM_BENCH_PEERS_VENV", DEFAULT_PEERS_VENV)))
    ap.add_argument("--repeat", type=int, default=1, help="runs of each peer pass (Datum: at least 5)")
    args = ap.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t]
    if unknown := set(tools) - set(TOOLS):
        ap.error(f"unknown tools: {sorted(unknown)}")
    ns = [int(x) for x in args.n.split(",")] if args.n else None
    peers_bin = args.peers_venv / "bin"
    for tool, exe in (("ansible", "ansible-playbook"), ("pyinfra", "pyinfra")):
        if tool in tools and not (peers_bin / exe).exists():
            print(f"{peers_bin / exe} is missing: run ./scripts/bench peers, which installs it", file=sys.stderr)
            return 1
    print(header("peers"))
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="datum-bench-peers-") as tmp:
        for tool, n in plan(ns, tools):
            repeat = max(5, args.repeat) if tool == "datum" else args.repeat
            m = measure(tool, n, Path(tmp), peers_bin, repeat)
            results.append(m)
            t, i = m.first[-1], m.idle[-1]
            extra = f", idle without cache {median([x.wall for x in m.idle_nocache]):.3f} s" if m.idle_nocache else ""
            print(f"{tool:>8} N={n:<5} first {m.first_s:8.3f} s (user {t.user:.2f} s, sys {t.system:.2f} s, "
                  f"max RSS {t.max_rss_kib / 1024:.0f} MiB)  idle {m.idle_s:8.3f} s (user {i.user:.2f} s, "
                  f"sys {i.system:.2f} s){extra}  [{len(m.first)} run(s), load {os.getloadavg()[0]:.2f}]"
                  + ("" if not m.problems else f"  PROBLEMS: {m.problems[:3]}"), flush=True)
    return report(results)


def report(results: list[Measured]) -> int:
    """Datum's speed-up over each peer per N and pass; the last line is the figure and the verdict."""
    datum = {m.n: m for m in results if m.tool == "datum"}
    ratios = []
    for m in results:
        if m.tool == "datum" or m.n not in datum:
            continue
        d = datum[m.n]
        first, idle = m.first_s / d.first_s, m.idle_s / d.idle_s
        ratios.append((m.tool, m.n, first, idle))
        print(f"speed-up of Datum over {m.tool} at N={m.n}: first pass {ratio(first)} "
              f"({m.first_s:.2f} s / {d.first_s:.3f} s), idle pass {ratio(idle)} ({m.idle_s:.2f} s / {d.idle_s:.3f} s)")
    problems = [f"{m.tool} N={m.n}: {p}" for m in results for p in m.problems]
    for p in problems:
        print(f"problem: {p}")
    ok = not problems and all(f > 1 and i > 1 for _, _, f, i in ratios)
    figures = "; ".join(f"{tool} N={n} first {ratio(f)} idle {ratio(i)}" for tool, n, f, i in ratios) or "no peer ran"
    print(f"peers: Datum's speed-up {figures}; every end state right and every idle pass changed nothing: "
          f"{'yes' if not problems else 'NO'} -> {'MEETS' if ok else 'MISSES'} (Datum ahead of each peer, idle passes idle)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
