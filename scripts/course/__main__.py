"""`python3 scripts/course <command> ...` (what scripts/course.sh runs)."""
import sys
from pathlib import Path

# Run as a folder, Python puts this folder first on the path: put its parent there instead,
# so that the package imports as `course`. Nothing is cached beside the sources.
sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

from course.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
