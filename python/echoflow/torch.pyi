# SPDX-License-Identifier: Apache-2.0
import datetime
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import numpy
import torch.utils.data

from . import FeedbackIds, FeedbackValues, Identity, MapFn, Sample

def to_torch(sample: Sample) -> Sample: ...

# What Loader(..., as_tuple=names) yields: those fields in that order.
class FieldTuple(Tuple[torch.Tensor, ...]):
    identity: Optional[Identity]
    members: Optional[numpy.ndarray]

class Loader(torch.utils.data.IterableDataset):
    spec: str
    seed: int
    rank: int
    world_size: int
    # None (one part per rank), or the number of partitions of the data,
    # dealt to the ranks: rank r hosts the partitions p with
    # p % world_size == r, and the checkpoint resumes on any world_size
    # that divides it
    partitions: Optional[int]
    epoch: int
    def __init__(self, spec: str, *, seed: int = ..., rank: Optional[int] = ...,
                 world_size: Optional[int] = ..., on_error: str = ...,
                 memory_budget: Optional[int] = ...,
                 maps: Optional[Mapping[str, MapFn]] = ...,
                 as_tuple: Optional[Sequence[str]] = ...,
                 pin_memory: bool = ...,
                 source: Optional[Iterable[Any]] = ...,
                 fields: Optional[Sequence[str]] = ...,
                 unbatch: bool = ...,
                 batched: Optional[bool] = ...,
                 even_steps: Optional[str] = ...,
                 partitions: Optional[int] = ...) -> None: ...
    as_tuple: Optional[Tuple[str, ...]]
    pin_memory: bool
    # None, "pad" or "drop": every rank yields as many batches per epoch
    even_steps: Optional[str]
    # batches of padding (wrap-round) the latest iteration yielded
    padded: int
    def set_epoch(self, epoch: int) -> None: ...
    def __iter__(self) -> Iterator[Union[Sample, FieldTuple]]: ...
    def __len__(self) -> int: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Dict[str, Any]) -> None: ...
    # Pipeline.feedback() on the pipeline of the iteration in progress in
    # this process; StateError outside one, and with DataLoader workers
    # (num_workers > 0), whose pipelines it cannot reach.
    def feedback(self, ids: FeedbackIds, values: FeedbackValues) -> None: ...
    def stats(self) -> Optional[Dict[str, Any]]: ...
    @property
    def identity(self) -> Optional[Identity]: ...
    @property
    def members(self) -> Optional[numpy.ndarray]: ...
    def close(self) -> None: ...

# echo(dataloader, ...) yields what the DataLoader yields, echoed: a
# tensor, or tuples, lists, dicts and namedtuples nesting tensors and
# lists (or tuples) of str, as the DataLoader's batches are laid out.
Batch = Any

def echo(dataloader: Iterable[Any], factor: Union[str, float] = ..., *,
         max: int = ..., shuffle: Optional[int] = ...,
         pool: Optional[int] = ..., mode: str = ...,
         seed: int = ..., even_steps: Optional[str] = ...) -> "Echo": ...

class Echo:
    dataloader: Iterable[Any]
    factor: Union[str, float]
    max: int
    shuffle: int
    pool: int
    mode: str
    seed: int
    even_steps: Optional[str]
    padded: int
    def __init__(self, dataloader: Iterable[Any],
                 factor: Union[str, float] = ..., *, max: int = ...,
                 shuffle: Optional[int] = ..., pool: Optional[int] = ...,
                 mode: str = ..., seed: int = ...,
                 even_steps: Optional[str] = ...) -> None: ...
    def __iter__(self) -> Iterator[Batch]: ...
    def __len__(self) -> int: ...
    def stats(self) -> Optional[Dict[str, Any]]: ...
    @property
    def identity(self) -> Optional[Identity]: ...
    @property
    def members(self) -> Optional[numpy.ndarray]: ...

# the data-parallel helpers (echoflow/_distributed.py)
def init_distributed(backend: str = ...,
                     timeout: Optional[datetime.timedelta] = ...
                     ) -> Tuple[int, int]: ...
def save_checkpoint(path: str, model: torch.nn.Module,
                    optimizer: Optional[torch.optim.Optimizer] = ...,
                    loaders: Union[None, Loader, Sequence[Loader]] = ...,
                    extra: Any = ...) -> None: ...
def load_checkpoint(path: str, model: torch.nn.Module,
                    optimizer: Optional[torch.optim.Optimizer] = ...,
                    loaders: Union[None, Loader, Sequence[Loader]] = ...
                    ) -> Any: ...
