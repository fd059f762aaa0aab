"""``python -m dlinfra.payload``: see :mod:`dlinfra.payload.cli`.

Once ``main`` returns, the record is written and flushed; the process then leaves with ``os._exit``, skipping
the interpreter's shutdown, where TensorFlow spends about a second on a 2-core host tearing itself down.
That second would count as per-cell overhead of every single-process cell (distributed processes already
leave this way: gRPC threads can keep a process alive).
"""

import os
import sys

from dlinfra.payload.cli import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
