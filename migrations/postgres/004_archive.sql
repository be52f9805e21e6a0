-- jobctl event store on PostgreSQL, schema version 4: `jobctl archive` may remove finished jobs from
-- the log (as migrations/sqlite/004_archive.sql).
--
-- The log stays append-only for everything else. The DELETE trigger now lets a row through only for a
-- job named in `archive_authorisations`, which `jobctl archive` fills and empties again inside its one
-- transaction (between transactions the table is empty, so every other DELETE is refused as before).
-- TRUNCATE is still refused unconditionally, UPDATE too.

CREATE TABLE IF NOT EXISTS archive_authorisations (
    job_id text PRIMARY KEY
);

CREATE OR REPLACE FUNCTION events_refuse_unarchived_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM archive_authorisations WHERE job_id = OLD.job_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only: DELETE is refused (only `jobctl archive` removes finished jobs)'
        USING ERRCODE = 'restrict_violation',
              HINT = 'the log is never changed; `jobctl archive --before` moves finished jobs to a file';
END;
$$;

DROP TRIGGER events_refuse_delete ON events;

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_unarchived_delete();

-- Blobs removed by `jobctl archive --blobs-before`: the event that produced one keeps its hash.
CREATE TABLE IF NOT EXISTS expired_blobs (
    sha256        text   PRIMARY KEY,
    size          bigint NOT NULL,
    expired_at_ms bigint NOT NULL
);
