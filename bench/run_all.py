"""Runs every bench/bench_*.py and joins bench/results/*.md into bench/RESULTS.md."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

if __name__ == "__main__":
    extra = sys.argv[1:]
    for script in sorted(BENCH.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        subprocess.run([sys.executable, str(script), *extra], check=False)
    parts = [p.read_text() for p in sorted((BENCH / "results").glob("*.md"))]
    (BENCH / "RESULTS.md").write_text("# Benchmark results\n\nEach section says the machine, the date and the "
                                       "command that produced it.\n\n" + "\n\n".join(parts))
    print(f"wrote {BENCH / 'RESULTS.md'}")
