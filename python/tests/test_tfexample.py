# SPDX-License-Identifier: Apache-2.0
"""tfrecord | tfexample: tf.train.Example records written by protobuf
itself (Debian's python3-protobuf), read back through echoflow.Pipeline and
echoflow.torch.Loader exactly, and decoded end to end.

The Example messages are built at run time from a descriptor made here by
hand, the same as examples/example.proto (checked with protoc when it
is installed), so the test needs no generated code and no TensorFlow."""
import gzip
import io
import os
import shutil
import struct
import subprocess

import numpy
import pytest

import echoflow

protobuf = pytest.importorskip(
    "google.protobuf", reason="python3-protobuf writes the fixtures")
from google.protobuf import descriptor_pb2  # noqa: E402
from google.protobuf import descriptor_pool  # noqa: E402
from google.protobuf import message_factory  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTO = os.path.join(ROOT, "examples", "example.proto")
FASHION = "/usr/share/datasets/fashion-mnist"

# ---- the messages ----------------------------------------------------------

F = descriptor_pb2.FieldDescriptorProto


def _field(msg, name, number, ftype, label=F.LABEL_OPTIONAL, type_name=None,
           packed=False, oneof=None, json_name=None):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    if packed:
        f.options.packed = True
    if oneof is not None:
        f.oneof_index = oneof
    f.json_name = json_name or name
    return f


def example_descriptor():
    """examples/example.proto as a FileDescriptorProto."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="example.proto", package="tensorflow", syntax="proto3")
    m = fd.message_type.add(name="BytesList")
    _field(m, "value", 1, F.TYPE_BYTES, F.LABEL_REPEATED)
    m = fd.message_type.add(name="FloatList")
    _field(m, "value", 1, F.TYPE_FLOAT, F.LABEL_REPEATED, packed=True)
    m = fd.message_type.add(name="Int64List")
    _field(m, "value", 1, F.TYPE_INT64, F.LABEL_REPEATED, packed=True)
    m = fd.message_type.add(name="Feature")
    for number, kind in ((1, "bytes"), (2, "float"), (3, "int64")):
        _field(m, kind + "_list", number, F.TYPE_MESSAGE,
               type_name=".tensorflow.%sList" % kind.capitalize(), oneof=0,
               json_name=kind + "List")
    m.oneof_decl.add(name="kind")
    m = fd.message_type.add(name="Features")
    entry = m.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, F.TYPE_STRING)
    _field(entry, "value", 2, F.TYPE_MESSAGE, type_name=".tensorflow.Feature")
    _field(m, "feature", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED,
           type_name=".tensorflow.Features.FeatureEntry")
    m = fd.message_type.add(name="Example")
    _field(m, "features", 1, F.TYPE_MESSAGE, type_name=".tensorflow.Features")
    return fd


def _example_class():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(example_descriptor())
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("tensorflow.Example"))


Example = _example_class()


def example(**features):
    """An Example of name -> bytes, [bytes], int, [int], float or [float]
    (a name's '/' given as '__' in the keyword)."""
    ex = Example()
    for key, value in features.items():
        f = ex.features.feature[key.replace("__", "/")]
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            raise ValueError("give an empty list through the message")
        if isinstance(values[0], bytes):
            f.bytes_list.value.extend(values)
        elif isinstance(values[0], float):
            f.float_list.value.extend(values)
        else:
            f.int64_list.value.extend(values)
    return ex


# ---- TFRecord framing ------------------------------------------------------

def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path, records):
    """Each record: u64le length, masked CRC-32C of those 8 bytes, the
    data, masked CRC-32C of the data."""
    with open(path, "wb") as f:
        for data in records:
            if not isinstance(data, bytes):
                data = data.SerializeToString()
            n = struct.pack("<Q", len(data))
            f.write(n + struct.pack("<I", masked_crc(n)) + data +
                    struct.pack("<I", masked_crc(data)))


def test_crc32c_known_value():
    # the check value of CRC-32C (RFC 3720, B.4)
    assert crc32c(b"123456789") == 0xE3069283


