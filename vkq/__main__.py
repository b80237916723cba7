"""`python -m vkq ...`: the same command line as `vkq ...`."""
import sys

from .cli import main

sys.exit(main())
