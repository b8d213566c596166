"""Recall by meaning: embeddings as the store keeps them, the scenes nearest a question,
and the fusion of that ranking with the full-text one. Pure.

A vector is kept unit length (float32): cosine similarity is then a dot product, and a
chat's scenes are one matrix, so that the nearest of 500 scenes to a question is one
matrix-vector product (NumPy, in C: a Python loop over 500 vectors of 384 numbers would
take tens of milliseconds on the chat path).

The two rankings are fused by reciprocal rank (`fuse`): each scene scores the sum of
1/(k + its rank) over the rankings it is in. It needs no calibration between bm25 scores
and cosines, which have nothing in common, and a scene both find comes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
RRF_K = 60  # the usual constant: ranks deep in a list count for little, the top much


def unit(values: Sequence[float]) -> Vector:
    """A vector of unit length (a zero vector stays zero: it is near nothing)."""
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def to_blob(vector: Vector) -> bytes:
    return vector.astype("<f4").tobytes()


def from_blob(blob: bytes) -> Vector:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


@dataclass(frozen=True, slots=True, eq=False)
class VectorSet:
    """A chat's scenes as vectors: `uids[i]` is the break whose recap `matrix[i]` embeds.
    Built off the request path; compared by identity."""

    uids: tuple[int, ...]
    matrix: Vector  # len(uids) x dimensions, unit rows

    def nearest(self, question: Vector, limit: int, floor: float) -> list[int]:
        """The scenes nearest `question` (unit length), best first, at most `limit`, none
        less similar than `floor`; none when the dimensions differ (another model)."""
        if not self.uids or question.shape[0] != self.matrix.shape[1]:
            return []
        scores = self.matrix @ question
        count = min(limit, len(self.uids))
        top = np.argpartition(-scores, count - 1)[:count]
        ordered = top[np.argsort(-scores[top], kind="stable")]
        return [self.uids[i] for i in ordered if scores[i] >= floor]


def stacked(uids: Sequence[int], vectors: Sequence[Vector]) -> VectorSet:
    """The scenes whose vectors share the first one's dimensions (a model change leaves
    some of the old size until they are embedded again)."""
    if not vectors:
        return VectorSet((), np.zeros((0, 0), dtype=np.float32))
    size = vectors[0].shape[0]
    kept = [(u, v) for u, v in zip(uids, vectors, strict=True) if v.shape[0] == size]
    return VectorSet(tuple(u for u, _ in kept), np.vstack([v for _, v in kept]))


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion: every id of `rankings` (each best first), by the sum of
    1/(k + rank) over the rankings it is in, best first; ties keep the first ranking's
    order."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, uid in enumerate(ranking):
            scores[uid] = scores.get(uid, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda uid: -scores[uid])
