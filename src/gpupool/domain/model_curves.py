"""Named throughput curves: ElasticFlow's A100 measurements of its six models at their batch sizes.

Source: ElasticFlow's artifact (ASPLOS'23), https://github.com/pkusys/ElasticFlow, commit 04a0109a6acd,
``ElasticFlow/scheduler/throughputs_A100/<model>.csv`` (rows: global batch size; columns: GPUs; values:
iterations per second at that batch size; 6 significant digits kept). The repository is Apache-2.0; these are
measured facts, copied as numbers, no code. The ITP traces' durations are ``num_iteration / rate(num_gpu)``
of these curves. ``ELASTICFLOW_MAX_GPUS`` is the artifact's cap on a job's GPUs per model and batch size on
A100 (``scheduler/models.py: get_max_gpu``): beyond it a bigger job runs no faster or does not fit its batch.
A curve is named ``<model>@<global batch size>``; a job spec may name one instead of listing points.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gpupool.domain.elastic import ThroughputCurve

_POINTS: dict[str, tuple[tuple[int, float], ...]] = {
    "bert@64": ((1, 6.03066), (2, 8.64348), (4, 10.3563), (8, 11.0602), (16, 10.9869), (32, 10.6083), (64, 9.24586)),
    "bert@128": ((1, 3.57493), (2, 5.67941), (4, 8.45093), (8, 9.99424), (16, 10.7676), (32, 10.7104), (64, 9.44456)),
    "deepspeech2@32": ((1, 3.02316), (2, 5.36586), (4, 7.54393), (8, 9.81614), (16, 12.8832), (32, 14.4615)),
    "deepspeech2@64": (
        (1, 1.59992),
        (2, 2.96148),
        (4, 5.25276),
        (8, 7.40624),
        (16, 9.40086),
        (32, 12.4843),
        (64, 13.9739),
    ),
    "gpt2@128": ((1, 7.30884), (2, 11.9459), (4, 16.6663), (8, 18.7037), (16, 19.8749), (32, 18.599), (64, 16.6465)),
    "gpt2@256": ((1, 4.09734), (2, 6.95975), (4, 11.4405), (8, 15.6555), (16, 17.8723), (32, 18.8554), (64, 15.6436)),
    "inception3@64": (
        (1, 4.82065),
        (2, 8.19006),
        (4, 11.6932),
        (8, 13.3925),
        (16, 13.6934),
        (32, 13.6875),
        (64, 13.0548),
    ),
    "inception3@128": (
        (1, 2.5623),
        (2, 4.65929),
        (4, 7.80361),
        (8, 10.8542),
        (16, 12.7972),
        (32, 12.8435),
        (64, 12.3407),
    ),
    "resnet50@64": (
        (1, 6.84298),
        (2, 11.8385),
        (4, 18.2989),
        (8, 21.2654),
        (16, 21.5097),
        (32, 22.7498),
        (64, 20.9691),
    ),
    "resnet50@128": (
        (1, 3.65537),
        (2, 6.61953),
        (4, 11.2242),
        (8, 16.5341),
        (16, 20.1556),
        (32, 20.291),
        (64, 21.0709),
    ),
    "resnet50@256": (
        (1, 1.84337),
        (2, 3.44862),
        (4, 6.19081),
        (8, 10.3787),
        (16, 15.1527),
        (32, 17.8226),
        (64, 18.8453),
    ),
    "vgg16@64": ((1, 5.05302), (2, 9.03564), (4, 14.755), (8, 19.3299), (16, 25.8933), (32, 30.5557), (64, 29.5336)),
    "vgg16@128": ((1, 2.62478), (2, 4.87362), (4, 8.72075), (8, 13.573), (16, 18.0598), (32, 23.6154), (64, 25.7825)),
    "vgg16@256": ((1, 1.31366), (2, 2.52269), (4, 4.64187), (8, 7.99643), (16, 12.6218), (32, 16.3718), (64, 20.6555)),
}

MODEL_CURVES: Mapping[str, ThroughputCurve] = MappingProxyType(
    {name: ThroughputCurve(points, name) for name, points in _POINTS.items()}
)


def elasticflow_max_gpus(model: str, batch_size: int) -> int:
    """ElasticFlow's A100 cap on one job's GPUs (``get_max_gpu``), by model and global batch size."""
    caps = {
        ("gpt2", 128): 16,
        ("gpt2", 256): 32,
        ("bert", 64): 8,
        ("inception3", 64): 16,
        ("inception3", 128): 32,
        ("resnet50", 64): 32,
        ("vgg16", 64): 32,
    }
    if model == "deepspeech2":
        return batch_size
    if model == "bert":
        return caps.get((model, batch_size), 16)
    return caps.get((model, batch_size), min(batch_size, 64))
