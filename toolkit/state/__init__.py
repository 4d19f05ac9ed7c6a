"""What rtk keeps on the machine it runs on, per cluster: its directory and records."""
