-- vak store schema, version 6: a delivery that continues a chat's session in two round trips.
--
-- A partial index of the turns: a delivery reads its session's first and last turn (and, for a
-- last turn that does not carry its number, counts them) through it, so each end is one index
-- entry however long the session. The predicate is the turn record's opening tag, spelled the
-- same in every statement that uses it.
CREATE INDEX vak_records_turns ON vak_records (session_id, seq) WHERE record LIKE '{"type":"turn",%';

-- The write of a delivery that continues the chat's session, planned from a read made without
-- the chat's lock: one statement, so one round trip and one transaction, that takes the chat's
-- lock and then (each statement of a PL/pgSQL function reading a snapshot taken after the one
-- before it, so after the lock) commits only what that read still describes:
--   'moved'    the chat is bound to another session, or a turn was added since p_last (the row
--              seq of the last turn read, NULL for none); nothing written: plan under the lock.
--   'home'     the home side is not at p_generation (when given); nothing written.
--   'replayed' the signature p_key was already taken; nothing written.
--   'ok'       the signature taken (stamped within [now - p_window, now]) and the turn written.
CREATE FUNCTION vak_continue(
    p_bot text, p_chat text, p_advisory boolean, p_session text, p_last bigint,
    p_generation bigint, p_key text, p_at bigint, p_window bigint, p_record text,
    OUT outcome text, OUT generation bigint
) LANGUAGE plpgsql AS $$
DECLARE
    holds boolean;
BEGIN
    IF p_advisory THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_bot || '/' || p_chat, 7));
    ELSE
        PERFORM 1 FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat FOR UPDATE;
    END IF;
    -- Three statements in all, each one executor run: the lock, this check, the write.
    SELECT g.generation,
           (SELECT b.session_id FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat)
               IS NOT DISTINCT FROM p_session
           AND (SELECT r.seq FROM vak_records r
                 WHERE r.session_id = p_session AND r.record LIKE '{"type":"turn",%'
                 ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM p_last
      INTO generation, holds
      FROM vak_home_generation g;
    IF NOT holds THEN
        outcome := 'moved';
    ELSIF p_generation IS NOT NULL AND generation IS DISTINCT FROM p_generation THEN
        outcome := 'home';
    ELSIF p_key IS NULL THEN
        INSERT INTO vak_records (session_id, record) VALUES (p_session, p_record);
        outcome := 'ok';
    ELSE
        -- The claim and the turn in one statement: the turn only when the claim was taken.
        WITH claim AS (
            INSERT INTO vak_replay (key, at)
            SELECT p_key, LEAST(GREATEST(p_at, n - p_window), n)
            FROM (SELECT extract(epoch FROM now())::bigint AS n) AS clock
            ON CONFLICT (key) DO NOTHING
            RETURNING 1
        )
        INSERT INTO vak_records (session_id, record)
        SELECT p_session, p_record FROM claim;
        outcome := CASE WHEN FOUND THEN 'ok' ELSE 'replayed' END;
    END IF;
END
$$;
