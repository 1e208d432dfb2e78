"""`python -m numprobe.cluster compare|run_ut ...` (see numprobe.cluster)."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
