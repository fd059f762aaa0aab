"""``python -m dlinfra.payload``: see :mod:`dlinfra.payload.cli`.

Once ``main`` returns, the record is written and flushed; the process then leaves with ``os._exit``, skipping
the interpreter's shutdown, where TensorFlow spends about a second on a 2-core host tearing itself down
(and, with it, the ``atexit`` hooks: :mod:`dlinfra.payload.scratch` cleans up what they would have).
That second would count as per-cell overhead of every single-process cell (distributed processes already
leave this way: gRPC threads can keep a process alive).
"""

from dlinfra.payload import scratch
from dlinfra.payload.cli import main

scratch.run(main)
