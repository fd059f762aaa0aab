"""``python -m dlinfra.payload``: see :mod:`dlinfra.payload.cli`."""

import sys

from dlinfra.payload.cli import main

sys.exit(main())
