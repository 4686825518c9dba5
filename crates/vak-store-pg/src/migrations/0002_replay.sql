-- vak store schema, version 2: request signatures already accepted, so a signed request is
-- taken once by whichever node receives it first.
CREATE TABLE vak_replay (
    key  text PRIMARY KEY,
    at   bigint NOT NULL
);
CREATE INDEX vak_replay_at ON vak_replay (at);
