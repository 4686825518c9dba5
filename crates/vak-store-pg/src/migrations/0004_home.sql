-- vak store schema, version 4: the home side of the prompt (the shared layer and its surface and
-- agent sub-layers, the gateway tiers), by path relative to the home, and the bots' signing
-- secrets (DECISIONS §14). One generation row, bumped in the same transaction as any change, so
-- a node can tell with one query whether its replica is current.
CREATE TABLE vak_home_files (
    path    text PRIMARY KEY,
    text    text NOT NULL,
    sha256  text NOT NULL,
    by_who  text NOT NULL,
    at      text NOT NULL
);
CREATE TABLE vak_home_generation (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    generation  bigint NOT NULL
);
INSERT INTO vak_home_generation (one, generation) VALUES (true, 1);
CREATE TABLE vak_bot_secrets (
    bot         text PRIMARY KEY,
    secret      text NOT NULL,
    created_at  text NOT NULL
);
