"""Runs every bench/bench_*.py (or only joins, with --join) and writes bench/results/*.md into
bench/RESULTS.md. Other arguments (--quick) go to each benchmark."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

if __name__ == "__main__":
    extra = [a for a in sys.argv[1:] if a != "--join"]
    if "--join" not in sys.argv:
        for script in sorted(BENCH.glob("bench_*.py")):
            print(f"== {script.name}", flush=True)
            subprocess.run([sys.executable, str(script), *extra], check=False)
    parts = [p.read_text() for p in sorted((BENCH / "results").glob("*.md"))]
    (BENCH / "RESULTS.md").write_text(
        "# Benchmark results\n\nEach section says the machine, the date and the "
        "command that produced it.\n\n" + "\n\n".join(parts)
    )
    print(f"wrote {BENCH / 'RESULTS.md'}")
