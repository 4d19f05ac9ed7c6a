"""What runs on the head beside any workload: the one life every job driver of rtk leads.

A job driver (``rtk train``'s ``train/job.py``, ``rtk torchrun``'s
``torchrun/fanout.py``, ``rtk telemetry record``'s ``telemetry/record_job.py``) says
how to run and stop its workload; ``runtime.JobDriver`` runs the rest in one order.
"""
