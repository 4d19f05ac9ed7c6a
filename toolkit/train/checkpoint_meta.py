"""What a checkpoint records besides the model and optimizer state: its metadata.

The loop makes one at every checkpoint and the strategy saves it with the state
(``toolkit.train.strategies``: in ``state.pt`` beside ``model`` and ``optimizer`` for
DDP and FSDP2, alone in ``state.pt`` for DeepSpeed); a resumed run reads it back and
continues at ``next_step``. A resume from an older rtk's checkpoint reads the same
keys, so they stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import record_fields


@dataclass(frozen=True)
class CheckpointMeta:
    """A checkpoint's metadata.

    Attributes:
        step: The last step trained before it was saved.
        next_step: The step a run resumed from it trains first.
        seed: The run's seed.
        world_size: The ranks that saved it.
        strategy: ``ddp``, ``fsdp2`` or ``deepspeed``.
    """

    step: int
    next_step: int
    seed: int
    world_size: int
    strategy: str

    def to_json(self) -> JsonObject:
        """The metadata as saved (the keys of ``state.pt`` beside the state)."""
        return {
            "step": self.step,
            "next_step": self.next_step,
            "seed": self.seed,
            "world_size": self.world_size,
            "strategy": self.strategy,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "checkpoint") -> CheckpointMeta:
        """The inverse of ``to_json``; other keys (the state, when saved with it) are left.

        Raises:
            RunDirError: ``data`` is not an object, or a field is missing or of the
                wrong type (the message names ``where`` and the field).
        """
        f = record_fields(data, where)
        return cls(
            step=f.integer("step"),
            next_step=f.integer("next_step"),
            seed=f.integer("seed"),
            world_size=f.integer("world_size"),
            strategy=f.text("strategy"),
        )
