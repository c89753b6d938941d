"""Datasets the measured path reads: synthetic labelled images in three storage forms, and text.

Images are written once to a cache directory and reused; a manifest records the checksum so a
changed or damaged file is noticed. Three sources, one sample format ``{"image": uint8[H,W,C],
"label": int32}``:

- ``arrayrecord``: one ArrayRecord file; each record is an encoded blob (header, zlib-compressed
  pixels, CRC32) that the loader must decode.
- ``memmap``: fixed-size records in one flat file read through ``np.memmap``; a sample is a
  zero-copy slice, checked against its per-record CRC32.
- ``ram``: the whole dataset as numpy arrays in memory.

The text workload is the bytes of the Python standard library's own ``.py`` files: real text that
every machine has, split deterministically into train and validation by a hash of each path.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import struct
import sysconfig
import zlib
from pathlib import Path

import numpy as np

from experiments.configs import check

from memsim.knobs import SOURCES
DEFAULT_CACHE = Path(os.environ.get("MEMSIM_CACHE", Path(__file__).resolve().parent.parent / ".cache"))



def check_cache_dir(cache_dir: Path | str) -> Path:
    """Creates ``cache_dir`` if needed and checks it is writable; ConfigError naming it otherwise."""
    import tempfile
    from experiments.configs import ConfigError
    d = Path(cache_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".write-check-"):
            pass
    except OSError as e:
        raise ConfigError(f"cache_dir={str(cache_dir)!r}: cannot create or write there ({e.strerror or e}); "
                          "choose a writable folder") from None
    return d


_MAGIC = b"MSIM"
_REC_HEADER = struct.Struct("<4sIHHHI")  # magic, label, h, w, c, crc32(raw pixels)
_MM_HEADER = struct.Struct("<8sQHHHH")  # magic, count, h, w, c, pad
_MM_MAGIC = b"MSIMMAP1"


class DatasetError(RuntimeError):
    """A dataset file is missing, truncated or corrupt; the message names the file and record."""


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    num_samples: int = 2048
    image_size: int = 32
    channels: int = 3
    num_classes: int = 10
    seed: int = 0

    def __post_init__(self):
        check(self.num_samples > 0, "num_samples", self.num_samples, "must be positive")
        check(8 <= self.image_size <= 512, "image_size", self.image_size, "must be in 8..512")
        check(self.channels in (1, 3), "channels", self.channels, "must be 1 or 3")
        check(self.num_classes >= 2, "num_classes", self.num_classes, "must be at least 2")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.image_size, self.image_size, self.channels)

    @property
    def sample_bytes(self) -> int:
        return int(np.prod(self.shape))

    def key(self) -> str:
        return f"img_n{self.num_samples}_s{self.image_size}_c{self.channels}_k{self.num_classes}_seed{self.seed}"


@functools.lru_cache(maxsize=32)
def _class_pattern(shape: tuple[int, int, int], label: int, num_classes: int) -> np.ndarray:
    """The smooth pattern of class ``label`` (read-only; the same for every sample of the class).
    Computed once per class: it was 60% of a 128×128 sample's 1.8 ms on the 2-core CPU, and the
    rules' memmap file of 5,215 such samples took 18 s to write."""
    h, w, c = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) / max(h, w)
    phase = 2 * np.pi * label / num_classes
    base = 0.5 + 0.25 * np.sin(6 * xx + phase)[..., None] + 0.25 * np.cos(5 * yy - phase)[..., None]
    out = base * np.linspace(0.7, 1.0, c, dtype=np.float32)
    out.flags.writeable = False
    return out


def synth_sample(spec: ImageSpec, i: int) -> tuple[np.ndarray, int]:
    """Sample ``i``: smooth class-dependent pattern plus noise, so compression and learning mean something."""
    rng = np.random.default_rng([spec.seed, i])
    label = int(rng.integers(spec.num_classes))
    img = _class_pattern(spec.shape, label, spec.num_classes) + rng.normal(0, 0.08, spec.shape).astype(np.float32)
    return np.clip(img * 255, 0, 255).astype(np.uint8), label


def encode_record(image: np.ndarray, label: int) -> bytes:
    h, w, c = image.shape
    raw = np.ascontiguousarray(image, dtype=np.uint8).tobytes()
    return _REC_HEADER.pack(_MAGIC, label, h, w, c, zlib.crc32(raw)) + zlib.compress(raw, 1)


