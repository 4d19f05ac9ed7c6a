"""SLURM: batch scripts rendered from ``sbatch/`` templates, submitted and followed."""
