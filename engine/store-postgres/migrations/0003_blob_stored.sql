-- Schema 3: when each blob was last stored.
--
-- A component's blob is deleted once no agent refers to its digest. An
-- upload on one node stores the blob just before the agent record that
-- names it, so a node deleting blobs leaves those stored (or stored
-- again) recently: one of them may be about to be named. Storing a blob
-- again sets `stored` and keeps the bytes first stored.

ALTER TABLE blobs ADD COLUMN stored timestamptz NOT NULL DEFAULT now();
