# SPDX-License-Identifier: Apache-2.0
"""The decode benchmark's PyTorch side: JPEG decode, RandomResizedCrop(224),
horizontal flip, ToTensor and Normalize through torchvision, in a
DataLoader with batch 32, for 0, 1 and 2 workers. Prints one line per
setting: "workers N images_per_s X".

usage: torch_decode.py JPG_DIR IMAGES_PER_SETTING WORKERS...
"""
import os
import sys
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class Photos(Dataset):
    def __init__(self, root, length):
        self.paths = sorted(os.path.join(root, f) for f in os.listdir(root))
        self.length = length
        self.tf = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        with Image.open(self.paths[i % len(self.paths)]) as im:
            return self.tf(im.convert("RGB")), i % 7


def worker_init(_):
    torch.set_num_threads(1)


def main():
    root, n = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    for workers in map(int, sys.argv[3:]):
        loader = DataLoader(Photos(root, n), batch_size=32, shuffle=False,
                            num_workers=workers, worker_init_fn=worker_init,
                            persistent_workers=False)
        it = iter(loader)
        next(it)  # startup (worker processes, first batch) is not counted
        start = time.perf_counter()
        images = 0
        for x, _ in it:
            images += x.shape[0]
        elapsed = time.perf_counter() - start
        print("workers %d images_per_s %.1f" % (workers, images / elapsed),
              flush=True)


if __name__ == "__main__":
    main()
