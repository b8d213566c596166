"""Embeddings kept by what was embedded (store thread): `model` names the API, model and
size that made them (`proxy.settings.embeddings.EmbeddingSettings.identity`), `hash` the
text (`proxy.sillytavern.chatfile.text_hash`). Content-addressed, so that a text met
again is never embedded again, and nothing needs rewriting when a scene changes: its new
text has a new hash."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from proxy.core.vectors import Vector, from_blob, to_blob
from proxy.store.records import Table

_CHUNK = 500  # hashes per query (SQLite's limit on parameters is far above; a bound)


class VectorTable(Table):
    def get(self, model: str, hashes: Sequence[str]) -> dict[str, Vector]:
        found: dict[str, Vector] = {}
        for at in range(0, len(hashes), _CHUNK):
            chunk = hashes[at : at + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT hash, vector FROM vectors WHERE model=? AND hash IN ({marks})",
                (model, *chunk),
            )
            found.update((h, from_blob(blob)) for h, blob in rows)
        return found

    def put(self, model: str, items: Iterable[tuple[str, Vector]], made: float) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO vectors (model, hash, vector, made) VALUES (?,?,?,?)",
                [(model, h, to_blob(v), made) for h, v in items],
            )
