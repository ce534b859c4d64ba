"""What a recipe image costs: the example recipe's build from nothing, and its cache hit
(JSON on stdout).

    python bench/recipe.py [--recipe conftest_examples/fm_desktop/fm-desktop.toml] [--hits 5]

The build runs ``adare-image build RECIPE`` in a fresh, empty cache (as root: mmdebstrap
downloads and installs every package, then the disk is made; the figure is mostly the
mirror's and dpkg's), with each phase's seconds read from its progress lines. The cache
hit is ``resolve_image(RECIPE)`` in this process once the image is there (median of
``--hits``: reading the recipe, hashing its files, finding the manifest) and the same
through the command line (a new Python process each time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "conftest_examples" / "fm_desktop" / "fm-desktop.toml"
_PHASE = re.compile(r"^\[\s*[\d.]+s\] (\w+)\s+([\d.]+) s")


def build_seconds(recipe: Path, env: dict[str, str]) -> tuple[float, dict[str, float]]:
    command = [sys.executable, "-m", "pytest_adare.image_cli", "build", str(recipe)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    took = time.perf_counter() - started
    phases = {m[1]: float(m[2]) for line in done.stdout.splitlines() if (m := _PHASE.match(line))}
    return took, phases


def cli_hit_seconds(recipe: Path, env: dict[str, str]) -> float:
    command = [sys.executable, "-m", "pytest_adare.image_cli", "build", str(recipe)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert "not rebuilt" in done.stdout, done.stdout
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--hits", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="adare-bench-recipe-") as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        build_s, phases = build_seconds(args.recipe, env)
        os.environ["XDG_CACHE_HOME"] = cache
        # Deferred: the cache root is read from the environment set just above.
        from pytest_adare.image.resolve import resolve_image

        hits = []
        for _ in range(args.hits):
            started = time.perf_counter()
            resolve_image(args.recipe)
            hits.append(time.perf_counter() - started)
        cli_hits = [cli_hit_seconds(args.recipe, env) for _ in range(max(1, args.hits // 2))]
    result: dict[str, Any] = {
        "recipe": str(args.recipe.relative_to(REPO) if args.recipe.is_relative_to(REPO)
                      else args.recipe),
        "build_s": round(build_s, 1),
        "build_phases_s": phases,
        "cache_hit_ms": round(statistics.median(hits) * 1000, 1),
        "cache_hit_cli_s": round(statistics.median(cli_hits), 2),
    }  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
