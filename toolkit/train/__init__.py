"""rtk's GPT on Ray Train.

Its config, model, data, strategies and loop; the job's driver on the head (``job``) and
what runs in each Ray Train worker (``ray_worker``).
"""
