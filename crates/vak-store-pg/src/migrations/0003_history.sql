-- vak store schema, version 3: the prompt history (DECISIONS §14).
-- Objects are kept by the sha256 of their exact bytes: keeping a text already there changes
-- nothing, every read re-hashes the bytes, so a row altered behind vak's back is refused, never
-- served, and the next keep of that text writes back the bytes its digest names. Version records are append-only, one row per change, in commit order (seq).
CREATE TABLE vak_objects (
    digest   text PRIMARY KEY,
    content  bytea NOT NULL,
    kept_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE vak_versions (
    seq      bigserial PRIMARY KEY,
    target   text NOT NULL,
    block    text NOT NULL,
    action   text NOT NULL,
    who      text NOT NULL,
    at       text NOT NULL,
    before   text,
    after    text,
    tokens   bigint,
    record   text NOT NULL
);
CREATE INDEX vak_versions_target ON vak_versions (target, seq);
