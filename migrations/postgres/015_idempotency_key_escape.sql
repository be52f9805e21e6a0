-- jobctl event store on PostgreSQL, schema version 15: `jobs.idempotency_key` holds a key with each U+0001
-- written twice and each NUL as U+0001 '0' (`JobRecord.postgresKeyText`).
--
-- PostgreSQL's text refuses a NUL, and an SQLite log from before 2026-12-04 can hold a key with one, so
-- `jobctl migrate --to` could not move it here. The escape keeps the column one-to-one with keys (the unique
-- index still refuses only equal keys); keys without a NUL or a U+0001 — every key submitted since
-- 2026-12-04, which may hold no control character — are stored as they are. Only a key stored before this
-- version with a U+0001 in it changes: its U+0001s are doubled, so it reads back as it was. The log is not
-- touched (its JSON writes a NUL as \u0000).
--
-- In two steps, through NULL: a key escaped in place could meet another key's old text in the unique index
-- ('a' || chr(1) becomes the 'a' || chr(1) || chr(1) another row still holds).
CREATE TEMPORARY TABLE escaped_keys ON COMMIT DROP AS
    SELECT id, replace(idempotency_key, chr(1), chr(1) || chr(1)) AS escaped FROM jobs
    WHERE idempotency_key IS NOT NULL AND strpos(idempotency_key, chr(1)) > 0;
UPDATE jobs SET idempotency_key = NULL WHERE id IN (SELECT id FROM escaped_keys);
UPDATE jobs SET idempotency_key = escaped_keys.escaped FROM escaped_keys WHERE jobs.id = escaped_keys.id;
