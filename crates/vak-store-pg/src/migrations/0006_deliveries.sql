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
    -- One statement after the lock checks the read and writes the claim and the turn: the
    -- claim only when the read holds, the turn only when the claim was taken (a data-modifying
    -- WITH runs once, whether or not the INSERT below reads it).
    WITH state AS (
        SELECT
               (SELECT b.session_id FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat)
                   IS NOT DISTINCT FROM p_session
               AND (SELECT r.seq FROM vak_records r
                     WHERE r.session_id = p_session AND r.record LIKE '{"type":"turn",%'
                     ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM p_last
               AND (p_generation IS NULL OR g.generation IS NOT DISTINCT FROM p_generation) AS holds
        FROM (SELECT 1) AS one LEFT JOIN vak_home_generation g ON true
    ), claim AS (
        INSERT INTO vak_replay (key, at)
        SELECT p_key, LEAST(GREATEST(p_at, n - p_window), n)
        FROM state, (SELECT extract(epoch FROM now())::bigint AS n) AS clock
        WHERE p_key IS NOT NULL AND state.holds
        ON CONFLICT (key) DO NOTHING
        RETURNING 1
    )
    INSERT INTO vak_records (session_id, record)
    SELECT p_session, p_record FROM state
    WHERE state.holds AND (p_key IS NULL OR EXISTS (SELECT 1 FROM claim));
    IF FOUND THEN
        outcome := 'ok';
        RETURN;
    END IF;
    -- Nothing written: say why (the chat is still locked, so the binding and its turns are as
    -- the statement above saw them; the generation only moves forward).
    SELECT g.generation,
           (SELECT b.session_id FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat)
               IS NOT DISTINCT FROM p_session
           AND (SELECT r.seq FROM vak_records r
                 WHERE r.session_id = p_session AND r.record LIKE '{"type":"turn",%'
                 ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM p_last
      INTO generation, holds
      FROM (SELECT 1) AS one LEFT JOIN vak_home_generation g ON true;
    IF NOT holds THEN
        outcome := 'moved';
    ELSIF p_generation IS NOT NULL AND generation IS DISTINCT FROM p_generation THEN
        outcome := 'home';
    ELSE
        outcome := 'replayed';
    END IF;
END
$$;
