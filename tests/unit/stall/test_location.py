"""Where a rank is, from realistic stacks (innermost frame first, as py-spy prints them)."""

from __future__ import annotations

import pytest

from toolkit.stall.location import (
    BACKWARD,
    COLLECTIVE,
    DATA,
    EXITED,
    FORWARD,
    OPTIMIZER,
    STOPPED_KIND,
    UNREADABLE,
    USER,
    is_user_file,
    locate,
)
from toolkit.stall.records import GONE, RUNNING, SLEEPING, STOPPED, ZOMBIE, Frame, RankEvidence

VENV = "/home/alice/proj/.venv/lib/python3.11/site-packages"
CONDA = "/opt/conda/envs/train/lib/python3.10/site-packages"
STDLIB = "/usr/lib/python3.11"
TRAIN = "/home/alice/proj/train.py"


@pytest.mark.parametrize(
    ("path", "mine"),
    [
        (TRAIN, True),
        ("/home/alice/proj/models/gpt.py", True),
        ("train.py", True),  # relative: a script run from its folder
        ("/srv/jobs/lib/data.py", True),  # a user's own lib/ folder
        ("/home/alice/proj/python3/train.py", True),
        (f"{VENV}/torch/distributed/distributed_c10d.py", False),
        (f"{CONDA}/torch/utils/data/dataloader.py", False),
        ("/usr/local/lib/python3.11/dist-packages/deepspeed/comm/comm.py", False),
        (f"{STDLIB}/threading.py", False),
        ("/opt/conda/envs/train/lib/python3.10/multiprocessing/queues.py", False),
        ("/home/alice/.pyenv/versions/3.11.4/lib/python3.11/selectors.py", False),
        ("/usr/lib64/python3.13t/runpy.py", False),
        ("<frozen runpy>", False),
        ("<string>", False),
        ("", False),
        ("/home/alice/rtk/toolkit/markers/api.py", False),  # rtk's wrapper of the user's call
        ("C:\\Users\\alice\\venv\\Lib\\site-packages\\torch\\nn\\modules\\module.py", False),
    ],
)
def test_the_users_own_files_are_told_from_libraries_and_python(path: str, mine: bool) -> None:
    assert is_user_file(path) is mine


def _rank(*frames: Frame, state: str = SLEEPING, **fields: object) -> RankEvidence:
    return RankEvidence(rank=0, node="node1", state=state, frames=frames, **fields)  # type: ignore[arg-type]


