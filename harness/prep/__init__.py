"""Model preparation, piece by piece: what `harness.models` composes.

- `tensors`: every ONNX element type as bytes (packed sizes, raw data, in-place OrtValues);
- `graphs`: walking a model's graphs and subgraphs, lifting Constant nodes into initializers;
- `optimize`: ORT's graph optimizations applied once, offline, before the weights are externalised;
- `inputs`: which inputs a model has, their shapes (--shape, --free-dim) and feeds (--input);
- `outputs`: comparing outputs with a reference (tolerance by dtype, NaN, non-determinism);
- `sessions`: the ORT session settings every session and every reference run share;
- `pipeline`: several models measured together (repeated --model, a folder, genai_config.json);
- `epcontext`: pre-compiled EPContext models and the context binaries they name;
- `containment`: the one rule for every path a model names (inside its folder, checked first).
"""
