"""Model preparation, piece by piece: the model folders the workers load.

- `models`: the cpu targets' models, composed (a user's model prepared, or the generated chain);
- `folder`: the model-folder format (`PreparedModel`, ``manifest.json``, the cache entry);
- `externalise`: large initializers into the aligned ``weights.bin``, copied file to file;
- `generated`: the generated fp32 MatMul chain;
- `modelargs`: the command line's --shape, --free-dim and --input parsed;
- `cachekeys`: what makes "the same" prepared model (file identities, settings, ORT, CPU);
- `onnxfile`: reading a user's ONNX file, and ORT's errors in one line;
- `reference`: the reference input and outputs every worker checks against;

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