DDP_BACKWARD = (
    Frame("_engine_run_backward", f"{VENV}/torch/autograd/graph.py", 769),
    Frame("backward", f"{VENV}/torch/autograd/__init__.py", 289),
    Frame("backward", f"{VENV}/torch/_tensor.py", 581),
    Frame("train_step", "/home/alice/proj/train_ddp.py", 61),
    Frame("main", "/home/alice/proj/train_ddp.py", 90),
    Frame("<module>", "/home/alice/proj/train_ddp.py", 101),
)
DATALOADER_WORKERS = (
    Frame("wait", f"{STDLIB}/threading.py", 331),
    Frame("get", f"{STDLIB}/multiprocessing/queues.py", 113),
    Frame("_try_get_data", f"{CONDA}/torch/utils/data/dataloader.py", 1133),
    Frame("_get_data", f"{CONDA}/torch/utils/data/dataloader.py", 1294),
    Frame("_next_data", f"{CONDA}/torch/utils/data/dataloader.py", 1318),
    Frame("__next__", f"{CONDA}/torch/utils/data/dataloader.py", 631),
    Frame("train", TRAIN, 88),
    Frame("<module>", TRAIN, 120),
)
GLOO_ALL_REDUCE = (
    Frame("all_reduce", f"{VENV}/torch/distributed/distributed_c10d.py", 2288),
    Frame("wrapper", f"{VENV}/torch/distributed/c10d_logger.py", 83),
    Frame("train", TRAIN, 70),
    Frame("<module>", TRAIN, 120),
)
BARRIER_THROUGH_MARKERS = (
    Frame("barrier", f"{VENV}/torch/distributed/distributed_c10d.py", 4159),
    Frame("wrapper", f"{VENV}/torch/distributed/c10d_logger.py", 83),
    Frame("barrier", "/home/alice/rtk/toolkit/markers/api.py", 210),
    Frame("save", TRAIN, 95),
    Frame("<module>", TRAIN, 120),
)
DEEPSPEED_ALL_REDUCE = (
    Frame("all_reduce", f"{VENV}/deepspeed/comm/torch.py", 164),
    Frame("log_wrapper", f"{VENV}/deepspeed/comm/comm.py", 117),
    Frame("all_reduce", f"{VENV}/deepspeed/comm/comm.py", 496),
    Frame("allreduce_bucket", f"{VENV}/deepspeed/runtime/zero/stage_1_and_2.py", 1481),
    Frame("step", f"{VENV}/deepspeed/runtime/engine.py", 2213),
    Frame("train", "/home/alice/proj/train_ds.py", 44),
)
STORE_BARRIER_AT_INIT = (
    Frame("_store_based_barrier", f"{VENV}/torch/distributed/distributed_c10d.py", 4445),
    Frame("init_process_group", f"{VENV}/torch/distributed/distributed_c10d.py", 1520),
    Frame("main", TRAIN, 20),
)
FORWARD_IN_USER_MODULE = (
    Frame("attention", "/home/alice/proj/model.py", 40),
    Frame("forward", "/home/alice/proj/model.py", 61),
    Frame("_call_impl", f"{VENV}/torch/nn/modules/module.py", 1750),
    Frame("_wrapped_call_impl", f"{VENV}/torch/nn/modules/module.py", 1739),
    Frame("train", TRAIN, 77),
)
OPTIMIZER_STEP = (
    Frame("_single_tensor_adam", f"{VENV}/torch/optim/adam.py", 401),
    Frame("adam", f"{VENV}/torch/optim/adam.py", 880),
    Frame("step", f"{VENV}/torch/optim/adam.py", 247),
    Frame("wrapper", f"{VENV}/torch/optim/optimizer.py", 487),
    Frame("train", TRAIN, 80),
)
# As py-spy 0.4 reads them: methods named with their class (the stall suite's loader
# fault, scripts/stall_fault_suite.py).
DATALOADER = "torch/utils/data/dataloader.py"
PY_SPY_DATALOADER = (
    Frame("_PollLikeSelector.select", f"{STDLIB}/selectors.py", 415),
    Frame("wait", f"{STDLIB}/multiprocessing/connection.py", 947),
    Frame("Connection._poll", f"{STDLIB}/multiprocessing/connection.py", 440),
    Frame("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 113),
    Frame("_MultiProcessingDataLoaderIter._try_get_data", f"{VENV}/{DATALOADER}", 1291),
    Frame("_MultiProcessingDataLoaderIter._get_data", f"{VENV}/{DATALOADER}", 1464),
    Frame("_MultiProcessingDataLoaderIter._next_data", f"{VENV}/{DATALOADER}", 1505),
    Frame("_BaseDataLoaderIter.__next__", f"{VENV}/{DATALOADER}", 732),
    Frame("main", "/home/alice/proj/faults.py", 92),
)
PY_SPY_FORWARD = (
    Frame("Linear.forward", f"{VENV}/torch/nn/modules/linear.py", 134),
    Frame("Module._call_impl", f"{VENV}/torch/nn/modules/module.py", 1786),
    Frame("Module._wrapped_call_impl", f"{VENV}/torch/nn/modules/module.py", 1775),
    Frame("main", TRAIN, 77),
)
USER_ITERATOR = (
    Frame("read", f"{STDLIB}/socket.py", 706),
    Frame("__next__", "/home/alice/proj/stream.py", 30),
    Frame("train", TRAIN, 86),
)
USER_SLEEP = (
    Frame("sleep_forever", TRAIN, 12),
    Frame("<module>", TRAIN, 120),
)


@pytest.mark.parametrize(
    ("frames", "kind", "phrase"),
    [
        (DDP_BACKWARD, BACKWARD, "wait in backward (DDP all-reduce) at train_ddp.py:61"),
        (DATALOADER_WORKERS, DATA, "in next(dataloader) at train.py:88"),
        (GLOO_ALL_REDUCE, COLLECTIVE, "wait in all_reduce at train.py:70"),
        (BARRIER_THROUGH_MARKERS, COLLECTIVE, "wait in barrier at train.py:95"),
        (DEEPSPEED_ALL_REDUCE, COLLECTIVE, "wait in all_reduce at train_ds.py:44"),
        (STORE_BARRIER_AT_INIT, COLLECTIVE, "wait in _store_based_barrier at train.py:20"),
        (FORWARD_IN_USER_MODULE, FORWARD, "in forward at model.py:40"),
        (OPTIMIZER_STEP, OPTIMIZER, "in optimizer step at train.py:80"),
        (USER_ITERATOR, DATA, "in next(dataloader) at stream.py:30"),
        (PY_SPY_DATALOADER, DATA, "in next(dataloader) at faults.py:92"),
        (PY_SPY_FORWARD, FORWARD, "in forward at train.py:77"),
        (USER_SLEEP, USER, "in sleep_forever() at train.py:12"),
        (
            (Frame("poll", f"{STDLIB}/selectors.py", 468),),
            USER,
            "in poll (selectors.py:468)",
        ),
    ],
)
def test_a_rank_is_placed_by_its_innermost_known_frame(
    frames: tuple[Frame, ...], kind: str, phrase: str
) -> None:
    where = locate(_rank(*frames))
    assert (where.kind, where.phrase) == (kind, phrase)
    assert where.waiting is (kind in (COLLECTIVE, BACKWARD))


def test_the_process_state_comes_before_the_stack() -> None:
    stopped = locate(_rank(*GLOO_ALL_REDUCE, state=STOPPED))
    assert (stopped.kind, stopped.phrase) == (STOPPED_KIND, "stopped (SIGSTOP or a debugger)")
    assert stopped.frame == Frame("train", TRAIN, 70)
    for state in (ZOMBIE, GONE):
        assert locate(_rank(state=state)).phrase == "exited"
        assert locate(_rank(state=state)).kind == EXITED


def test_a_rank_without_a_stack_says_why() -> None:
    where = locate(_rank(state=RUNNING, stack_error="py-spy: Permission denied (os error 13)"))
    assert (where.kind, where.phrase) == (
        UNREADABLE,
        "stack unreadable (py-spy: Permission denied (os error 13))",
    )
    assert locate(_rank(state=RUNNING)).phrase == "stack unreadable (no stack)"
