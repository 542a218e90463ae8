from typing import Any, Dict, Iterator, Mapping, Optional

import torch.utils.data

from . import MapFn, Sample

def to_torch(sample: Sample) -> Sample: ...

class Loader(torch.utils.data.IterableDataset):
    spec: str
    seed: int
    rank: int
    world_size: int
    epoch: int
    def __init__(self, spec: str, *, seed: int = ..., rank: Optional[int] = ...,
                 world_size: Optional[int] = ..., on_error: str = ...,
                 memory_budget: Optional[int] = ...,
                 maps: Optional[Mapping[str, MapFn]] = ...) -> None: ...
    def set_epoch(self, epoch: int) -> None: ...
    def __iter__(self) -> Iterator[Sample]: ...
    def stats(self) -> Optional[Dict[str, Any]]: ...
    def close(self) -> None: ...
