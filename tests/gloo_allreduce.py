"""A gloo all-reduce across one Ray actor per node, as the sandbox tests run it.

Fed to the head's Python on stdin with ``RTK_HEAD_ADDRESS`` and ``HOSTS`` (the nodes'
names, comma-separated) set; prints one JSON object per rank: its sum, host, the
interface gloo used and whether it ran in a container.
"""

GLOO_ALLREDUCE = """
import json, os, socket
import ray
import torch
import torch.distributed as dist

ray.init(address=os.environ["RTK_HEAD_ADDRESS"], logging_level="ERROR", log_to_driver=False)

@ray.remote(num_cpus=0)
class Rank:
    def ip(self):
        return os.environ["RTK_NODE_IP"]

    def run(self, rank, world, master):
        dist.init_process_group("gloo", init_method=f"tcp://{master}:29511", rank=rank,
                                world_size=world)
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        dist.destroy_process_group()
        return {"rank": rank, "host": socket.gethostname(), "sum": value.item(),
                "ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
                "in_container": os.path.exists("/run/.containerenv")}

hosts = os.environ["HOSTS"].split(",")
ranks = [Rank.options(resources={f"rtk_host:{h}": 0.001}).remote() for h in hosts]
master = ray.get(ranks[0].ip.remote())
print(json.dumps(ray.get([r.run.remote(i, len(ranks), master) for i, r in enumerate(ranks)])))
"""
