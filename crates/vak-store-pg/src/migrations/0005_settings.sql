-- vak store schema, version 5: settings every node on the database must agree on, and signatures
-- kept by digest. `lock_mode`
-- is how a delivery locks its chat (`row` or `advisory`): nodes that lock differently do not
-- exclude each other, so the first delivery records its mode and a node asking for another is
-- refused; `vak store migrate` with an explicit `vak_lock=` changes it, with every node stopped.
CREATE TABLE vak_settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- A taken signature is kept by its sha256 (hex), as the file store names its replay markers, so
-- `vak store import` can carry those markers over and a request the file store delivered is
-- refused here too.
UPDATE vak_replay SET key = encode(sha256(convert_to(key, 'UTF8')), 'hex');
