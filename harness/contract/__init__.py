"""What the runner and the targets agree on, below both (targets -> contract <- runner; test_architecture checks)."""
