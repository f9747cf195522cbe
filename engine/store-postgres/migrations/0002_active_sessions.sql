-- Schema 2: a session's status in a table of its own.
--
-- The session record is rewritten at every step, and its status (idle or
-- not) changes twice a turn. While `active` was an indexed column of
-- `sessions`, each of those changes made the rewrite a non-HOT update,
-- which inserts into every index of the table. Keeping the status as
-- membership of `active_sessions` leaves `sessions`' indexed columns
-- untouched, so nearly every rewrite stays in place.
--
-- `open_step` copies the record's `first_open_step`, so `load` can read a
-- session's record and its open steps with one query.

CREATE TABLE active_sessions (
    sid int8 PRIMARY KEY
);
INSERT INTO active_sessions SELECT sid FROM sessions WHERE active;

ALTER TABLE sessions ADD COLUMN open_step int8;
-- A number past int8's range is kept as int8's largest, as the writer does.
UPDATE sessions SET open_step = least(
    coalesce((convert_from(record, 'UTF8')::jsonb ->> 'first_open_step')::numeric, 0),
    9223372036854775807
)::int8;
ALTER TABLE sessions ALTER COLUMN open_step SET NOT NULL;

DROP INDEX sessions_active;
ALTER TABLE sessions DROP COLUMN active;

-- Rows rewritten in place need room in their page.
ALTER TABLE sessions SET (fillfactor = 50);
ALTER TABLE steps SET (fillfactor = 50);
ALTER TABLE calls SET (fillfactor = 50);
ALTER TABLE turns SET (fillfactor = 50);
