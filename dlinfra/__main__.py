import sys

from dlinfra.cli import main

sys.exit(main())
