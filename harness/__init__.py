"""harness: launches N ONNX Runtime sessions in worker processes and measures memory and
start-up time with and without file-mapped weights (``python -m harness run``).

Importing it is cheap: onnxruntime, numpy, onnx and pandas load only where used.
"""

__version__ = "0.1.0"
