"""Vectors kept by model and text hash: a text met again is found, another model's not."""

from __future__ import annotations

import numpy as np

from proxy.core.vectors import unit
from proxy.store import Database


def test_vectors_by_model_and_hash() -> None:
    db = Database(":memory:", lambda: 0.0)
    try:
        db.vectors.put("m1", [("h1", unit([1, 0])), ("h2", unit([0, 1]))], 5.0)
        found = db.vectors.get("m1", ["h1", "h2", "h3"])
        assert set(found) == {"h1", "h2"} and np.allclose(found["h2"], [0, 1])
        assert db.vectors.get("m2", ["h1"]) == {}  # another model's are another's
        db.vectors.put("m1", [("h1", unit([1, 1]))], 6.0)  # embedded again: replaced
        assert np.allclose(db.vectors.get("m1", ["h1"])["h1"], unit([1, 1]))
        many = [f"h{i}" for i in range(1200)]  # past one query's chunk
        db.vectors.put("m1", [(h, unit([1, 0])) for h in many], 7.0)
        assert len(db.vectors.get("m1", many)) == 1200
    finally:
        db.close()
