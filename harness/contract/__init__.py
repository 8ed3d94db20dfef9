"""What the runner and the targets agree on, below both: `options`, `spec`, `phases`, `spawn`.
Imports run one way (targets -> contract <- runner); suites/harness/test_architecture.py checks it."""
