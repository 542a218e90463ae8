# SPDX-License-Identifier: Apache-2.0
"""Makes the decode benchmark's images: JPEGs of about 500x375 at quality
90, cut from the photographs Debian ships with scikit-image (package
python3-skimage), written both as files (for the PyTorch DataLoader) and
as one WebDataset shard (for echoflow's tar source).

usage: photos.py OUTDIR COUNT
"""
import io
import os
import random
import sys
import tarfile

from PIL import Image

SKIMAGE_DATA = "/usr/lib/python3/dist-packages/skimage/data"
# the RGB photographs of at least 500x375 among scikit-image's data
PHOTOS = ["astronaut.png", "coffee.png", "motorcycle_left.png",
          "motorcycle_right.png", "rocket.jpg", "retina.jpg",
          "hubble_deep_field.jpg"]
W, H = 500, 375


def main():
    out, count = sys.argv[1], int(sys.argv[2])
    rng = random.Random(0)
    sources = []
    for name in PHOTOS:
        path = os.path.join(SKIMAGE_DATA, name)
        if not os.path.exists(path):
            sys.exit("photos.py: %s is missing: apt-get install python3-skimage"
                     % path)
        sources.append(Image.open(path).convert("RGB"))
    os.makedirs(os.path.join(out, "jpg"), exist_ok=True)
    with tarfile.open(os.path.join(out, "photos-000000.tar"), "w",
                      format=tarfile.USTAR_FORMAT) as tar:
        for i in range(count):
            src = sources[i % len(sources)]
            # large photographs are scaled down first, so a crop shows a
            # scene rather than a patch of texture
            scale = max(W / src.width, H / src.height,
                        rng.uniform(0.45, 0.9) * min(1, 1000 / src.width))
            img = src.resize((max(W, round(src.width * scale)),
                              max(H, round(src.height * scale))),
                             Image.BILINEAR)
            x = rng.randrange(img.width - W + 1)
            y = rng.randrange(img.height - H + 1)
            buf = io.BytesIO()
            img.crop((x, y, x + W, y + H)).save(buf, "JPEG", quality=90)
            data = buf.getvalue()
            key = "img%06d" % i
            with open(os.path.join(out, "jpg", key + ".jpg"), "wb") as f:
                f.write(data)
            for ext, payload in (("jpg", data),
                                 ("cls", str(i % len(PHOTOS)).encode())):
                info = tarfile.TarInfo("%s.%s" % (key, ext))
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


if __name__ == "__main__":
    main()
