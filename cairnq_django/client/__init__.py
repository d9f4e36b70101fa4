"""What application code calls: submit, queries, wait, backpressure, retention."""
