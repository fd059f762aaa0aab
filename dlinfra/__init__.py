"""dlinfra: measure what virtualisation costs deep learning, on your own hardware.

This module stays import-light on purpose: the payload runs on targets that
have only TensorFlow, NumPy and psutil, and it imports ``dlinfra``.
"""

__version__ = "0.1.0"
