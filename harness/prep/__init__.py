"""Model preparation: the model folders the workers load (docs/architecture.md lists the modules)."""
