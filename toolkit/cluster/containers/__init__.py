"""Ray in a container on a node: docker/podman over SSH, pyxis/apptainer in SLURM steps."""
