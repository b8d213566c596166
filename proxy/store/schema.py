"""The store's schema: versioned migrations, applied in order at open."""

from __future__ import annotations

PENDING_SNAPSHOT_TTL = 3600.0  # seconds a lorebook snapshot waits for its reply to be saved
DELETED_CHAT_TTL = 7 * 86400.0  # seconds a deleted chat's data is kept for a rename to claim

MIGRATIONS: tuple[str, ...] = (
    # 1: chats, their mirrored messages, and the change log
    """
    CREATE TABLE chats (
        id          TEXT PRIMARY KEY,      -- data-relative path without .jsonl
        user        TEXT NOT NULL,
        kind        TEXT NOT NULL,         -- character | group
        character   TEXT,                  -- avatar-key folder (character chats)
        group_id    TEXT,
        group_name  TEXT,
        name        TEXT NOT NULL,         -- file name without .jsonl
        file        TEXT NOT NULL,         -- data-relative path
        integrity   TEXT,
        main_chat   TEXT,                  -- parent chat name of a branch
        enabled     INTEGER,               -- NULL: the default applies
        size        INTEGER NOT NULL DEFAULT 0,
        mtime_ns    INTEGER NOT NULL DEFAULT 0,
        file_hash   BLOB,
        messages    INTEGER NOT NULL DEFAULT 0,
        bad_lines   INTEGER NOT NULL DEFAULT 0,
        updated     REAL,                  -- file mtime, seconds
        deleted     INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX chats_integrity ON chats(integrity);
    CREATE TABLE messages (
        uid          INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id      TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        position     INTEGER NOT NULL,     -- ST's message id, header excluded
        digest       BLOB NOT NULL,        -- hash of the whole line
        name         TEXT NOT NULL,
        is_user      INTEGER NOT NULL,
        is_system    INTEGER NOT NULL,     -- hidden
        narrator     INTEGER NOT NULL,
        send_date    TEXT,
        text         TEXT NOT NULL,        -- the selected swipe
        text_hash    TEXT NOT NULL,
        swipe_id     INTEGER,
        swipe_count  INTEGER NOT NULL,
        swipe_hashes TEXT NOT NULL         -- JSON list, one hash per swipe
    );
    CREATE INDEX messages_chat ON messages(chat_id, position);
    CREATE TABLE events (
        seq      INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id  TEXT NOT NULL,
        kind     TEXT NOT NULL,            -- added edited deleted swiped hidden unhidden
        uid      INTEGER,
        position INTEGER NOT NULL,
        at       REAL NOT NULL
    );
    CREATE INDEX events_chat ON events(chat_id, seq);
    """,
    # 2: the chat's ST metadata (its lorebook, timed effects) and lorebook snapshots
    """
    ALTER TABLE chats ADD COLUMN metadata TEXT;   -- chat_metadata JSON from the header
    ALTER TABLE chats ADD COLUMN deleted_at REAL; -- when its file went (a rename may follow)
    CREATE TABLE lore_snapshots (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id      TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        message_uid  INTEGER REFERENCES messages(uid) ON DELETE CASCADE,  -- NULL until saved
        target       INTEGER NOT NULL,     -- ST index the reply has or replaces
        swipe        INTEGER NOT NULL,
        generation   TEXT NOT NULL,
        created      REAL NOT NULL,
        active       TEXT NOT NULL,        -- JSON list of entry descriptions
        inactive     TEXT NOT NULL
    );
    CREATE INDEX lore_snapshots_message ON lore_snapshots(message_uid, swipe);
    CREATE INDEX lore_snapshots_pending ON lore_snapshots(chat_id, message_uid);
    """,
    # 3: the operation queue
    """
    CREATE TABLE jobs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        operation   TEXT NOT NULL,
        priority    INTEGER NOT NULL,     -- lower runs first
        dedup_key   TEXT NOT NULL,        -- at most one live job per key
        payload     TEXT NOT NULL,        -- JSON: what the job works on
        input_hash  TEXT NOT NULL,        -- the content it was made from
        upstream    TEXT NOT NULL,        -- which API it calls (concurrency is per upstream)
        state       TEXT NOT NULL,        -- queued running done failed dropped
        attempts    INTEGER NOT NULL DEFAULT 0,
        not_before  REAL NOT NULL,
        error       TEXT,
        created     REAL NOT NULL,
        updated     REAL NOT NULL
    );
    CREATE UNIQUE INDEX jobs_live ON jobs(dedup_key) WHERE state IN ('queued', 'running');
    CREATE INDEX jobs_next ON jobs(state, priority, id);
    CREATE TABLE settings_kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
)
