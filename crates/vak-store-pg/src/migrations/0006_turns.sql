-- vak store schema, version 6: a delivery reads its session's first and last turn, and (for a
-- last turn that does not carry its number) counts them, through an index that holds only the
-- turns: each end is one index entry however long the session. The predicate is the turn
-- record's opening tag, spelled the same in the statements that use it.
CREATE INDEX vak_records_turns ON vak_records (session_id, seq) WHERE record LIKE '{"type":"turn",%';
