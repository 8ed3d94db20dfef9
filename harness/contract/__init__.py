"""What the runner and the targets agree on, below both of them.

The runner (`harness.runner`) plans the groups and starts the workers; a target
(`harness.targets`) prepares the models in the parent and creates the sessions in each worker.
Both need the same few things, and they live here so that imports run one way: targets ->
`harness.contract` <- runner (the runner reaches the targets only through their registry,
`harness.targets`, and their interface, `harness.targets.base`; a target never imports the
runner).

- `options`: the run's options (`RunOptions`), each declared once with its command-line flag,
  and the derivation of every parser's arguments from those declarations;
- `spec`: the worker's spec (`WorkerSpec`, format-versioned) and its record (`WorkerRecord`);
- `phases`: the start-up phases and the hook a target calls at each (`phases.mark`), which
  the worker's peak sampler installs;
- `spawn`: how a child of the harness is started (the real interpreter, this package first on
  its path) and made to end with it.

Nothing here imports the runner, the targets, the command line or the reports (checked by
``suites/harness/test_architecture.py``).
"""
