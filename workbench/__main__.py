"""`python -m workbench ...` and `torchrun --nproc-per-node N -m workbench ...`: the CLI."""

import sys

from workbench.cli.parser import main

if __name__ == "__main__":
    sys.exit(main())
