-- vak store schema, version 1: ledgers, chat bindings, audit events.
-- Every record is kept as the exact JSON text the file backend writes as one line, so a ledger
-- moved between backends keeps its digests, and unknown fields survive.
CREATE TABLE vak_sessions (
    id          text PRIMARY KEY,
    seq         bigserial NOT NULL UNIQUE,
    created_at  text NOT NULL,
    header      text NOT NULL
);
CREATE TABLE vak_records (
    seq         bigserial PRIMARY KEY,
    session_id  text NOT NULL REFERENCES vak_sessions (id),
    record      text NOT NULL
);
CREATE INDEX vak_records_session ON vak_records (session_id, seq);
CREATE TABLE vak_bindings (
    bot         text NOT NULL,
    chat        text NOT NULL,
    session_id  text,
    bound_at    text,
    PRIMARY KEY (bot, chat)
);
CREATE TABLE vak_audit (
    seq         bigserial PRIMARY KEY,
    event       text NOT NULL
);
