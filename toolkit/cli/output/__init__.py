"""What the commands print: progress, job outcomes, node runs, a run's report."""
