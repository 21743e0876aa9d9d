"""torch.distributed.checkpoint: `save` and `async_save` with the same arguments, each recording its save.

dcp.save returns after every rank's writes and rank 0's .metadata (state_dict_saver._save_state_dict ends in an
all_reduce whose finish step writes the metadata on the coordinator): its return is the save's end on every rank.
dcp.async_save returns after staging (the blocking part); the future it returns (or the AsyncSaveResponse's
upload_completion) completes when the background save, the same _save_state_dict, returns: the persist's end.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

from ckplan.record import Timing, quietly, write


def _rank_and_world(kwargs: dict[str, Any]) -> tuple[int, int]:
    import torch.distributed as dist

    group = kwargs.get("process_group")
    if not dist.is_initialized() or kwargs.get("no_dist"):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def save(
    to: str | os.PathLike[str], state_dict: Any, *, checkpoint_id: str | os.PathLike[str], step: int, **kwargs: Any
) -> Any:
    """dcp.save(state_dict, checkpoint_id=…, **kwargs), recorded to `to` as step `step`."""
    timing = Timing()
    metadata = dcp.save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    timing.done()
    with quietly():
        rank, world = _rank_and_world(kwargs)
        paths = [os.fspath(checkpoint_id)]
        write(to, timing, framework="dcp", step=step, paths=paths, counted="directory", rank=rank, world_size=world)
    return metadata


def async_save(
    to: str | os.PathLike[str], state_dict: Any, *, checkpoint_id: str | os.PathLike[str], step: int, **kwargs: Any
) -> Any:
    """dcp.async_save(state_dict, checkpoint_id=…, **kwargs), recorded to `to` when its persist completes. Returns
    what async_save returns, with a persist future that completes once the line is written (so that waiting on it
    waits for the record too). A save whose persist fails leaves no line; where the recorder cannot follow the
    persist, async_save's own response is returned, unrecorded."""
    timing = Timing()
    response = dcp.async_save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    timing.done()
    with quietly():
        return _recorded(to, response, timing, checkpoint_id, step, *_rank_and_world(kwargs))
    return response


def _recorded(
    to: str | os.PathLike[str],
    response: Any,
    timing: Timing,
    checkpoint_id: str | os.PathLike[str],
    step: int,
    rank: int,
    world: int,
) -> Any:
    upload = response.upload_completion if isinstance(response, AsyncSaveResponse) else response
    recorded: Future[Any] = Future()

    def persisted(future: Future[Any]) -> None:
        end = timing.now()  # the done callback runs in the thread that completed the persist, as it completes
        if (exc := future.exception()) is not None:
            recorded.set_exception(exc)
            return
        try:
            write(
                to,
                timing,
                framework="dcp",
                step=step,
                paths=[os.fspath(checkpoint_id)],
                counted="directory",
                persisted=end,
                rank=rank,
                world_size=world,
            )
        finally:
            recorded.set_result(future.result())

    upload.add_done_callback(persisted)
    if isinstance(response, AsyncSaveResponse):
        return AsyncSaveResponse(staging_completion=response.staging_completion, upload_completion=recorded)
    return recorded
