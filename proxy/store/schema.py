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
    # 4: the memory: message recaps, scene breaks and recaps, running recap versions
    """
    ALTER TABLE messages ADD COLUMN extra_type TEXT;  -- extra.type: narrator, thoughts...
    CREATE TABLE memory_state (
        chat_id       TEXT PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        active        INTEGER NOT NULL DEFAULT 1,   -- upkeep runs for this chat
        current_recap INTEGER,                      -- selected running recap version
        checked_uid   INTEGER,                      -- detection found no break up to here
        inherited     INTEGER NOT NULL DEFAULT 0    -- a branch took its parent's memory
    );
    CREATE TABLE message_recaps (
        message_uid INTEGER NOT NULL REFERENCES messages(uid) ON DELETE CASCADE,
        swipe       INTEGER NOT NULL,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        source_hash TEXT NOT NULL,     -- text hash of the swipe it was made from
        recap       TEXT NOT NULL,
        reasoning   TEXT,
        edited      INTEGER NOT NULL DEFAULT 0,
        created     REAL NOT NULL,
        PRIMARY KEY (message_uid, swipe)
    );
    CREATE INDEX message_recaps_chat ON message_recaps(chat_id);
    CREATE TABLE message_exclusions (
        message_uid INTEGER PRIMARY KEY REFERENCES messages(uid) ON DELETE CASCADE,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE
    );
    CREATE TABLE scene_breaks (
        message_uid INTEGER PRIMARY KEY REFERENCES messages(uid) ON DELETE CASCADE,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        source      TEXT NOT NULL,     -- auto | manual | inherited
        visible     INTEGER NOT NULL DEFAULT 1,
        name        TEXT,
        name_edited INTEGER NOT NULL DEFAULT 0,
        rationale   TEXT,
        current     INTEGER,           -- selected scene recap version
        created     REAL NOT NULL
    );
    CREATE INDEX scene_breaks_chat ON scene_breaks(chat_id);
    CREATE TABLE scene_recaps (
        break_uid   INTEGER NOT NULL REFERENCES scene_breaks(message_uid) ON DELETE CASCADE,
        version     INTEGER NOT NULL,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        scene_name  TEXT,
        recap       TEXT NOT NULL,
        reasoning   TEXT,
        source      TEXT NOT NULL,     -- llm | edit | inherited
        input_hash  TEXT,
        created     REAL NOT NULL,
        PRIMARY KEY (break_uid, version)
    );
    CREATE TABLE running_recaps (
        chat_id        TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        version        INTEGER NOT NULL,
        content        TEXT NOT NULL,
        scene_count    INTEGER NOT NULL,
        prev_scene_uid INTEGER,        -- the scene the version it was built on ended with
        new_scene_uid  INTEGER,        -- the scene it folded in (message uid of its break)
        source         TEXT NOT NULL,  -- llm | edit | inherited
        reasoning      TEXT,
        created        REAL NOT NULL,
        PRIMARY KEY (chat_id, version)
    );
    """,
    # v5: the character's name as the chat calls it (its header's `character_name`, else
    # its speaker), not the folder ST keeps the chat in (`default_Seraphina`). Character
    # chats are read once more at the next start-up to fill it in.
    """
    ALTER TABLE chats ADD COLUMN character_name TEXT;
    UPDATE chats SET file_hash = NULL, size = -1 WHERE kind = 'character';
    """,
    # v6: long stories. A running recap version to condense before the next fold (a fold
    # on it was cut off at its length limit), and the full-text index of each visible
    # scene's current recap (FTS5, ranked by bm25) that older scenes are recalled from.
    # Triggers keep the index current on every path that writes breaks or recaps
    # (the planner, the API, branches, cascading deletes, renames).
    """
    ALTER TABLE memory_state ADD COLUMN condense_version INTEGER;
    CREATE VIRTUAL TABLE scene_search USING fts5(
        name, recap, chat_id UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER scene_search_break_insert AFTER INSERT ON scene_breaks BEGIN
        INSERT INTO scene_search (rowid, name, recap, chat_id)
            SELECT NEW.message_uid, COALESCE(NEW.name, r.scene_name, ''), r.recap, NEW.chat_id
            FROM scene_recaps r
            WHERE r.break_uid = NEW.message_uid AND r.version = NEW.current AND NEW.visible = 1;
    END;
    CREATE TRIGGER scene_search_break_update
    AFTER UPDATE OF current, name, visible, chat_id ON scene_breaks BEGIN
        DELETE FROM scene_search WHERE rowid = OLD.message_uid;
        INSERT INTO scene_search (rowid, name, recap, chat_id)
            SELECT NEW.message_uid, COALESCE(NEW.name, r.scene_name, ''), r.recap, NEW.chat_id
            FROM scene_recaps r
            WHERE r.break_uid = NEW.message_uid AND r.version = NEW.current AND NEW.visible = 1;
    END;
    CREATE TRIGGER scene_search_break_delete AFTER DELETE ON scene_breaks BEGIN
        DELETE FROM scene_search WHERE rowid = OLD.message_uid;
    END;
    CREATE TRIGGER scene_search_recap_insert AFTER INSERT ON scene_recaps BEGIN
        DELETE FROM scene_search WHERE rowid = NEW.break_uid AND EXISTS (
            SELECT 1 FROM scene_breaks b
            WHERE b.message_uid = NEW.break_uid AND b.current = NEW.version);
        INSERT INTO scene_search (rowid, name, recap, chat_id)
            SELECT b.message_uid, COALESCE(b.name, NEW.scene_name, ''), NEW.recap, b.chat_id
            FROM scene_breaks b
            WHERE b.message_uid = NEW.break_uid AND b.current = NEW.version AND b.visible = 1;
    END;
    INSERT INTO scene_search (rowid, name, recap, chat_id)
        SELECT b.message_uid, COALESCE(b.name, r.scene_name, ''), r.recap, b.chat_id
        FROM scene_breaks b JOIN scene_recaps r
            ON r.break_uid = b.message_uid AND r.version = b.current
        WHERE b.visible = 1;
    """,  # v7: memory extensions' work in the chat files (`proxy.sillytavern.extensions`): each
    # message's extension data, flagged when it changes until it is imported, imported
    # message recaps marked as such, and the running recap versions last imported. The
    # mirrors are read once more to fill it in: a digest that no longer matches makes
    # every row be written again (identity is kept by alignment, as after an edit).
    """
    ALTER TABLE messages ADD COLUMN extension TEXT;
    ALTER TABLE messages ADD COLUMN extension_new INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX messages_extension_new ON messages(chat_id) WHERE extension_new = 1;
    ALTER TABLE message_recaps ADD COLUMN source TEXT NOT NULL DEFAULT 'llm';
    UPDATE message_recaps SET source = 'edit' WHERE edited = 1;
    ALTER TABLE memory_state ADD COLUMN imported_running TEXT;
    UPDATE messages SET digest = CAST(X'00' || digest AS BLOB);
    UPDATE chats SET file_hash = NULL, size = -1;
    """,
    # v8: what the proxy's own calls cost, per chat, UTC day and operation (the tokens the
    # API reported, else counted with cl100k).
    """
    CREATE TABLE usage (
        chat_id       TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        day           TEXT NOT NULL,      -- YYYY-MM-DD, UTC
        operation     TEXT NOT NULL,
        calls         INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        answer_tokens INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (chat_id, day, operation)
    );
    """,
    # v9: a chat's layout (uid and digest in order) read from the index alone: it is read
    # on every re-read of a saved chat, and a row lookup per message was most of it.
    """
    CREATE INDEX messages_layout ON messages(chat_id, position, digest);
    DROP INDEX messages_chat;
    """,
    # v10: the entities each scene recap version listed (`proxy.core.entities`): a scene
    # recapped again, edited or deleted takes its own along (only the current version of
    # a visible break counts), and every version keeps what it said.
    """
    CREATE TABLE entity_mentions (
        break_uid   INTEGER NOT NULL,
        version     INTEGER NOT NULL,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        ordinal     INTEGER NOT NULL,  -- its place in the answer's list
        name        TEXT NOT NULL,
        type        TEXT NOT NULL,
        aliases     TEXT NOT NULL,     -- JSON list of strings
        facts       TEXT NOT NULL,     -- JSON list of strings
        PRIMARY KEY (break_uid, version, ordinal),
        FOREIGN KEY (break_uid, version) REFERENCES scene_recaps(break_uid, version)
            ON DELETE CASCADE
    );
    CREATE INDEX entity_mentions_chat ON entity_mentions(chat_id);
    """,
    # v11: what the user, condensing and imports changed of the entities
    # (`proxy.core.entity_changes`), in the order made, each naming its entity by a name:
    # the registry is made anew from the scenes, and these apply over it. Never rewritten.
    """
    CREATE TABLE entity_changes (
        id          INTEGER PRIMARY KEY,
        chat_id     TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE ON UPDATE CASCADE,
        kind        TEXT NOT NULL,     -- edit, delete, release, merge, condense, import
        key         TEXT NOT NULL,     -- a name the entity went by then
        body        TEXT NOT NULL,     -- JSON: name, type, aliases, facts, covers
        made        REAL NOT NULL
    );
    CREATE INDEX entity_changes_chat ON entity_changes(chat_id, id);
    """,
    # v12: embeddings (recall by meaning), by what was embedded (its text's hash) and the
    # model that embedded it: a text met again (a branch's scenes, a recap chosen back) is
    # not embedded again, and another model's vectors are another's.
    """
    CREATE TABLE vectors (
        model   TEXT NOT NULL,   -- the API, model and size (`EmbeddingSettings.identity`)
        hash    TEXT NOT NULL,   -- of the text embedded
        vector  BLOB NOT NULL,   -- float32, little-endian, unit length
        made    REAL NOT NULL,
        PRIMARY KEY (model, hash)
    ) WITHOUT ROWID;
    """,
)
