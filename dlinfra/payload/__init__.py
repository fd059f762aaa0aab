"""The benchmark payload: the one program every layer runs, identical bytes everywhere.

Run it as ``python -m dlinfra.payload run --workload mnist-dnn``. It imports only
the standard library, TensorFlow, NumPy, psutil and :mod:`dlinfra.record`, so
a target needs nothing of the controller; where a host has them, :mod:`dlinfra.payload.gpu`
also uses pynvml, CuPy or PyTorch, imported inside its functions. TensorFlow is imported late, after
``--cpus`` has pinned the process, because TF sizes its thread pools on first use.
"""