def test_descriptor_agrees_with_the_proto_file(tmp_path):
    protoc = shutil.which("protoc")
    if not protoc:
        pytest.skip("protoc (protobuf-compiler) checks the descriptor")
    out = tmp_path / "example.pb"
    subprocess.run([protoc, "--proto_path", os.path.dirname(PROTO),
                    "--descriptor_set_out", str(out),
                    os.path.basename(PROTO)], check=True)
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    assert fds.file[0] == example_descriptor()


# ---- Fashion-MNIST images as JPEG -------------------------------------------

def fashion_images(n):
    """The first n training images (uint8 [n, 28, 28]) and labels."""
    path = os.path.join(FASHION, "train-images-idx3-ubyte.gz")
    if not os.path.exists(path):
        pytest.skip("Fashion-MNIST: apt-get install dataset-fashion-mnist")
    with gzip.open(path) as f:
        f.read(16)
        images = numpy.frombuffer(f.read(n * 784), numpy.uint8)
    with gzip.open(os.path.join(FASHION, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = numpy.frombuffer(f.read(n), numpy.uint8)
    return images.reshape(n, 28, 28), labels


def jpeg(pixels):
    PIL = pytest.importorskip("PIL.Image")
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def imagenet_style(n, first=0):
    """n ImageNet-style Examples: the encoded image, its class, height and
    width, its format, a float list and an int64 list of varying length."""
    images, labels = fashion_images(first + n)
    out = []
    for i in range(first, first + n):
        ex = example(image__encoded=jpeg(images[i]),
                     image__class__label=int(labels[i]),
                     image__height=28, image__width=28,
                     image__format=b"JPEG",
                     image__mean=[float(images[i].mean()) / 255.0, -1.5,
                                  1e-30],
                     )
        ex.features.feature["ids"].int64_list.value.extend(
            [i * 1000 + k - 2 for k in range(i % 4)])  # 0 to 3 ids
        # a name past the 23 bytes samples once held; an empty list
        ex.features.feature["image/object/bbox/xmin_normalized"] \
            .float_list.value.extend([0.125 * k for k in range(i % 3)])
        out.append(ex)
    return out


FEATURES = ("image/encoded,image/class/label:int64,image/height:int64,"
            "image/width:int64,image/format:bytes,image/mean:float:3,"
            "image/object/bbox/xmin_normalized:float:var,"
            "ids:int64:var,image/bbox:float:var,"
            "image/id:int64=-7 as id")


def read_back(ex, sample):
    f = ex.features.feature
    assert bytes(numpy.asarray(sample["image/encoded"])) == \
        f["image/encoded"].bytes_list.value[0]
    for name in ("image/class/label", "image/height", "image/width"):
        t = numpy.asarray(sample[name])
        assert t.dtype == numpy.int64 and t.shape == ()
        assert int(t) == f[name].int64_list.value[0]
    assert bytes(numpy.asarray(sample["image/format"])) == b"JPEG"
    mean = numpy.asarray(sample["image/mean"])
    assert mean.dtype == numpy.float32 and mean.shape == (3,)
    assert mean.tolist() == list(f["image/mean"].float_list.value)
    ids = numpy.asarray(sample["ids"])
    assert ids.dtype == numpy.int64
    assert ids.tolist() == list(f["ids"].int64_list.value)
    xmin = numpy.asarray(sample["image/object/bbox/xmin_normalized"])
    assert xmin.tolist() == list(
        f["image/object/bbox/xmin_normalized"].float_list.value)
    assert numpy.asarray(sample["image/bbox"]).shape == (0,)  # missing: empty
    assert int(numpy.asarray(sample["id"])) == -7  # the default
    assert "record" not in sample.keys()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tfexample")
    exs = imagenet_style(12)
    write_tfrecord(str(d / "train-0.tfrecord"), exs[:6])
    write_tfrecord(str(d / "train-1.tfrecord"), exs[6:])
    return str(d / "train-{0..1}.tfrecord"), exs


def test_pipeline_reads_examples_exactly(files):
    pattern, exs = files
    spec = 'tfrecord:files="%s" | tfexample:features="%s",threads=2' % (
        pattern, FEATURES)
    with echoflow.Pipeline(spec) as p:
        got = list(p)
    assert len(got) == len(exs)
    for ex, s in zip(exs, got):
        read_back(ex, s)


def test_loader_batches_decoded_images(files):
    torch = pytest.importorskip("torch")
    import echoflow.torch as eft
    pattern, exs = files
    spec = ('tfrecord:files="%s" | tfexample:features="image/encoded,'
            'image/class/label:int64 as label" | decode:fields=image/encoded,'
            'channels=1 | batch:4' % pattern)
    images, labels = fashion_images(12)
    PIL = pytest.importorskip("PIL.Image")
    seen = 0
    for batch in eft.Loader(spec):
        assert batch["image"].shape == (4, 28, 28, 1)
        assert batch["label"].dtype == torch.int64
        for k in range(4):
            i = seen + k
            assert int(batch["label"][k]) == int(labels[i])
            enc = exs[i].features.feature["image/encoded"].bytes_list.value[0]
            want = numpy.asarray(PIL.open(io.BytesIO(enc)).convert("L"))
            got = batch["image"][k, :, :, 0].numpy()
            # the same libjpeg-turbo decodes both; allow a rounding step
            assert numpy.abs(got.astype(int) - want.astype(int)).max() <= 1
            # and the JPEG is close to the original pixels
            assert numpy.abs(got.astype(int) - images[i].astype(int)).mean() < 12
        seen += 4
    assert seen == 12


def test_corrupt_example_names_file_and_record(tmp_path):
    good = imagenet_style(2)
    data = good[1].SerializeToString()
    path = str(tmp_path / "bad.tfrecord")
    # valid framing and CRCs around a protobuf cut short
    write_tfrecord(path, [good[0], data[:len(data) // 2]])
    spec = 'tfrecord:files="%s" | tfexample:features="image/encoded"' % path
    with echoflow.Pipeline(spec) as p:
        it = iter(p)
        next(it)
        with pytest.raises(echoflow.Error) as e:
            next(it)
    msg = str(e.value)
    assert "file '%s'" % path in msg and "record 1 at offset" in msg
    assert "malformed Example" in msg
    # under skip the record is dropped and counted
    with echoflow.Pipeline(spec, on_error="skip") as p:
        assert len(list(p)) == 1


def test_kind_mismatch_names_the_feature(files):
    pattern, _ = files
    spec = ('tfrecord:files="%s" | tfexample:features="image/height:float"'
            % pattern)
    with echoflow.Pipeline(spec) as p:
        with pytest.raises(echoflow.Error) as e:
            next(iter(p))
    msg = str(e.value)
    assert "record 0 at offset 0" in msg and "train-0.tfrecord" in msg
    assert "feature 'image/height' is a int64_list in the record" in msg


def test_bad_feature_spec_is_a_spec_error():
    with pytest.raises(echoflow.SpecError, match="kind 'int32'"):
        echoflow.Pipeline('tfrecord:files=x | tfexample:features="a:int32"')


def test_state_dict_resumes_through_tfexample(files):
    # a shuffle after tfexample holds parsed items when the state is
    # taken; the resumed pipeline parses them again from their records
    pattern, _ = files
    spec = ('tfrecord:files="%s" | tfexample:features="image/encoded,'
            'ids:int64:var",threads=2 | shuffle:5' % pattern)

    def key(s):
        return (bytes(numpy.asarray(s["image/encoded"])),
                numpy.asarray(s["ids"]).tolist())

    with echoflow.Pipeline(spec, seed=3) as p:
        it = iter(p)
        for _ in range(4):
            next(it)
        state = p.state_dict()
        rest = [key(s) for s in it]
    with echoflow.Pipeline(spec, seed=3) as q:
        q.load_state_dict(state)
        assert [key(s) for s in q] == rest
    assert len(rest) == 8
