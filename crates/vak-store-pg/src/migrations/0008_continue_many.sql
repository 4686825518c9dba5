-- vak store schema, version 8: continuing deliveries written together, one transaction for many.
--
-- vak_continue_at (version 7) for several chats at once, in one call and so one commit: a node
-- gathers the continuing deliveries that are ready when a connection frees up (at most one per
-- chat, per session and per signature) and sends them here. Item i is (p_bot[i], p_chat[i],
-- p_session[i], p_last[i], p_generation[i], p_key[i], p_at[i], p_window[i], p_record[i]), checked
-- and written exactly as vak_continue_at would, and answered as one row (item, outcome,
-- generation, written) with vak_continue_at's outcomes. An item whose check fails writes nothing
-- and does not roll the others back; the node sends it alone again.
--
-- A batch never waits for a chat's lock: it takes the locks it can at once (SKIP LOCKED, or
-- pg_try_advisory_xact_lock) and answers 'moved', with nothing written, for an item whose chat
-- another transaction holds — another delivery to that chat is under way, which would make the
-- item's plan stale anyway, and the node delivers it again alone. So a batch holding some chats'
-- locks never waits on another's (no convoy of nodes' batches behind one busy chat, no deadlock).
CREATE FUNCTION vak_continue_many(
    p_advisory boolean, p_bot text[], p_chat text[], p_session text[], p_last bigint[],
    p_generation bigint[], p_key text[], p_at bigint[], p_window bigint[], p_record text[]
) RETURNS TABLE (item bigint, outcome text, generation bigint, written bigint)
LANGUAGE plpgsql AS $$
DECLARE
    done bigint[];
    seqs bigint[];
    locked bigint[];
BEGIN
    IF p_advisory THEN
        SELECT array_agg(u.i) INTO locked
          FROM unnest(p_bot, p_chat) WITH ORDINALITY AS u(b, c, i)
         WHERE pg_try_advisory_xact_lock(hashtextextended(u.b || '/' || u.c, 7));
    ELSE
        SELECT array_agg(l.i) INTO locked
          FROM (SELECT u.i FROM vak_bindings b
                  JOIN unnest(p_bot, p_chat) WITH ORDINALITY AS u(bot, chat, i)
                    ON b.bot = u.bot AND b.chat = u.chat
                   FOR UPDATE OF b SKIP LOCKED) AS l;
    END IF;
    -- As in vak_continue_at: this statement's snapshot is taken after the locks, so it sees every
    -- delivery to the chats locked that committed before; the check, the claims and the turns
    -- are one statement, for the items whose chat is locked.
    WITH items AS (
        SELECT u.*
          FROM unnest(p_bot, p_chat, p_session, p_last, p_generation, p_key, p_at, p_window,
                      p_record) WITH ORDINALITY
               AS u(bot, chat, session, last, gen, key, at, win, record, i)
    ), holds AS (
        SELECT t.* FROM items t
         WHERE t.i = ANY (coalesce(locked, '{}'))
           AND (SELECT b.session_id FROM vak_bindings b WHERE b.bot = t.bot AND b.chat = t.chat)
                   IS NOT DISTINCT FROM t.session
           AND (SELECT r.seq FROM vak_records r
                 WHERE r.session_id = t.session AND r.record LIKE '{"type":"turn",%'
                 ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM t.last
           AND (t.gen IS NULL
                OR (SELECT g.generation FROM vak_home_generation g) IS NOT DISTINCT FROM t.gen)
    ), claim AS (
        INSERT INTO vak_replay (key, at)
        SELECT h.key, LEAST(GREATEST(h.at, n - h.win), n)
        FROM holds h, (SELECT extract(epoch FROM now())::bigint AS n) AS clock
        WHERE h.key IS NOT NULL
        ON CONFLICT (key) DO NOTHING
        RETURNING key
    ), wrote AS (
        INSERT INTO vak_records (session_id, record)
        SELECT h.session, h.record FROM holds h
         WHERE h.key IS NULL OR h.key IN (SELECT c.key FROM claim c)
        RETURNING seq, session_id
    )
    SELECT array_agg(t.i), array_agg(w.seq) INTO done, seqs
      FROM items t JOIN wrote w ON w.session_id = t.session;
    RETURN QUERY SELECT d.i, 'ok'::text, NULL::bigint, d.seq FROM unnest(done, seqs) AS d(i, seq);
    -- Nothing written for the rest: say why, as vak_continue_at does (still under the locks, and
    -- no other item wrote to their sessions); an item whose chat was not locked is 'moved'.
    RETURN QUERY
    SELECT u.i,
           CASE
               -- Its chat's lock is held by another transaction: not read.
               WHEN NOT (u.i = ANY (coalesce(locked, '{}'))) THEN 'moved'
               WHEN NOT ((SELECT b.session_id FROM vak_bindings b
                           WHERE b.bot = u.bot AND b.chat = u.chat) IS NOT DISTINCT FROM u.session
                         AND (SELECT r.seq FROM vak_records r
                               WHERE r.session_id = u.session AND r.record LIKE '{"type":"turn",%'
                               ORDER BY r.seq DESC LIMIT 1) IS NOT DISTINCT FROM u.last)
                   THEN 'moved'
               WHEN u.gen IS NOT NULL AND g.generation IS DISTINCT FROM u.gen THEN 'home'
               WHEN u.key IS NULL THEN 'moved'
               ELSE 'replayed'
           END,
           g.generation,
           NULL::bigint
      FROM unnest(p_bot, p_chat, p_session, p_last, p_generation, p_key) WITH ORDINALITY
           AS u(bot, chat, session, last, gen, key, i)
      LEFT JOIN vak_home_generation g ON true
     WHERE NOT (u.i = ANY (coalesce(done, '{}')));
END
$$;