def decode_record(blob: bytes, where: str = "record") -> dict:
    """Decodes one ArrayRecord blob; raises DatasetError naming ``where`` if it is damaged."""
    if len(blob) < _REC_HEADER.size:
        raise DatasetError(f"{where}: truncated record ({len(blob)} bytes, header needs {_REC_HEADER.size})")
    magic, label, h, w, c, crc = _REC_HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise DatasetError(f"{where}: bad magic {magic!r}; the file is corrupt or not a memsim dataset")
    try:
        raw = zlib.decompress(blob[_REC_HEADER.size:])
    except zlib.error as e:
        raise DatasetError(f"{where}: cannot decompress pixels ({e}); the record is corrupt") from None
    if len(raw) != h * w * c or zlib.crc32(raw) != crc:
        raise DatasetError(f"{where}: checksum mismatch; the record is corrupt. Delete the dataset cache to rebuild it")
    return {"image": np.frombuffer(raw, np.uint8).reshape(h, w, c), "label": np.int32(label)}


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _paths(spec: ImageSpec, cache_dir: Path) -> dict[str, Path]:
    d = Path(cache_dir) / spec.key()
    return {"dir": d, "arrayrecord": d / "data.array_record", "memmap": d / "data.mmap",
            "manifest": d / "manifest.json"}


def ensure_images(spec: ImageSpec, source: str, cache_dir: Path | str = DEFAULT_CACHE, verify: bool = True) -> Path:
    """Writes the dataset for ``source`` once and returns its file; later calls reuse it.

    With ``verify`` the file's size and SHA-256 are checked against the manifest; a mismatch raises
    DatasetError naming the file (it is never silently rewritten: delete it to rebuild).
    """
    check(source in SOURCES, "source", source, f"expected one of {', '.join(SOURCES)}")
    p = _paths(spec, Path(cache_dir))
    if source == "ram":
        source = "memmap"  # the in-RAM source is loaded from the memmap file
    path = p[source]
    manifest = json.loads(p["manifest"].read_text()) if p["manifest"].exists() else {}
    entry = manifest.get(source)
    if entry and path.exists():
        if verify:
            size = path.stat().st_size
            if size != entry["bytes"]:
                raise DatasetError(f"{path}: size {size} bytes, manifest says {entry['bytes']}; the file is "
                                   f"truncated or changed. Delete {p['dir']} to rebuild it")
            if _file_sha256(path) != entry["sha256"]:
                raise DatasetError(f"{path}: SHA-256 differs from the manifest; the file is corrupt. "
                                   f"Delete {p['dir']} to rebuild it")
        return path
    p["dir"].mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    if source == "arrayrecord":
        from array_record.python.array_record_module import ArrayRecordWriter
        w = ArrayRecordWriter(str(tmp), "group_size:1")
        for i in range(spec.num_samples):
            img, label = synth_sample(spec, i)
            w.write(encode_record(img, label))
        w.close()
    else:
        dt = memmap_dtype(spec)
        with open(tmp, "wb") as f:
            f.write(_MM_HEADER.pack(_MM_MAGIC, spec.num_samples, *spec.shape, 0).ljust(64, b"\0"))
            recs = np.zeros(min(spec.num_samples, 4096), dt)
            for start in range(0, spec.num_samples, len(recs)):
                n = min(len(recs), spec.num_samples - start)
                for j in range(n):
                    img, label = synth_sample(spec, start + j)
                    recs[j]["label"] = label
                    recs[j]["image"] = img
                    recs[j]["crc"] = zlib.crc32(img.tobytes())
                f.write(recs[:n].tobytes())
    os.replace(tmp, path)
    manifest = json.loads(p["manifest"].read_text()) if p["manifest"].exists() else {}
    manifest[source] = {"bytes": path.stat().st_size, "sha256": _file_sha256(path),
                        "spec": dataclasses.asdict(spec)}
    from experiments.results import write_json_atomic  # here: loader workers import this module, not pandas
    write_json_atomic(p["manifest"], manifest)
    return path


def memmap_dtype(spec: ImageSpec) -> np.dtype:
    return np.dtype([("label", "<i4"), ("crc", "<u4"), ("image", "u1", spec.shape)])


class ArrayRecordImages:
    """Grain random-access source over the encoded ArrayRecord file; decoding is the loader's job."""

    def __init__(self, path: Path | str):
        import grain
        self.path = str(path)
        self._src = grain.sources.ArrayRecordDataSource([self.path])

    def __len__(self) -> int:
        return len(self._src)

    def __getitem__(self, i: int) -> dict:
        try:
            blob = self._src[i]
        except (RuntimeError, OSError) as e:  # array_record's own chunk checksums
            raise DatasetError(f"{self.path}: record {i}: {e}. Delete the file to rebuild it") from None
        return {"blob": blob, "index": np.int64(i)}

    def __repr__(self) -> str:
        return f"ArrayRecordImages({self.path!r})"


