"""The failure film's costs on the desktop image (JSON on stdout).

    python bench/film.py [--image debian-desktop] [--dumps 20] [--seconds 20]

One VM of the image (``launch()``). ``--dumps`` QMP screendumps as PNG, one after the
other (host wall time of each, and the PNG's size); then, with a clock in an xterm
changing the screen all the time, the plugin's recorder (``ScreenRecorder``, 2 fps)
for ``--seconds``: the distinct frames kept and their PNG bytes, and the time and size
of the film written from them as animated WebP (what the plugin writes) and as GIF.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_adare import launch
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine_tools.screen_recorder import DEFAULT_FPS, ScreenRecorder
from pytest_adare.vm import VM

CLOCK = (
    "setsid xterm -geometry 40x4+500+420 -e sh -c 'while :; do date +%T.%N; sleep 0.2; done' "
    "> /dev/null 2>&1 < /dev/null &"
)


def screendumps(vm: VM, count: int, out: Path) -> dict[str, Any]:
    seconds: list[float] = []
    sizes: list[int] = []
    for n in range(count):
        path = out / f"dump-{n}.png"
        started = time.monotonic()
        vm.machine.qmp("screendump", filename=str(path), format="png")
        seconds.append(time.monotonic() - started)
        sizes.append(path.stat().st_size)
    median = statistics.median(seconds)
    return {
        "n": count,
        "median_ms": round(median * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
        "png_median_kib": round(statistics.median(sizes) / 1024, 1),
        # the recorder's share of QEMU's time at its default rate, if a dump's wall time
        # were all QEMU's work (an upper bound)
        "busy_share_at_default_fps": round(median * DEFAULT_FPS, 3),
    }


def film(vm: VM, seconds: float, out: Path) -> dict[str, Any]:
    vm.guest.shell(CLOCK).check()
    recorder = ScreenRecorder(lambda: vm.machine, fps=DEFAULT_FPS, seconds=seconds)
    loop = shared_loop()
    loop.run(recorder.start(), timeout=30)
    time.sleep(seconds + 1)
    loop.run(recorder.stop(), timeout=30)
    result: dict[str, Any] = {
        "seconds": seconds,
        "captured": recorder.captured,
        "failed": recorder.failed,
        "frames": len(recorder.ring),
        "frames_kib": round(recorder.ring.size / 1024, 1),
    }
    for suffix in ("webp", "gif"):
        started = time.monotonic()
        path = recorder.save_film(out / f"film.{suffix}")
        result[suffix] = {
            "write_s": round(time.monotonic() - started, 2),
            "kib": round(path.stat().st_size / 1024, 1) if path else None,
        }
    vm.guest.shell("pkill -f 'date +%T.%N'; true")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="debian-desktop")
    parser.add_argument("--dumps", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="adare-bench-film-") as tmp:
        out = Path(tmp)
        with launch(args.image, workdir=out / "vm", progress=None) as vm:
            result = {
                "benchmark": "failure film",
                "image": args.image,
                "screen": list(vm.screendump().size),
                "screendump_png": screendumps(vm, args.dumps, out),
                "film": film(vm, args.seconds, out),
            }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
