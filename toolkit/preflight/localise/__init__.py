"""Localisation: find the node or link behind a bad cluster-wide test, in rounds."""