class MemmapImages:
    """Fixed-size records in one file; each sample is a zero-copy slice of a read-only memmap."""

    def __init__(self, path: Path | str, verify_crc: bool = True):
        self.path = str(path)
        self.verify_crc = verify_crc
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(64)
        if len(head) < _MM_HEADER.size:
            raise DatasetError(f"{self.path}: truncated header ({len(head)} bytes)")
        magic, count, h, w, c, _ = _MM_HEADER.unpack_from(head)
        if magic != _MM_MAGIC:
            raise DatasetError(f"{self.path}: bad magic {magic!r}; not a memsim memmap dataset")
        self._dtype = np.dtype([("label", "<i4"), ("crc", "<u4"), ("image", "u1", (h, w, c))])
        need = 64 + count * self._dtype.itemsize
        if size < need:
            whole = max(0, (size - 64) // self._dtype.itemsize)
            raise DatasetError(f"{self.path}: truncated: {size} bytes, {count} records need {need}; "
                               f"record {whole} is the first incomplete one. Delete the file to rebuild it")
        self._count = count
        self._mm = None

    def _map(self):
        if self._mm is None:
            self._mm = np.memmap(self.path, self._dtype, mode="r", offset=64, shape=(self._count,))
        return self._mm

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_mm"] = None  # each worker maps the file itself
        return d

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> dict:
        rec = self._map()[i]
        img = rec["image"]
        if self.verify_crc and zlib.crc32(img) != int(rec["crc"]):
            raise DatasetError(f"{self.path}: record {i}: checksum mismatch; the file is corrupt. "
                               f"Delete it to rebuild")
        return {"image": img, "label": np.int32(rec["label"])}

    def __repr__(self) -> str:
        return f"MemmapImages({self.path!r})"


class RamImages:
    """The whole dataset held in RAM as two numpy arrays."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, labels

    @classmethod
    def from_memmap(cls, path: Path | str) -> "RamImages":
        mm = MemmapImages(path, verify_crc=False)._map()
        return cls(np.array(mm["image"]), np.array(mm["label"], np.int32))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"image": self.images[i], "label": self.labels[i]}

    def __repr__(self) -> str:
        return f"RamImages({self.images.shape})"


def image_source(spec: ImageSpec, source: str, cache_dir: Path | str = DEFAULT_CACHE):
    path = ensure_images(spec, source, cache_dir)
    if source == "arrayrecord":
        return ArrayRecordImages(path)
    if source == "memmap":
        return MemmapImages(path)
    return RamImages.from_memmap(path)


# ----------------------------------------------------------------------------------------- text

def stdlib_py_files() -> list[Path]:
    """The standard library's own ``.py`` files, sorted (site-packages and tests excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("site-packages/", "test/", "idlelib/", "lib2to3/tests")) or "/test" in rel:
            continue
        files.append(p)
    return files


def text_corpus(split: str, max_bytes: int | None = None, cache_dir: Path | str = DEFAULT_CACHE) -> np.ndarray:
    """Cached form of ``read_text_corpus`` (an .npy per split and Python version in ``cache_dir``)."""
    check(split in ("train", "val"), "split", split, "expected 'train' or 'val'")
    path = Path(cache_dir) / f"stdlib_text_py{sysconfig.get_python_version()}_{split}.npy"
    if path.exists():
        try:
            data = np.load(path, mmap_mode="r")
            return np.asarray(data[:max_bytes] if max_bytes else data)
        except (ValueError, OSError):
            path.unlink(missing_ok=True)  # damaged cache file: rebuild from the source files
    data = read_text_corpus(split)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.npy")
    np.save(tmp, data)
    os.replace(tmp, path)
    return data[:max_bytes] if max_bytes else data


def read_text_corpus(split: str, max_bytes: int | None = None) -> np.ndarray:
    """Bytes of the stdlib's ``.py`` files as uint8; ``split`` is 'train' (~95%) or 'val' (~5%).

    The split is by a SHA-1 of each file's relative path, so it is the same on every machine with
    the same Python version, and no file appears in both.
    """
    check(split in ("train", "val"), "split", split, "expected 'train' or 'val'")
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for p in stdlib_py_files():
        digest = hashlib.sha1(p.relative_to(root).as_posix().encode()).digest()[0]
        if (digest < 13) != (split == "val"):  # 13/256 ≈ 5% validation
            continue
        b = p.read_bytes()
        chunks.append(np.frombuffer(b, np.uint8))
        total += len(b)
        if max_bytes is not None and total >= max_bytes:
            break
    if not chunks:
        raise DatasetError(f"no standard-library .py files found under {root}")
    out = np.concatenate(chunks)
    return out[:max_bytes] if max_bytes else out


class TextWindows:
    """Random-access source of ``seq_len + 1`` byte windows (inputs and next-byte targets).

    Made with ``from_split``, it pickles without the corpus and reloads it in each worker process.
    """

    def __init__(self, data: np.ndarray, seq_len: int, split: str | None = None):
        check(len(data) > seq_len + 1, "seq_len", seq_len, f"longer than the corpus ({len(data)} bytes)")
        self.data, self.seq_len, self.split = data, seq_len, split
        self._n = (len(data) - 1) // seq_len

    @classmethod
    def from_split(cls, split: str, seq_len: int) -> "TextWindows":
        return cls(text_corpus(split), seq_len, split)

    def __getstate__(self):
        d = dict(self.__dict__)
        if self.split is not None:
            d["data"] = None
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        if self.data is None:
            self.data = text_corpus(self.split)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> dict:
        s = i * self.seq_len
        w = self.data[s:s + self.seq_len + 1].astype(np.int32)
        return {"tokens": w[:-1], "targets": w[1:]}
