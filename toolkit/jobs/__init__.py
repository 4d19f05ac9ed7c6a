"""Ray jobs on a cluster rtk brought up.

Submit and follow (``client``), a driver run on the head itself (``local_driver``),
the log stream (``logtail``), the runtime environment (``runtime_env``) and whether a
job ships rtk's source to the nodes (``shipped_code``).
"""
