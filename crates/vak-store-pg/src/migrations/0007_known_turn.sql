-- vak store schema, version 7: a delivery that continues a chat's session in one round trip.
--
-- vak_continue (version 6)'s check, also answering the row number of the turn it wrote. A node
-- remembers, for each chat it delivered to, the session, its last turn and that row number; its
-- next delivery to the chat plans from what it remembers and sends only this call, which takes
-- the chat's lock and writes only if what the node remembers still holds. Under the lock it is
-- the same check as vak_continue's, so a node that remembers wrong (another node delivered to the
-- chat since) is answered 'moved' with nothing written, and reads again:
--   'moved'    the chat is bound to another session, or a turn was added since p_last (the row
--              seq of the last turn planned from, NULL for none); nothing written.
--   'home'     the home side is not at p_generation (when given); nothing written.
--   'replayed' the signature p_key was already taken; nothing written.
--   'ok'       the signature taken (stamped within [now - p_window, now]) and the turn written
--              as row `written`.
-- vak_continue stays for a node of the previous build still running against this database.
CREATE OR REPLACE FUNCTION vak_continue_at(
    p_bot text, p_chat text, p_advisory boolean, p_session text, p_last bigint,
    p_generation bigint, p_key text, p_at bigint, p_window bigint, p_record text,
    OUT outcome text, OUT generation bigint, OUT written bigint
) LANGUAGE plpgsql AS $$
DECLARE
    holds boolean;
BEGIN
    IF p_advisory THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_bot || '/' || p_chat, 7));
    ELSE
        PERFORM 1 FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat FOR UPDATE;
    END IF;
    -- Each statement of a PL/pgSQL function reads a snapshot taken after the one before it, so
    -- this one sees every delivery to the chat that committed before the lock was granted. The
    -- check, the claim and the turn are one statement (each statement costs an executor
    -- start-up): the claim only when the check holds, the turn only when the claim was taken.
    WITH holds AS (
        SELECT 1
         WHERE (SELECT b.session_id FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat)
                   IS NOT DISTINCT FROM p_session
           AND (SELECT r.seq FROM vak_records r
                 WHERE r.session_id = p_session AND r.record LIKE '{"type":"turn",%'
                 ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM p_last
           AND (p_generation IS NULL
                OR (SELECT g.generation FROM vak_home_generation g) IS NOT DISTINCT FROM p_generation)
    ), claim AS (
        INSERT INTO vak_replay (key, at)
        SELECT p_key, LEAST(GREATEST(p_at, n - p_window), n)
        FROM holds, (SELECT extract(epoch FROM now())::bigint AS n) AS clock
        WHERE p_key IS NOT NULL
        ON CONFLICT (key) DO NOTHING
        RETURNING 1
    )
    INSERT INTO vak_records (session_id, record)
    SELECT p_session, p_record FROM holds
     WHERE p_key IS NULL OR EXISTS (SELECT 1 FROM claim)
    RETURNING seq INTO written;
    IF FOUND THEN
        outcome := 'ok';
        RETURN;
    END IF;
    -- Nothing written: say why (still under the lock, so the chat is as the write saw it).
    SELECT g.generation,
           (SELECT b.session_id FROM vak_bindings b WHERE b.bot = p_bot AND b.chat = p_chat)
               IS NOT DISTINCT FROM p_session
           AND (SELECT r.seq FROM vak_records r
                 WHERE r.session_id = p_session AND r.record LIKE '{"type":"turn",%'
                 ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM p_last
      INTO generation, holds
      FROM vak_home_generation g;
    IF holds IS NOT TRUE THEN
        outcome := 'moved';
    ELSIF p_generation IS NOT NULL AND generation IS DISTINCT FROM p_generation THEN
        outcome := 'home';
    ELSIF p_key IS NULL THEN
        -- The check held here but not in the write: something wrote between the two
        -- statements; plan again.
        outcome := 'moved';
    ELSE
        outcome := 'replayed';
    END IF;
END
$$;
