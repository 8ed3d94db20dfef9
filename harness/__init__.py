"""harness: N ONNX Runtime sessions in worker processes, memory and start-up measured with and without
file-mapped weights (``python -m harness run``); importing it is cheap (heavy packages load where used)."""

__version__ = "0.1.0"
