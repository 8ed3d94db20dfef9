"""harness: N ORT sessions in worker processes, measured with and without file-mapped weights (cheap to import)."""

__version__ = "0.1.0"
