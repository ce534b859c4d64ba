"""How cost grows with the work: snapshot/diff of generated trees, pulls of growing files,
and 8 VMs warm-started at once. Prints one JSON object; draws docs/scale.png.

    python bench/scale.py [--entries 10000,100000,1000000] [--pull-mib 16,...,4096] [--vms 8]

* ``tree``: per size, a generated tree under /tmp (files of a few bytes, 20 files and
  3 subdirectories per directory, so ~87 % files) snapshotted through the real agent on
  localhost by the project's host client (``AsyncGuest.fs_snapshot``), 1 % of the files
  then changed and the tree snapshotted again, ``after.diff(before)`` timed. Each size
  runs in a fresh host process and a fresh agent, so the peak RSS figures (``ru_maxrss``
  of the host process, ``VmHWM`` of the agent) are that size's own. The tree is deleted
  after.
* ``pull``: ``AsyncGuest.pull`` (binary messages) of files of each size; a size that
  does not fit on /tmp three times over (source, copy, margin) is skipped and said so.
* ``fit``: least-squares line (time = a + slope * work) and r² of each series; the
  host's peak RSS per million entries.
* ``vms``: ``launch()`` of the built-in ``debian`` image N times at once (warm start,
  cached states), seconds from the first launch call to all ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent import TOKEN, agent_process  # bench/agent.py: the agent as a subprocess

from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.guest import AsyncGuest

REPO = Path(__file__).resolve().parents[1]
PLOT = REPO / "docs" / "scale.png"
FILES_PER_DIR = 20
DIRS_PER_DIR = 3


def make_tree(root: Path, files: int) -> int:
    """A tree of about ``files`` files of a few bytes; returns the entries made."""
    made = 0
    queue = [root]
    root.mkdir()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    while made < files:
        directory = queue.pop(0)
        parent = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(min(FILES_PER_DIR, files - made)):
                fd = os.open(f"f{i}.txt", flags, 0o644, dir_fd=parent)
                os.write(fd, b"%d\n" % made)
                os.close(fd)
                made += 1
            for i in range(DIRS_PER_DIR):
                os.mkdir(f"d{i}", dir_fd=parent)
                queue.append(directory / f"d{i}")
                made += 1
        finally:
            os.close(parent)
    return made


def tree_place(largest: int) -> tuple[Path, str]:
    """Where the trees go: /tmp, unless its disk makes files too slowly for the largest
    tree and /dev/shm (tmpfs) has room for it (a page per file, twice over)."""
    probe = Path(tempfile.mkdtemp(prefix="adare-scale-probe-", dir="/tmp"))
    try:
        started = time.perf_counter()
        make_tree(probe / "t", 500)
        rate = 500 / (time.perf_counter() - started)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    seconds = largest / rate
    shm = Path("/dev/shm")
    if seconds > 120 and shm.is_dir() and shutil.disk_usage(shm).free > largest * 8192:
        return shm, (
            f"/dev/shm: /tmp's disk makes {rate:.0f} files/s here, {seconds:.0f} s for the "
            f"largest tree"
        )
    return Path("/tmp"), f"/tmp ({rate:.0f} files/s)"


def change_files(files: list[str]) -> int:
    """Append a byte to every hundredth file; how many were changed."""
    chosen = files[::100]
    for path in chosen:
        with open(path, "ab") as out:
            out.write(b"+")
    return len(chosen)


def agent_peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


async def measure_tree(port: int, root: str) -> dict[str, Any]:
    """In a fresh process: snapshot, change 1 % of the files, snapshot, diff."""
    client = await AgentClient.connect("127.0.0.1", port, TOKEN)
    try:
        guest = AsyncGuest(client)
        started = time.perf_counter()
        before = await guest.fs_snapshot(root)
        snapshot_s = time.perf_counter() - started
        changed = change_files([p for p, e in before.items() if e.kind == "file"])
        after = await guest.fs_snapshot(root)
        started = time.perf_counter()
        diff = after.diff(before)
        diff_s = time.perf_counter() - started
    finally:
        await client.close()
    return {
        "entries": len(before),
        "snapshot_s": round(snapshot_s, 3),
        "changed": changed,
        "diff_modified": len(diff.modified),
        "diff_s": round(diff_s, 3),
        "host_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


async def measure_pulls(port: int, workdir: Path, sizes_mib: list[int]) -> list[dict[str, Any]]:
    client = await AgentClient.connect("127.0.0.1", port, TOKEN)
    rows: list[dict[str, Any]] = []
    block = os.urandom(16 * 2**20)
    try:
        guest = AsyncGuest(client)
        for mib in sizes_mib:
            free = shutil.disk_usage(workdir).free
            if free < 3 * mib * 2**20:
                rows.append(
                    {"mib": mib, "skipped": f"needs {3 * mib} MiB on /tmp, {free >> 20} free"}
                )
                continue
            source, target = workdir / f"pull-{mib}.bin", workdir / f"pulled-{mib}.bin"
            with source.open("wb") as out:
                for _ in range(mib // 16):
                    out.write(block)
            started = time.perf_counter()
            await guest.pull(str(source), target, timeout=3600)
            seconds = time.perf_counter() - started
            same = source.stat().st_size == target.stat().st_size
            source.unlink()
            target.unlink()
            rows.append(
                {
                    "mib": mib,
                    "seconds": round(seconds, 3),
                    "mb_per_s": round(mib * 1.048576 / seconds, 1),
                    "same_size": same,
                }
            )
    finally:
        await client.close()
    return rows


def fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least squares y = a + slope * x, with r²."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    a = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return {"intercept": a, "slope": slope, "r2": round(1 - ss_res / ss_tot, 4) if ss_tot else 1.0}


async def run_tree(workdir: Path, files: int) -> dict[str, Any]:
    root = workdir / f"tree-{files}"
    started = time.perf_counter()
    made = make_tree(root, files)
    generate_s = time.perf_counter() - started
    run_dir = workdir / f"run-{files}"
    run_dir.mkdir()
    try:
        async with agent_process(run_dir, None) as (port, pid):
            child = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--measure-tree", str(root), "--port", str(port),
                stdout=subprocess.PIPE, cwd=REPO,
            )  # fmt: skip
            out, _ = await child.communicate()
            if child.returncode:
                raise RuntimeError(f"tree measurement of {files} files failed")
            row = json.loads(out)
            row["agent_peak_rss_mib"] = agent_peak_rss_mib(pid)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    return {"files": files, "made": made, "generate_s": round(generate_s, 1), **row}


def warm_start_many(count: int, image: str) -> dict[str, Any]:
    from pytest_adare import launch

    ready: list[float] = []
    errors: list[str] = []
    all_ready = threading.Barrier(count + 1)
    started = time.perf_counter()

    def one() -> None:
        try:
            with launch(image, progress=None) as vm:
                vm.guest.call("get_timestamp")
                ready.append(time.perf_counter() - started)
                all_ready.wait(timeout=900)
        except Exception as exc:  # reported in the JSON, the others go on
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            all_ready.abort()

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        all_ready.wait(timeout=900)
    except threading.BrokenBarrierError:
        pass
    total = time.perf_counter() - started
    for thread in threads:
        thread.join(timeout=300)
    return {
        "vms": count,
        "image": image,
        "all_ready_s": round(total, 2) if not errors else None,
        "ready_s": sorted(round(r, 2) for r in ready),
        "errors": errors,
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """Two panels (snapshot+diff seconds vs entries, pull seconds vs MiB), drawn with PIL."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (1000, 420), "white")
    draw = ImageDraw.Draw(image)
    tree = [r for r in report["tree"] if "snapshot_s" in r]
    pulls = [r for r in report["pull"] if "seconds" in r]
    panels = [
        ("fs snapshot (blue) / diff (red), seconds vs entries", [
            ([r["entries"] for r in tree], [r["snapshot_s"] for r in tree], (30, 80, 200)),
            ([r["entries"] for r in tree], [r["diff_s"] for r in tree], (200, 40, 40)),
        ]),
        ("binary pull, seconds vs MiB", [
            ([r["mib"] for r in pulls], [r["seconds"] for r in pulls], (30, 140, 60)),
        ]),
    ]  # fmt: skip
    for index, (title, series) in enumerate(panels):
        left, top, width, height = 70 + index * 500, 40, 400, 320
        draw.text((left, 12), title, fill="black")
        draw.rectangle((left, top, left + width, top + height), outline="black")
        xs = [x for s in series for x in s[0]] or [1]
        ys = [y for s in series for y in s[1]] or [1]
        xmax, ymax = max(xs) or 1, max(ys) or 1
        for tick in range(5):
            fx = tick / 4
            draw.text((left + fx * width - 15, top + height + 5), f"{xmax * fx:.3g}", fill="black")
            draw.text((left - 55, top + height - fx * height - 5), f"{ymax * fx:.3g}", fill="black")
        for sx, sy, colour in series:
            points = [
                (left + x / xmax * width, top + height - y / ymax * height)
                for x, y in zip(sx, sy, strict=True)
            ]
            if len(points) > 1:
                draw.line(points, fill=colour, width=2)
            for px, py in points:
                draw.ellipse((px - 4, py - 4, px + 4, py + 4), fill=colour)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    entries = [int(n) for n in args.entries.split(",") if n]
    sizes = [int(n) for n in args.pull_mib.split(",") if n]
    report: dict[str, Any] = {"host": "localhost", "python": sys.version.split()[0]}
    place, report["tree_place"] = tree_place(max(entries, default=0))
    with tempfile.TemporaryDirectory(prefix="adare-scale-", dir=place) as trees:
        report["tree"] = [await run_tree(Path(trees), n) for n in entries]
    with tempfile.TemporaryDirectory(prefix="adare-scale-", dir="/tmp") as tmp:
        workdir = Path(tmp)
        run_dir = workdir / "run-pull"
        run_dir.mkdir()
        async with agent_process(run_dir, None) as (port, _pid):
            report["pull"] = await measure_pulls(port, workdir, sizes)
    tree = [r for r in report["tree"] if "snapshot_s" in r]
    pulls = [r for r in report["pull"] if "seconds" in r]
    fits: dict[str, Any] = {}
    if len(tree) >= 2:
        xs = [float(r["entries"]) for r in tree]
        snap, diff = fit(xs, [r["snapshot_s"] for r in tree]), fit(xs, [r["diff_s"] for r in tree])
        rss = fit(xs, [r["host_peak_rss_mib"] for r in tree])
        fits["snapshot_us_per_entry"] = round(snap["slope"] * 1e6, 2)
        fits["snapshot_r2"] = snap["r2"]
        fits["diff_us_per_entry"] = round(diff["slope"] * 1e6, 3)
        fits["diff_r2"] = diff["r2"]
        fits["host_rss_mib_per_million_entries"] = round(rss["slope"] * 1e6, 1)
        fits["host_rss_r2"] = rss["r2"]
        biggest = max(tree, key=lambda r: r["entries"])
        fits["largest_tree_host_peak_rss_mib"] = biggest["host_peak_rss_mib"]
        fits["largest_tree_entries"] = biggest["entries"]
        fits["million_entries_under_1_gib"] = (
            biggest["entries"] >= 1_000_000 and biggest["host_peak_rss_mib"] < 1024
        )
    if len(pulls) >= 2:
        pull = fit([float(r["mib"]) for r in pulls], [r["seconds"] for r in pulls])
        fits["pull_s_per_gib"] = round(pull["slope"] * 1024, 3)
        fits["pull_mb_per_s_from_slope"] = (
            round(1.048576 / pull["slope"], 1) if pull["slope"] else None
        )
        fits["pull_r2"] = pull["r2"]
    report["fit"] = fits
    if args.vms:
        report["warm_start_at_once"] = await asyncio.to_thread(
            warm_start_many, args.vms, args.image
        )
    plot(report, PLOT)
    report["plot"] = str(PLOT.relative_to(REPO))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", default="10000,100000,1000000")
    parser.add_argument("--pull-mib", default="16,64,256,1024,4096")
    parser.add_argument("--vms", type=int, default=8, help="VMs warm-started at once (0: none)")
    parser.add_argument("--image", default=os.environ.get("ADARE_BENCH_IMAGE", "debian"))
    parser.add_argument("--measure-tree", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_tree:
        print(json.dumps(asyncio.run(measure_tree(args.port, args.measure_tree))))
        return 0
    print(json.dumps(asyncio.run(run(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
