"""`python -m vkq ...`: the same command line as `vkq ...`."""
import sys

from .commands.cli import main

sys.exit(main())
