-- jobctl event store on PostgreSQL, schema version 16: the idempotency keys' uniqueness is kept by a hash
-- index (an exclusion constraint), which holds any key, instead of a B-tree, which refused a long one.
--
-- A B-tree entry holds at most 2,704 bytes. A key written in a manifest has at most 1,024, but a folder
-- or prefix job's key is expanded with each file's path (`KEY/relative/path`), which can be longer: such a
-- submit failed whole on PostgreSQL ("index row size 2920 exceeds btree version 4 maximum 2704 for index
-- jobs_idempotency_key_set"), where SQLite keeps it. A hash index keeps a key's 4-byte hash only; the
-- exclusion constraint refuses a second job with an equal key (SQLSTATE 23P01 instead of 23505) and waits
-- for a concurrent insert of one as a unique index does; the lookup `idempotency_key = $1` reads it. Still
-- partial (schema 10): jobs without a key have no entry. Same name, so plans read as before. Either may be
-- there when this runs (a ledger rewound by hand runs it again), so both go first.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_idempotency_key_set;
DROP INDEX IF EXISTS jobs_idempotency_key_set;
ALTER TABLE jobs ADD CONSTRAINT jobs_idempotency_key_set
    EXCLUDE USING hash (idempotency_key WITH =) WHERE (idempotency_key IS NOT NULL);
